"""MuJoCo Playground (`pip install "jaxrl[playground]"`): ids `playground:<name>`, e.g. `playground:CartpoleBalance`,
`playground:PendulumSwingup` (`mujoco_playground.registry.ALL_ENVS`).

- Signals: the same as Brax's: Playground's trainers wrap an environment in Brax's `EpisodeWrapper`
  (`mujoco_playground.wrapper.wrap_for_brax_training`), which sets `state.info["truncation"]` where its
  `episode_length` ended the episode. truncated is that; terminated is `done` without it.
- Auto-reset: here, with the true successor in `info["final_observation"]` (see `jaxrl.envs.suites.brax`).
- Observations: Playground's array observation (float32); a dict observation (locomotion: "state",
  "privileged_state") is flattened by the rule of `jaxrl.envs.suites.base` (keys sorted, each raveled, concatenated).
- Actions: bounded by the MuJoCo model's actuator `ctrlrange` where `ctrllimited`, else [-1, 1]; clipped.
- Keywords: `impl` (the MJX implementation; default "jax", which runs on any backend: Playground's own default
  for some environments is "warp", which needs a GPU), `episode_length` and `action_repeat` (default: the
  environment's config), and any other field of the environment's config (`config_overrides`).
- Files: the robots' environments load MuJoCo Menagerie's models, which mujoco_playground clones with git on first
  use; offline, such an env is refused in one line.
- Rendering: `episode_renderer` draws an episode's states with the environment's own `render` (MuJoCo's
  renderer on each state's `data`), off screen where MuJoCo's OpenGL backend allows it (`MUJOCO_GL=egl` or
  `osmesa`).
"""

from __future__ import annotations

import contextlib
import io
import subprocess

import numpy as np
from mujoco_playground import registry

from jaxrl.envs.suites import brax as brax_adapter

PREFIX = "playground"


def ids() -> list[str]:
    return list(registry.ALL_ENVS)


def make(name: str, num_envs: int, impl: str = "jax", **overrides):
    config = registry.get_default_config(name)
    episode_length = int(overrides.pop("episode_length", config.episode_length))
    action_repeat = int(overrides.pop("action_repeat", config.get("action_repeat", 1)))
    if "impl" in config:
        overrides["impl"] = impl

    def load(**_):
        try:
            return registry.load(name, config_overrides=overrides)
        except subprocess.CalledProcessError as error:  # the robots' models, cloned on first use
            raise OSError(
                f"{PREFIX}:{name} needs MuJoCo Menagerie's robot models, which mujoco_playground clones with git on "
                f"first use, and the clone failed ({str(error).rstrip('.')}); run it once with the network reachable."
            ) from error

    env, bounds = brax_adapter.episode_env(load, episode_length, action_repeat)
    return brax_adapter.adapter(f"{PREFIX}:{name}", env, bounds, num_envs, episode_length, action_repeat)


def episode_renderer(env):
    """`draw(states, height, width) -> [[H, W, 3] uint8]`: one env's states of an episode (this adapter's,
    Playground `State`s on the host) drawn by the environment's `render`, one renderer for them all."""
    playground_env = env.unwrapped

    def draw(states, height: int, width: int):
        with contextlib.redirect_stderr(io.StringIO()):  # Playground's render shows a progress bar of its own
            frames = playground_env.render(list(states), height, width)
        return [np.asarray(f) for f in frames]

    return draw
