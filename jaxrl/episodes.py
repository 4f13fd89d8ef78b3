"""Evaluation episodes: E fresh episodes in parallel, each played from reset to its end on fresh env keys, with a
policy's actions (`evaluate`). The runner's in-program evaluation and `jaxrl eval` both play them."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxrl import envs
from jaxrl.rollout import RecurrentAct


def evaluate(
    env_id: str, act: Callable, key: jax.Array, num_episodes: int, max_steps: int | None = None, normalize=None
) -> dict[str, jax.Array]:
    """Plays `num_episodes` episodes of `env_id` with `act(obs[E, ...], key) -> action[E, ...]`.

    Every episode runs in its own env until it ends (terminated or truncated); its first completion is
    recorded and later steps (after gymnax's auto-reset) are ignored. `max_steps` defaults to the env's time
    limit. `normalize(obs)` is applied to observations when the policy was trained on normalised ones.
    A policy with memory (`rollout.RecurrentAct`) starts from `act.initial(E)` and is told each episode's start
    (so its state is zeroed there, after gymnax's auto-reset too).
    Returns per-episode `returns` and `lengths` [E], their means over the finished episodes (`mean_return`
    is 0 and `mean_length` NaN when none finished) and the number `finished`.
    """
    env = envs.make(env_id, num_episodes)
    limit = max_steps or int(getattr(env.params, "max_steps_in_episode", None) or 1000)
    normalize = normalize or (lambda obs: obs)
    reset_key, run_key = jax.random.split(key)
    obs, state = env.reset(reset_key)
    memory = (act.initial(num_episodes), jnp.ones(num_episodes, bool)) if isinstance(act, RecurrentAct) else None

    def step(carry, keys):
        obs, state, returns, lengths, finished, memory = carry
        if memory is None:
            action = act(normalize(obs), keys[0])
        else:
            hidden, action = act.step(memory[0], normalize(obs), memory[1], keys[0])
        obs, state, _, _, _, info = env.step(keys[1], state, action)
        if memory is not None:
            memory = (hidden, info["episode_done"])
        first_end = info["episode_done"] & ~finished
        returns = jnp.where(first_end, info["episode_return"], returns)
        lengths = jnp.where(first_end, info["episode_length"], lengths)
        return (obs, state, returns, lengths, finished | info["episode_done"], memory), None

    zeros = jnp.zeros(num_episodes, jnp.float32)
    carry = (obs, state, zeros, zeros.astype(jnp.int32), jnp.zeros(num_episodes, bool), memory)
    (_, _, returns, lengths, finished, _), _ = jax.lax.scan(step, carry, jax.random.split(run_key, (limit, 2)))
    count = finished.sum()
    return {
        "returns": jnp.where(finished, returns, jnp.nan),
        "lengths": lengths,
        "mean_return": jnp.where(finished, returns, 0.0).sum() / jnp.maximum(count, 1),
        "mean_length": jnp.where(count > 0, jnp.where(finished, lengths, 0).sum() / jnp.maximum(count, 1), jnp.nan),
        "finished": count,
    }
