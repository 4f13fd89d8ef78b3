"""V-trace actor-critic (IMPALA, Espeholt et al. 2018, "IMPALA: Scalable Distributed Deep-RL with Importance
Weighted Actor-Learner Architectures", arXiv 1802.01561) with the actor-learner split inside one program.

One iteration: the `num_envs` envs take `num_steps` steps with the behaviour policy mu, the learner's parameters
of `behaviour_lag` iterations ago (`jaxrl.lag`); their log-probabilities are stored. The learner's critic values
the observations (and the final observations of truncated episodes); `estimators.vtrace` turns the log ratios
log pi - log mu into value targets v_s and policy-gradient advantages; then `update_epochs` x `num_minibatches`
steps of

    loss = -sg(A_pg) log pi(a|s) + vf_coef 0.5 (V(s) - v_s)^2 - ent_coef H(pi(.|s)).

With `behaviour_lag` = 0 the data is on-policy, the ratios are 1 and v_s are the lambda-returns (A2C with
TD(lambda) targets).

With `critic="q"` (discrete actions) the critic learns action values instead and `estimators.retrace` gives the
targets G_t for Q(s_t, a_t) (Munos et al. 2016), bootstrapping from E_pi Q(s', .) of the learner's policy; the
policy-gradient advantage is min(clip_pg_rho, rho_t) (G_t - E_pi Q(s_t, .)), as in ACER (Wang et al. 2017):

    loss = -sg(A) log pi(a|s) + vf_coef 0.5 (Q(s, a) - G)^2 - ent_coef H(pi(.|s)).

`normalize_advantages` standardises A_pg within each minibatch (off by default). Without it, an advantage offset
c (a critic error shared by every step) times the truncated weight min(1, pi/mu) moves a Gaussian policy's mean m
away from the behaviour's: for pi = N(m, s^2) and mu = N(0, s^2), E_mu[c min(1, pi/mu) d log pi / dm]
= -c (m / 2) P / s^2 with P = E_mu[min(1, pi/mu)], so c < 0 pushes m further from 0 every step; standardising
removes the offset, at the price of scaling advantages that are mostly noise up to unit size where the critic
fits.

With `core="gru"` (V-trace critic) actor and critic are recurrent (torso -> GRU -> head): the behaviour actor (the
lagged parameters) and the learner's critic step along the rollout with their own states, reset where an episode
starts; the learner re-runs its actor over each sequence from the actor state stored at the sequence start (the
behaviour's state, as in R2D2's stored-state strategy, Kapturowski et al. 2019) for log pi, and its updates use
minibatches of whole environment sequences.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import config_rules, envs, estimators, lag, losses, parallel
from jaxrl.algos.base import (  # noqa: F401 (re-exports make_train, train)
    check,
    hyper,
    make_train,
    recurrent,
    shared,
    static,
    takes_setup,
    train,
)
from jaxrl.algos.families import actor_critic as ac
from jaxrl.algos.families import actor_critic_recurrent as acr
from jaxrl.algos.families.actor_critic import TrainState, evaluation_policy  # noqa: F401 (the module's surface)
from jaxrl.networks import ActorCritic, ActorQCritic
from jaxrl.rollout import episode_metrics


@struct.dataclass
class Config(ac.Config):
    num_envs: int = shared("num_envs", 32)
    num_steps: int = shared("num_steps", 32)
    total_timesteps: int = shared("total_timesteps", 500_000)
    behaviour_lag: int = static(2, "iterations the acting parameters lag the learner's (0: on-policy)")
    critic: str = static("value", "value: V-trace with a state-value critic; q: Retrace with an action-value one")
    update_epochs: int = shared("update_epochs", 1)
    num_minibatches: int = shared("num_minibatches", 2)
    anneal_lr: bool = shared("anneal_lr", True)
    core: str = static("none", "recurrent core between torso and heads: none, gru, lstm, lru or gtrxl (critic='value')")
    core_size: int = shared("core_size", 128)
    learning_rate: float = shared("learning_rate", 1e-3)
    vtrace_lambda: float = hyper(1.0, "lambda of the V-trace traces c = lambda min(c_bar, rho)")
    clip_rho: float = hyper(1.0, "rho-bar: truncation of the importance weight in the V-trace TD errors")
    clip_c: float = hyper(1.0, "c-bar: truncation of the importance weight in the traces")
    clip_pg_rho: float = hyper(1.0, "truncation of the importance weight of the policy-gradient advantage")
    normalize_advantages: bool = static(
        False, "standardise the policy-gradient advantages within each minibatch (see the module docstring)"
    )
    ent_coef: float = shared("ent_coef", 0.01)
    vf_coef: float = shared("vf_coef", 0.5)


def validate(config: Config) -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run."""
    ac.validate(config, config_rules.impala)


def make_network(config: Config, spec: envs.EnvSpec, box: envs.EnvSpec | None = None) -> ActorCritic | ActorQCritic:
    """`ActorQCritic` with `critic="q"`, else the family's `ActorCritic`."""
    if config.critic == "q":
        return ActorQCritic(spec.action_dim, ac.torso(config, spec), spec.action_mask)
    return ac.make_network(config, spec, box)


