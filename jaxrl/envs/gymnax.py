"""gymnax 1.x environments as `VecEnv`s: `GymnaxVecEnv` vmaps one gymnax environment over `num_envs` copies,
auto-reset by gymnax, with the true successor in `info["final_observation"]`.

gymnax is imported on first use (`import_gymnax`), not with this module: its import creates JAX arrays, which
initialises JAX's backends, after which the CPU device count (`jaxrl.sweep.use_cpu_cores`) and
`jax.distributed.initialize` can no longer be set up.
"""

from __future__ import annotations

import importlib
import sys
import threading
import types

import jax
import jax.numpy as jnp

from jaxrl.envs.spec import EnvSpec

# Modules that gymnax's environment modules import at their top for their `render` functions alone (Pong's imports
# seaborn, and with it pandas and scipy.stats): most of gymnax's import time. `import_gymnax` defers them.
RENDER_ONLY_IMPORTS = ("seaborn", "matplotlib.pyplot")


class DeferredModule(types.ModuleType):
    """Stands in for a module while gymnax is imported; the first attribute read imports the real module (by then
    out of `sys.modules`, so any later `import` gets the real one) and every read goes to it."""

    def __getattr__(self, name: str):
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return getattr(importlib.import_module(self.__name__), name)


_IMPORTING = threading.Lock()


def import_gymnax():
    """The gymnax module, imported on first use (see the module docstring), with `RENDER_ONLY_IMPORTS` deferred
    until a gymnax render function uses them. Safe from several threads at once (a sweep compiles while it
    validates): a thread never gets the module while another is still initialising it."""
    with _IMPORTING:
        if "gymnax" not in sys.modules:
            stand_ins = {name: DeferredModule(name) for name in RENDER_ONLY_IMPORTS if name not in sys.modules}
            sys.modules.update(stand_ins)
            try:
                import gymnax  # noqa: F401
            finally:
                for name, stand_in in stand_ins.items():
                    if sys.modules.get(name) is stand_in:
                        del sys.modules[name]
    return importlib.import_module("gymnax")  # waits for an import of gymnax another thread has under way


def ids() -> list[str]:
    """The ids of gymnax's own environments."""
    return import_gymnax().registered_envs


class GymnaxVecEnv:
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
        keys = jax.random.split(key, self.num_envs)
        obs, state = jax.vmap(self.env.reset, in_axes=(0, None))(keys, self.params)
        return _as_float(obs), state

    def step(self, key: jax.Array, state, action: jax.Array):
        """One step of every env, auto-reset as gymnax's `Environment.step` does it (each env's key split into a
        step key and a reset key; where an env is done, the reset's observation and state replace the stepped
        ones), except that the resets are computed only on steps where some env is done (a `lax.cond`): on most
        steps no episode ends, and gymnax computes a reset for every env on every step. Environments that
        override `step` (bsuite's DeepSea keeps metrics across resets) are stepped by their own."""
        keys = jax.random.split(key, self.num_envs)
        if _auto_resets_as_gymnax(self.env):
            obs, state, reward, terminated, truncated, final_obs = self._step_then_reset_done(keys, state, action)
        else:
            step = jax.vmap(self.env.step, in_axes=(0, 0, 0, None))
            obs, state, reward, terminated, truncated, info = step(keys, state, action, self.params)
            final_obs = info["final_observation"]
        return (
            _as_float(obs),
            state,
            reward.astype(jnp.float32),
            terminated.astype(bool),
            truncated.astype(bool),
            {"final_observation": _as_float(final_obs)},
        )

    def _step_then_reset_done(self, keys: jax.Array, state, action: jax.Array):
        env, params = self.env, self.params

        def step_one(key, state, action):
            key_step, key_reset = jax.random.split(key)
            obs, state, reward, terminated, _ = env.step_env(key_step, state, action, params)
            return obs, state, reward, terminated, env.is_truncated(state, params), key_reset

        obs, stepped, reward, terminated, truncated, reset_keys = jax.vmap(step_one)(keys, state, action)
        done = jnp.logical_or(terminated, truncated)

        def reset_done(_):
            obs_reset, state_reset = jax.vmap(env.reset_env, in_axes=(0, None))(reset_keys, params)

            def pick(reset, kept):
                return jnp.where(done.reshape(done.shape + (1,) * (kept.ndim - 1)), reset, kept)

            return jax.tree.map(pick, obs_reset, obs), jax.tree.map(pick, state_reset, stepped)

        next_obs, next_state = jax.lax.cond(done.any(), reset_done, lambda _: (obs, stepped), None)
        return next_obs, next_state, reward, terminated, truncated, obs


def _auto_resets_as_gymnax(env) -> bool:
    """Whether `env` keeps gymnax's own `Environment.step` (step_env, is_truncated, reset_env where done)."""
    from gymnax.environments.environment import Environment

    return getattr(type(env), "step", None) is Environment.step


def _as_float(obs):
    return obs.astype(jnp.float32)


def spec_of(env_id: str, env, params) -> EnvSpec:
    """The EnvSpec of a gymnax environment (Discrete or Box actions)."""
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


def make(env_id: str, num_envs: int, probe_and_params=None, **env_params) -> GymnaxVecEnv:
    """The gymnax environment `env_id` (or a user's gymnax-API `(env, params)`), vectorised: keywords that name
    a field of its `EnvParams` override it, the others go to the environment's constructor."""
    gymnax = import_gymnax()
    probe, params = gymnax.make(env_id) if probe_and_params is None else probe_and_params
    param_fields = set(params.__dataclass_fields__)
    overrides = {k: v for k, v in env_params.items() if k in param_fields}
    ctor_kwargs = {k: v for k, v in env_params.items() if k not in param_fields}
    if ctor_kwargs and probe_and_params is not None:
        raise ValueError(f"{env_id}: {', '.join(ctor_kwargs)} are not fields of its EnvParams.")
    env = gymnax.make(env_id, **ctor_kwargs)[0] if ctor_kwargs else probe
    params = params.replace(**overrides)
    return GymnaxVecEnv(env, params, num_envs, spec_of(env_id, env, params))
