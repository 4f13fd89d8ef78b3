"""Uniform replay of transitions collected by `num_envs` environments, usable inside `jax.jit` and `jax.vmap`.

Built on flashbax's trajectory buffer (InstaDeep; `flashbax.buffers.trajectory_buffer`): its state is a pytree
holding each env's stream of transitions in a ring `[num_envs, capacity // num_envs, ...]`; a rollout
`[T, N, ...]` appends T steps to every env's stream, wrapping past the end and overwriting the oldest; a sample
picks an env and a start step uniformly among the stored windows of `sequence_length` consecutive steps of one
env (never crossing the write position), so with `sequence_length=1` every written transition is equally likely
and unwritten slots never come back. jaxrl draws a sample's windows itself, as one draw of `batch_size` random
words (`uniform_below`), where flashbax's sampler splits its key four times and draws four times as many words:
the same distribution in a smaller program. Windows of n steps serve n-step returns: the estimators cut them at
episode ends.

Here the time-major convention of the rest of jaxrl holds on both sides: `add` takes `[T, N, ...]` and
`sample` returns `[sequence_length, batch_size, ...]`.

The prioritised variant (`init_prioritized`, `add_prioritized`, `sample_prioritized`, `set_priorities`,
`importance_weights`) is at the end of this file.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
from flashbax.buffers import prioritised_trajectory_buffer, trajectory_buffer

from jaxrl import parallel

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
    key = parallel.device_key(key)  # each device samples its own buffer shard
    num_envs, length = jax.tree.leaves(state.experience)[0].shape[:2]
    oldest = jnp.where(state.is_full, state.current_index, 0)
    starts_per_env = jnp.maximum(steps_stored(state) - sequence_length + 1, 0)
    window = uniform_below(key, (batch_size,), num_envs * starts_per_env)  # window = start * num_envs + env
    env, start = window % num_envs, window // num_envs
    slots = (oldest + start[None, :] + jnp.arange(sequence_length)[:, None]) % length  # [L, B] ring positions
    return jax.tree.map(lambda x: x[env[None, :], slots], state.experience)


def uniform_below(key: jax.Array, shape: tuple[int, ...], bound: jax.Array) -> jax.Array:
    """int32 draws in [0, bound) for a traced `bound` below 2^31 (0 gives 0): floor(u * bound / 2^32) for uniform
    32-bit words u, one draw of `jax.random.bits` (Lemire 2019, "Fast random integer generation in an interval",
    without its rejection step: each value's probability is within 2^-32 of 1 / bound)."""
    words = jax.random.bits(key, shape, jnp.uint32)
    return _high_word_of_product(words, jnp.asarray(bound).astype(jnp.uint32)).astype(jnp.int32)


def _high_word_of_product(a: jax.Array, b: jax.Array) -> jax.Array:
    """floor(a * b / 2^32) for uint32 a and b, in 16-bit halves: no 64-bit integers, and no `jax.lax.mulhi`, which
    a program over several devices cannot lower (jax 0.10)."""
    low = jnp.uint32(0xFFFF)
    a1, a0, b1, b0 = a >> 16, a & low, b >> 16, b & low
    cross1, cross0 = a1 * b0, a0 * b1
    carry = ((a0 * b0) >> 16) + (cross1 & low) + (cross0 & low)
    return a1 * b1 + (cross1 >> 16) + (cross0 >> 16) + (carry >> 16)


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


# ---------------------------------------------------------------------------------------------------------------
# Prioritised replay (Schaul, Quan, Antonoglou & Silver 2016, "Prioritized Experience Replay", proportional
# variant). Built on flashbax's prioritised trajectory buffer: the same ring of per-env streams plus a sum tree over
# the windows that may be sampled (one per start step, `period` 1). Window i is drawn with probability
# P(i) = p_i^alpha / sum_k p_k^alpha (stratified over the tree's total, as flashbax samples it); a window added
# gets the largest p^alpha recorded so far (1 at the start), so it is replayed at least once soon; windows that
# would cross the write position (or are overwritten) get priority 0. Works with jax 0.10.2 (flashbax 0.1.3).
# ---------------------------------------------------------------------------------------------------------------

PrioritizedReplayState = prioritised_trajectory_buffer.PrioritisedTrajectoryBufferState


def _device() -> str:
    """flashbax's sum-tree update: a scan on CPU, a bincount on accelerators."""
    return "cpu" if jax.default_backend() == "cpu" else "gpu"


def init_prioritized(item, num_envs: int, capacity: int) -> PrioritizedReplayState:
    """An empty prioritised buffer for `capacity` transitions (a multiple of `num_envs`) shaped like `item`."""
    if capacity % num_envs or capacity < num_envs:
        raise ValueError(f"capacity={capacity} must be a positive multiple of num_envs={num_envs}.")
    return prioritised_trajectory_buffer.prioritised_init(item, num_envs, capacity // num_envs, 1)


def add_prioritized(state: PrioritizedReplayState, items, sequence_length: int = 1) -> PrioritizedReplayState:
    """Appends a time-major batch `[T, N, ...]`; the windows of `sequence_length` steps it completes get the
    maximum priority^alpha recorded so far. `sequence_length` must be the one later passed to `sample_prioritized`.
    """
    batch = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), items)
    num_envs, length = jax.tree.leaves(state.experience)[0].shape[:2]
    add_length = jax.tree.leaves(batch)[0].shape[1]
    new_windows, _ = prioritised_trajectory_buffer._calculate_new_item_indices(
        state.running_index, add_length, 1, length, sequence_length, num_envs
    )
    state = prioritised_trajectory_buffer.prioritised_add(state, batch, sequence_length, 1, _device())
    # flashbax 0.1.3 gives the new windows int(max priority) (a `full_like` of the integer index array), e.g. 4
    # instead of 4.87; set the float maximum, as Schaul et al. do. Padding indices lie outside the tree (dropped).
    padding = prioritised_trajectory_buffer._get_padding_num(length, 1, num_envs)
    tree = state.sum_tree_state
    priorities = jnp.where(new_windows != padding, tree.max_recorded_priority, 0.0)
    tree = prioritised_trajectory_buffer.SET_BATCH_FN[_device()](tree, new_windows, priorities)
    return state.replace(sum_tree_state=tree)


