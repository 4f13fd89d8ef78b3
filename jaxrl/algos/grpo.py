"""Group Relative Policy Optimization for control (Shao et al. 2024, "DeepSeekMath", arXiv 2402.03300, Sec. 4):
a critic-free clipped policy gradient whose advantages are returns normalised within a group of rollouts that
share a start, on-policy or with a replay of past groups.

One iteration:
1. Starts. `group_mode="start"`: M fresh reset states. `group_mode="branch"`: the current states of M ordinary
   rollouts (the "trunk"), so groups branch from states the policy visits; member 0 of each group carries the
   trunk on.
2. Each start is copied G times and each copy (a member) runs `num_steps` steps with its own keys (by default
   the env's time limit: whole episodes). Steps after a member's first episode ends are masked out.
3. Advantages: `estimators.group_relative_advantages` with outcome supervision (each member's return,
   normalised in its group, on all its steps) or process supervision (per-step rewards normalised over the
   group, summed from each step on). In branch mode this is a Monte Carlo estimate of
   A(s, a_i) ~ Q(s, a_i) - V(s) among the siblings' first actions.
4. `update_epochs` passes of shuffled minibatches of the clipped surrogate (`losses.clipped_surrogate_loss`,
   through its truncated-importance form), minus an entropy bonus, plus an optional k3 KL penalty to a
   reference policy (the initial one, or one that moves toward the current policy every
   `ref_update_interval` iterations by `ref_tau`), averaged over valid steps.

Off-policy (scheme 1): with `replay_ratio` = r > 0 every iteration's groups (with their behaviour
log-probabilities and group-relative advantages, which depend on the rewards only) go into a replay buffer of
`replay_capacity` iterations; each update trains on the fresh groups plus r groups-batches drawn uniformly from
the buffer, with r times as many minibatches. The surrogate is anchored at the policy at the start of the update
(pi_prox) and weighted by the truncated importance ratio min(rho_bar, pi_prox / mu) of the stored behaviour
log-probabilities mu (Hilton et al. 2022's decoupled objective). With r = 0 it is on-policy GRPO exactly.

Off-policy (scheme 2): with `behaviour_lag` = K > 0 the groups are collected by the learner's parameters of K
iterations ago (`jaxrl.lag`, IMPALA's actor-learner split inside one program) and corrected by the same
truncated importance weights. The V-trace-corrected actor-critic with a learned value baseline that shares
this lag is `jaxrl.algos.impala`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import config_rules, estimators, lag, losses, replay
from jaxrl.algos.base import check, hyper, make_train, shared, static, takes_setup, train  # noqa: F401
from jaxrl.algos.families import actor_critic as ac
from jaxrl.algos.families import grouped
from jaxrl.algos.families.actor_critic import behaviour, policy_of
from jaxrl.algos.families.grouped import GROUP_MODES, Setup, evaluation_policy  # noqa: F401 (the module's surface)
from jaxrl.networks import ActorCritic
from jaxrl.rollout import EnvCarry

SUPERVISION = ("outcome", "process")
KL_REFERENCES = ("none", "initial", "moving")


@struct.dataclass
class Config(grouped.GroupConfig):
    supervision: str = static("outcome", "outcome: normalised episode returns; process: normalised step rewards")
    update_epochs: int = static(4, "passes over each iteration's data")
    num_minibatches: int = static(8, "minibatches per pass over the fresh data; must divide M * G * horizon")
    replay_ratio: int = static(0, "replayed group batches per fresh one (0: on-policy GRPO)")
    replay_capacity: int = static(8, "iterations of groups the replay buffer holds")
    behaviour_lag: int = static(0, "iterations the acting parameters lag the learner's (0: act with the learner's)")
    kl_reference: str = static("none", "KL penalty reference: none, initial (policy) or moving")
    ref_update_interval: int = static(10, "iterations between moves of a moving reference")
    learning_rate: float = shared("learning_rate", 1e-2)
    clip_eps: float = hyper(0.2, "surrogate clipping epsilon")
    kl_coef: float = hyper(0.04, "coefficient of the k3 KL penalty (used unless kl_reference is none)")
    ref_tau: float = hyper(1.0, "step of a moving reference toward the current policy (1: a snapshot)")
    advantage_eps: float = hyper(1e-8, "epsilon added to the group std when normalising")
    rho_bar: float = hyper(1.0, "truncation of the importance weight pi_prox / mu on replayed data")

    @property
    def minibatches_per_epoch(self) -> int:
        """Minibatches per pass: num_minibatches of fresh data and as many per replayed batch."""
        return self.num_minibatches * (1 + self.replay_ratio)

    @property
    def updates_per_iteration(self) -> int:
        """Gradient steps per iteration: update_epochs * minibatches_per_epoch."""
        return self.update_epochs * self.minibatches_per_epoch


@struct.dataclass
class TrainState:
    params: Any
    opt_state: optax.OptState
    ref_params: Any  # reference policy of the KL penalty (None without one)
    trunk: EnvCarry | None  # branch mode: the M ordinary rollouts groups branch from, leaves [M, 1, ...]
    buffer: Any  # replay of past iterations' groups (None on-policy)
    lagged: lag.ParamsLag | None  # the learner's last `behaviour_lag` parameters (None without a lag)
    key: jax.Array
    iteration: jax.Array


def validate(config: Config) -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run."""
    ac.validate(config, config_rules.grpo)


setup = grouped.setup  # one environment and the policy network


