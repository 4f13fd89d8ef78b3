"""Jumanji (`pip install "jaxrl[jumanji]"`): ids `jumanji:<jumanji id>`, e.g. `jumanji:Snake-v1`, `jumanji:Maze-v0`
(single-agent environments whose action spec is one `DiscreteArray` or one `BoundedArray`).

- Signals: Jumanji's dm_env-style `TimeStep`: `step_type == LAST` ends an episode; its `discount` is 0 for a
  termination (`jumanji.types.termination`) and non-zero for a truncation (`jumanji.types.truncation`).
  terminated is LAST with discount 0, truncated LAST with a non-zero discount. Jumanji's single-agent
  environments (Snake, Maze, ...) end their time limit with `termination`, so in them truncated is never set:
  that is the suite's own signal, kept as it is.
- Auto-reset: the adapter resets here, with the true successor in `info["final_observation"]`.
- Observations: Jumanji's structured observation (a NamedTuple) flattened by the rule of `jaxrl.envs.suites.base`:
  its fields in declaration order, each float32 and raveled, concatenated, with the `action_mask` field (if
  any) moved last (Snake: the [12, 12, 5] grid, the step count, the [4] action mask -> 725 floats); a plain
  array observation keeps its shape.
- Action masks: where the observation has an `action_mask` field of one entry per action, the spec declares it
  (`EnvSpec.action_mask`): it is the last A entries of the flat observation, and jaxrl's discrete policies
  never choose a masked action (`jaxrl.networks.heads`). `info["action_mask"]` [N, A] (bool) is the same mask
  of the returned observation (after any auto-reset).
- Keywords: the environment's constructor arguments (`jumanji.make(name, **kwargs)`, e.g. `time_limit=500`).
- Files: some environments (Sokoban's level sets) download files on first use; offline, such an env is refused in
  one line.
- Rendering: `renderer` draws with the environment's own Matplotlib viewer (`jumanji.viewer.MatplotlibViewer`)
  in its `rgb_array` mode, off screen.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import jumanji
import numpy as np
from jumanji import specs
from jumanji.types import StepType

from jaxrl.envs.suites.base import AutoResetVecEnv, as_observation, box_spec, discrete_spec, flatten_observation

PREFIX = "jumanji"


def ids() -> list[str]:
    return sorted(jumanji.registered_environments())


def action_mask(observation):
    """The observation's `action_mask` field (bool), or None."""
    mask = getattr(observation, "action_mask", None)
    return None if mask is None else jnp.asarray(mask, bool)


def mask_last(observation) -> jax.Array:
    """jaxrl's form of one observation (`as_observation`), with its action mask (when it has one) moved to the
    tail of the flat vector, where `EnvSpec.action_mask` says it is."""
    mask = action_mask(observation)
    if mask is None:
        return as_observation(observation)
    if hasattr(observation, "_replace"):  # a NamedTuple; None drops the field from the leaves
        rest = observation._replace(action_mask=None)
    else:
        rest = dataclasses.replace(observation, action_mask=None)
    return jnp.concatenate([flatten_observation(rest), jnp.ravel(mask).astype(jnp.float32)])


def make(name: str, num_envs: int, **kwargs) -> AutoResetVecEnv:
    with jax.ensure_compile_time_eval():  # Jumanji's specs check concrete values: build them eagerly under jit too
        try:
            env = jumanji.make(name, **kwargs)
        except OSError as error:  # a level set (Sokoban's) downloaded from the Hugging Face Hub on first use
            raise OSError(
                f"{PREFIX}:{name} needs files jumanji downloads on first use, and the download failed "
                f"({str(error).rstrip('.')}); run it once with the network reachable."
            ) from error
        action_spec = env.action_spec
        mask = action_mask(env.observation_spec.generate_value())

    def reset(key):
        state, timestep = env.reset(key)
        return mask_last(timestep.observation), (state, action_mask(timestep.observation))

    def step(key, carry, action):
        del key  # Jumanji's randomness lives in its state's key
        state, timestep = env.step(carry[0], action)
        last = timestep.step_type == StepType.LAST
        ended = timestep.discount == 0
        next_carry = (state, action_mask(timestep.observation))
        return mask_last(timestep.observation), next_carry, timestep.reward, last & ended, last & ~ended

    env_id = f"{PREFIX}:{name}"
    if isinstance(action_spec, specs.DiscreteArray):
        one_per_action = mask is not None and mask.shape == (action_spec.num_values,)
        spec = discrete_spec(env_id, reset, action_spec.num_values, action_mask=one_per_action)
    elif isinstance(action_spec, specs.BoundedArray) and len(action_spec.shape) == 1:
        bounds = (jnp.broadcast_to(b, action_spec.shape) for b in (action_spec.minimum, action_spec.maximum))
        spec = box_spec(env_id, reset, *bounds)
    else:
        raise ValueError(
            f"{env_id}: its action spec {action_spec!r} is neither one DiscreteArray nor one 1-D BoundedArray; jaxrl "
            "supports those two (multi-discrete and multi-agent Jumanji actions are not adapted yet)."
        )
    extras = (lambda carry: {"action_mask": carry[1]}) if mask is not None else None
    limit = getattr(env, "time_limit", None)  # Jumanji ends it with a termination, so it bounds no truncations
    return AutoResetVecEnv(reset, step, num_envs, spec, None, extras, suite_env=env, episode_limit=limit)


FIGURE_INCHES = 5.0  # the viewer's figure, 100 pixels an inch


def renderer(env):
    """`draw(carry) -> [H, W, 3] uint8`: one env's state (this adapter's carry: the Jumanji State and its action
    mask) drawn by the environment's Matplotlib viewer in `rgb_array` mode."""
    import matplotlib

    matplotlib.use("Agg")  # off screen
    from jumanji.viewer import MatplotlibViewer

    viewer = getattr(env, "_viewer", None) or getattr(env, "viewer", None)
    if not isinstance(viewer, MatplotlibViewer):
        raise ValueError(f"Jumanji's {type(env).__name__}: its viewer ({type(viewer).__name__}) draws no RGB frames.")
    viewer.figure_size = (FIGURE_INCHES, FIGURE_INCHES)
    viewer._display = viewer._display_rgb_array  # the viewer's own rgb_array mode, on an env built for display

    def draw(carry):
        return np.asarray(viewer.render(jax.device_get(carry[0])))[..., :3].copy()

    return draw
