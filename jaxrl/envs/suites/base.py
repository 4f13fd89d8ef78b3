"""What every suite adapter shares: `AutoResetVecEnv` (a single-env suite environment given as two pure functions,
vmapped, auto-reset by jaxrl with the true successor in `info["final_observation"]`) and the observation rule.

Observation rule (all suites): an array observation is cast to float32 and keeps its shape, so an image
[H, W, C] reaches `torso="cnn"` as it is; a structured observation (a dict, NamedTuple or dataclass of arrays) is
flattened by `flatten_observation`: its leaves in `jax.tree` order (dict keys sorted, NamedTuple / dataclass
fields in declaration order), each cast to float32 and raveled, concatenated into one vector.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp

from jaxrl.envs.spec import EnvSpec

# reset(key) -> (obs, state) and step(key, state, action) -> (obs, state, reward, terminated, truncated) of ONE
# environment, observations already in jaxrl's form (`as_observation`); the suite's own signals decide
# terminated and truncated.
ResetFn = Callable[[jax.Array], tuple[jax.Array, Any]]
StepFn = Callable[[jax.Array, Any, jax.Array], tuple[jax.Array, Any, jax.Array, jax.Array, jax.Array]]


@dataclass(frozen=True)
class EpisodeLimit:
    """What jaxrl's runners read as `env.params`: the suite's time limit (None when it has none)."""

    max_steps_in_episode: int | None


def flatten_observation(obs) -> jax.Array:
    """A pytree of arrays (one env's observation) -> one float32 vector: leaves in `jax.tree` order, raveled."""
    return jnp.concatenate([jnp.ravel(x).astype(jnp.float32) for x in jax.tree.leaves(obs)])


def as_observation(obs) -> jax.Array:
    """jaxrl's form of one env's observation: an array keeps its shape (float32), a structure is flattened."""
    if isinstance(obs, jax.Array) or hasattr(obs, "shape"):
        return jnp.asarray(obs).astype(jnp.float32)
    return flatten_observation(obs)


def where_done(done: jax.Array, reset_tree, step_tree):
    """Per env (leading axis), the reset value where `done`, else the stepped one."""

    def pick(r, s):
        return jnp.where(done.reshape(done.shape + (1,) * (s.ndim - 1)), r, s)

    return jax.tree.map(pick, reset_tree, step_tree)


class AutoResetVecEnv:
    """`num_envs` copies of one suite environment, stepped with `jax.vmap` and auto-reset here.

    `step` steps every env, then resets (with its own key) the envs whose episode ended (terminated or
    truncated): the returned observation and state are the reset ones there, and `info["final_observation"]`
    holds the true successor of every env. `extras(state) -> dict` (optional) adds per-env entries about the
    returned state to `info` (e.g. Jumanji's action mask). `time_limit` is the suite's episode limit when the
    suite truncates only there (it bounds `max_truncations`), None when truncations may come at any step.
    `suite_env` is the suite's own environment object the functions step (for tests and benchmarks);
    `episode_limit` the longest episode when the suite ends it otherwise than by truncation (default `time_limit`).
    """

    def __init__(
        self,
        reset_fn: ResetFn,
        step_fn: StepFn,
        num_envs: int,
        spec: EnvSpec,
        time_limit: int | None,
        extras: Callable[[Any], dict] | None = None,
        suite_env: Any = None,
        episode_limit: int | None = None,
    ):
        self.reset_fn, self.step_fn, self.num_envs, self.spec = reset_fn, step_fn, num_envs, spec
        self.time_limit, self.extras, self.suite_env = time_limit, extras, suite_env
        self.params = EpisodeLimit(time_limit if episode_limit is None else episode_limit)

    def max_truncations(self, num_steps: int) -> int:
        """An upper bound on the truncated steps in a window of `num_steps` steps of all envs: one per
        `time_limit` steps of each env (episodes restart at 0 after every end), else every step."""
        if not isinstance(self.time_limit, int) or self.time_limit < 1:
            return num_steps * self.num_envs
        return self.num_envs * min(num_steps, -(-num_steps // self.time_limit))

    def reset(self, key: jax.Array):
        return jax.vmap(self.reset_fn)(jax.random.split(key, self.num_envs))

    def step(self, key: jax.Array, state, action: jax.Array):
        keys = jax.random.split(key, (2, self.num_envs))
        obs, stepped, reward, terminated, truncated = jax.vmap(self.step_fn)(keys[0], state, action)
        terminated, truncated = terminated.astype(bool), truncated.astype(bool)
        done = terminated | truncated

        def reset_ended(_):
            reset_obs, reset_state = jax.vmap(self.reset_fn)(keys[1])
            return where_done(done, reset_obs, obs), where_done(done, reset_state, stepped)

        # resets (Craftax generates a world) run only in steps where some episode ended; under a vmap over
        # seeds the cond becomes a select and both branches run, as a plain select would
        next_obs, state = jax.lax.cond(done.any(), reset_ended, lambda _: (obs, stepped), None)
        info = {"final_observation": obs}
        if self.extras is not None:
            info.update(self.extras(state))
        return next_obs, state, reward.astype(jnp.float32), terminated, truncated, info


def observation_shape(reset_fn: ResetFn) -> tuple[int, ...]:
    """The shape of one env's observation, from `jax.eval_shape` of `reset_fn` (nothing is computed)."""
    obs, _ = jax.eval_shape(reset_fn, jax.random.key(0))
    return tuple(obs.shape)


def discrete_spec(env_id: str, reset_fn: ResetFn, num_actions: int, action_mask: bool = False) -> EnvSpec:
    """`action_mask`: the last `num_actions` entries of `reset_fn`'s flat observations are the action mask."""
    return EnvSpec(env_id, observation_shape(reset_fn), True, int(num_actions), action_mask=action_mask)


def box_spec(env_id: str, reset_fn: ResetFn, low, high) -> EnvSpec:
    low, high = jnp.asarray(low, jnp.float32), jnp.asarray(high, jnp.float32)
    return EnvSpec(env_id, observation_shape(reset_fn), False, int(low.shape[0]), low, high)
