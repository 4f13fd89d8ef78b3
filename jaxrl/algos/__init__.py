"""Algorithms: each module exposes Config, validate, init, update, train and make_train."""

from jaxrl.algos import dqn, ppo, pqn

ALGORITHMS = {"ppo": ppo, "dqn": dqn, "pqn": pqn}

__all__ = ["ALGORITHMS", "dqn", "ppo", "pqn"]
