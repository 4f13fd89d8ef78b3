"""Networks: torsos (observation encoders) and the heads every algorithm family reads off them."""

from jaxrl.networks.heads import (
    ActorCritic,
    ActorQCritic,
    Critics,
    DeterministicActor,
    GaussianActor,
    QCritic,
    QNetwork,
    TorsoHead,
    epsilon_greedy,
    squashed_gaussian,
)
from jaxrl.networks.torsos import ACTIVATIONS, MLPTorso, Torso, dense, flatten_observation, orthogonal

__all__ = [
    "ACTIVATIONS",
    "ActorCritic",
    "ActorQCritic",
    "Critics",
    "DeterministicActor",
    "GaussianActor",
    "MLPTorso",
    "QCritic",
    "QNetwork",
    "Torso",
    "TorsoHead",
    "dense",
    "epsilon_greedy",
    "flatten_observation",
    "orthogonal",
    "squashed_gaussian",
]
