"""Algorithms: each module exposes Config, validate, init, update, train and make_train."""

from jaxrl.algos import a2c, ddpg, dqn, grpo, impala, ppo, pqn, reinforce, sac, sarsa, td3, trpo

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
    "ddpg": ddpg,
    "td3": td3,
    "sac": sac,
}

__all__ = [
    "ALGORITHMS",
    "a2c",
    "ddpg",
    "dqn",
    "grpo",
    "impala",
    "ppo",
    "pqn",
    "reinforce",
    "sac",
    "sarsa",
    "td3",
    "trpo",
]
