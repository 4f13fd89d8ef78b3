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
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import envs, estimators, lag, losses
from jaxrl.algos import ppo
from jaxrl.configs import check, check_common, check_minibatches, check_range, hyper, static
from jaxrl.minibatch import minibatch_epochs
from jaxrl.networks import ActorCritic, ActorQCritic
from jaxrl.rollout import EnvCarry, episode_metrics, reset, rollout


@struct.dataclass
class Config:
    env: str = static("CartPole-v1", "gymnax environment id")
    num_envs: int = static(32, "parallel environments")
    num_steps: int = static(32, "rollout length T per iteration, per environment")
    total_timesteps: int = static(500_000, "environment steps of the whole run")
    behaviour_lag: int = static(2, "iterations the acting parameters lag the learner's (0: on-policy)")
    critic: str = static("value", "value: V-trace with a state-value critic; q: Retrace with an action-value one")
    update_epochs: int = static(1, "passes over each rollout")
    num_minibatches: int = static(2, "minibatches per pass; must divide num_envs * num_steps")
    hidden_sizes: tuple[int, ...] = static((64, 64), "hidden layer sizes of the actor and of the critic MLP")
    activation: str = static("tanh", "hidden activation: tanh, relu, gelu or silu")
    policy: str = static("auto", "action head: auto (from the action space), categorical or gaussian")
    anneal_lr: bool = static(True, "decay the learning rate linearly to 0 over the run")
    normalize_observations: bool = static(False, "normalise observations by running mean and std")
    learning_rate: float = hyper(1e-3, "Adam learning rate")
    gamma: float = hyper(0.99, "discount factor")
    vtrace_lambda: float = hyper(1.0, "lambda of the V-trace traces c = lambda min(c_bar, rho)")
    clip_rho: float = hyper(1.0, "rho-bar: truncation of the importance weight in the V-trace TD errors")
    clip_c: float = hyper(1.0, "c-bar: truncation of the importance weight in the traces")
    clip_pg_rho: float = hyper(1.0, "truncation of the importance weight of the policy-gradient advantage")
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
    lagged: lag.ParamsLag | None
    env: EnvCarry
    key: jax.Array
    iteration: jax.Array


def validate(config: Config) -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run."""
    check_common(config, ("num_envs", "num_steps", "update_epochs", "num_minibatches"), config.batch_size)
    check_minibatches(config)
    check(
        isinstance(config.behaviour_lag, int) and config.behaviour_lag >= 0,
        "behaviour_lag",
        f"got {config.behaviour_lag!r}; must be an integer >= 0.",
    )
    check(config.policy in ("auto", "categorical", "gaussian"), "policy", f"{config.policy!r} is not known.")
    check(config.critic in ("value", "q"), "critic", f"{config.critic!r} is not one of value, q.")
    if config.critic == "q":
        check(
            make_env(config).spec.discrete,
            "critic",
            f"critic='q' needs discrete actions; {config.env} is continuous: use critic='value'.",
        )
    if config.policy != "auto":
        wanted = "categorical" if make_env(config).spec.discrete else "gaussian"
        check(config.policy == wanted, "policy", f"{config.env} needs a {wanted} head; use policy='auto'.")
    check_range(config, "learning_rate", 0.0, low_open=True)
    check_range(config, "gamma", 0.0, 1.0)
    check_range(config, "vtrace_lambda", 0.0, 1.0)
    for name in ("clip_rho", "clip_c", "clip_pg_rho", "max_grad_norm"):
        check_range(config, name, 0.0, low_open=True)


make_env = ppo.make_env


def make_network(config: Config, spec: envs.EnvSpec) -> ActorCritic | ActorQCritic:
    if config.critic == "q":
        return ActorQCritic(spec.action_dim, config.hidden_sizes, config.activation, len(spec.observation_shape))
    return ppo.make_network(config, spec)


def behaviour(network, params):
    """`act(obs, key) -> (action, log_prob)` and the critic's state value `value(obs)` at `params`."""

    def act(obs, key):
        return network.apply(params, obs, method="policy").sample_and_log_prob(seed=key)

    return act, functools.partial(network.apply, params, method="value")


def evaluation_policy(config: Config, state: TrainState, deterministic: bool = True):
    """`act(obs, key) -> action` of the trained policy (the mode when `deterministic`), for `jaxrl.evaluate`."""
    network = make_network(config, make_env(config).spec)

    def act(obs, key):
        dist = network.apply(state.params, obs, method="policy")
        return dist.mode() if deterministic else dist.sample(seed=key)

    return act, envs.observation_normalizer(state.env.state)