def sample_prioritized(state: PrioritizedReplayState, key: jax.Array, batch_size: int, sequence_length: int = 1):
    """`batch_size` windows drawn with probability P(i) proportional to their stored priority p_i^alpha.

    Returns (windows `[sequence_length, batch_size, ...]`, indices [B] for `set_priorities`, probabilities P(i)
    [B]). The batch comes stratified (one draw per equal slice of the total priority), so in sum-tree order.
    """
    chex.assert_scalar_positive(batch_size)
    chex.assert_scalar_positive(sequence_length)
    key = parallel.device_key(key)
    out = prioritised_trajectory_buffer.prioritised_sample(state, key, batch_size, sequence_length, 1)
    windows = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), out.experience)
    return windows, out.indices, out.probabilities


def set_priorities(
    state: PrioritizedReplayState, indices: jax.Array, priorities: jax.Array, alpha
) -> PrioritizedReplayState:
    """Sets window `indices` to priorities p (e.g. |TD error| + eps, > 0); sampling then uses p^alpha
    (alpha = 0: uniform, alpha = 1: proportional). `alpha` may be traced. Of repeated indices the last wins."""
    chex.assert_equal_shape([indices, priorities])
    return prioritised_trajectory_buffer.set_priorities(state, indices, priorities, alpha, _device())


def importance_weights(probabilities: jax.Array, num_items, beta) -> jax.Array:
    """Importance-sampling weights w_i = (N P(i))^-beta / max_j w_j over the batch (Schaul et al. 2016, Alg. 1
    line 10), correcting the bias of prioritised sampling fully at beta = 1; N is the number of stored windows
    (it cancels in the normalisation, which keeps every weight <= 1)."""
    # a window drawn at probability 0 (only by floating-point rounding at a tree boundary) must not give inf
    weights = (num_items * jnp.maximum(probabilities, jnp.finfo(jnp.float32).tiny)) ** (-beta)
    return weights / weights.max()
