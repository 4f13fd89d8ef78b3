"""Algorithms: each module exposes Config, validate, init, update, train and make_train."""

from jaxrl.algos import dqn, grpo, impala, ppo, pqn, sarsa

ALGORITHMS = {"ppo": ppo, "grpo": grpo, "impala": impala, "dqn": dqn, "pqn": pqn, "sarsa": sarsa}

__all__ = ["ALGORITHMS", "dqn", "grpo", "impala", "ppo", "pqn", "sarsa"]
