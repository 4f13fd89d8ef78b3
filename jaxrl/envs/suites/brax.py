"""Brax (`pip install "jaxrl[brax]"`): ids `brax:<brax env name>`, e.g. `brax:inverted_pendulum`, `brax:ant`.

- Signals: Brax's own `EpisodeWrapper` (what `brax.envs.create` and Brax's trainers use) sets `state.done` at the
  episode limit and `state.info["truncation"]` = 1 where the limit, not the task, ended it. truncated is
  `info["truncation"]`; terminated is `done` without it.
- Auto-reset: the adapter wraps only `EpisodeWrapper` (not Brax's `AutoResetWrapper`, which drops the successor)
  and resets here, with the true successor in `info["final_observation"]`.
- Observations: Brax's flat float vector.
- Actions: continuous, bounded by the model's actuator `ctrlrange` where the actuator is `ctrllimited` (e.g. [-3, 3]
  for inverted_pendulum), [-1, 1] elsewhere; `envs.make` clips to the bounds (ClipAction).
- Keywords: `episode_length` (default 1000, as `brax.envs.create`), `action_repeat` (1), and the environment's
  constructor keywords (e.g. `backend="generalized"`, Brax's default for most environments).
- Rendering: `episode_renderer` draws an episode's pipeline states with Brax's MuJoCo renderer (`env.render`,
  `brax.io.image.render_array`), off screen where MuJoCo's OpenGL backend allows it (`MUJOCO_GL=egl` or `osmesa`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from brax import envs as brax_envs
from brax.envs.wrappers.training import EpisodeWrapper

from jaxrl.envs.suites.base import AutoResetVecEnv, as_observation, box_spec

PREFIX = "brax"


def ids() -> list[str]:
    return sorted(brax_envs._envs)  # Brax's registry (get_environment reads it; it has no public listing)


def action_bounds(env) -> tuple[jax.Array, jax.Array]:
    """[A] low and high: the actuators' ctrlrange where ctrllimited, else [-1, 1]."""
    size = env.action_size
    model = getattr(env, "sys", None) or getattr(env, "mj_model", None)  # Brax's System, Playground's MjModel
    limited = getattr(model, "actuator_ctrllimited", None)
    if limited is None or len(limited) != size:
        return -jnp.ones(size), jnp.ones(size)
    ranges = jnp.asarray(model.actuator_ctrlrange, jnp.float32)
    limited = jnp.asarray(limited, bool)
    return jnp.where(limited, ranges[:, 0], -1.0), jnp.where(limited, ranges[:, 1], 1.0)


def episode_env(make_env, episode_length: int, action_repeat: int, **kwargs):
    with jax.ensure_compile_time_eval():  # the system (model) is built eagerly, also under jit
        env = make_env(**kwargs)
        bounds = action_bounds(env)
    return EpisodeWrapper(env, episode_length, action_repeat), bounds


def adapter(env_id, env, bounds, num_envs, episode_length, action_repeat) -> AutoResetVecEnv:
    """The VecEnv of one Brax-API environment wrapped in `EpisodeWrapper` (Brax and MuJoCo Playground)."""

    def reset(key):
        state = env.reset(key)
        return as_observation(state.obs), state

    def step(key, state, action):
        del key  # Brax's transitions are deterministic given the state
        state = env.step(state, action)
        truncated = state.info["truncation"] > 0
        return as_observation(state.obs), state, state.reward, (state.done > 0) & ~truncated, truncated

    spec = box_spec(env_id, reset, *bounds)
    limit = -(-episode_length // action_repeat)  # EpisodeWrapper counts action_repeat steps per step
    return AutoResetVecEnv(reset, step, num_envs, spec, limit, suite_env=env)


def make(name: str, num_envs: int, episode_length: int = 1000, action_repeat: int = 1, **kwargs):
    env, bounds = episode_env(
        lambda **kw: brax_envs.get_environment(name, **kw), episode_length, action_repeat, **kwargs
    )
    return adapter(f"{PREFIX}:{name}", env, bounds, num_envs, episode_length, action_repeat)


def episode_renderer(env):
    """`draw(states, height, width) -> [[H, W, 3] uint8]`: one env's states of an episode (this adapter's, Brax
    `State`s on the host) drawn by Brax's MuJoCo renderer on their pipeline states, one renderer for them all."""
    brax_env = env.unwrapped

    def draw(states, height: int, width: int):
        return [np.asarray(f) for f in brax_env.render([s.pipeline_state for s in states], height, width)]

    return draw
