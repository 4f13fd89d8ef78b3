"""jaxrl: reinforcement learning compiled end to end in JAX.

`jaxrl.run` is the runner package (`jaxrl.run.loop`, `.report`, `.checkpoint`, ...); `jaxrl.run.run(ppo, config,
seeds=4)` trains in compiled chunks with checkpoints and logs.

The names below are imported on first use (`jaxrl.ppo`, `from jaxrl import sweep`), so that a command line that
only parses (`jaxrl --help`) does not start JAX."""

import importlib

_MODULES = {
    "envs": "jaxrl.envs",
    "estimators": "jaxrl.estimators",
    "losses": "jaxrl.losses",
    "networks": "jaxrl.networks",
    "rollout": "jaxrl.rollout",
    "run": "jaxrl.run",
    "sweep": "jaxrl.sweep",
    "dqn": "jaxrl.algos.dqn",
    "grpo": "jaxrl.algos.grpo",
    "ppo": "jaxrl.algos.ppo",
    "pqn": "jaxrl.algos.pqn",
}

__all__ = [
    "ALGORITHMS",
    "dqn",
    "envs",
    "grpo",
    "estimators",
    "losses",
    "networks",
    "ppo",
    "pqn",
    "rollout",
    "run",
    "sweep",
]
__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "ALGORITHMS":
        value = importlib.import_module("jaxrl.algos").ALGORITHMS
    elif name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    else:
        raise AttributeError(f"module 'jaxrl' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