def make_optimizer(config: Config) -> optax.GradientTransformation:
    return ppo.make_optimizer(config)


def init(config: Config, key: jax.Array) -> TrainState:
    env = make_env(config)
    network = make_network(config, env.spec)
    key, net_key, env_key = jax.random.split(key, 3)
    carry = reset(env, env_key)
    params = network.init(net_key, carry.obs[:1])
    opt_state = make_optimizer(config).init(params)
    lagged = lag.init(params, config.behaviour_lag)
    return TrainState(params, opt_state, lagged, carry, key, jnp.zeros((), jnp.int32))


def vtrace_batch(config: Config, network, params, traj) -> dict[str, jax.Array]:
    """Critic targets and policy-gradient advantages of a trajectory whose `log_probs` are the behaviour's
    and whose `values` / `next_values` are the learner's state values at `params`: V-trace for a value
    critic, Retrace for an action-value one."""
    log_pi = network.apply(params, traj.obs, method="policy").log_prob(traj.actions)
    log_rho = log_pi - traj.log_probs
    if config.critic == "q":
        q_taken = losses.action_value(network.apply(params, traj.obs, method="q_values"), traj.actions)
        targets = estimators.retrace(
            q_taken,
            traj.next_values,
            traj.rewards,
            traj.terminated,
            traj.truncated,
            log_rho,
            config.gamma,
            config.vtrace_lambda,
        )
        advantages = jnp.minimum(config.clip_pg_rho, jnp.exp(log_rho)) * (targets - traj.values)
        return {
            "obs": traj.obs,
            "actions": traj.actions,
            "targets": jax.lax.stop_gradient(targets),
            "advantages": jax.lax.stop_gradient(advantages),
            "log_rho": log_rho,
        }
    targets, advantages = estimators.vtrace(
        traj.values,
        traj.next_values,
        traj.rewards,
        traj.terminated,
        traj.truncated,
        log_pi - traj.log_probs,
        config.gamma,
        config.vtrace_lambda,
        config.clip_rho,
        config.clip_c,
        config.clip_pg_rho,
    )
    return {
        "obs": traj.obs,
        "actions": traj.actions,
        "targets": jax.lax.stop_gradient(targets),
        "advantages": jax.lax.stop_gradient(advantages),
        "log_rho": log_pi - traj.log_probs,
    }


def loss_fn(params, network, config: Config, batch: dict[str, jax.Array]):
    """-A_pg log pi + vf_coef * 0.5 (V - v_s)^2 (or (Q(s, a) - G)^2) - ent_coef * entropy, averaged over the
    minibatch."""
    dist, values = network.apply(params, batch["obs"])
    if config.critic == "q":
        values = losses.action_value(values, batch["actions"])
    policy_loss = -(batch["advantages"] * dist.log_prob(batch["actions"])).mean()
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
    env = make_env(config)
    network = make_network(config, env.spec)
    key, rollout_key, shuffle_key = jax.random.split(state.key, 3)
    act, _ = behaviour(network, lag.behaviour_params(state.lagged, state.params))
    _, value = behaviour(network, state.params)
    carry, traj = rollout(env, act, value, state.env, rollout_key, config.num_steps)
    batch = vtrace_batch(config, network, state.params, traj)
    grad_fn = jax.grad(functools.partial(loss_fn, network=network, config=config), has_aux=True)
    params, opt_state, stats = minibatch_epochs(
        lambda params, minibatch: grad_fn(params, batch=minibatch),
        make_optimizer(config),
        state.params,
        state.opt_state,
        batch,
        shuffle_key,
        config.update_epochs,
        config.num_minibatches,
    )
    metrics = {**episode_metrics(traj), **jax.tree.map(jnp.mean, stats)}
    lagged = lag.push(state.lagged, state.params)
    return TrainState(params, opt_state, lagged, carry, key, state.iteration + 1), metrics


def train(config: Config, key: jax.Array) -> tuple[TrainState, dict[str, jax.Array]]:
    """init + `lax.scan` of `update` over `config.num_iterations`; metrics are stacked per iteration."""
    state = init(config, key)
    return jax.lax.scan(lambda s, _: update(config, s), state, None, length=config.num_iterations)


def make_train(config: Config):
    """Validates `config` and returns the pure `train(key) -> (TrainState, metrics)`, ready to jit/vmap."""
    validate(config)
    return functools.partial(train, config)
