"""A2C: synchronous advantage actor-critic (Mnih et al. 2016, "Asynchronous Methods for Deep Reinforcement
Learning", arXiv 1602.01783, Algorithm S3, run synchronously on `num_envs` environments as in OpenAI baselines).

One iteration: roll out `num_envs` x `num_steps` (a short window, 5 steps by default), estimate advantages and
value targets, then one gradient step (RMSprop by default) on the policy gradient -A log pi(a|s) - ent_coef *
entropy + vf_coef * 0.5 (V(s) - G)^2 averaged over the rollout.

Advantages (`advantage`):
- "n_step": G_t = `estimators.n_step_returns` with n = `n_step` (0: to the window's end, so step t looks
  T - t steps ahead as in A3C's forward view), bootstrapping from V at the window's end, from V(final observation)
  at time-limit truncations and with 0 at terminations; A_t = G_t - V(s_t).
- "gae": `estimators.gae` with `gae_lambda` (Schulman et al. 2016); gae_lambda = 1 equals n_step with n_step = 0.
"""

from __future__ import annotations

import jax
from flax import struct

from jaxrl import estimators
from jaxrl.algos.base import hyper, make_train, shared, static, takes_setup, train  # noqa: F401 (re-exports)
from jaxrl.algos.families import actor_critic as ac
from jaxrl.algos.families.actor_critic import TrainState, evaluation_policy, init  # noqa: F401 (the module's surface)
from jaxrl.rollout import episode_metrics
from jaxrl.types import Trajectory

ADVANTAGES = ("n_step", "gae")


@struct.dataclass
class Config(ac.Config):
    num_steps: int = shared("num_steps", 5)
    total_timesteps: int = shared("total_timesteps", 300_000)
    advantage: str = static("n_step", "advantage estimator: n_step (returns) or gae")
    n_step: int = static(0, "n of the n-step returns (advantage=n_step); 0: up to the window's end")
    update_epochs: int = static(1, "passes over each rollout (1: A2C's single gradient step)")
    num_minibatches: int = shared("num_minibatches", 1)
    optimizer: str = static("rmsprop", "rmsprop (decay 0.99, eps 1e-5), adam or radam, after gradient clipping")
    anneal_lr: bool = shared("anneal_lr", False)
    normalize_advantages: bool = static(False, "normalise advantages over the batch")
    learning_rate: float = shared("learning_rate", 7e-4)
    gae_lambda: float = hyper(1.0, "GAE lambda (advantage=gae)")
    ent_coef: float = shared("ent_coef", 0.0)
    vf_coef: float = shared("vf_coef", 0.5)


def validate(config: Config) -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run."""
    ac.validate(config)


setup = ac.setup  # the env batch and the actor-critic network


def advantages(config: Config, traj: Trajectory) -> tuple[jax.Array, jax.Array]:
    """(advantages, value targets) by n-step returns or GAE, from the rollout's critic values."""
    if config.advantage == "gae":
        return ac.gae(config, traj)
    n = config.n_step or config.num_steps
    returns = estimators.n_step_returns(
        traj.rewards, traj.next_values, traj.terminated, traj.truncated, config.gamma, n
    )
    return returns - traj.values, returns


@takes_setup
def update(setup: ac.Setup, config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration: a short rollout, n-step or GAE advantages, one actor-critic gradient step."""
    key, rollout_key, step_key = jax.random.split(state.key, 3)
    rollout = setup.collect(config, state, rollout_key)
    traj = rollout.traj
    batch = ac.rollout_batch(traj, *advantages(config, traj))
    params, opt_state, stats = ac.actor_critic_step(
        config, setup.network, state.params, state.opt_state, batch, step_key
    )
    return setup.next_state(state, params, opt_state, rollout, key), {**episode_metrics(traj), **stats}
