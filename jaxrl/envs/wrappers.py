"""Pure wrappers of a `VecEnv`: per-device keys, observation and reward normalisation, episode statistics,
action clipping and scaling.

Wrappers act on the whole batch (observation statistics are shared across the N envs), hold their state in
`flax.struct` pytrees and are pure, so a wrapped VecEnv steps inside `jax.jit`, `lax.scan` and `jax.vmap`.

Devices: when one batch of envs is split over the devices of a named axis (`axis_name`, e.g. a `shard_map` or a
named `vmap`), `DeviceKeys` gives every device its own key stream, fold_in(key, axis index), and the running
statistics of the normalisers are those of the global batch (`mean_var`). With `axis_name=None` (one device)
both are the identity and the program is the one-device program.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.envs.spec import EnvSpec

OBS_CLIP = 10.0  # normalised observations are clipped to [-10, 10], as in SB3's VecNormalize


class Wrapper:
    """Forwards attributes to the wrapped VecEnv."""

    def __init__(self, env):
        self.inner = env

    def __getattr__(self, name):
        return getattr(self.inner, name)


def device_key(key: jax.Array, axis_name: str | None) -> jax.Array:
    """fold_in(key, index along `axis_name`) (each device its own stream), or `key` when `axis_name` is None."""
    return key if axis_name is None else jax.random.fold_in(key, jax.lax.axis_index(axis_name))


class DeviceKeys(Wrapper):
    """Resets and steps the wrapped env with `device_key(key, axis_name)`: the envs of each device along the
    named axis draw their own random streams."""

    def __init__(self, env, axis_name: str):
        super().__init__(env)
        self.axis_name = axis_name

    def reset(self, key):
        return self.inner.reset(device_key(key, self.axis_name))

    def step(self, key, state, action):
        return self.inner.step(device_key(key, self.axis_name), state, action)


@struct.dataclass
class EpisodeStatisticsState:
    inner: Any
    episode_return: jax.Array  # [N] return of the running episode so far
    episode_length: jax.Array  # [N]


class EpisodeStatistics(Wrapper):
    """Adds `info["episode_return"]`, `info["episode_length"]` and `info["episode_done"]`.

    The first two hold the return and length of the episode that ended at this step and are meaningful
    only where `episode_done` (terminated or truncated) is true; they are 0 elsewhere.
    """

    def reset(self, key):
        obs, inner = self.inner.reset(key)
        zeros = jnp.zeros(self.num_envs, jnp.float32)
        return obs, EpisodeStatisticsState(inner, zeros, zeros.astype(jnp.int32))

    def step(self, key, state, action):
        obs, inner, reward, terminated, truncated, info = self.inner.step(key, state.inner, action)
        done = terminated | truncated
        episode_return = state.episode_return + reward
        episode_length = state.episode_length + 1
        info = {
            **info,
            "episode_done": done,
            "episode_return": jnp.where(done, episode_return, 0.0),
            "episode_length": jnp.where(done, episode_length, 0),
        }
        state = EpisodeStatisticsState(inner, jnp.where(done, 0.0, episode_return), jnp.where(done, 0, episode_length))
        return obs, state, reward, terminated, truncated, info


def mean_var(batch: jax.Array, axis_name: str | None = None) -> tuple[jax.Array, jax.Array, int]:
    """(mean, variance, count) over axis 0 of the batch; with `axis_name`, of the global batch of the D devices
    along that axis, each holding a block of n rows: mean = (1/D) sum_d m_d and
    var = (1/D) sum_d (v_d + (m_d - mean)^2), count = D n."""
    local_mean, local_var, count = batch.mean(0), batch.var(0), batch.shape[0]
    if axis_name is None:
        return local_mean, local_var, count
    mean = jax.lax.pmean(local_mean, axis_name)
    var = jax.lax.pmean(local_var + jnp.square(local_mean - mean), axis_name)
    return mean, var, count * jax.lax.axis_size(axis_name)


@struct.dataclass
class RunningMeanStd:
    """Running mean and variance (Chan et al. parallel update), shared by the batch."""

    mean: jax.Array
    var: jax.Array
    count: jax.Array
    raw_tail: int = struct.field(pytree_node=False, default=0)  # last features `normalize` leaves as they are

    @classmethod
    def create(cls, shape, raw_tail: int = 0):
        zeros, ones = jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32)
        return cls(zeros, ones, jnp.array(1e-4, jnp.float32), raw_tail)

    def update(self, batch: jax.Array, axis_name: str | None = None) -> RunningMeanStd:
        """The statistics with `batch` [n, ...] added (the global batch over `axis_name`, see `mean_var`)."""
        batch_mean, batch_var, batch_count = mean_var(batch, axis_name)
        delta = batch_mean - self.mean
        count = self.count + batch_count
        mean = self.mean + delta * batch_count / count
        m2 = self.var * self.count + batch_var * batch_count + delta**2 * self.count * batch_count / count
        return self.replace(mean=mean, var=m2 / count, count=count)

    def normalize(self, x: jax.Array) -> jax.Array:
        """(x - mean) / std clipped to [-OBS_CLIP, OBS_CLIP]; the last `raw_tail` features (an action mask) raw."""
        z = jnp.clip((x - self.mean) / jnp.sqrt(self.var + 1e-8), -OBS_CLIP, OBS_CLIP)
        if not self.raw_tail:
            return z
        return jnp.concatenate([z[..., : -self.raw_tail], x[..., -self.raw_tail :]], axis=-1)


@struct.dataclass
class NormalizeObservationState:
    inner: Any
    stats: RunningMeanStd


class NormalizeObservation(Wrapper):
    """Normalises observations (and `final_observation`) by running statistics updated every step (over the
    devices along `axis_name`, when given); an action mask (`EnvSpec.action_mask`) stays raw, for the policies
    to read."""

    def __init__(self, env, axis_name: str | None = None):
        super().__init__(env)
        self.axis_name = axis_name

    def reset(self, key):
        obs, inner = self.inner.reset(key)
        raw_tail = self.spec.action_dim if self.spec.action_mask else 0
        stats = RunningMeanStd.create(obs.shape[1:], raw_tail).update(obs, self.axis_name)
        return stats.normalize(obs), NormalizeObservationState(inner, stats)

    def step(self, key, state, action):
        obs, inner, reward, terminated, truncated, info = self.inner.step(key, state.inner, action)
        stats = state.stats.update(obs, self.axis_name)
        info = {**info, "final_observation": stats.normalize(info["final_observation"])}
        return stats.normalize(obs), NormalizeObservationState(inner, stats), reward, terminated, truncated, info


@struct.dataclass
class NormalizeRewardState:
    inner: Any
    returns: jax.Array  # [N] discounted return of the running episode, 0 after a done
    reward_stats: RunningMeanStd  # of the discounted return, shape (), shared by the batch


class NormalizeReward(Wrapper):
    """Divides rewards by the running standard deviation of the discounted return (as gym's NormalizeReward,
    used by CleanRL's and SB3's PPO for continuous control): per env

        G_t = gamma * G_{t-1} * (1 - done_{t-1}) + r_t,   r~_t = r_t / sqrt(Var[G] + 1e-8),

    with Var[G] the running variance (`RunningMeanStd`, Chan et al.) of every G_t seen (over the devices along
    `axis_name`, when given), updated with the batch's G_t before r_t is scaled. Wrap it outside
    `EpisodeStatistics`, so episode statistics report raw returns."""

    def __init__(self, env, gamma, axis_name: str | None = None):
        super().__init__(env)
        self.gamma, self.axis_name = gamma, axis_name

    def reset(self, key):
        obs, inner = self.inner.reset(key)
        zeros = jnp.zeros(self.num_envs, jnp.float32)
        return obs, NormalizeRewardState(inner, zeros, RunningMeanStd.create(()))

    def step(self, key, state, action):
        obs, inner, reward, terminated, truncated, info = self.inner.step(key, state.inner, action)
        returns = self.gamma * state.returns + reward
        stats = state.reward_stats.update(returns, self.axis_name)
        scaled = reward / jnp.sqrt(stats.var + 1e-8)
        returns = jnp.where(terminated | truncated, 0.0, returns)
        return obs, NormalizeRewardState(inner, returns, stats), scaled, terminated, truncated, info


class ClipAction(Wrapper):
    """Clips continuous actions to the action space's bounds before the env sees them."""

    def step(self, key, state, action):
        return self.inner.step(key, state, jnp.clip(action, self.spec.action_low, self.spec.action_high))


class ScaleAction(Wrapper):
    """Takes continuous actions u in the normalised box [-1, 1]^A and applies a = low + (u + 1) (high - low) / 2
    to the wrapped env, so actors, critics, replay and exploration noise work in units of the half-range for any
    Box bounds (DDPG, TD3, SAC)."""

    def step(self, key, state, action):
        return self.inner.step(key, state, scale_action(action, self.spec))


def scale_action(u: jax.Array, spec: EnvSpec) -> jax.Array:
    """[-1, 1]^A -> [low, high]."""
    return spec.action_low + 0.5 * (u + 1.0) * (spec.action_high - spec.action_low)


def observation_normalizer(env_state):
    """The observation normalisation of a wrapped env's state (`RunningMeanStd.normalize`), or identity."""
    while env_state is not None:
        stats = getattr(env_state, "stats", None)
        if isinstance(stats, RunningMeanStd):
            return stats.normalize
        env_state = getattr(env_state, "inner", None)
    return lambda obs: obs
