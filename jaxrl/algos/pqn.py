"""Parallelised Q-Network (Gallici et al. 2024, "Simplifying Deep Temporal Difference Learning", arXiv 2407.04811):
Q-learning without a replay buffer or a target network, stabilised by LayerNorm and many parallel environments.

One iteration (`q_learning.lambda_update`): every one of `num_envs` envs takes `num_steps` epsilon-greedy steps of
the Q-network; the rollout gets Q(lambda) targets (Peng & Williams 1996; `estimators.lambda_returns` with next
values max_a Q(o', a) of the true successors, 0 after termination), then `update_epochs` passes of shuffled
minibatches regress Q(o, a) on them. Discrete actions only.

With `core="gru"` (PQN-RNN) the Q-network is torso -> GRU -> Q head, its state carried through the rollout and
reset where an episode starts; the regression runs on minibatches of whole environment sequences
(`q_learning_recurrent.update`).
"""

from __future__ import annotations

import jax
from flax import struct

from jaxrl import config_rules
from jaxrl.algos.base import core_field, make_train, recurrent, shared, takes_setup, train  # noqa: F401 (re-exports make_train, train)
from jaxrl.algos.families import q_learning, q_learning_recurrent
from jaxrl.algos.families.q_learning import LambdaState as TrainState
from jaxrl.algos.families.q_learning import Setup


@struct.dataclass
class Config(q_learning.LambdaConfig):
    """The Q-learning family's fields and those of the lambda-return iteration, at PQN's defaults."""

    core: str = core_field("Q head")
    core_size: int = shared("core_size", 128)


def validate(config: Config) -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run."""
    q_learning.validate_lambda(config, config_rules.pqn)


def setup(config: Config) -> Setup:
    """The env and the Q-network: feed-forward, or recurrent with `core`."""
    if recurrent(config):
        return q_learning_recurrent.setup(config)
    return q_learning.setup(config)


@takes_setup
def init(setup: Setup, config: Config, key: jax.Array) -> TrainState:
    if recurrent(config):
        return q_learning_recurrent.init(setup, config, key)
    return q_learning.lambda_init(setup, config, key)


def evaluation_policy(setup: Setup, config: Config, state: TrainState, deterministic: bool = True):
    """The greedy policy (or epsilon_end-greedy when not `deterministic`) of the Q-network."""
    if recurrent(config):
        return q_learning_recurrent.evaluation_policy(setup, config, state, deterministic)
    return q_learning.evaluation_policy(setup, config, state, deterministic)


def greedy_value(q_values: jax.Array, epsilon) -> jax.Array:
    """max_a Q(o, a): the bootstrap value of Q-learning (`epsilon` is unused)."""
    return q_values.max(-1)


@takes_setup
def update(setup: Setup, config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration: epsilon-greedy rollout, Q(lambda) targets, `update_epochs` x `num_minibatches` steps."""
    if recurrent(config):
        return q_learning_recurrent.update(setup, config, state, greedy_value)
    return q_learning.lambda_update(setup, config, state, greedy_value)
