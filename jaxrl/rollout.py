"""Rollouts: a `lax.scan` of policy + vmapped env.step, returning a time-major Trajectory [T, N, ...]."""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.types import Trajectory

# act(obs[N, ...], key) -> (action[N, ...], behaviour log_prob[N])
ActFn = Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array]]
# value(obs[..., *obs_shape]) -> value[...]; critic-free algorithms pass `zero_value`
ValueFn = Callable[[jax.Array], jax.Array]


def zero_value(obs: jax.Array, obs_ndim: int = 1) -> jax.Array:
    return jnp.zeros(obs.shape[: obs.ndim - obs_ndim], jnp.float32)


@struct.dataclass
class EnvCarry:
    """The batch of environments between rollouts: their state and current observation."""

    state: Any
    obs: jax.Array  # [N, *obs_shape]


def reset(env, key: jax.Array) -> EnvCarry:
    obs, state = env.reset(key)
    return EnvCarry(state, obs)


def rollout(
    env,
    act: ActFn,
    value: ValueFn,
    carry: EnvCarry,
    key: jax.Array,
    num_steps: int,
    *,
    keep_next_obs: bool = False,
) -> tuple[EnvCarry, Trajectory]:
    """Steps `env` (a jaxrl VecEnv with episode statistics) `num_steps` times with the policy `act`.

    Only the policy runs inside the sequential scan; the critic runs after it on all [T + 1, N] observations
    at once (the parameters do not change during a rollout, so the values are those an in-loop critic would
    give, from fewer, larger matmuls). `next_values[t]` is the value of the true successor of step t:
    V(o_{t+1}) inside an episode, 0 where it terminated, and where it was truncated the value of gymnax's
    `info["final_observation"]` (the next observation there is the auto-reset one). Truncations come from
    the time limit, so at most `env.max_truncations(T)` occur in a window; only those successors are
    gathered and evaluated, instead of a second critic pass over every step.

    With the static `keep_next_obs=True` the trajectory also holds `next_obs[t]`, the true successor
    observation of step t (`info["final_observation"]`), which replay-based learners store.
    """

    def step(carry: EnvCarry, keys):
        action, log_prob = act(carry.obs, keys[0])
        obs, state, reward, terminated, truncated, info = env.step(keys[1], carry.state, action)
        transition = (
            carry.obs,
            action,
            reward,
            terminated,
            truncated,
            log_prob,
            info["final_observation"],
            info["episode_return"],
            info["episode_length"],
        )
        return EnvCarry(state, obs), transition

    carry, (obs, actions, rewards, terminated, truncated, log_probs, final_obs, episode_return, episode_length) = (
        jax.lax.scan(step, carry, jax.random.split(key, (num_steps, 2)))
    )
    values = value(jnp.concatenate([obs, carry.obs[None]]))  # [T + 1, N]
    next_values = jnp.where(terminated, 0.0, values[1:])
    next_values = bootstrap_truncated(
        next_values, truncated & ~terminated, final_obs, value, env.max_truncations(num_steps)
    )
    return carry, Trajectory(
        obs,
        actions,
        rewards,
        terminated,
        truncated,
        log_probs,
        values[:-1],
        next_values,
        episode_return,
        episode_length,
        final_obs if keep_next_obs else None,
    )


def bootstrap_truncated(
    next_values: jax.Array, truncated: jax.Array, final_obs: jax.Array, value: ValueFn, max_count: int
) -> jax.Array:
    """Sets `next_values` [T, N] to `value(final_obs)` where `truncated`, evaluating at most `max_count`
    gathered observations (the caller guarantees no more than `max_count` truncations)."""
    size = truncated.size
    index = jnp.nonzero(truncated.reshape(-1), size=max_count, fill_value=size)[0]
    flat_obs = final_obs.reshape((size,) + final_obs.shape[truncated.ndim :])
    successor_values = value(flat_obs[jnp.minimum(index, size - 1)])
    return next_values.reshape(-1).at[index].set(successor_values, mode="drop").reshape(next_values.shape)


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
