"""jaxrl: reinforcement learning compiled end to end in JAX.

`jaxrl.run` is the runner package (`jaxrl.run.loop`, `.report`, `.checkpoint`, ...); `jaxrl.run.run(ppo, config,
seeds=4)` trains in compiled chunks with checkpoints and logs."""

from jaxrl import envs, estimators, losses, networks, rollout, run, sweep
from jaxrl.algos import ALGORITHMS, dqn, grpo, ppo, pqn

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
