"""Algorithms: each module exposes Config, validate, init, update, train and make_train."""

from jaxrl.algos import dqn, grpo, ppo, pqn, sarsa

ALGORITHMS = {"ppo": ppo, "grpo": grpo, "dqn": dqn, "pqn": pqn, "sarsa": sarsa}

__all__ = ["ALGORITHMS", "dqn", "grpo", "ppo", "pqn", "sarsa"]
