"""Rollouts: a `lax.scan` of policy + vmapped env.step, returning a time-major Trajectory [T, N, ...]."""

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import parallel
from jaxrl.types import Trajectory

# act(obs[N, ...], key) -> (action[N, ...], behaviour log_prob[N])
ActFn = Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array]]
# value(obs[..., *obs_shape]) -> value[...]; critic-free algorithms pass `zero_value`
ValueFn = Callable[[jax.Array], jax.Array]


def zero_value(obs: jax.Array, obs_ndim: int = 1) -> jax.Array:
    return jnp.zeros(obs.shape[: obs.ndim - obs_ndim], jnp.float32)


def no_critic(env) -> ValueFn:
    """`zero_value` for `env`'s observations (vectors or images): one 0 per env step, no critic evaluated."""
    return functools.partial(zero_value, obs_ndim=len(env.spec.observation_shape))


CRITIC_CHUNK_ROWS = 16384
"""Rows (time steps x envs) per pass of the critic over a rollout's observations when it has more than
4 x CRITIC_CHUNK_ROWS of them (`values_of`)."""


def values_of(value: ValueFn, obs: jax.Array) -> jax.Array:
    """value(obs) for a rollout's observations [T + 1, N, ...]: in one pass, or, beyond 4 x CRITIC_CHUNK_ROWS rows,
    over chunks of whole time steps of about CRITIC_CHUNK_ROWS rows each (`jax.lax.map`). One pass materialises
    every layer's activations for all rows ([T + 1, N, width]); at thousands of envs they no longer fit in the CPU's
    caches and the pass waits on memory, while a chunk's activations stay in them. The chunks give the values of
    one pass, bit for bit where each chunk's rows fill the matrix products' row tiles (N a multiple of 16) and
    otherwise in all but the last bits of a few rows. The chunks are for the CPU only (`jax.lax.platform_dependent`):
    a program lowered for a GPU or TPU takes one pass."""
    steps, envs = obs.shape[:2]
    if steps * envs <= 4 * CRITIC_CHUNK_ROWS or (isinstance(value, functools.partial) and value.func is zero_value):
        return value(obs)

    def in_chunks(obs):
        return jax.lax.map(value, obs, batch_size=max(1, CRITIC_CHUNK_ROWS // envs))

    return jax.lax.platform_dependent(obs, cpu=in_chunks, default=value)


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
    at once, or in chunks of time steps at thousands of envs (`values_of`): the parameters do not change during a
    rollout, so the values are those an in-loop critic would give, from fewer, larger matmuls.

    `next_values[t]` is the value of the true successor of step t: V(o_{t+1}) inside an episode, 0 where it
    terminated, and where it was truncated the value of gymnax's `info["final_observation"]` (the next
    observation there is the auto-reset one). Truncations come from the time limit, so at most
    `env.max_truncations(T)` occur in a window; only those successors are gathered and evaluated, instead of a
    second critic pass over every step.

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
        jax.lax.scan(step, carry, jax.random.split(parallel.device_key(key), (num_steps, 2)))
    )
    values = values_of(value, jnp.concatenate([obs, carry.obs[None]]))  # [T + 1, N]
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
    index, gather = truncated_index(truncated, max_count)
    successor_values = value(gather(final_obs))
    return next_values.reshape(-1).at[index].set(successor_values, mode="drop").reshape(next_values.shape)


def truncated_index(truncated: jax.Array, max_count: int) -> tuple[jax.Array, Callable]:
    """(flat indices [max_count] of the truncated steps of `truncated` [T, N], padded with T * N, and
    `gather(x [T, N, ...]) -> x at those steps [max_count, ...]`, the padding reading the last step)."""
    size = truncated.size
    index = jnp.nonzero(truncated.reshape(-1), size=max_count, fill_value=size)[0]

    def gather(x: jax.Array) -> jax.Array:
        return x.reshape((size,) + x.shape[truncated.ndim :])[jnp.minimum(index, size - 1)]

    return index, gather


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


