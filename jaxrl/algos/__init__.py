"""Algorithms: each module follows the `jaxrl.algos.base.Algorithm` protocol (Config, validate, init, update,
evaluation_policy) and is registered here by name; `train` / `make_train` are `jaxrl.algos.base`'s, once."""

from jaxrl.algos import a2c, base, ddpg, dpo, dqn, grpo, impala, ppo, pqn, reinforce, sac, sarsa, td3, trpo, vmpo
from jaxrl.algos.base import Algorithm, algorithm_of, make_train, train

ALGORITHMS: dict[str, Algorithm] = base.register(
    ppo=ppo,
    grpo=grpo,
    dpo=dpo,
    impala=impala,
    dqn=dqn,
    pqn=pqn,
    sarsa=sarsa,
    reinforce=reinforce,
    a2c=a2c,
    trpo=trpo,
    ddpg=ddpg,
    td3=td3,
    sac=sac,
    vmpo=vmpo,
)

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "a2c",
    "algorithm_of",
    "base",
    "ddpg",
    "dpo",
    "dqn",
    "grpo",
    "impala",
    "make_train",
    "ppo",
    "pqn",
    "reinforce",
    "sac",
    "sarsa",
    "td3",
    "train",
    "trpo",
    "vmpo",
]
