"""jaxrl: reinforcement learning compiled end to end in JAX."""

from jaxrl import envs, estimators, losses, networks, rollout, sweep
from jaxrl.algos import ALGORITHMS, dqn, grpo, ppo, pqn
from jaxrl.train import run

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
