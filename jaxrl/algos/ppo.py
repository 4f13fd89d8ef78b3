"""Proximal Policy Optimization with the clipped surrogate (Schulman et al. 2017, arXiv 1707.06347).

One iteration: roll out `num_envs` x `num_steps`, estimate advantages with GAE (truncated episodes
bootstrap from the value of their final observation), then `update_epochs` passes of shuffled minibatches
of the clipped surrogate + value loss - entropy bonus, all inside one compiled program.

With `core="gru"` the actor and the critic are recurrent (torso -> GRU -> head, `networks.recurrent`): the
rollout carries their hidden state (reset where an episode starts), a minibatch is a set of whole environment
sequences in time order, and the loss re-runs the core over each from the state the rollout started it with.
"""

from __future__ import annotations

import functools

import jax
from flax import struct

from jaxrl import losses, parallel
from jaxrl.algos.base import core_field, hyper, make_train, recurrent, shared, static, takes_setup, train  # noqa: F401 (re-exports make_train, train)
from jaxrl.algos.families import actor_critic as ac
from jaxrl.algos.families import actor_critic_recurrent as acr
from jaxrl.algos.families.actor_critic import TrainState, evaluation_policy, init, validate  # noqa: F401 (the module's surface)
from jaxrl.rollout import episode_metrics


@struct.dataclass
class Config(ac.Config):
    update_epochs: int = shared("update_epochs", 4)
    num_minibatches: int = shared("num_minibatches", 4)
    anneal_lr: bool = shared("anneal_lr", True)
    clip_value_loss: bool = static(True, "clip the value loss around the rollout's values (clip_eps)")
    normalize_advantages: bool = static(True, "normalise advantages within each minibatch")
    core: str = core_field()
    core_size: int = shared("core_size", 128)
    learning_rate: float = shared("learning_rate", 2.5e-3)
    gae_lambda: float = shared("gae_lambda", 0.95)
    clip_eps: float = hyper(0.2, "surrogate clipping epsilon (and value clipping range)")
    ent_coef: float = shared("ent_coef", 0.01)
    vf_coef: float = shared("vf_coef", 0.5)


def setup(config: Config) -> ac.Setup:
    """The env batch and the actor-critic network: recurrent (`actor_critic_recurrent`) with a `core`."""
    return acr.setup(config) if recurrent(config) else ac.setup(config)


def loss_fn(params, setup: ac.Setup, config: Config, minibatch, normalize: bool | None = None):
    """Clipped surrogate + vf_coef * value loss - ent_coef * entropy, averaged over the minibatch (its steps
    [B, ...], or for a recurrent network its sequences and their initial states, `Setup.forward`). `normalize`:
    whether to normalise the advantages here (default `config.normalize_advantages`)."""
    dist, values, steps = setup.forward(params, minibatch)
    return surrogate(dist, values, config, steps, normalize)


def normalized_advantages(config: Config, minibatch: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """The minibatch with its advantages normalised over it (over every device's), where the Config asks."""
    if not config.normalize_advantages:
        return minibatch
    return {**minibatch, "advantages": parallel.normalize(minibatch["advantages"])}


def surrogate(dist, values: jax.Array, config: Config, batch: dict[str, jax.Array], normalize: bool | None = None):
    """The PPO objective of the policy `dist` and the values at the batch's steps (any batch shape): the clipped
    surrogate -min(rho A, clip(rho, 1 - eps, 1 + eps) A) with rho = pi / pi_old (Schulman et al. 2017, eq. 7),
    + vf_coef * the (clipped) value loss - ent_coef * entropy, each a mean over the batch. The advantages are
    normalised over the batch first when `normalize` (default `config.normalize_advantages`)."""
    log_prob = dist.log_prob(batch["actions"])
    advantages = batch["advantages"]
    if config.normalize_advantages if normalize is None else normalize:
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


@takes_setup
def update(setup: ac.Setup, config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration: rollout, GAE, `update_epochs` x `num_minibatches` gradient steps (on minibatches of whole
    environment sequences for a recurrent network)."""
    key, rollout_key, shuffle_key = jax.random.split(state.key, 3)
    rollout = setup.collect(config, state, rollout_key)
    traj = rollout.traj
    advantages, targets = ac.gae(config, traj)
    steps = {
        "obs": traj.obs,
        "actions": traj.actions,
        "log_probs": traj.log_probs,
        "values": traj.values,
        "advantages": advantages,
        "targets": targets,
    }

    def loss(params, minibatch):
        return loss_fn(params, setup, config, minibatch)

    def sample_mean_loss(params, minibatch):  # the advantages normalised over the whole minibatch beforehand
        return loss_fn(params, setup, config, minibatch, normalize=False)

    chunked = (functools.partial(normalized_advantages, config), sample_mean_loss)
    params, opt_state, stats = setup.updates(
        config, loss, state.params, state.opt_state, rollout, steps, shuffle_key, chunked=chunked
    )
    metrics = {**episode_metrics(traj), **stats}
    return setup.next_state(state, params, opt_state, rollout, key), metrics
