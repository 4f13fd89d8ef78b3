"""Uniform replay of transitions collected by `num_envs` environments, usable inside `jax.jit` and `jax.vmap`.

Built on flashbax's trajectory buffer (InstaDeep; `flashbax.buffers.trajectory_buffer`): its state is a pytree
holding each env's stream of transitions in a ring `[num_envs, capacity // num_envs, ...]`; a rollout
`[T, N, ...]` appends T steps to every env's stream, wrapping past the end and overwriting the oldest; a sample
picks an env and a start step uniformly among the stored windows of `sequence_length` consecutive steps of one
env (never crossing the write position), so with `sequence_length=1` every written transition is equally likely
and unwritten slots never come back. Windows of n steps serve n-step returns: the estimators cut them at episode
ends.

Here the time-major convention of the rest of jaxrl holds on both sides: `add` takes `[T, N, ...]` and
`sample` returns `[sequence_length, batch_size, ...]`.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
from flashbax.buffers import trajectory_buffer

ReplayState = trajectory_buffer.TrajectoryBufferState


def init(item, num_envs: int, capacity: int) -> ReplayState:
    """An empty buffer for `capacity` transitions (a multiple of `num_envs`) shaped like `item`.

    `item` is one transition: a pytree of arrays without batch or time axes (their values are ignored).
    """
    if capacity % num_envs or capacity < num_envs:
        raise ValueError(f"capacity={capacity} must be a positive multiple of num_envs={num_envs}.")
    return trajectory_buffer.init(item, num_envs, capacity // num_envs)


def add(state: ReplayState, items) -> ReplayState:
    """Appends a time-major batch `[T, N, ...]` (T steps of each of the N envs, T <= capacity // N)."""
    return trajectory_buffer.add(state, jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), items))


def sample(state: ReplayState, key: jax.Array, batch_size: int, sequence_length: int = 1):
    """`batch_size` windows of `sequence_length` consecutive steps of one env, drawn uniformly with replacement
    from the written ones; time-major `[sequence_length, batch_size, ...]`.

    Only meaningful once `can_sample(state, sequence_length)`; before that it returns unwritten (zero) slots.
    """
    chex.assert_scalar_positive(batch_size)
    chex.assert_scalar_positive(sequence_length)
    windows = trajectory_buffer.sample(state, key, batch_size, sequence_length, 1).experience  # [B, L, ...]
    return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), windows)


def steps_stored(state: ReplayState) -> jax.Array:
    """Steps held per env (the buffer holds `num_envs` times as many transitions)."""
    length = jax.tree.leaves(state.experience)[0].shape[1]
    return jnp.where(state.is_full, length, state.current_index)


def size(state: ReplayState) -> jax.Array:
    """Transitions held (all envs)."""
    return steps_stored(state) * jax.tree.leaves(state.experience)[0].shape[0]


def can_sample(state: ReplayState, sequence_length: int = 1) -> jax.Array:
    """True once every env has written at least `sequence_length` steps."""
    return trajectory_buffer.can_sample(state, sequence_length)
