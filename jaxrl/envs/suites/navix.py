"""Navix (`pip install "jaxrl[navix]"`): MiniGrid in JAX. Ids `navix:<navix id>`, e.g. `navix:Navix-Empty-5x5-v0`.

- Signals: navix's `Timestep.step_type` (TRANSITION 0, TRUNCATION 1, TERMINATION 2; `Environment.termination`
  sets TRUNCATION when `t >= max_steps` and the task did not end, TERMINATION when it did). terminated is
  TERMINATION, truncated is TRUNCATION.
- Auto-reset: navix resets lazily, on the step AFTER an end (that step's action is dropped); the adapter calls
  navix's `_step` (the transition itself) and resets in the same step instead, so no step is lost, with the true
  successor in `info["final_observation"]`.
- Observations: navix's `observation_fn` (default `symbolic`, a [H, W, 3] grid), float32, shape kept: an image
  for `torso="cnn"`. `observation="rgb"` (or any name in `navix.observations`) picks another one.
- Keywords: `max_steps` (navix's time limit; default 100, as `navix.make`), `observation`, and any other keyword
  of the navix environment's constructor.
- Rendering: `renderer` draws the whole grid with navix's `observations.rgb` (its tile sprites).
"""

from __future__ import annotations

import jax
import navix
import numpy as np

from jaxrl.envs.suites.base import AutoResetVecEnv, as_observation, discrete_spec

PREFIX = "navix"


def ids() -> list[str]:
    return list(navix.registry())


def make_env(name: str, max_steps: int = 100, observation: str | None = None, **kwargs):
    """The navix environment `name` (one env)."""
    if observation is not None:
        kwargs["observation_fn"] = getattr(navix.observations, observation)
    return navix.make(name, max_steps=max_steps, **kwargs)


def make(name: str, num_envs: int, **kwargs) -> AutoResetVecEnv:
    env = make_env(name, **kwargs)
    step_type = navix.environments.environment.StepType

    def reset(key):
        timestep = env.reset(key)
        return as_observation(timestep.observation), timestep

    def step(key, timestep, action):
        del key  # navix's randomness lives in its state's key
        timestep = env._step(timestep, action)
        return (
            as_observation(timestep.observation),
            timestep,
            timestep.reward,
            timestep.step_type == step_type.TERMINATION,
            timestep.step_type == step_type.TRUNCATION,
        )

    spec = discrete_spec(f"{PREFIX}:{name}", reset, len(env.action_set))
    return AutoResetVecEnv(reset, step, num_envs, spec, env.max_steps, suite_env=env)


def renderer(env):
    """`draw(timestep) -> [H, W, 3] uint8`: one env's state (this adapter's, a navix Timestep) drawn whole by
    navix's RGB observation (`navix.observations.rgb`)."""
    rgb = jax.jit(navix.observations.rgb)
    return lambda timestep: np.asarray(rgb(timestep.state), np.uint8)
