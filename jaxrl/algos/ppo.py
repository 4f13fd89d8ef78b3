"""Proximal Policy Optimization with the clipped surrogate (Schulman et al. 2017, arXiv 1707.06347).

One iteration: roll out `num_envs` x `num_steps`, estimate advantages with GAE (truncated episodes
bootstrap from the value of their final observation), then `update_epochs` passes of shuffled minibatches
of the clipped surrogate + value loss - entropy bonus, all inside one compiled program.

With `core="gru"` the actor and the critic are recurrent (torso -> GRU -> head, `networks.recurrent`): the
rollout carries their hidden state (reset where an episode starts), a minibatch is a set of whole environment
sequences in time order, and the loss re-runs the core over each from the state the rollout started it with.
"""

from __future__ import annotations

import jax
from flax import struct

from jaxrl import losses, parallel
from jaxrl.algos import actor_critic as ac
from jaxrl.algos.actor_critic import (  # noqa: F401 (the module's surface)
    TrainState,
    behaviour,
    evaluation_policy,
    init,
    make_env,
    make_network,
    validate,
)
from jaxrl.algos.base import hyper, make_train, static, train  # noqa: F401 (re-exports make_train, train)
from jaxrl.networks import ActorCritic
from jaxrl.networks.recurrent import RecurrentActorCritic
from jaxrl.rollout import episode_metrics


@struct.dataclass
class Config(ac.Config):
    update_epochs: int = static(4, "passes over each rollout")
    num_minibatches: int = static(4, "minibatches per pass; must divide num_envs * num_steps")
    anneal_lr: bool = static(True, "decay the learning rate linearly to 0 over the run")
    clip_value_loss: bool = static(True, "clip the value loss around the rollout's values (clip_eps)")
    normalize_advantages: bool = static(True, "normalise advantages within each minibatch")
    core: str = static("none", "recurrent core between torso and heads: none or gru")
    core_size: int = static(128, "hidden units of the recurrent core (core='gru')")
    learning_rate: float = hyper(2.5e-3, "learning rate")
    gae_lambda: float = hyper(0.95, "GAE lambda")
    clip_eps: float = hyper(0.2, "surrogate clipping epsilon (and value clipping range)")
    ent_coef: float = hyper(0.01, "entropy bonus coefficient")
    vf_coef: float = hyper(0.5, "value loss coefficient")


def loss_fn(params, network: ActorCritic, config: Config, batch: dict[str, jax.Array]):
    """Clipped surrogate + vf_coef * value loss - ent_coef * entropy, averaged over the minibatch."""
    dist, values = network.apply(params, batch["obs"])
    return surrogate(dist, values, config, batch)


def recurrent_loss_fn(params, network: RecurrentActorCritic, config: Config, minibatch):
    """`loss_fn` of a recurrent network: the core re-runs over the minibatch's sequences (steps [T, B, ...]) from
    their initial states with the rollout's episode starts, giving pi(.|o_0..o_t) and V(o_0..o_t) at `params`."""
    steps, initial = minibatch
    _, dist, values = network.apply(params, initial, steps["obs"], steps["starts"])
    return surrogate(dist, values, config, steps)


def surrogate(dist, values: jax.Array, config: Config, batch: dict[str, jax.Array]):
    """The PPO objective of the policy `dist` and the values at the batch's steps (any batch shape): the clipped
    surrogate -min(rho A, clip(rho, 1 - eps, 1 + eps) A) with rho = pi / pi_old (Schulman et al. 2017, eq. 7),
    + vf_coef * the (clipped) value loss - ent_coef * entropy, each a mean over the batch."""
    log_prob = dist.log_prob(batch["actions"])
    advantages = batch["advantages"]
    if config.normalize_advantages:
        advantages = parallel.normalize(advantages)  # over the minibatch of every device
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
    if config.core != "none":
        return recurrent_update(config, state)
    key, rollout_key, shuffle_key = jax.random.split(state.key, 3)
    network, carry, traj = ac.collect(config, state, rollout_key)
    advantages, targets = ac.gae(config, traj)
    batch = {
        "obs": traj.obs,
        "actions": traj.actions,
        "log_probs": traj.log_probs,
        "values": traj.values,
        "advantages": advantages,
        "targets": targets,
    }

    def loss(params, minibatch):
        return loss_fn(params, network, config, minibatch)

    params, opt_state, stats = ac.minibatch_updates(config, loss, state.params, state.opt_state, batch, shuffle_key)
    metrics = {**episode_metrics(traj), **stats}
    return ac.next_state(state, params, opt_state, carry, key), metrics


def recurrent_update(config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """`update` of a recurrent PPO: recurrent rollout, GAE, `update_epochs` x `num_minibatches` steps on
    minibatches of num_envs / num_minibatches whole environment sequences."""
    key, rollout_key, shuffle_key = jax.random.split(state.key, 3)
    network, carry, memory, traj, sequences = ac.collect_recurrent(config, state, rollout_key)
    advantages, targets = ac.gae(config, traj)
    steps = {
        "obs": traj.obs,
        "actions": traj.actions,
        "log_probs": traj.log_probs,
        "values": traj.values,
        "advantages": advantages,
        "targets": targets,
        "starts": sequences.starts,
    }

    def loss(params, minibatch):
        return recurrent_loss_fn(params, network, config, minibatch)

    params, opt_state, stats = ac.sequence_minibatch_updates(
        config, loss, state.params, state.opt_state, steps, sequences.initial_hidden, shuffle_key
    )
    metrics = {**episode_metrics(traj), **stats}
    return ac.next_recurrent_state(state, params, opt_state, carry, memory, key), metrics
