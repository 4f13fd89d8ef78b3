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
  ruleset: pass `ruleset=` a RuleSet (`xminigrid.load_benchmark(name).get_ruleset(i)`) or the id
  `"<benchmark>/<i>"` (e.g. `"trivial-21k/0"`), read from xminigrid's local copy of the benchmark; without one
  they run xminigrid's empty default ruleset (no goal). xminigrid downloads benchmarks from Hugging Face on
  first use; jaxrl never downloads (an env is built many times: validation, init, evaluation), so a benchmark
  not yet on disk is a one-line error saying how to fetch it.
- Rendering: `renderer` draws the whole grid with xminigrid's RGB renderer (`env.render`, MiniGrid's tiles), the
  agent's view highlighted.
"""

from __future__ import annotations

import os

import jax
import numpy as np
import xminigrid
from xminigrid import benchmarks
from xminigrid.types import StepType

from jaxrl.envs.suites.base import AutoResetVecEnv, as_observation, discrete_spec

PREFIX = "xminigrid"


def ids() -> list[str]:
    return list(xminigrid.registered_environments())


def benchmark_ruleset(ruleset_id: str):
    """The ruleset `"<benchmark>/<index>"` (index 0 when omitted) of an XLand-MiniGrid benchmark, from the file
    xminigrid keeps in `benchmarks.DATA_PATH`; a missing file raises instead of downloading (module docstring)."""
    name, _, index = ruleset_id.partition("/")
    known = benchmarks.registered_benchmarks()
    if name not in known or not (index or "0").isdigit():
        raise ValueError(f"ruleset={ruleset_id!r}: expected '<benchmark>/<index>' with a benchmark of {known}.")
    path = os.path.join(benchmarks.DATA_PATH, benchmarks.NAME2HFFILENAME[name])
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"ruleset={ruleset_id!r}: XLand-MiniGrid benchmark {name!r} is not on disk ({path}); xminigrid downloads "
            f'it from huggingface.co/datasets/{benchmarks.HF_REPO_ID}: run python -c "import xminigrid; '
            f"xminigrid.load_benchmark('{name}')\" once with internet access (or copy the file there)."
        )
    return benchmarks.load_benchmark_from_path(path).get_ruleset(int(index or 0))


def make(name: str, num_envs: int, **params) -> AutoResetVecEnv:
    if isinstance(params.get("ruleset"), str):
        params["ruleset"] = benchmark_ruleset(params["ruleset"])
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


def renderer(suite_env):
    """`draw(timestep) -> [H, W, 3] uint8`: one env's state (this adapter's, an xminigrid TimeStep) drawn by
    xminigrid's RGB renderer (NumPy, on the host)."""
    env, params = suite_env
    params = params.replace(render_mode="rgb_array")
    return lambda timestep: np.asarray(env.render(params, jax.device_get(timestep)), np.uint8)
