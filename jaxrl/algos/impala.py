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

`normalize_advantages` standardises A_pg within each minibatch. Without it, an advantage offset c
(the critic's error: with V = 0 at the start and Pendulum's rewards of -16 a step, every TD error is negative)
times the truncated weight min(1, pi/mu) drifts a Gaussian policy's mean m away from the behaviour's: for
pi = N(m, s^2) and mu = N(0, s^2), E_mu[c min(1, pi/mu) d log pi / dm] = -c (m / 2) P / s^2 with
P = E_mu[min(1, pi/mu)], so c < 0 moves m further from 0 every step (measured on Pendulum-v1: the mean went to
|m| = 8.9, far outside the action bounds [-2, 2], and the return to -1600, below a random policy's -1200).
It is off by default: where the critic fits (CartPole), the advantages shrink to noise that standardising
blows up to unit scale (measured at 5e6 steps, 4 seeds: final returns 496-498 without, 500, 9, 9, 199 with).

With `core="gru"` (V-trace critic) actor and critic are recurrent (torso -> GRU -> head): the behaviour actor (the
lagged parameters) and the learner's critic step along the rollout with their own states, reset where an episode
starts; the learner re-runs its actor over each sequence from the actor state stored at the sequence start (the
behaviour's state, as in R2D2's stored-state strategy, Kapturowski et al. 2019) for log pi, and its updates use
minibatches of whole environment sequences.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import envs, estimators, lag, losses
from jaxrl.algos import actor_critic as ac
from jaxrl.algos.actor_critic import TrainState, behaviour, make_env
from jaxrl.algos.base import check, check_choice, check_int, check_range, hyper, make_train, static, train  # noqa: F401
from jaxrl.networks import ActorCritic, ActorQCritic
from jaxrl.networks.recurrent import RecurrentActorCritic
from jaxrl.rollout import episode_metrics, recurrent_rollout, rollout


@struct.dataclass
class Config(ac.Config):
    num_envs: int = static(32, "parallel environments")
    num_steps: int = static(32, "rollout length T per iteration, per environment")
    total_timesteps: int = static(500_000, "environment steps of the whole run")
    behaviour_lag: int = static(2, "iterations the acting parameters lag the learner's (0: on-policy)")
    critic: str = static("value", "value: V-trace with a state-value critic; q: Retrace with an action-value one")
    update_epochs: int = static(1, "passes over each rollout")
    num_minibatches: int = static(2, "minibatches per pass; must divide num_envs * num_steps")
    anneal_lr: bool = static(True, "decay the learning rate linearly to 0 over the run")
    core: str = static("none", "recurrent core between torso and heads: none or gru (critic='value')")
    core_size: int = static(128, "hidden units of the recurrent core (core='gru')")
    learning_rate: float = hyper(1e-3, "learning rate")
    vtrace_lambda: float = hyper(1.0, "lambda of the V-trace traces c = lambda min(c_bar, rho)")
    clip_rho: float = hyper(1.0, "rho-bar: truncation of the importance weight in the V-trace TD errors")
    clip_c: float = hyper(1.0, "c-bar: truncation of the importance weight in the traces")
    clip_pg_rho: float = hyper(1.0, "truncation of the importance weight of the policy-gradient advantage")
    normalize_advantages: bool = static(
        False, "standardise the policy-gradient advantages within each minibatch (see the module docstring)"
    )
    ent_coef: float = hyper(0.01, "entropy bonus coefficient")
    vf_coef: float = hyper(0.5, "value loss coefficient")


def validate(config: Config) -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run."""
    ac.validate(config)
    check_int(config, "behaviour_lag", 0)
    check_choice(config, "critic", ("value", "q"))
    if config.critic == "q":
        check(
            make_env(config).spec.discrete,
            "critic",
            f"critic='q' needs discrete actions; {config.env} is continuous: use critic='value'.",
        )
    check(
        config.core == "none" or config.critic == "value",
        "core",
        f"core={config.core!r} is built for the V-trace critic; use critic='value' or core='none'.",
    )
    check_range(config, "vtrace_lambda", 0.0, 1.0)
    for name in ("clip_rho", "clip_c", "clip_pg_rho"):
        check_range(config, name, 0.0, low_open=True)


def make_network(config: Config, spec: envs.EnvSpec) -> ActorCritic | ActorQCritic:
    if config.critic == "q":
        return ActorQCritic(spec.action_dim, ac.torso(config, spec), spec.action_mask)
    return ac.make_network(config, spec)


def evaluation_policy(config: Config, state: TrainState, deterministic: bool = True):
    """`act(obs, key) -> action` of the trained policy (the mode when `deterministic`), for `jaxrl.run.evaluate`."""
    return ac.evaluation_policy(config, state, deterministic, make_network(config, make_env(config).spec))


def init(config: Config, key: jax.Array) -> TrainState:
    state = ac.init(config, key, make_network(config, make_env(config).spec))
    return state.replace(lagged=lag.init(state.params, config.behaviour_lag))


def vtrace_batch(config: Config, network, params, traj) -> dict[str, jax.Array]:
    """Critic targets and policy-gradient advantages of a trajectory whose `log_probs` are the behaviour's
    and whose `values` / `next_values` are the learner's state values at `params`: V-trace for a value
    critic, Retrace for an action-value one."""
    log_pi = ac.policy_of(network, params)(traj.obs).log_prob(traj.actions)
    log_rho = log_pi - traj.log_probs
    gamma, lambda_ = config.gamma, config.vtrace_lambda
    shared = (traj.next_values, traj.rewards, traj.terminated, traj.truncated, log_rho, gamma, lambda_)
    if config.critic == "q":
        q_taken = losses.action_value(network.apply(params, traj.obs, method="q_values"), traj.actions)
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


def loss_fn(params, network, config: Config, batch: dict[str, jax.Array]):
    """-A_pg log pi + vf_coef * 0.5 (V - v_s)^2 (or (Q(s, a) - G)^2) - ent_coef * entropy, averaged over the
    minibatch; A_pg standardised over the minibatch with `normalize_advantages`."""
    dist, values = network.apply(params, batch["obs"])
    if config.critic == "q":
        values = losses.action_value(values, batch["actions"])
    return vtrace_loss(dist, values, config, batch)


def recurrent_loss_fn(params, network: RecurrentActorCritic, config: Config, minibatch):
    """`loss_fn` with the recurrent actor and critic re-run over the minibatch's sequences [T, B] from their
    stored initial states with the rollout's episode starts."""
    steps, initial = minibatch
    _, dist, values = network.apply(params, initial, steps["obs"], steps["starts"])
    return vtrace_loss(dist, values, config, steps)


def vtrace_loss(dist, values: jax.Array, config: Config, batch: dict[str, jax.Array]):
    """The loss of the policy `dist` and the critic's `values` (V(s), or Q(s, a) of the taken actions) at the
    batch's steps: -sg(A_pg) log pi(a|s) + vf_coef 0.5 (value - target)^2 - ent_coef H(pi), means over the batch;
    A_pg standardised over the batch with `normalize_advantages`."""
    advantages = batch["advantages"]
    if config.normalize_advantages:
        advantages = ac.normalize(advantages, jnp.ones(advantages.shape, bool))
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


def update(config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration: act with the lagged parameters, V-trace, `update_epochs` x `num_minibatches` steps."""
    if config.core != "none":
        return recurrent_update(config, state)
    env = make_env(config)
    network = make_network(config, env.spec)
    key, rollout_key, shuffle_key = jax.random.split(state.key, 3)
    act, _ = behaviour(network, lag.behaviour_params(state.lagged, state.params))
    _, value = behaviour(network, state.params)
    carry, traj = rollout(env, act, value, state.env, rollout_key, config.num_steps)
    batch = vtrace_batch(config, network, state.params, traj)

    def loss(params, minibatch):
        return loss_fn(params, network, config, minibatch)

    params, opt_state, stats = ac.minibatch_updates(config, loss, state.params, state.opt_state, batch, shuffle_key)
    metrics = {**episode_metrics(traj), **stats}
    lagged = lag.push(state.lagged, state.params)  # this iteration's parameters, before the update
    return ac.next_state(state, params, opt_state, carry, key).replace(lagged=lagged), metrics


def recurrent_behaviour(network: RecurrentActorCritic, mu_params, params):
    """The recurrent rollout's `step(h, obs, start, key)`: the behaviour actor at `mu_params` samples, the
    learner's critic at `params` values, each stepping its own state (h_actor, h_critic); and the critic's
    `value(h, obs, start)`."""

    def step(hidden, obs, start, key):
        h_actor, dist = network.apply(mu_params, hidden[0], obs[None], start[None], method="policy")
        h_critic, value = network.apply(params, hidden[1], obs[None], start[None], method="value")
        action, log_prob = dist.sample_and_log_prob(seed=key)
        return (h_actor, h_critic), action[0], log_prob[0], value[0]

    def value(hidden, obs, start):
        return network.apply(params, hidden[1], obs[None], start[None], method="value")[1][0]

    return step, value


def recurrent_update(config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """`update` of a recurrent IMPALA: recurrent rollout (behaviour actor, learner critic), log pi from the
    learner's actor re-run over the whole rollout, V-trace, then steps on minibatches of env sequences."""
    env = make_env(config)
    network = make_network(config, env.spec)
    key, rollout_key, shuffle_key = jax.random.split(state.key, 3)
    step, value = recurrent_behaviour(network, lag.behaviour_params(state.lagged, state.params), state.params)
    carry, memory, traj, sequences = recurrent_rollout(
        env, step, value, state.env, state.memory, rollout_key, config.num_steps
    )
    _, pi = network.apply(state.params, sequences.initial_hidden[0], traj.obs, sequences.starts, method="policy")
    log_rho = pi.log_prob(traj.actions) - traj.log_probs
    shared = (traj.next_values, traj.rewards, traj.terminated, traj.truncated, log_rho, config.gamma)
    clips = (config.clip_rho, config.clip_c, config.clip_pg_rho)
    targets, advantages = estimators.vtrace(traj.values, *shared, config.vtrace_lambda, *clips)
    steps = {
        "obs": traj.obs,
        "actions": traj.actions,
        "targets": jax.lax.stop_gradient(targets),
        "advantages": jax.lax.stop_gradient(advantages),
        "log_rho": log_rho,
        "starts": sequences.starts,
    }

    def loss(params, minibatch):
        return recurrent_loss_fn(params, network, config, minibatch)

    params, opt_state, stats = ac.sequence_minibatch_updates(
        config, loss, state.params, state.opt_state, steps, sequences.initial_hidden, shuffle_key
    )
    metrics = {**episode_metrics(traj), **stats}
    lagged = lag.push(state.lagged, state.params)
    return ac.next_recurrent_state(state, params, opt_state, carry, memory, key).replace(lagged=lagged), metrics
