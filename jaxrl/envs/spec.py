"""The environment contract: `EnvSpec` (what a network needs to know about an environment) and the `VecEnv`
protocol every vectorised environment of `jaxrl.envs` follows. The bottom of the environment layer: it imports
nothing of jaxrl.

Action masks: an env whose `EnvSpec.action_mask` is True has flat observations [N, D] whose last `action_dim`
entries are the mask of that observation (1 valid, 0 not; `action_mask` reads it). The mask travels inside the
observation, so the contract keeps one observation array and every path that stores or replays observations
(rollouts, minibatches, replay, evaluation, final observations) carries it unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import jax


@dataclass(frozen=True)
class EnvSpec:
    """What a network needs to know about an environment."""

    env_id: str
    observation_shape: tuple[int, ...]
    discrete: bool
    action_dim: int  # number of actions (discrete) or the action vector's size (continuous)
    action_low: Any = None
    action_high: Any = None
    action_mask: bool = False  # discrete, flat observations whose last action_dim entries are the action mask

    def __post_init__(self):
        flat = len(self.observation_shape) == 1 and self.observation_shape[0] >= self.action_dim
        if self.action_mask and not (self.discrete and flat):
            raise ValueError(
                f"{self.env_id}: action_mask=True needs discrete actions and a flat observation of at least "
                f"action_dim={self.action_dim} entries (its tail is the mask); got {self.observation_shape}."
            )


def action_mask(obs: jax.Array, num_actions: int) -> jax.Array:
    """The valid actions [..., A] (bool) of observations [..., D] of an env with `EnvSpec.action_mask`: their
    last A entries, > 0.5 where valid. Where an observation marks no action valid (a terminal one may), every
    action counts as valid, so a policy, a greedy choice and a max stay defined."""
    valid = obs[..., -num_actions:] > 0.5
    return valid | ~valid.any(-1, keepdims=True)


@runtime_checkable
class VecEnv(Protocol):
    """`num_envs` environments stepped as one batch, pure, so they step inside `jax.jit`, `lax.scan` and `jax.vmap`.

    `reset(key) -> (obs[N, ...], state)` and `step(key, state, action[N, ...]) -> (obs, state, reward[N],
    terminated[N], truncated[N], info)`, observations float32. `info["final_observation"]` is the true successor
    observation of every env (before auto-reset): on a truncated step its value is what a return bootstraps from.
    `max_truncations(num_steps)` bounds the truncated steps of all envs in a window of `num_steps` steps.
    """

    num_envs: int
    spec: EnvSpec

    def reset(self, key: jax.Array) -> tuple[jax.Array, Any]: ...

    def step(self, key: jax.Array, state: Any, action: jax.Array) -> tuple: ...

    def max_truncations(self, num_steps: int) -> int: ...
