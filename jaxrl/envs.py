"""Vectorised gymnax 1.x environments and their pure wrappers.

`make(env_id, num_envs=N)` returns a `VecEnv`: `reset(key) -> (obs[N, ...], state)` and
`step(key, state, action[N, ...]) -> (obs, state, reward[N], terminated[N], truncated[N], info)`.
Wrappers act on the whole batch (observation statistics are shared across the N envs), hold their
state in `flax.struct` pytrees and are pure, so a VecEnv steps inside `jax.jit`, `lax.scan` and `jax.vmap`.

`info["final_observation"]` is the true successor observation of every env (before auto-reset): on a
truncated step its value is what a return bootstraps from.

Action masks: an env whose `EnvSpec.action_mask` is True has flat observations [N, D] whose last `action_dim`
entries are the mask of that observation (1 valid, 0 not; `action_mask` reads it). The mask travels inside the
observation, so the contract keeps one observation array and every path that stores or replays observations
(rollouts, minibatches, replay, evaluation, final observations) carries it unchanged; `NormalizeObservation`
leaves it raw, and the heads of `jaxrl.networks` mask their logits and action values with it.

Ids: a plain id (`CartPole-v1`) is a gymnax environment; `suite:Name` (`navix:Navix-Empty-5x5-v0`,
`brax:inverted_pendulum`, ...) is one of the suites of `jaxrl.suites`, an optional extra adapted to this same
contract; any other id is one a user added with `register` (a gymnax 1.x environment or a VecEnv of their own).

gymnax is imported on first use, not with this module: its import creates JAX arrays, which initialises JAX's
backends, after which the CPU device count (`jaxrl.sweep.use_cpu_cores`) and `jax.distributed.initialize`
can no longer be set up.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import parallel


def _gymnax():
    """The gymnax module, imported on first use (see the module docstring)."""
    import gymnax

    return gymnax


OBS_CLIP = 10.0  # normalised observations are clipped to [-10, 10], as in SB3's VecNormalize


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


class VecEnv:
    """`num_envs` copies of one gymnax environment, stepped with `jax.vmap` and auto-reset by gymnax."""

    def __init__(self, env, params, num_envs: int, spec: EnvSpec):
        self.env, self.params, self.num_envs, self.spec = env, params, num_envs, spec

    def max_truncations(self, num_steps: int) -> int:
        """An upper bound on the truncated steps in a window of `num_steps` steps of all envs.

        gymnax truncates when an episode reaches `max_steps_in_episode`, so one env truncates at most once
        per that many steps; an env that overrides `is_truncated` gets the trivial bound.
        """
        limit = getattr(self.params, "max_steps_in_episode", None)
        from gymnax.environments.environment import Environment

        standard = getattr(type(self.env), "is_truncated", None) is Environment.is_truncated
        if not standard or not isinstance(limit, int) or limit < 1:
            return num_steps * self.num_envs
        return self.num_envs * min(num_steps, -(-num_steps // limit))

    def reset(self, key: jax.Array):
        keys = jax.random.split(parallel.device_key(key), self.num_envs)
        obs, state = jax.vmap(self.env.reset, in_axes=(0, None))(keys, self.params)
        return _as_float(obs), state

    def step(self, key: jax.Array, state, action: jax.Array):
        keys = jax.random.split(parallel.device_key(key), self.num_envs)
        obs, state, reward, terminated, truncated, info = jax.vmap(self.env.step, in_axes=(0, 0, 0, None))(
            keys, state, action, self.params
        )
        info = {"final_observation": _as_float(info["final_observation"])}
        return (
            _as_float(obs),
            state,
            reward.astype(jnp.float32),
            terminated.astype(bool),
            truncated.astype(bool),
            info,
        )


def _as_float(obs):
    return obs.astype(jnp.float32)


class Wrapper:
    """Forwards attributes to the wrapped VecEnv."""

    def __init__(self, env):
        self.inner = env

    def __getattr__(self, name):
        return getattr(self.inner, name)


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

    def update(self, batch: jax.Array) -> RunningMeanStd:
        batch_mean, batch_var, batch_count = parallel.mean_var(batch)  # over every device's envs
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
    """Normalises observations (and `final_observation`) by running statistics updated every step; an action
    mask (`EnvSpec.action_mask`) stays raw, for the policies to read."""

    def reset(self, key):
        obs, inner = self.inner.reset(key)
        raw_tail = self.spec.action_dim if self.spec.action_mask else 0
        stats = RunningMeanStd.create(obs.shape[1:], raw_tail).update(obs)
        return stats.normalize(obs), NormalizeObservationState(inner, stats)

    def step(self, key, state, action):
        obs, inner, reward, terminated, truncated, info = self.inner.step(key, state.inner, action)
        stats = state.stats.update(obs)
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

    with Var[G] the running variance (`RunningMeanStd`, Chan et al.) of every G_t seen, updated with the batch's
    G_t before r_t is scaled. Wrap it outside `EpisodeStatistics`, so episode statistics report raw returns."""

    def __init__(self, env, gamma):
        super().__init__(env)
        self.gamma = gamma

    def reset(self, key):
        obs, inner = self.inner.reset(key)
        zeros = jnp.zeros(self.num_envs, jnp.float32)
        return obs, NormalizeRewardState(inner, zeros, RunningMeanStd.create(()))

    def step(self, key, state, action):
        obs, inner, reward, terminated, truncated, info = self.inner.step(key, state.inner, action)
        returns = self.gamma * state.returns + reward
        stats = state.reward_stats.update(returns)
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


