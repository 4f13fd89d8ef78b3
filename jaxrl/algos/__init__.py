"""Algorithms: each module exposes Config, validate, init, update, train and make_train."""

from jaxrl.algos import dqn, ppo, pqn, sarsa

ALGORITHMS = {"ppo": ppo, "dqn": dqn, "pqn": pqn, "sarsa": sarsa}

__all__ = ["ALGORITHMS", "dqn", "ppo", "pqn", "sarsa"]
