"""Direct Preference Optimization for control (Rafailov et al. 2023, "Direct Preference Optimization: Your
Language Model is Secretly a Reward Model", arXiv 2305.18290) on GRPO's grouped rollouts: no critic and no
learned reward model; preferences come from the returns of rollouts that share a start.

One iteration:
1. A grouped rollout (`grouped.collect_groups`, as GRPO's): M starts (`group_mode="start"`: fresh resets;
   `"branch"`: states along M trunk rollouts), each copied G times; every member runs `num_steps` steps with its
   own keys and only its first episode is kept (the first-episode mask).
2. Pairs: x is a group's shared start, y a member's trajectory. `estimators.preference_pairs` ranks a group's
   members by their (undiscounted, first-episode) returns: best vs worst (`pairs="best_worst"`, one pair per
   group) or every pair of distinct members (`pairs="all"`); a pair counts when R_w - R_l > `margin`, so ties
   give no pair, and pairs never cross groups.
3. log pi(y|x) = sum over the member's valid steps of log pi(a_t|s_t) (the start distribution and the dynamics
   cancel in the DPO ratio). The reference pi_ref (`reference`) is
   - "behaviour": the policy that collected the groups (the learner at the start of the iteration); its
     log-probabilities are the ones stored at collection time, with no extra forward pass;
   - "initial": the initial policy, its log-probabilities computed with the stored initial parameters;
   - "moving": a copy of the learner refreshed every `ref_update_interval` iterations (computed likewise).
4. `update_epochs` full-batch Adam steps on the mean over valid pairs of `losses.dpo_loss`,
   -log sigmoid(beta (log pi(y_w) - log pi_ref(y_w) - log pi(y_l) + log pi_ref(y_l))), minus an optional
   entropy bonus. `beta` is a `hyper` field: vmappable in sweeps.

A batch of more than `minibatch.GRADIENT_CHUNKS_FROM` steps takes its gradient in two passes over chunks of it on
a CPU (`chunked_grad`): log pi(y) of every member, then the gradient through the pairs' loss.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import config_rules, estimators, losses
from jaxrl import minibatch as minibatches
from jaxrl.algos.base import check, hyper, make_train, shared, static, takes_setup, train  # noqa: F401
from jaxrl.algos.families import actor_critic as ac
from jaxrl.algos.families import grouped
from jaxrl.algos.families.actor_critic import behaviour, policy_of
from jaxrl.algos.families.grouped import GROUP_MODES, Setup, evaluation_policy  # noqa: F401 (the module's surface)
from jaxrl.networks import ActorCritic
from jaxrl.rollout import EnvCarry

REFERENCES = ("behaviour", "initial", "moving")


@struct.dataclass
class Config(grouped.GroupConfig):
    pairs: str = static("best_worst", "preference pairs per group: best_worst (one) or all (every ranked pair)")
    reference: str = static("moving", "reference policy: behaviour (stored log-probs), initial or moving")
    ref_update_interval: int = static(10, "iterations between refreshes of a moving reference")
    update_epochs: int = static(8, "full-batch gradient steps on each iteration's pairs")
    learning_rate: float = shared("learning_rate", 3e-3)
    beta: float = hyper(0.2, "DPO temperature: the scale of the implicit reward beta log pi / pi_ref")
    margin: float = hyper(0.0, "a pair needs R_w - R_l > margin (ties never make a pair)")

    @property
    def updates_per_iteration(self) -> int:
        """Gradient steps per iteration: update_epochs."""
        return self.update_epochs


@struct.dataclass
class TrainState:
    params: Any
    opt_state: optax.OptState
    ref_params: Any  # the reference policy's parameters (None when it is the behaviour policy)
    trunk: EnvCarry | None  # branch mode: the M ordinary rollouts groups branch from, leaves [M, 1, ...]
    key: jax.Array
    iteration: jax.Array


def validate(config: Config) -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run."""
    ac.validate(config, config_rules.dpo)


setup = grouped.setup  # one environment and the policy network