def spec_of(env_id: str, env, params) -> EnvSpec:
    from gymnax.environments import spaces

    action_space = env.action_space(params)
    obs_shape = tuple(env.observation_space(params).shape)
    if isinstance(action_space, spaces.Discrete):
        return EnvSpec(env_id, obs_shape, True, int(action_space.n))
    if isinstance(action_space, spaces.Box):
        shape = tuple(action_space.shape) or (1,)
        low = jnp.broadcast_to(jnp.asarray(action_space.low, jnp.float32), shape)
        high = jnp.broadcast_to(jnp.asarray(action_space.high, jnp.float32), shape)
        return EnvSpec(env_id, obs_shape, False, int(shape[0]), low, high)
    raise ValueError(f"{env_id}: unsupported action space {action_space!r} (jaxrl supports Discrete and Box)")


# ---------------------------------------------------------------------------------------------------------
# Ids: gymnax, the suites of jaxrl.suites (`suite:Name`), and environments registered by users
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Registration:
    """A user's environment: `factory(**env_kwargs)` returns a gymnax 1.x `Environment` or an `(env, params)`
    pair; with `vectorised=True`, `factory(num_envs, **env_kwargs)` returns an object with the VecEnv contract."""

    factory: Any
    vectorised: bool = False


_REGISTERED: dict[str, Registration] = {}


def register(env_id: str, factory, *, vectorised: bool = False) -> None:
    """Makes `env_id` an id `make` (hence every algorithm's `Config.env`) accepts.

    `factory(**env_kwargs)` returns a gymnax 1.x environment (`reset(key, params)`, `step(key, state, action,
    params)` with terminated and truncated, `default_params`, `action_space`, `observation_space`) or an
    `(env, params)` pair: jaxrl vectorises it as it does gymnax's own. With `vectorised=True`,
    `factory(num_envs, **env_kwargs)` returns an object with the VecEnv contract (`reset`, `step` with
    `info["final_observation"]`, `num_envs`, `spec`, `max_truncations`). A suite prefix (`navix:`, ...) or a
    gymnax id cannot be taken; registering an id again replaces it.
    """
    from jaxrl import suites

    prefix = env_id.split(":", 1)[0] if ":" in env_id else None
    if prefix in suites.SUITES:
        raise ValueError(f"env id {env_id!r}: the prefix {prefix!r} belongs to jaxrl's {prefix} suite; use another.")
    if prefix is None and env_id in _gymnax().registered_envs:
        raise ValueError(f"env id {env_id!r} is a gymnax environment; choose another id (e.g. 'mine:{env_id}').")
    if not callable(factory):
        raise TypeError(f"register({env_id!r}, factory): factory must be callable, got {type(factory).__name__}.")
    _REGISTERED[env_id] = Registration(factory, vectorised)


