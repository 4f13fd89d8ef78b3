"""Environment ids and `make`.

A plain id (`CartPole-v1`) is a gymnax environment (`jaxrl.envs.gymnax`); `suite:Name` (`navix:Navix-Empty-5x5-v0`,
`brax:inverted_pendulum`, ...) is one of the suites of `jaxrl.envs.suites`, an optional extra adapted to the same
`VecEnv` contract and found by its prefix; any other id is one a user added with `register` (a gymnax 1.x
environment or a VecEnv of their own). `make` builds the env of an id and wraps it (`jaxrl.envs.wrappers`).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any

from jaxrl.envs import gymnax, suites
from jaxrl.envs.spec import VecEnv
from jaxrl.envs.wrappers import ClipAction, DeviceKeys, EpisodeStatistics, NormalizeObservation, NormalizeReward


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
    prefix = env_id.split(":", 1)[0] if ":" in env_id else None
    if prefix in suites.SUITES:
        raise ValueError(f"env id {env_id!r}: the prefix {prefix!r} belongs to jaxrl's {prefix} suite; use another.")
    if prefix is None and env_id in gymnax.ids():
        raise ValueError(f"env id {env_id!r} is a gymnax environment; choose another id (e.g. 'mine:{env_id}').")
    if not callable(factory):
        raise TypeError(f"register({env_id!r}, factory): factory must be callable, got {type(factory).__name__}.")
    _REGISTERED[env_id] = Registration(factory, vectorised)


def register_builtin(env_id: str, factory) -> None:
    """`register` for jaxrl's own ids (`jaxrl.envs.memory`), at import: no check against gymnax's ids, which would
    import gymnax (and start JAX) whenever jaxrl.envs is imported; tests/test_memory_envs.py checks that they
    collide with none."""
    _REGISTERED[env_id] = Registration(factory, False)


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
        suites.check_id(env_id)
        return
    registered = gymnax.ids()
    if env_id in registered:
        return
    close = difflib.get_close_matches(env_id, [*registered, *_REGISTERED], n=3, cutoff=0.4)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(
        f"env={env_id!r} is not a registered gymnax environment.{hint} Known ids: {', '.join(registered)}. "
        "Other suites take a prefix (e.g. 'navix:Navix-Empty-5x5-v0'); your own: jaxrl.envs.register."
    )


def _make_registered(env_id: str, num_envs: int, **env_kwargs):
    registration = _REGISTERED[env_id]
    if registration.vectorised:
        vec = registration.factory(num_envs, **env_kwargs)
        for member in ("reset", "step", "num_envs", "spec", "max_truncations"):
            if not hasattr(vec, member):
                raise TypeError(f"{env_id}: its factory returned {type(vec).__name__} without {member!r} (VecEnv).")
        return vec
    gymnax.import_gymnax()  # before a factory imports parts of gymnax itself
    made = registration.factory(**env_kwargs)
    env, params = made if isinstance(made, tuple) else (made, made.default_params)
    return gymnax.make(env_id, num_envs, (env, params))


def make(
    env_id: str,
    num_envs: int = 1,
    *,
    normalize_observations: bool = False,
    clip_actions: bool = True,
    normalize_rewards: bool = False,
    reward_gamma=0.99,
    axis_name: str | None = None,
    **env_params,
) -> VecEnv:
    """Builds `num_envs` vectorised copies of the environment `env_id`, with episode statistics (of the raw
    rewards) and, with `normalize_rewards`, rewards scaled by `NormalizeReward` at discount `reward_gamma`.

    gymnax ids: keyword arguments that name a field of the env's `EnvParams` (e.g. `max_steps_in_episode=200`)
    override it; other keywords go to the environment's constructor. Suite ids (`suite:Name`): keywords go to
    the suite's adapter (`jaxrl.envs.suites.<suite>.make`); registered ids: to their factory.

    `axis_name`: the named axis (a `shard_map` or named `vmap`) whose devices each hold `num_envs` envs of one
    global batch: resets and steps use fold_in(key, axis index) (`DeviceKeys`) and the normalisers' running
    statistics are those of the global batch. None (the default): one device.
    """
    check_env_id(env_id)
    if num_envs < 1:
        raise ValueError(f"num_envs={num_envs}: need at least one environment.")
    if env_id in _REGISTERED:
        vec: Any = _make_registered(env_id, num_envs, **env_params)
    elif ":" in env_id:
        vec = suites.make(env_id, num_envs, **env_params)
    else:
        vec = gymnax.make(env_id, num_envs, **env_params)
    spec = vec.spec
    if axis_name is not None:
        vec = DeviceKeys(vec, axis_name)
    if clip_actions and not spec.discrete:
        vec = ClipAction(vec)
    if normalize_observations:
        vec = NormalizeObservation(vec, axis_name)
    vec = EpisodeStatistics(vec)
    return NormalizeReward(vec, reward_gamma, axis_name) if normalize_rewards else vec
