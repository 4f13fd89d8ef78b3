"""Algorithms: each module exposes Config, validate, init, update, train and make_train."""

from jaxrl.algos import a2c, dqn, grpo, impala, ppo, pqn, reinforce, sarsa, trpo

ALGORITHMS = {
    "ppo": ppo,
    "grpo": grpo,
    "impala": impala,
    "dqn": dqn,
    "pqn": pqn,
    "sarsa": sarsa,
    "reinforce": reinforce,
    "a2c": a2c,
    "trpo": trpo,
}

__all__ = ["ALGORITHMS", "a2c", "dqn", "grpo", "impala", "ppo", "pqn", "reinforce", "sarsa", "trpo"]
