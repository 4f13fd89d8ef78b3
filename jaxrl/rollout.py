"""Rollouts: a `lax.scan` of policy + vmapped env.step, returning a time-major Trajectory [T, N, ...]."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.types import Trajectory

# act(obs[N, ...], key) -> (action[N, ...], log_prob[N], value[N])
ActFn = Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array, jax.Array]]
# value(obs[..., *obs_shape]) -> value[...]
ValueFn = Callable[[jax.Array], jax.Array]


@struct.dataclass
class EnvCarry:
    """The batch of environments between rollouts: their state and current observation."""

    state: Any
    obs: jax.Array  # [N, *obs_shape]


def reset(env, key: jax.Array) -> EnvCarry:
    obs, state = env.reset(key)
    return EnvCarry(state, obs)


def rollout(
    env, act: ActFn, value: ValueFn, carry: EnvCarry, key: jax.Array, num_steps: int
) -> tuple[EnvCarry, Trajectory]:
    """Steps `env` (a jaxrl VecEnv with episode statistics) `num_steps` times with the policy `act`.

    The value of each step's true successor (`info["final_observation"]`, which differs from the next
    observation where an episode ended and the env auto-reset) is computed after the scan in one batched
    call of `value`, so truncated episodes can bootstrap from it.
    """

    def step(carry: EnvCarry, step_key):
        act_key, env_key = jax.random.split(step_key)
        action, log_prob, v = act(carry.obs, act_key)
        obs, state, reward, terminated, truncated, info = env.step(env_key, carry.state, action)
        transition = (
            carry.obs,
            action,
            reward,
            terminated,
            truncated,
            log_prob,
            v,
            info["final_observation"],
            info["episode_return"],
            info["episode_length"],
        )
        return EnvCarry(state, obs), transition

    (
        carry,
        (obs, actions, rewards, terminated, truncated, log_probs, values, final_obs, episode_return, episode_length),
    ) = jax.lax.scan(step, carry, jax.random.split(key, num_steps))
    next_values = value(final_obs)
    return carry, Trajectory(
        obs, actions, rewards, terminated, truncated, log_probs, values, next_values, episode_return, episode_length
    )


def episode_metrics(traj: Trajectory) -> dict[str, jax.Array]:
    """Mean return and length of the episodes completed in `traj` (NaN when none did) and their count."""
    done = traj.done
    count = done.sum()
    safe = jnp.maximum(count, 1)
    nan_if_none = jnp.where(count > 0, 1.0, jnp.nan)
    return {
        "episode_return": jnp.where(done, traj.episode_return, 0.0).sum() / safe * nan_if_none,
        "episode_length": jnp.where(done, traj.episode_length, 0).sum() / safe * nan_if_none,
        "episodes": count,
    }
