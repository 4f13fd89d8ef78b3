"""REINFORCE: the Monte Carlo policy gradient (Williams 1992), optionally with a learned value baseline.

One iteration: roll out `num_envs` x `num_steps`, compute discounted returns G_t (`estimators.discounted_returns`)
and take one gradient step (or `update_epochs` x `num_minibatches`) on -(G_t - b(s_t)) log pi(a_t|s_t) averaged
over the steps, minus an entropy bonus, plus the baseline's regression 0.5 (V(s_t) - G_t)^2.

Returns and windows (`num_steps`):
- `baseline=True` (default): b = V, and G_t bootstraps from V where the data stops short of the episode's end: at
  the window's end from V(o_T), at a time-limit truncation from V(final observation). This is REINFORCE with
  baseline (Sutton & Barto 2018, Sec. 13.4) whose tails beyond the window are estimated by the critic: no bias
  from the cut beyond the critic's error.
- `baseline=False`: b = 0 and no critic is evaluated (`rollout.zero_value`), so G_t is the pure Monte Carlo return
  up to the episode's end or the window's end, whichever comes first. Steps whose episode runs past the window
  lose the rewards after it: their returns are biased low, by at most gamma^(T - t) of the tail's value, so the
  bias concerns the last ~1 / (1 - gamma) steps of each window. Time-limit truncations end the return as the
  episode does (the finite-horizon objective). `whole_episodes` removes the window's bias.
- `whole_episodes=True`: every env is reset at the start of the rollout and only its first episode in the window
  is learned from (later steps are masked out, still simulated and counted in `total_timesteps`). With
  `num_steps` >= the env's time limit (500 for CartPole-v1) every return is that of a complete episode: textbook
  episodic REINFORCE, exact without a critic, at the price of simulating masked steps.

As usual, the gamma^t factor of the discounted policy-gradient theorem is dropped (Thomas 2014). Advantages are
normalised over the batch by default (`normalize_advantages`), a common variance reduction; with `update_epochs`
> 1 the later steps are importance-weighted by pi / mu (`losses.policy_gradient_loss`).
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
from jaxrl.rollout import episode_metrics, first_episode_mask, no_critic, reset, rollout
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


@struct.dataclass
class Config:
    env: str = static("CartPole-v1", "gymnax environment id")
    num_envs: int = static(8, "parallel environments")
    num_steps: int = static(64, "rollout window T per iteration, per environment (returns are cut at its end)")
    total_timesteps: int = static(300_000, "environment steps of the whole run")
    baseline: bool = static(True, "learn a value baseline V(s); returns bootstrap from it at window ends")
    whole_episodes: bool = static(False, "reset envs each rollout; learn from each env's first episode only")
    update_epochs: int = static(1, "passes over each rollout (1: one gradient step, plain REINFORCE)")
    num_minibatches: int = static(1, "minibatches per pass; must divide num_envs * num_steps")
    hidden_sizes: tuple[int, ...] = static((64, 64), "hidden layer sizes of the actor and of the critic MLP")
    activation: str = static("tanh", "hidden activation: tanh, relu, gelu or silu")
    optimizer: str = static("adam", "adam or rmsprop")
    anneal_lr: bool = static(True, "decay the learning rate linearly to 0 over the run")
    normalize_advantages: bool = static(True, "normalise advantages (returns without a baseline) over the batch")
    normalize_observations: bool = static(False, "normalise observations by running mean and std")
    learning_rate: float = hyper(3e-3, "learning rate")
    gamma: float = hyper(0.99, "discount factor")
    ent_coef: float = hyper(0.0, "entropy bonus coefficient")
    vf_coef: float = hyper(0.5, "value (baseline) loss coefficient")
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
    check(
        not (config.whole_episodes and config.normalize_observations),
        "normalize_observations",
        "whole_episodes resets the envs every iteration, which would reset the observation statistics too; "
        "turn one of them off.",
    )
    check_range(config, "learning_rate", 0.0, low_open=True)
    check_range(config, "gamma", 0.0, 1.0)
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
    """(advantages G_t - V(s_t), returns G_t). Without a baseline the rollout's values are 0, so both are the
    Monte Carlo returns cut at the window's end."""
    returns = estimators.discounted_returns(
        traj.rewards, traj.next_values, traj.terminated, traj.truncated, config.gamma
    )
    return returns - traj.values, returns


def update(config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration: rollout, Monte Carlo returns, one (or epochs x minibatches) policy-gradient step."""
    env = make_env(config)
    network = make_network(config, env.spec)
    key, reset_key, rollout_key, step_key = jax.random.split(state.key, 4)

    carry = reset(env, reset_key) if config.whole_episodes else state.env
    act, value = behaviour(network, state.params)
    if not config.baseline:
        value = no_critic(env)
    carry, traj = rollout(env, act, value, carry, rollout_key, config.num_steps)
    mask = first_episode_mask(traj.done) if config.whole_episodes else jnp.ones(traj.rewards.shape, bool)
    adv, returns = advantages(config, traj)
    batch = {
        "obs": traj.obs,
        "actions": traj.actions,
        "log_probs": traj.log_probs,
        "advantages": adv,
        "targets": returns,
        "mask": mask,
    }
    params, opt_state, stats = pg.actor_critic_step(
        config, network, make_optimizer(config), state.params, state.opt_state, batch, step_key, config.baseline
    )
    metrics = {**episode_metrics(traj), **stats, "valid_fraction": mask.mean()}
    return TrainState(params, opt_state, carry, key, state.iteration + 1), metrics


def train(config: Config, key: jax.Array) -> tuple[TrainState, dict[str, jax.Array]]:
    """init + `lax.scan` of `update` over `config.num_iterations`; metrics are stacked per iteration."""
    return pg.train(init, update, config, key)


def make_train(config: Config):
    """Validates `config` and returns the pure `train(key) -> (TrainState, metrics)`, ready to jit/vmap."""
    validate(config)
    return functools.partial(train, config)
