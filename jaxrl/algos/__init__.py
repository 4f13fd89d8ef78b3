"""Algorithms: each module exposes Config, validate, init, update, train and make_train."""

from jaxrl.algos import ppo

ALGORITHMS = {"ppo": ppo}

__all__ = ["ALGORITHMS", "ppo"]
