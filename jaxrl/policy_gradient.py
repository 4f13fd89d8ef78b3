"""What REINFORCE, A2C and TRPO share beyond PPO's helpers.

The environment, the network, the rollout's behaviour policy and the evaluation policy are PPO's
(`jaxrl.algos.ppo.make_env`, `make_network`, `behaviour`, `evaluation_policy`, `TrainState`): the algorithm files
import them from there. This module holds the few pieces the three new files would otherwise each repeat: the
optimiser, `init` with a given optimiser, the actor-critic loss (the importance-weighted policy gradient, an
entropy bonus and a value regression, over a validity mask), masked advantage normalisation, the exact KL between
two parameter sets, and the `train` scan. It imports nothing from `jaxrl.algos` at module level, because
`jaxrl.algos` imports the algorithm files that import it.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from jaxrl import losses
from jaxrl.configs import check
from jaxrl.minibatch import minibatch_epochs
from jaxrl.networks import ActorCritic
from jaxrl.rollout import reset

OPTIMIZERS = ("adam", "rmsprop")


def check_optimizer(config, field: str = "optimizer") -> None:
    name = getattr(config, field)
    check(name in OPTIMIZERS, field, f"{name!r} is not one of {', '.join(OPTIMIZERS)}.")


def check_divides(config, field: str) -> None:
    """`field` (a minibatch count) must divide the rollout batch num_envs * num_steps."""
    batch, parts = config.num_envs * config.num_steps, getattr(config, field)
    check(
        batch % parts == 0,
        field,
        f"{parts} does not divide the batch num_envs * num_steps = {config.num_envs} * {config.num_steps} = "
        f"{batch}; choose a divisor of {batch}.",
    )


def make_optimizer(
    name: str, learning_rate, max_grad_norm, num_updates: int | None = None
) -> optax.GradientTransformation:
    """Global-norm clipping at `max_grad_norm`, then Adam (eps 1e-5) or RMSprop (decay 0.99, eps 1e-5, as A2C in
    Stable-Baselines3). With `num_updates`, the learning rate decays linearly to 0 over that many steps."""
    schedule = learning_rate
    if num_updates is not None:

        def schedule(count):
            return learning_rate * (1.0 - count / num_updates)

    if name == "rmsprop":
        scale = optax.rmsprop(schedule, decay=0.99, eps=1e-5)
    else:
        scale = optax.adam(schedule, eps=1e-5)
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), scale)


def init(env, network: ActorCritic, optimizer: optax.GradientTransformation, key: jax.Array, trainable=None):
    """PPO's TrainState: fresh network parameters, env batch and optimiser state (of `trainable(params)`)."""
    from jaxrl.algos.ppo import TrainState  # here, not at the top: jaxrl.algos imports the files importing us

    key, net_key, env_key = jax.random.split(key, 3)
    carry = reset(env, env_key)
    params = network.init(net_key, carry.obs[:1])
    opt_state = optimizer.init(params if trainable is None else trainable(params))
    return TrainState(params, opt_state, carry, key, jnp.zeros((), jnp.int32))


def train(init_fn: Callable, update_fn: Callable, config, key: jax.Array):
    """`init_fn(config, key)` then a `lax.scan` of `update_fn(config, state)` over `config.num_iterations`."""
    state = init_fn(config, key)
    return jax.lax.scan(lambda s, _: update_fn(config, s), state, None, length=config.num_iterations)


def normalize(x: jax.Array, mask: jax.Array) -> jax.Array:
    """(x - mean) / (std + 1e-8) over the elements where `mask`."""
    mean = losses.masked_mean(x, mask)
    std = jnp.sqrt(losses.masked_mean(jnp.square(x - mean), mask))
    return (x - mean) / (std + 1e-8)


def actor_critic_loss(params, network: ActorCritic, config, batch: dict[str, jax.Array], critic: bool = True):
    """Masked mean of the policy-gradient loss - ent_coef * entropy (+ vf_coef * 0.5 (V - G)^2 with `critic`).

    The policy term is `losses.policy_gradient_loss`, -rho A with rho = pi / mu from the stored behaviour
    log-probabilities: on the first gradient step of a rollout rho = 1 and its gradient is the score-function
    estimate -A grad log pi; later epochs (if any) stay importance-corrected. `batch` holds obs, actions,
    log_probs, advantages, targets and a validity mask; advantages are normalised over the valid elements when
    `config.normalize_advantages`.
    """
    mask = batch["mask"]
    if critic:
        dist, values = network.apply(params, batch["obs"])
    else:
        dist = network.apply(params, batch["obs"], method=ActorCritic.policy)
    log_prob = dist.log_prob(batch["actions"])
    advantages = batch["advantages"]
    if config.normalize_advantages:
        advantages = normalize(advantages, mask)
    policy_loss = losses.masked_mean(losses.policy_gradient_loss(log_prob, batch["log_probs"], advantages), mask)
    entropy = losses.masked_mean(dist.entropy(), mask)
    total = policy_loss - config.ent_coef * entropy
    value_loss = jnp.zeros(())
    if critic:
        value_loss = losses.masked_mean(losses.value_loss(values, batch["targets"]), mask)
        total = total + config.vf_coef * value_loss
    return total, {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy}


def policy_kl(network: ActorCritic, old_params, new_params, obs: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean over the valid observations of the exact KL(pi_old(.|s) || pi_new(.|s))."""
    old = network.apply(old_params, obs, method=ActorCritic.policy)
    new = network.apply(new_params, obs, method=ActorCritic.policy)
    return losses.masked_mean(old.kl_divergence(new), mask)


def actor_critic_step(config, network, optimizer, params, opt_state, batch, key, critic: bool = True):
    """`config.update_epochs` x `config.num_minibatches` optimiser steps of `actor_critic_loss` (1 x 1: one
    gradient step on the whole rollout). Returns (params, opt_state, stats) with the stats averaged over the
    steps and `kl`, the exact mean KL from the rollout's policy to the updated one on the rollout's states."""

    def grad_fn(p, minibatch):
        return jax.grad(actor_critic_loss, has_aux=True)(p, network, config, minibatch, critic)

    new_params, opt_state, stats = minibatch_epochs(
        grad_fn, optimizer, params, opt_state, batch, key, config.update_epochs, config.num_minibatches
    )
    stats = jax.tree.map(jnp.mean, stats)
    stats["kl"] = policy_kl(network, params, new_params, batch["obs"], batch["mask"])
    return new_params, opt_state, stats
