"""Craftax (`pip install "jaxrl[craftax]"`): ids `craftax:Craftax-Symbolic-v1`, `craftax:Craftax-Pixels-v1`,
`craftax:Craftax-Classic-Symbolic-v1`, `craftax:Craftax-Classic-Pixels-v1`.

- Signals: Craftax's `done` is `is_game_over`: `state.timestep >= params.max_timesteps` (its time limit) or a
  natural end (death; in Craftax also the defeated final boss; in Classic also lava). terminated is the natural
  end, computed by the suite's own `is_terminal` with the time limit lifted; truncated is `done` without it.
- Auto-reset: the adapter steps the suite's NoAutoReset environment and resets here, with the true successor in
  `info["final_observation"]` (Craftax's own AutoReset variant discards it).
- Observations: Symbolic ids give Craftax's flat float vector (the map, then the inventory, as Craftax lays them
  out); Pixels ids give its [H, W, 3] image, kept as an image for `torso="cnn"`.
- Keywords: fields of the suite's `EnvParams` (e.g. `max_timesteps=1000`; Craftax's default limit is 100000,
  Classic's 10000).
- Rendering: `renderer` draws Craftax's pixel view (`render_craftax_pixels`: the player's surroundings and the
  inventory, 16 pixels a block) of Symbolic and Pixels ids alike.
"""

from __future__ import annotations

import contextlib
import io

import jax
import jax.numpy as jnp
import numpy as np
from craftax.craftax_env import make_craftax_env_from_name

from jaxrl.envs.suites.base import AutoResetVecEnv, as_observation, discrete_spec

PREFIX = "craftax"
NO_LIMIT = 2**31 - 1


def ids() -> list[str]:
    return ["Craftax-Symbolic-v1", "Craftax-Pixels-v1", "Craftax-Classic-Symbolic-v1", "Craftax-Classic-Pixels-v1"]


def make(name: str, num_envs: int, **params) -> AutoResetVecEnv:
    env = make_craftax_env_from_name(name, auto_reset=False)
    params = env.default_params.replace(**params)
    without_limit = params.replace(max_timesteps=NO_LIMIT)

    def reset(key):
        obs, state = env.reset_env(key, params)
        return as_observation(obs), state

    def step(key, state, action):
        obs, state, reward, done, _ = env.step_env(key, state, action, params)
        terminated = jnp.asarray(env.is_terminal(state, without_limit), bool)
        return as_observation(obs), state, reward, terminated, done & ~terminated

    spec = discrete_spec(f"{PREFIX}:{name}", reset, env.action_space(params).n)
    return AutoResetVecEnv(reset, step, num_envs, spec, int(params.max_timesteps), suite_env=(env, params))


def renderer(suite_env):
    """`draw(state) -> [H, W, 3] uint8`: one env's state (a Craftax EnvState) drawn by Craftax's pixel renderer
    (`make_craftax_pixel_renderer(BLOCK_PIXEL_SIZE_IMG)`), of Craftax or Craftax-Classic as the env is."""
    env, _ = suite_env
    if type(env).__module__.startswith("craftax.craftax_classic"):
        from craftax.craftax_classic.constants import BLOCK_PIXEL_SIZE_IMG
        from craftax.craftax_classic.renderer import make_craftax_pixel_renderer
    else:
        from craftax.craftax.constants import BLOCK_PIXEL_SIZE_IMG
        from craftax.craftax.renderer import make_craftax_pixel_renderer
    with contextlib.redirect_stdout(io.StringIO()):  # Craftax reports loading its textures on stdout
        pixels = jax.jit(make_craftax_pixel_renderer(BLOCK_PIXEL_SIZE_IMG))
    return lambda state: np.asarray(jnp.clip(jnp.round(pixels(state)), 0, 255), np.uint8)
