"""XLand-MiniGrid (`pip install "jaxrl[xminigrid]"`): ids `xminigrid:<xminigrid id>`, e.g.
`xminigrid:MiniGrid-Empty-6x6`, `xminigrid:MiniGrid-DoorKey-5x5`, `xminigrid:XLand-MiniGrid-R1-9x9`.

- Signals: xminigrid's dm_env-style `TimeStep`: `step_type == LAST` ends an episode; `discount == 0` there marks
  the goal reached (`check_goal`), `discount == 1` its time limit (`step_num == params.max_steps`). terminated is
  LAST with discount 0, truncated LAST with discount 1.
- Auto-reset: xminigrid's environments do not reset themselves; the adapter resets here, with the true successor
  in `info["final_observation"]`.
- Observations: the agent's partial view [view_size, view_size, 2] (tile and colour ids), float32, shape kept: an
  image for `torso="cnn"`.
- Keywords: fields of the env's params (`max_steps`, `view_size`, ...). XLand ids sample their task from a
  ruleset: pass `ruleset=xminigrid.load_benchmark(...).get_ruleset(i)` (`envs.make(..., ruleset=...)`, Python
  API); without one they run xminigrid's empty default ruleset (no goal).
"""

from __future__ import annotations

import xminigrid
from xminigrid.types import StepType

from jaxrl.suites.base import AutoResetVecEnv, as_observation, discrete_spec

PREFIX = "xminigrid"


def ids() -> list[str]:
    return list(xminigrid.registered_environments())


def make(name: str, num_envs: int, **params) -> AutoResetVecEnv:
    env, env_params = xminigrid.make(name)
    env_params = env_params.replace(**params)

    def reset(key):
        timestep = env.reset(env_params, key)
        return as_observation(timestep.observation), timestep

    def step(key, timestep, action):
        del key  # xminigrid's transitions are deterministic
        timestep = env.step(env_params, timestep, action)
        last = timestep.step_type == StepType.LAST
        ended = timestep.discount == 0.0
        return as_observation(timestep.observation), timestep, timestep.reward, last & ended, last & ~ended

    spec = discrete_spec(f"{PREFIX}:{name}", reset, env.num_actions(env_params))
    return AutoResetVecEnv(reset, step, num_envs, spec, int(env_params.max_steps), suite_env=(env, env_params))