# ---------------------------------------------------------------------------------------------------------------
# Grouped rollouts (GRPO): M groups of G members. Member n belongs to group n // G; the G members of a group start
# from one environment state and follow their own keys. Each member is an independent 1-env rollout, so a member
# is exactly `rollout(env, act, value, its start, its key, T)`; members are stacked along the env axis [T, M * G].
# ---------------------------------------------------------------------------------------------------------------


def group_starts(env, key: jax.Array, num_groups: int) -> EnvCarry:
    """`num_groups` fresh reset states of the 1-env VecEnv `env`, stacked: leaves [M, 1, ...]."""
    _check_single_env(env)
    return jax.vmap(lambda k: reset(env, k))(jax.random.split(key, num_groups))


def repeat_members(starts: EnvCarry, group_size: int) -> EnvCarry:
    """Copies each of the M start states `group_size` times: leaves [M, ...] -> [M * G, ...], member-major.

    gymnax states are plain pytrees of arrays, so a copy is a full clone: copies given the same keys follow the
    same trajectory.
    """
    return jax.tree.map(lambda x: jnp.repeat(x, group_size, axis=0), starts)


def grouped_rollout(
    env, act: ActFn, value: ValueFn, starts: EnvCarry, member_keys: jax.Array, num_steps: int
) -> tuple[EnvCarry, Trajectory]:
    """Rolls each member (a 1-env VecEnv state, leaves [N, 1, ...]) `num_steps` steps with its own key.

    Returns the members' final states (leaves [N, 1, ...]) and a time-major Trajectory [T, N, ...]. A member
    whose episode ends is auto-reset by gymnax and goes on; `first_episode_mask` marks the steps of each
    member's first episode.
    """
    _check_single_env(env)

    def member(carry, key):
        return rollout(env, act, value, carry, key, num_steps)

    carry, traj = jax.vmap(member)(starts, member_keys)  # traj leaves [N, T, 1, ...]
    traj = jax.tree.map(lambda x: jnp.swapaxes(x[:, :, 0], 0, 1), traj)
    return carry, traj


def first_episode_mask(done: jax.Array) -> jax.Array:
    """[T, N] bool: step t belongs to the first episode of its column (no episode ended before t)."""
    ended_before = jnp.cumsum(done, axis=0) - done
    return ended_before == 0


def _check_single_env(env) -> None:
    if env.num_envs != 1:
        raise ValueError(f"grouped rollouts step 1-env VecEnvs (envs.make(id, 1)), got num_envs={env.num_envs}.")


# ---------------------------------------------------------------------------------------------------------------
# Recurrent rollouts: the policy carries a hidden state h (any pytree of [N, ...] arrays) from step to step. The
# state the policy reads at step t is reset to zero exactly where step t starts an episode (start_t = done_{t-1},
# and every env starts one after `reset`), inside the policy itself (`networks.recurrent`), so the learner that
# re-runs the core over a stored sequence from its stored initial state with the stored starts gets the same
# states the rollout had.
# ---------------------------------------------------------------------------------------------------------------

# step(h, obs [N, ...], start [N], key) -> (h', action [N, ...], behaviour log_prob [N], value [N]): h' is the
# state after consuming obs_t (before any reset)
RecurrentStepFn = Callable[[Any, jax.Array, jax.Array, jax.Array], tuple[Any, jax.Array, jax.Array, jax.Array]]
# value(h, obs [M, ...], start [M]) -> V [M], one critic step from state h
RecurrentValueFn = Callable[[Any, jax.Array, jax.Array], jax.Array]


@struct.dataclass
class RecurrentCarry:
    """The policy's memory between steps (and iterations): the state before the next step's reset, and whether
    the next step starts an episode."""

    hidden: Any  # pytree of [N, ...] float32
    start: jax.Array  # [N] bool, the next step is the first of an episode (done at the previous step)


def initial_memory(hidden) -> RecurrentCarry:
    """The memory right after `reset`: `hidden` (zeros) and every env at an episode start."""
    batch = jax.tree.leaves(hidden)[0].shape[0]
    return RecurrentCarry(hidden, jnp.ones(batch, bool))


