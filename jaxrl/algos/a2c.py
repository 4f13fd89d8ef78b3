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

import functools

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import estimators
from jaxrl import policy_gradient as pg
from jaxrl.algos.ppo import TrainState, behaviour, evaluation_policy, make_env, make_network
from jaxrl.configs import check, check_common, check_range, hyper, static
from jaxrl.rollout import episode_metrics, rollout
from jaxrl.types import Trajectory

__all__ = [
    "Config",
    "TrainState",
    "advantages",
    "behaviour",
    "evaluation_policy",
    "init",
    "make_train",
    "train",
    "update",
    "validate",
]

ADVANTAGES = ("n_step", "gae")


@struct.dataclass
class Config:
    env: str = static("CartPole-v1", "gymnax environment id")
    num_envs: int = static(16, "parallel environments")
    num_steps: int = static(5, "rollout length T per iteration, per environment")
    total_timesteps: int = static(300_000, "environment steps of the whole run")
    advantage: str = static("n_step", "advantage estimator: n_step (returns) or gae")
    n_step: int = static(0, "n of the n-step returns (advantage=n_step); 0: up to the window's end")
    update_epochs: int = static(1, "passes over each rollout (1: A2C's single gradient step)")
    num_minibatches: int = static(1, "minibatches per pass; must divide num_envs * num_steps")
    hidden_sizes: tuple[int, ...] = static((64, 64), "hidden layer sizes of the actor and of the critic MLP")
    activation: str = static("tanh", "hidden activation: tanh, relu, gelu or silu")
    optimizer: str = static("rmsprop", "rmsprop (decay 0.99, eps 1e-5) or adam")
    anneal_lr: bool = static(False, "decay the learning rate linearly to 0 over the run")
    normalize_advantages: bool = static(False, "normalise advantages over the batch")
    normalize_observations: bool = static(False, "normalise observations by running mean and std")
    learning_rate: float = hyper(7e-4, "learning rate")
    gamma: float = hyper(0.99, "discount factor")
    gae_lambda: float = hyper(1.0, "GAE lambda (advantage=gae)")
    ent_coef: float = hyper(0.0, "entropy bonus coefficient")
    vf_coef: float = hyper(0.5, "value loss coefficient")
    max_grad_norm: float = hyper(0.5, "global gradient-norm clipping threshold")

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        return self.total_timesteps // self.batch_size


def validate(config: Config) -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run."""
    check_common(config, ("num_envs", "num_steps", "update_epochs", "num_minibatches"), config.batch_size)
    pg.check_divides(config, "num_minibatches")
    pg.check_optimizer(config)
    check(config.advantage in ADVANTAGES, "advantage", f"{config.advantage!r} is not one of n_step, gae.")
    check(
        isinstance(config.n_step, int) and config.n_step >= 0,
        "n_step",
        f"got {config.n_step!r}, must be an integer >= 0 (0: returns up to the window's end).",
    )
    check_range(config, "learning_rate", 0.0, low_open=True)
    check_range(config, "gamma", 0.0, 1.0)
    check_range(config, "gae_lambda", 0.0, 1.0)
    check_range(config, "ent_coef", 0.0)
    check_range(config, "vf_coef", 0.0)
    check_range(config, "max_grad_norm", 0.0, low_open=True)


def make_optimizer(config: Config):
    updates = config.num_iterations * config.update_epochs * config.num_minibatches if config.anneal_lr else None
    return pg.make_optimizer(config.optimizer, config.learning_rate, config.max_grad_norm, updates)


def init(config: Config, key: jax.Array) -> TrainState:
    env = make_env(config)
    return pg.init(env, make_network(config, env.spec), make_optimizer(config), key)


def advantages(config: Config, traj: Trajectory) -> tuple[jax.Array, jax.Array]:
    """(advantages, value targets) by n-step returns or GAE, from the rollout's critic values."""
    if config.advantage == "gae":
        return estimators.gae(
            traj.rewards,
            traj.values,
            traj.next_values,
            traj.terminated,
            traj.truncated,
            config.gamma,
            config.gae_lambda,
        )
    n = config.n_step or config.num_steps
    returns = estimators.n_step_returns(
        traj.rewards, traj.next_values, traj.terminated, traj.truncated, config.gamma, n
    )
    return returns - traj.values, returns


def update(config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration: a short rollout, n-step or GAE advantages, one actor-critic gradient step."""
    env = make_env(config)
    network = make_network(config, env.spec)
    key, rollout_key, step_key = jax.random.split(state.key, 3)

    act, value = behaviour(network, state.params)
    carry, traj = rollout(env, act, value, state.env, rollout_key, config.num_steps)
    adv, targets = advantages(config, traj)
    batch = {
        "obs": traj.obs,
        "actions": traj.actions,
        "log_probs": traj.log_probs,
        "advantages": adv,
        "targets": targets,
        "mask": jnp.ones(traj.rewards.shape, bool),
    }
    params, opt_state, stats = pg.actor_critic_step(
        config, network, make_optimizer(config), state.params, state.opt_state, batch, step_key
    )
    metrics = {**episode_metrics(traj), **stats}
    return TrainState(params, opt_state, carry, key, state.iteration + 1), metrics


def train(config: Config, key: jax.Array) -> tuple[TrainState, dict[str, jax.Array]]:
    """init + `lax.scan` of `update` over `config.num_iterations`; metrics are stacked per iteration."""
    return pg.train(init, update, config, key)


def make_train(config: Config):
    """Validates `config` and returns the pure `train(key) -> (TrainState, metrics)`, ready to jit/vmap."""
    validate(config)
    return functools.partial(train, config)
