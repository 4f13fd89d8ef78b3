"""Proximal Policy Optimization with the clipped surrogate (Schulman et al. 2017, arXiv 1707.06347).

One iteration: roll out `num_envs` x `num_steps`, estimate advantages with GAE (truncated episodes
bootstrap from the value of their final observation), then `update_epochs` passes of shuffled minibatches
of the clipped surrogate + value loss - entropy bonus, all inside one compiled program.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import envs, estimators, losses
from jaxrl.configs import check, check_common, check_minibatches, check_range, hyper, static
from jaxrl.minibatch import minibatch_epochs
from jaxrl.networks import ActorCritic
from jaxrl.rollout import EnvCarry, episode_metrics, reset, rollout


@struct.dataclass
class Config:
    env: str = static("CartPole-v1", "gymnax environment id")
    num_envs: int = static(16, "parallel environments")
    num_steps: int = static(64, "rollout length T per iteration, per environment")
    total_timesteps: int = static(200_000, "environment steps of the whole run")
    update_epochs: int = static(4, "passes over each rollout")
    num_minibatches: int = static(4, "minibatches per pass; must divide num_envs * num_steps")
    hidden_sizes: tuple[int, ...] = static((64, 64), "hidden layer sizes of the actor and of the critic MLP")
    activation: str = static("tanh", "hidden activation: tanh, relu, gelu or silu")
    policy: str = static("auto", "action head: auto (from the action space), categorical or gaussian")
    anneal_lr: bool = static(True, "decay the learning rate linearly to 0 over the run")
    clip_value_loss: bool = static(True, "clip the value loss around the rollout's values (clip_eps)")
    normalize_advantages: bool = static(True, "normalise advantages within each minibatch")
    normalize_observations: bool = static(False, "normalise observations by running mean and std")
    learning_rate: float = hyper(2.5e-3, "Adam learning rate")
    gamma: float = hyper(0.99, "discount factor")
    gae_lambda: float = hyper(0.95, "GAE lambda")
    clip_eps: float = hyper(0.2, "surrogate clipping epsilon (and value clipping range)")
    ent_coef: float = hyper(0.01, "entropy bonus coefficient")
    vf_coef: float = hyper(0.5, "value loss coefficient")
    max_grad_norm: float = hyper(0.5, "global gradient-norm clipping threshold")

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        return self.total_timesteps // self.batch_size


@struct.dataclass
class TrainState:
    params: Any
    opt_state: optax.OptState
    env: EnvCarry
    key: jax.Array
    iteration: jax.Array


def validate(config: Config) -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run."""
    check_common(config, ("num_envs", "num_steps", "update_epochs", "num_minibatches"), config.batch_size)
    check_minibatches(config)
    check(
        config.policy in ("auto", "categorical", "gaussian"),
        "policy",
        f"{config.policy!r} is not one of auto, categorical, gaussian.",
    )
    discrete = make_env(config).spec.discrete
    if config.policy != "auto":
        wanted = "categorical" if discrete else "gaussian"
        check(
            config.policy == wanted,
            "policy",
            f"{config.env} has {'discrete' if discrete else 'continuous'} actions and needs a {wanted} "
            f"head, not {config.policy}; use policy='auto' or policy='{wanted}'.",
        )
    check_range(config, "learning_rate", 0.0, low_open=True)
    check_range(config, "gamma", 0.0, 1.0)
    check_range(config, "gae_lambda", 0.0, 1.0)
    check_range(config, "clip_eps", 0.0, low_open=True)
    check_range(config, "max_grad_norm", 0.0, low_open=True)


def make_env(config: Config):
    return envs.make(config.env, config.num_envs, normalize_observations=config.normalize_observations)


def make_network(config: Config, spec: envs.EnvSpec) -> ActorCritic:
    return ActorCritic(
        spec.action_dim, spec.discrete, config.hidden_sizes, config.activation, len(spec.observation_shape)
    )


def make_optimizer(config: Config) -> optax.GradientTransformation:
    learning_rate: Any = config.learning_rate
    if config.anneal_lr:
        steps_per_iteration = config.update_epochs * config.num_minibatches

        def learning_rate(count):
            done = (count // steps_per_iteration) / config.num_iterations
            return config.learning_rate * (1.0 - done)

    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.adam(learning_rate, eps=1e-5))


