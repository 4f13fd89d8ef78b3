"""On-policy SARSA(lambda) and Expected SARSA(lambda) with PQN's vectorised collection (Sutton & Barto 2018,
Sec. 6.4 and 6.6, 12.7; Rummery & Niranjan 1994; van Seijen, van Hasselt, Whiteson & Wiering 2009, "A
Theoretical and Empirical Analysis of Expected Sarsa").

Everything but the bootstrap value is the Q-learning family's replay-free iteration (`q_learning.lambda_update`,
shared with PQN): `num_envs` envs take `num_steps` epsilon-greedy steps of a LayerNorm Q-network, no replay, no
target network; the rollout gets lambda-return targets (`estimators.lambda_returns`), then `update_epochs` passes
of shuffled minibatches regress Q(o, a) on them. Where PQN bootstraps with max_a Q(o', a) (Q-learning,
off-policy), these bootstrap with values of the epsilon-greedy behaviour policy itself, so they learn Q of that
policy:

- SARSA (`expected=False`): next value of step t is Q(o_{t+1}, a_{t+1}), the action the behaviour policy took
  next, when step t+1 is in the same episode and in the window. At the window end (a_{t+1} is chosen by the
  next iteration) and at a truncation (the true successor, `info["final_observation"]`, never gets an action)
  no next action exists; there the target uses the expectation under the current epsilon-greedy policy,
  sum_a pi_eps(a|o') Q(o', a) -- the mean of the sampled alternative, without its variance.
- Expected SARSA (`expected=True`): every next value is sum_a pi_eps(a|o') Q(o', a) of the true successor.

Both are 0 after termination. With lambda > 0 the targets are the forward-view SARSA(lambda) returns
G_t = r_t + gamma (1 - term_t) [(1 - lambda) next_v_t + lambda G_{t+1}], cut at episode and window ends.
pi_eps uses the epsilon of the current iteration (the one the rollout acted with). Discrete actions only.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import config_rules, losses
from jaxrl.algos.base import check, hyper, make_train, static, takes_setup, train
from jaxrl.algos.families import q_learning
from jaxrl.algos.families.q_learning import LambdaState as TrainState
from jaxrl.algos.families.q_learning import Setup, evaluation_policy
from jaxrl.networks import epsilon_greedy
from jaxrl.types import Trajectory

__all__ = [
    "Config",
    "Setup",
    "TrainState",
    "epsilon_greedy_value",
    "evaluation_policy",
    "init",
    "make_train",
    "on_policy_next_values",
    "setup",
    "train",
    "update",
    "validate",
]


@struct.dataclass
class Config(q_learning.LambdaConfig):
    """The lambda-return iteration's fields (network, optimiser, rollout, epsilon schedule, lambda, reward scale),
    as PQN has them, plus `expected`."""

    q_lambda: float = hyper(0.95, "lambda of the SARSA(lambda) / Expected SARSA(lambda) targets")
    expected: bool = static(
        False,
        "Expected SARSA: bootstrap on sum_a pi_eps(a|o') Q(o', a) instead of Q(o', a') of the next action taken",
    )


def validate(config: Config) -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run."""
    q_learning.validate_lambda(config, config_rules.sarsa)
    check(isinstance(config.expected, bool), "expected", f"got {config.expected!r}, must be True or False.")


def setup(config: Config) -> Setup:
    """The env and the feed-forward Q-network."""
    return q_learning.setup(config)


@takes_setup
def init(setup: Setup, config: Config, key: jax.Array) -> TrainState:
    return q_learning.lambda_init(setup, config, key)


def epsilon_greedy_value(q_values: jax.Array, epsilon) -> jax.Array:
    """sum_a pi_eps(a|o) Q(o, a) [...] of action values [..., A] under the epsilon-greedy policy (the behaviour
    policy, `networks.epsilon_greedy`): epsilon mean_a Q(o, a) + (1 - epsilon) max_a Q(o, a)."""
    return jnp.sum(epsilon_greedy(q_values, epsilon).probs * q_values, axis=-1)


def on_policy_next_values(traj: Trajectory, q_values: jax.Array) -> jax.Array:
    """SARSA's next values [T, N]: Q(o_{t+1}, a_{t+1}) where step t+1 continues step t's episode inside the
    window; elsewhere `traj.next_values` as the rollout computed them (0 after termination; at a truncation and
    at the window end the epsilon-greedy expectation at the true successor, see the module docstring).

    `q_values` [T, N, A] are Q(o_t, .) of the trajectory's observations.
    """
    chex.assert_rank(q_values, traj.actions.ndim + 1)
    q_taken = losses.action_value(q_values, traj.actions)  # Q(o_t, a_t)
    chex.assert_equal_shape([q_taken, traj.next_values])
    continues = (~traj.done).at[-1].set(False)
    following = jnp.concatenate([q_taken[1:], q_taken[-1:]])  # row T-1 is never used
    return jnp.where(continues, following, traj.next_values)


@takes_setup
def update(setup: Setup, config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration of the family's loop (`q_learning.lambda_update`) with SARSA(lambda) or Expected
    SARSA(lambda) targets."""
    next_values = None if config.expected else on_policy_next_values
    return q_learning.lambda_update(setup, config, state, epsilon_greedy_value, next_values)