@takes_setup
def init(setup: Setup, config: Config, key: jax.Array) -> TrainState:
    """The actor's parameters, the reference's, the trunk, the lag and (with `replay_ratio`) an empty replay."""
    key, params, opt_state, trunk = grouped.init_actor(setup, config, key)
    ref_params = params if config.kl_reference != "none" else None
    lagged = lag.init(params, config.behaviour_lag)
    state = TrainState(params, opt_state, ref_params, trunk, None, lagged, key, jnp.zeros((), jnp.int32))
    if config.replay_ratio == 0:
        return state
    # the replay holds iterations of groups shaped as `collect` returns them: leaves [T, N, ...]
    item = jax.eval_shape(lambda s, k: collect(setup, config, s, k)[0], state, key)
    item = jax.tree.map(lambda x: jnp.zeros(x.shape, x.dtype), item)
    return state.replace(buffer=replay.init(item, 1, config.replay_capacity))


def loss_fn(params, ref_params, network: ActorCritic, config: Config, batch: dict[str, jax.Array], weighted=False):
    """Masked mean over valid steps of the (importance-weighted) clipped surrogate - ent_coef * entropy
    (+ kl_coef * k3 KL to the reference policy). `weighted`: `batch` holds its samples' `losses.mask_weights`
    ("weights"), and every masked mean is a plain mean of the weighted samples, which chunks can average."""
    dist = policy_of(network, params)(batch["obs"])
    log_prob = dist.log_prob(batch["actions"])
    mask = batch["mask"]
    mean = losses.valid_mean(mask, batch["weights"] if weighted else None)
    surrogate, clipped, weight = losses.truncated_importance_surrogate_loss(
        log_prob, batch["proximal_log_probs"], batch["log_probs"], batch["advantages"], config.clip_eps, config.rho_bar
    )
    entropy = mean(dist.entropy())
    policy_loss = mean(surrogate)
    total = policy_loss - config.ent_coef * entropy
    stats = {
        "policy_loss": policy_loss,
        "entropy": entropy,
        "approx_kl": mean(losses.approx_kl(log_prob, batch["proximal_log_probs"])),
        "clip_fraction": mean(clipped.astype(jnp.float32)),
        "importance_weight": mean(weight),
    }
    if ref_params is not None:
        ref_log_prob = jax.lax.stop_gradient(policy_of(network, ref_params)(batch["obs"]).log_prob(batch["actions"]))
        # k3 estimator of KL(pi || pi_ref) on actions sampled from pi: r - log r - 1, r = pi_ref / pi.
        kl = mean(losses.approx_kl(ref_log_prob, log_prob))
        total = total + config.kl_coef * kl
        stats["kl_ref"] = kl
    return total, stats


def collect(setup: Setup, config: Config, state: TrainState, key: jax.Array):
    """One iteration's grouped rollout (`grouped.collect_groups`) with group-relative advantages:
    (groups batch [T, N, ...], new trunk, metrics)."""
    act = behaviour(setup.network, lag.behaviour_params(state.lagged, state.params))[0]
    traj, mask, trunk, metrics = grouped.collect_groups(setup, config, act, state.trunk, key)
    advantages = estimators.group_relative_advantages(
        traj.rewards, mask, config.group_size, config.supervision, config.advantage_eps
    )
    batch = {
        "obs": traj.obs,
        "actions": traj.actions,
        "log_probs": traj.log_probs,
        "advantages": advantages,
        "mask": mask,
    }
    return batch, trunk, metrics


@takes_setup
def update(setup: Setup, config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration: grouped rollout, group-relative advantages, `update_epochs` x minibatches."""
    network = setup.network
    key, collect_key, replay_key, shuffle_key = jax.random.split(state.key, 4)
    batch, trunk, metrics = collect(setup, config, state, collect_key)

    buffer = state.buffer
    if config.replay_ratio > 0:
        buffer = replay.add(buffer, jax.tree.map(lambda x: x[None, None], batch))
        replayed = replay.sample(buffer, replay_key, config.replay_ratio)  # leaves [1, r, T, N, ...]
        batch = jax.tree.map(
            lambda fresh, old: jnp.concatenate([fresh, *old[0]], axis=1), batch, replayed
        )  # [T, (1 + r) N, ...]
    if config.replay_ratio > 0 or config.behaviour_lag > 0:  # off-policy data: anchor at the learner's policy
        proximal = policy_of(network, state.params)(batch["obs"]).log_prob(batch["actions"])
        batch["proximal_log_probs"] = jax.lax.stop_gradient(proximal)
    else:
        batch["proximal_log_probs"] = batch["log_probs"]

    def loss(params, minibatch):
        return loss_fn(params, state.ref_params, network, config, minibatch)

    def sample_mean_loss(params, minibatch):  # a large minibatch's chunks, their samples weighted by the mask
        return loss_fn(params, state.ref_params, network, config, minibatch, weighted=True)

    def weighted(minibatch):
        return {**minibatch, "weights": losses.mask_weights(minibatch["mask"])}

    params, opt_state, stats = ac.minibatch_updates(
        config,
        loss,
        state.params,
        state.opt_state,
        batch,
        shuffle_key,
        config.minibatches_per_epoch,
        chunked=(weighted, sample_mean_loss),
    )
    ref_params = state.ref_params
    if config.kl_reference == "moving":
        move = (state.iteration + 1) % config.ref_update_interval == 0
        tau = jnp.where(move, config.ref_tau, 0.0)
        ref_params = optax.incremental_update(params, ref_params, tau)
    metrics = {**metrics, **stats}
    lagged = lag.push(state.lagged, state.params)
    state = TrainState(params, opt_state, ref_params, trunk, buffer, lagged, key, state.iteration + 1)
    return state, metrics
