"""jaxrl: reinforcement learning compiled end to end in JAX."""

from jaxrl import envs, estimators, losses, networks, rollout
from jaxrl.algos import ALGORITHMS, ppo
from jaxrl.train import run

__all__ = ["ALGORITHMS", "envs", "estimators", "losses", "networks", "ppo", "rollout", "run"]
__version__ = "0.1.0"