def registered_ids() -> list[str]:
    """The ids added with `register`."""
    return list(_REGISTERED)


def check_env_id(env_id: str) -> None:
    """Raises a ValueError naming close matches when `env_id` is neither a gymnax environment, nor a known id
    of an installed suite (`suite:Name`), nor one added with `register`; for a suite whose extra is missing,
    the error names the install command."""
    if env_id in _REGISTERED:
        return
    if ":" in env_id:
        from jaxrl import suites

        suites.check_id(env_id)
        return
    registered = _gymnax().registered_envs
    if env_id in registered:
        return
    close = difflib.get_close_matches(env_id, registered, n=3, cutoff=0.4)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(
        f"env={env_id!r} is not a registered gymnax environment.{hint} Known ids: {', '.join(registered)}. "
        "Other suites take a prefix (e.g. 'navix:Navix-Empty-5x5-v0'); your own: jaxrl.envs.register."
    )


def _make_gymnax(env_id: str, num_envs: int, probe_and_params=None, **env_params) -> VecEnv:
    """The gymnax environment `env_id` (or a user's gymnax-API `(env, params)`), vectorised."""
    gymnax = _gymnax()
    probe, params = gymnax.make(env_id) if probe_and_params is None else probe_and_params
    param_fields = set(params.__dataclass_fields__)
    overrides = {k: v for k, v in env_params.items() if k in param_fields}
    ctor_kwargs = {k: v for k, v in env_params.items() if k not in param_fields}
    if ctor_kwargs and probe_and_params is not None:
        raise ValueError(f"{env_id}: {', '.join(ctor_kwargs)} are not fields of its EnvParams.")
    env = gymnax.make(env_id, **ctor_kwargs)[0] if ctor_kwargs else probe
    params = params.replace(**overrides)
    return VecEnv(env, params, num_envs, spec_of(env_id, env, params))


def _make_registered(env_id: str, num_envs: int, **env_kwargs):
    registration = _REGISTERED[env_id]
    if registration.vectorised:
        vec = registration.factory(num_envs, **env_kwargs)
        for member in ("reset", "step", "num_envs", "spec", "max_truncations"):
            if not hasattr(vec, member):
                raise TypeError(f"{env_id}: its factory returned {type(vec).__name__} without {member!r} (VecEnv).")
        return vec
    made = registration.factory(**env_kwargs)
    env, params = made if isinstance(made, tuple) else (made, made.default_params)
    return _make_gymnax(env_id, num_envs, (env, params))


def make(
    env_id: str,
    num_envs: int = 1,
    *,
    normalize_observations: bool = False,
    clip_actions: bool = True,
    normalize_rewards: bool = False,
    reward_gamma=0.99,
    **env_params,
) -> VecEnv:
    """Builds `num_envs` vectorised copies of the environment `env_id`, with episode statistics (of the raw
    rewards) and, with `normalize_rewards`, rewards scaled by `NormalizeReward` at discount `reward_gamma`.

    gymnax ids: keyword arguments that name a field of the env's `EnvParams` (e.g. `max_steps_in_episode=200`)
    override it; other keywords go to the environment's constructor. Suite ids (`suite:Name`): keywords go to
    the suite's adapter (`jaxrl.suites.<suite>.make`); registered ids: to their factory.
    """
    check_env_id(env_id)
    if num_envs < 1:
        raise ValueError(f"num_envs={num_envs}: need at least one environment.")
    if env_id in _REGISTERED:
        vec: Any = _make_registered(env_id, num_envs, **env_params)
    elif ":" in env_id:
        from jaxrl import suites

        vec = suites.make(env_id, num_envs, **env_params)
    else:
        vec = _make_gymnax(env_id, num_envs, **env_params)
    spec = vec.spec
    if clip_actions and not spec.discrete:
        vec = ClipAction(vec)
    if normalize_observations:
        vec = NormalizeObservation(vec)
    vec = EpisodeStatistics(vec)
    return NormalizeReward(vec, reward_gamma) if normalize_rewards else vec