def behaviour(network: ActorCritic, params) -> tuple[Callable, Callable]:
    """The rollout's policy `act(obs, key) -> (action, log_prob)` and critic `value(obs)` at `params`."""

    def act(obs, key):
        return network.apply(params, obs, method=ActorCritic.policy).sample_and_log_prob(seed=key)

    def value(obs):
        return network.apply(params, obs, method=ActorCritic.value)

    return act, value


def evaluation_policy(config: Config, state: TrainState, deterministic: bool = True):
    """`act(obs, key) -> action` of the trained policy (the mode when `deterministic`) and the observation
    normalisation it was trained with, for `jaxrl.evaluate.evaluate`."""
    network = make_network(config, make_env(config).spec)

    def act(obs, key):
        dist = network.apply(state.params, obs, method=ActorCritic.policy)
        return dist.mode() if deterministic else dist.sample(seed=key)

    return act, envs.observation_normalizer(state.env.state)


def init(config: Config, key: jax.Array) -> TrainState:
    env = make_env(config)
    network = make_network(config, env.spec)
    key, net_key, env_key = jax.random.split(key, 3)
    carry = reset(env, env_key)
    params = network.init(net_key, carry.obs[:1])
    opt_state = make_optimizer(config).init(params)
    return TrainState(params, opt_state, carry, key, jnp.zeros((), jnp.int32))


def loss_fn(params, network: ActorCritic, config: Config, batch: dict[str, jax.Array]):
    """Clipped surrogate + vf_coef * value loss - ent_coef * entropy, averaged over the minibatch."""
    dist, values = network.apply(params, batch["obs"])
    log_prob = dist.log_prob(batch["actions"])
    advantages = batch["advantages"]
    if config.normalize_advantages:
        advantages = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
    policy_loss, clipped = losses.clipped_surrogate_loss(log_prob, batch["log_probs"], advantages, config.clip_eps)
    old_values = batch["values"] if config.clip_value_loss else None
    value_loss = losses.value_loss(values, batch["targets"], old_values, config.clip_eps)
    entropy = dist.entropy()
    total = policy_loss.mean() + config.vf_coef * value_loss.mean() - config.ent_coef * entropy.mean()
    stats = {
        "policy_loss": policy_loss.mean(),
        "value_loss": value_loss.mean(),
        "entropy": entropy.mean(),
        "approx_kl": losses.approx_kl(log_prob, batch["log_probs"]).mean(),
        "clip_fraction": clipped.mean(),
    }
    return total, stats


def update(config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration: rollout, GAE, `update_epochs` x `num_minibatches` gradient steps."""
    env = make_env(config)
    network = make_network(config, env.spec)
    optimizer = make_optimizer(config)
    key, rollout_key, shuffle_key = jax.random.split(state.key, 3)

    act, value = behaviour(network, state.params)
    carry, traj = rollout(env, act, value, state.env, rollout_key, config.num_steps)
    advantages, targets = estimators.gae(
        traj.rewards, traj.values, traj.next_values, traj.terminated, traj.truncated, config.gamma, config.gae_lambda
    )
    batch = {
        "obs": traj.obs,
        "actions": traj.actions,
        "log_probs": traj.log_probs,
        "values": traj.values,
        "advantages": advantages,
        "targets": targets,
    }
    grad_fn = jax.grad(functools.partial(loss_fn, network=network, config=config), has_aux=True)
    params, opt_state, stats = minibatch_epochs(
        lambda params, minibatch: grad_fn(params, batch=minibatch),
        optimizer,
        state.params,
        state.opt_state,
        batch,
        shuffle_key,
        config.update_epochs,
        config.num_minibatches,
    )
    metrics = {**episode_metrics(traj), **jax.tree.map(jnp.mean, stats)}
    state = TrainState(params, opt_state, carry, key, state.iteration + 1)
    return state, metrics


def train(config: Config, key: jax.Array) -> tuple[TrainState, dict[str, jax.Array]]:
    """init + `lax.scan` of `update` over `config.num_iterations`; metrics are stacked per iteration."""
    state = init(config, key)
    return jax.lax.scan(lambda s, _: update(config, s), state, None, length=config.num_iterations)


def make_train(config: Config):
    """Validates `config` and returns the pure `train(key) -> (TrainState, metrics)`, ready to jit/vmap."""
    validate(config)
    return functools.partial(train, config)