def setup(config: Config) -> ac.Setup:
    """The env batch and the network (`make_network`), recurrent (`actor_critic_recurrent`) with a `core`."""
    return acr.setup(config) if recurrent(config) else ac.setup(config, make_network)


@takes_setup
def init(setup: ac.Setup, config: Config, key: jax.Array) -> TrainState:
    """`actor_critic.init` and the lag of the learner's parameters the behaviour policy acts with."""
    state = ac.init(setup, config, key)
    return state.replace(lagged=lag.init(state.params, config.behaviour_lag))


def vtrace_batch(config: Config, setup: ac.Setup, params, rollout: ac.Rollout) -> dict[str, jax.Array]:
    """Critic targets and policy-gradient advantages of a rollout whose `log_probs` are the behaviour's and whose
    `values` / `next_values` are the learner's state values at `params`: V-trace for a value critic, Retrace
    for an action-value one."""
    traj = rollout.traj
    log_pi = setup.rollout_policy(params, rollout).log_prob(traj.actions)
    log_rho = log_pi - traj.log_probs
    gamma, lambda_ = config.gamma, config.vtrace_lambda
    shared = (traj.next_values, traj.rewards, traj.terminated, traj.truncated, log_rho, gamma, lambda_)
    if config.critic == "q":
        q_taken = losses.action_value(setup.network.apply(params, traj.obs, method="q_values"), traj.actions)
        targets = estimators.retrace(q_taken, *shared)
        advantages = jnp.minimum(config.clip_pg_rho, jnp.exp(log_rho)) * (targets - traj.values)
    else:
        clips = (config.clip_rho, config.clip_c, config.clip_pg_rho)
        targets, advantages = estimators.vtrace(traj.values, *shared, *clips)
    return {
        "obs": traj.obs,
        "actions": traj.actions,
        "targets": jax.lax.stop_gradient(targets),
        "advantages": jax.lax.stop_gradient(advantages),
        "log_rho": log_rho,
    }


def loss_fn(params, setup: ac.Setup, config: Config, minibatch, standardized: bool = False):
    """-A_pg log pi + vf_coef * 0.5 (V - v_s)^2 (or (Q(s, a) - G)^2) - ent_coef * entropy, averaged over the
    minibatch (its steps, or for a recurrent network its sequences re-run from their stored initial states,
    `Setup.forward`); A_pg standardised over the minibatch with `normalize_advantages`, unless `standardized`
    (`standardized_advantages` done beforehand, over a larger batch)."""
    dist, values, steps = setup.forward(params, minibatch)
    if config.critic == "q":
        values = losses.action_value(values, steps["actions"])
    return vtrace_loss(dist, values, config, steps, standardized)


def standardized_advantages(config: Config, batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """The batch with A_pg standardised over it (over every device's), where the Config asks."""
    if not config.normalize_advantages:
        return batch
    advantages = batch["advantages"]
    return {**batch, "advantages": parallel.normalize(advantages, jnp.ones(advantages.shape, bool))}


def vtrace_loss(dist, values: jax.Array, config: Config, batch: dict[str, jax.Array], standardized: bool = False):
    """The loss of the policy `dist` and the critic's `values` (V(s), or Q(s, a) of the taken actions) at the
    batch's steps: -sg(A_pg) log pi(a|s) + vf_coef 0.5 (value - target)^2 - ent_coef H(pi), means over the batch;
    A_pg standardised over the batch with `normalize_advantages`, unless `standardized` already."""
    if not standardized:
        batch = standardized_advantages(config, batch)
    advantages = batch["advantages"]
    policy_loss = -(advantages * dist.log_prob(batch["actions"])).mean()
    value_loss = losses.value_loss(values, batch["targets"]).mean()
    entropy = dist.entropy().mean()
    total = policy_loss + config.vf_coef * value_loss - config.ent_coef * entropy
    stats = {
        "policy_loss": policy_loss,
        "value_loss": value_loss,
        "entropy": entropy,
        "importance_weight": jnp.exp(batch["log_rho"]).mean(),
    }
    return total, stats


@takes_setup
def update(setup: ac.Setup, config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration: act with the lagged parameters (valued by the learner's critic), V-trace (or Retrace),
    `update_epochs` x `num_minibatches` steps (on minibatches of whole environment sequences for a recurrent
    network, whose learner re-runs its actor over each sequence from the behaviour's stored state)."""
    key, rollout_key, shuffle_key = jax.random.split(state.key, 3)
    mu_params = lag.behaviour_params(state.lagged, state.params)
    rollout = setup.collect(config, state, rollout_key, mu_params)
    steps = vtrace_batch(config, setup, state.params, rollout)

    def loss(params, minibatch):
        return loss_fn(params, setup, config, minibatch)

    def sample_mean_loss(params, minibatch):  # A_pg standardised over the whole minibatch beforehand
        return loss_fn(params, setup, config, minibatch, standardized=True)

    chunked = (functools.partial(standardized_advantages, config), sample_mean_loss)
    params, opt_state, stats = setup.updates(
        config, loss, state.params, state.opt_state, rollout, steps, shuffle_key, chunked=chunked
    )
    metrics = {**episode_metrics(rollout.traj), **stats}
    lagged = lag.push(state.lagged, state.params)  # this iteration's parameters, before the update
    return setup.next_state(state, params, opt_state, rollout, key).replace(lagged=lagged), metrics