@struct.dataclass
class Sequences:
    """What a recurrent learner needs besides the Trajectory to re-run its core over the rollout: the state each
    environment's sequence started from and the episode starts along it."""

    initial_hidden: Any  # pytree of [N, ...], the memory's state before step 0 (before its reset)
    starts: jax.Array  # [T, N] bool, start_t: the state is zeroed before step t (done_{t-1}; t = 0 from the carry)
    hidden: Any = None  # pytree of [T, N, ...], the state before each step t (before its reset; hidden[0] =
    #   initial_hidden); only with recurrent_rollout(keep_hidden=True), for a replay that stores it per step


def recurrent_rollout(
    env,
    step: RecurrentStepFn,
    value: RecurrentValueFn,
    carry: EnvCarry,
    memory: RecurrentCarry,
    key: jax.Array,
    num_steps: int,
    *,
    keep_next_obs: bool = False,
    keep_hidden: bool = False,
) -> tuple[EnvCarry, RecurrentCarry, Trajectory, Sequences]:
    """`rollout` for a policy with memory: the actor and critic step together inside the scan.

    `next_values[t]` is 0 where step t terminated, V(h_{t+1}, o_{t+1}) inside an episode (the next step's value,
    the last one from a critic step after the scan), and where step t was truncated
    V(h'_t, final_observation_t, start=False): the critic takes one more step from h'_t, the state after
    consuming o_t, on the true successor observation, exactly as if the episode had gone on. Only the at most
    `env.max_truncations(T)` truncated steps are gathered (with their h'_t) and evaluated.

    With the static `keep_next_obs=True` the trajectory also holds the true successor observations `next_obs`
    (as `rollout`'s), and with `keep_hidden=True` the sequences also hold the state before every step
    (`Sequences.hidden`): what a replay of sequences stores (`jaxrl.algos.families.recurrent_replay`).
    """

    def body(loop, keys):
        carry, memory = loop
        hidden, action, log_prob, v = step(memory.hidden, carry.obs, memory.start, keys[0])
        obs, state, reward, terminated, truncated, info = env.step(keys[1], carry.state, action)
        transition = (
            (carry.obs, action, reward, terminated, truncated, log_prob, v, memory.start),
            (hidden, info["final_observation"], info["episode_return"], info["episode_length"]),
        )
        return (EnvCarry(state, obs), RecurrentCarry(hidden, terminated | truncated)), transition

    (carry_after, memory_after), (facts, extra) = jax.lax.scan(
        body, (carry, memory), jax.random.split(parallel.device_key(key), (num_steps, 2))
    )
    obs, actions, rewards, terminated, truncated, log_probs, values, starts = facts
    hidden_after, final_obs, episode_return, episode_length = extra
    last_value = value(memory_after.hidden, carry_after.obs, memory_after.start)
    next_values = jnp.where(terminated, 0.0, jnp.concatenate([values[1:], last_value[None]]))
    index, gather = truncated_index(truncated & ~terminated, env.max_truncations(num_steps))
    successor = value(jax.tree.map(gather, hidden_after), gather(final_obs), jnp.zeros(index.shape, bool))
    next_values = next_values.reshape(-1).at[index].set(successor, mode="drop").reshape(next_values.shape)
    traj = Trajectory(
        obs, actions, rewards, terminated, truncated, log_probs, values, next_values, episode_return, episode_length
    )
    if keep_next_obs:
        traj = traj.replace(next_obs=final_obs)
    hidden = None
    if keep_hidden:  # the state before step t is the state after step t - 1 (before any reset)
        hidden = jax.tree.map(lambda h0, h: jnp.concatenate([h0[None], h[:-1]]), memory.hidden, hidden_after)
    return carry_after, memory_after, traj, Sequences(memory.hidden, starts, hidden)


@dataclasses.dataclass(frozen=True)
class RecurrentAct:
    """A policy with memory, as `jaxrl.episodes.evaluate` plays it: `step(h, obs [E, ...], start [E], key) ->
    (h', action [E, ...])` from `initial(E) -> h`; `evaluate` passes start = True at each episode's first step."""

    step: Callable
    initial: Callable