@takes_setup
def init(setup: Setup, config: Config, key: jax.Array) -> TrainState:
    """The actor's parameters, the reference's (unless it is the behaviour policy) and the trunk."""
    key, params, opt_state, trunk = grouped.init_actor(setup, config, key)
    ref_params = None if config.reference == "behaviour" else params
    return TrainState(params, opt_state, ref_params, trunk, key, jnp.zeros((), jnp.int32))


def sequence_log_probs(log_prob: jax.Array, mask: jax.Array) -> jax.Array:
    """log pi(y) [N] of each member's trajectory: its per-step log-probabilities [T, N] summed over valid steps."""
    return jnp.where(mask, log_prob, 0.0).sum(0)


def pairs_loss(log_pi: jax.Array, config: Config, batch: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
    """(the mean over valid pairs of `losses.dpo_loss`, h [P]) for the members' log pi(y) [N]."""
    ref, win, lose = batch["ref_log_probs"], batch["winners"], batch["losers"]
    pair_loss, h = losses.dpo_loss(log_pi[win], ref[win], log_pi[lose], ref[lose], config.beta)
    return losses.masked_mean(pair_loss, batch["valid"]), h


def pair_stats(h: jax.Array, log_pi: jax.Array, batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
    valid, ref = batch["valid"], batch["ref_log_probs"]
    return {
        "reward_accuracy": losses.masked_mean((h > 0).astype(jnp.float32), valid),  # implicit reward ranks right
        "reward_margin": losses.masked_mean(h, valid),
        "log_ratio": losses.masked_mean(log_pi - ref, batch["mask"].any(0)),  # mean log pi(y) / pi_ref(y)
    }


def loss_fn(params, network: ActorCritic, config: Config, batch: dict[str, jax.Array]):
    """Mean over valid pairs of `losses.dpo_loss` - ent_coef * the masked mean entropy, and its statistics."""
    dist = policy_of(network, params)(batch["obs"])
    log_pi = sequence_log_probs(dist.log_prob(batch["actions"]), batch["mask"])
    dpo, h = pairs_loss(log_pi, config, batch)
    entropy = losses.masked_mean(dist.entropy(), batch["mask"])
    return dpo - config.ent_coef * entropy, {"dpo_loss": dpo, **pair_stats(h, log_pi, batch), "entropy": entropy}


def step_log_probs(network: ActorCritic, params, obs: jax.Array, actions: jax.Array) -> jax.Array:
    """log pi(a_t|s_t) [T, N], without a gradient's activations: on a CPU over chunks of whole time steps of
    about `minibatch.GRADIENT_CHUNK_ROWS` rows (`jax.lax.map`)."""

    def log_prob(obs, actions):
        return policy_of(network, params)(obs).log_prob(actions)

    def in_chunks(obs, actions):
        steps = max(1, minibatches.GRADIENT_CHUNK_ROWS // obs.shape[1])
        return jax.lax.map(lambda step: log_prob(*step), (obs, actions), batch_size=steps)

    return jax.lax.platform_dependent(obs, actions, cpu=in_chunks, default=log_prob)


def takes_chunks(steps: tuple[int, int]) -> bool:
    """Whether an update over a batch of [T, N] `steps` takes its gradient in two passes over chunks
    (`chunked_grad`): above `minibatch.GRADIENT_CHUNKS_FROM` steps."""
    return steps[0] * steps[1] > minibatches.GRADIENT_CHUNKS_FROM


def chunked_grad(network: ActorCritic, config: Config):
    """`grad(params, batch) -> (grads, stats)` of `loss_fn` in two passes over chunks of the batch. With
    c_n = dL_DPO / d log pi(y_n) from the members' log pi(y) (`step_log_probs`), the chain rule gives
    grad L_DPO = sum_n c_n grad log pi(y_n) = grad sum_{t,n} sg(c_n) mask_tn log pi(a_tn|s_tn): a mean over steps
    with weights c_n mask_tn T N, whose gradient `minibatch.gradient_in_chunks` takes with the entropy bonus's."""

    def sample_mean_loss(params, steps):
        dist = policy_of(network, params)(steps["obs"])
        log_pi = jnp.mean(jnp.where(steps["mask"], steps["scaled_weights"] * dist.log_prob(steps["actions"]), 0.0))
        entropy = jnp.mean(steps["weights"] * dist.entropy())
        return log_pi - config.ent_coef * entropy, {"entropy": entropy}

    in_chunks = minibatches.gradient_in_chunks(
        jax.grad(sample_mean_loss, has_aux=True), minibatches.GRADIENT_CHUNK_ROWS
    )

    def grad(params, batch):
        mask = batch["mask"]
        log_pi = sequence_log_probs(step_log_probs(network, params, batch["obs"], batch["actions"]), mask)
        (dpo, h), c = jax.value_and_grad(pairs_loss, has_aux=True)(log_pi, config, batch)
        steps = {
            "obs": batch["obs"],
            "actions": batch["actions"],
            "mask": mask,
            "scaled_weights": jnp.broadcast_to(c * mask.size, mask.shape),
            "weights": losses.mask_weights(mask),
        }
        grads, stats = in_chunks(params, jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), steps))
        return grads, {"dpo_loss": dpo, **pair_stats(h, log_pi, batch), **stats}

    return grad


def pairs_batch(config: Config, obs, actions, rewards, mask, ref_log_prob) -> dict[str, jax.Array]:
    """What `loss_fn` reads of one iteration's groups ([T, N, ...] leaves): the steps, their first-episode mask,
    each member's reference log pi_ref(y) [N] and the preference pairs of `estimators.preference_pairs` ranked by
    the members' first-episode returns."""
    returns = jnp.where(mask, rewards, 0.0).sum(0)  # [N]
    winners, losers, valid = estimators.preference_pairs(returns, config.group_size, config.pairs, config.margin)
    return {
        "obs": obs,
        "actions": actions,
        "mask": mask,
        "ref_log_probs": jax.lax.stop_gradient(sequence_log_probs(ref_log_prob, mask)),
        "winners": winners,
        "losers": losers,
        "valid": valid,
    }


def collect(setup: Setup, config: Config, state: TrainState, key: jax.Array):
    """One iteration's groups (`grouped.collect_groups`) and their pairs: (batch, new trunk, metrics)."""
    network = setup.network
    act = behaviour(network, state.params)[0]
    traj, mask, trunk, metrics = grouped.collect_groups(setup, config, act, state.trunk, key)
    if config.reference == "behaviour":
        ref_log_prob = traj.log_probs  # stored at collection time by the policy at state.params
    elif takes_chunks(traj.actions.shape[:2]):  # as chunked_grad computes log pi(y): pi = pi_ref gives margins of 0
        ref_log_prob = step_log_probs(network, state.ref_params, traj.obs, traj.actions)
    else:
        ref_log_prob = policy_of(network, state.ref_params)(traj.obs).log_prob(traj.actions)
    batch = pairs_batch(config, traj.obs, traj.actions, traj.rewards, mask, ref_log_prob)
    return batch, trunk, {**metrics, "pair_fraction": batch["valid"].mean()}


@takes_setup
def update(setup: Setup, config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration: grouped rollout, preference pairs, `update_epochs` full-batch DPO steps."""
    network = setup.network
    key, collect_key = jax.random.split(state.key)
    batch, trunk, metrics = collect(setup, config, state, collect_key)
    optimizer = ac.make_optimizer(config)
    grad_fn = jax.grad(lambda p: loss_fn(p, network, config, batch), has_aux=True)
    if takes_chunks(batch["mask"].shape):
        grad_fn = functools.partial(chunked_grad(network, config), batch=batch)

    def step(carry, _):
        params, opt_state = carry
        grads, stats = grad_fn(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), stats

    (params, opt_state), stats = jax.lax.scan(step, (state.params, state.opt_state), None, config.update_epochs)
    ref_params = state.ref_params
    if config.reference == "moving":
        refresh = (state.iteration + 1) % config.ref_update_interval == 0
        ref_params = jax.tree.map(lambda new, old: jnp.where(refresh, new, old), params, ref_params)
    metrics = {**metrics, **jax.tree.map(jnp.mean, stats)}
    return TrainState(params, opt_state, ref_params, trunk, key, state.iteration + 1), metrics
