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
from jaxrl.networks.initialisation import init_params, orthogonal
from jaxrl.networks.torsos import (
    ACTIVATIONS,
    CNN_TORSOS,
    TORSOS,
    CNNTorso,
    MLPTorso,
    Torso,
    dense,
    flatten_observation,
    make_torso,
)

__all__ = [
    "ACTIVATIONS",
    "ActorCritic",
    "ActorQCritic",
    "CNNTorso",
    "CNN_TORSOS",
    "Critics",
    "DeterministicActor",
    "GaussianActor",
    "MLPTorso",
    "QCritic",
    "QNetwork",
    "Torso",
    "TORSOS",
    "TorsoHead",
    "dense",
    "epsilon_greedy",
    "flatten_observation",
    "init_params",
    "make_torso",
    "orthogonal",
    "squashed_gaussian",
]
