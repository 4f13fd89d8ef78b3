"""Trust Region Policy Optimization (Schulman et al. 2015, arXiv 1502.05477), with GAE advantages (Schulman et al.
2016) and a separately regressed value function, as in OpenAI baselines' TRPO.

One iteration, all inside the compiled program:
1. Roll out `num_envs` x `num_steps`; GAE advantages and value targets from the rollout's critic (truncated
   episodes bootstrap from the value of their final observation).
2. Policy step on the surrogate L(theta) = E[pi_theta(a|s) / pi_old(a|s) A] (`losses.policy_gradient_loss`) under
   the constraint E_s KL(pi_old || pi_theta) <= max_kl: its gradient g; the natural direction s ~ (F + damping I)^-1 g
   by `cg_iters` of conjugate gradient (`optim.conjugate_gradient`) on Fisher-vector products of the KL
   (`optim.fisher_vector_product`, a JVP of the KL's gradient, never a matrix); the step s scaled so that the
   quadratic model of the KL, 0.5 s^T F s, equals max_kl; then a backtracking line search
   (`optim.backtracking_line_search`, `backtrack_coef`^i of the step) accepting the first candidate whose exact
   KL is <= max_kl and whose surrogate improves. When none qualifies, the policy stays.
3. Value regression: `vf_epochs` x `vf_minibatches` Adam steps on 0.5 (V(s) - G)^2 with the GAE targets
   (`minibatch_epochs`), on the critic's parameters only.

The natural-gradient step acts on the actor's parameters (the actor MLP and, for Gaussian policies, the log
standard deviation); the critic's are split off and have their own Adam state in `TrainState.opt_state`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.flatten_util import ravel_pytree

from jaxrl import estimators, losses, optim
from jaxrl import policy_gradient as pg
from jaxrl.algos.ppo import TrainState, behaviour, evaluation_policy, make_env, make_network
from jaxrl.configs import check_common, check_range, hyper, static
from jaxrl.minibatch import minibatch_epochs
from jaxrl.networks import ActorCritic
from jaxrl.rollout import episode_metrics, rollout

__all__ = [
    "Config",
    "TrainState",
    "behaviour",
    "evaluation_policy",
    "init",
    "make_train",
    "policy_step",
    "train",
    "update",
    "validate",
]


@struct.dataclass
class Config:
    env: str = static("CartPole-v1", "gymnax environment id")
    num_envs: int = static(16, "parallel environments")
    num_steps: int = static(128, "rollout length T per iteration, per environment")
    total_timesteps: int = static(150_000, "environment steps of the whole run")
    cg_iters: int = static(10, "conjugate gradient iterations of the natural-gradient solve")
    backtrack_iters: int = static(10, "step sizes the line search tries (backtrack_coef^i, i = 0 ..)")
    vf_epochs: int = static(5, "passes of the value regression over each rollout")
    vf_minibatches: int = static(8, "minibatches per value pass; must divide num_envs * num_steps")
    hidden_sizes: tuple[int, ...] = static((64, 64), "hidden layer sizes of the actor and of the critic MLP")
    activation: str = static("tanh", "hidden activation: tanh, relu, gelu or silu")
    normalize_advantages: bool = static(True, "normalise advantages over the batch")
    normalize_observations: bool = static(False, "normalise observations by running mean and std")
    max_kl: float = hyper(0.01, "trust region: largest mean KL(pi_old || pi_new) of a policy step")
    damping: float = hyper(0.1, "damping added to the Fisher matrix in the conjugate gradient solve")
    cg_tol: float = hyper(1e-10, "conjugate gradient stops when ||residual|| <= cg_tol * ||gradient||")
    backtrack_coef: float = hyper(0.5, "line search step shrink factor")
    gamma: float = hyper(0.99, "discount factor")
    gae_lambda: float = hyper(0.95, "GAE lambda")
    vf_learning_rate: float = hyper(1e-3, "Adam learning rate of the value regression")
    max_grad_norm: float = hyper(0.5, "global gradient-norm clipping of the value regression")

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def num_iterations(self) -> int:
        return self.total_timesteps // self.batch_size


def validate(config: Config) -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run."""
    positive = ("num_envs", "num_steps", "cg_iters", "backtrack_iters", "vf_epochs", "vf_minibatches")
    check_common(config, positive, config.batch_size)
    pg.check_divides(config, "vf_minibatches")
    check_range(config, "max_kl", 0.0, low_open=True)
    check_range(config, "damping", 0.0)
    check_range(config, "cg_tol", 0.0)
    check_range(config, "backtrack_coef", 0.0, 1.0, low_open=True)
    check_range(config, "gamma", 0.0, 1.0)
    check_range(config, "gae_lambda", 0.0, 1.0)
    check_range(config, "vf_learning_rate", 0.0, low_open=True)
    check_range(config, "max_grad_norm", 0.0, low_open=True)


def make_value_optimizer(config: Config) -> optax.GradientTransformation:
    return pg.make_optimizer("adam", config.vf_learning_rate, config.max_grad_norm)


def split_params(params) -> tuple[dict, dict]:
    """(actor's parameters, critic's parameters) of ActorCritic params; `merge_params` inverts it."""
    inner = params["params"]
    return {"params": {k: v for k, v in inner.items() if k != "critic"}}, {"params": {"critic": inner["critic"]}}


def merge_params(policy_params, critic_params):
    return {"params": {**policy_params["params"], **critic_params["params"]}}


def init(config: Config, key: jax.Array) -> TrainState:
    env = make_env(config)
    network = make_network(config, env.spec)
    return pg.init(env, network, make_value_optimizer(config), key, trainable=lambda p: split_params(p)[1])


def policy_step(config: Config, network: ActorCritic, params, batch: dict[str, jax.Array]):
    """The TRPO policy update on a rollout `batch` (obs, actions, behaviour log_probs, advantages, mask).

    Returns (params with the new actor, stats): `kl` (exact mean KL of the step taken, 0 if none), the surrogate's
    improvement and its linear prediction g . step, the accepted step fraction (0: rejected), `accepted`,
    and the conjugate gradient's relative residual ||(F + damping I) s - g|| / ||g||.
    """
    policy_params, critic_params = split_params(params)
    theta_old, unravel = ravel_pytree(policy_params)
    mask = batch["mask"]
    advantages = batch["advantages"]
    if config.normalize_advantages:
        advantages = pg.normalize(advantages, mask)

    def policy(theta):
        return network.apply(merge_params(unravel(theta), critic_params), batch["obs"], method=ActorCritic.policy)

    old = policy(jax.lax.stop_gradient(theta_old))

    def surrogate(theta):  # L(theta) = E[pi_theta / pi_old * A], to be maximised
        log_prob = policy(theta).log_prob(batch["actions"])
        return -losses.masked_mean(losses.policy_gradient_loss(log_prob, batch["log_probs"], advantages), mask)

    def kl(theta):
        return losses.masked_mean(old.kl_divergence(policy(theta)), mask)

    surrogate_old, g = jax.value_and_grad(surrogate)(theta_old)
    fvp = optim.fisher_vector_product(kl, theta_old, config.damping)
    direction = optim.conjugate_gradient(fvp, g, config.cg_iters, config.cg_tol)
    f_direction = fvp(direction)
    scale = jnp.sqrt(2.0 * config.max_kl / jnp.maximum(direction @ f_direction, 1e-20))
    full_step = scale * direction

    def accept(theta):
        step_kl, improvement = kl(theta), surrogate(theta) - surrogate_old
        ok = (step_kl <= config.max_kl) & (improvement > 0.0) & jnp.isfinite(step_kl) & jnp.isfinite(improvement)
        return ok, {"kl": step_kl, "surrogate_improvement": improvement}

    theta, accepted, fraction, stats = optim.backtracking_line_search(
        accept, theta_old, full_step, config.backtrack_iters, config.backtrack_coef
    )
    stats = jax.tree.map(lambda x: jnp.where(accepted, x, 0.0), stats)
    stats |= {
        "expected_improvement": fraction * (g @ full_step),
        "step_fraction": fraction,
        "accepted": accepted.astype(jnp.float32),
        "cg_residual": jnp.linalg.norm(f_direction - g) / jnp.maximum(jnp.linalg.norm(g), 1e-20),
        "entropy": losses.masked_mean(old.entropy(), mask),
    }
    return merge_params(unravel(theta), critic_params), stats


def value_regression(config: Config, network: ActorCritic, params, opt_state, batch, key):
    """`vf_epochs` x `vf_minibatches` Adam steps of 0.5 (V(s) - G)^2 on the critic's parameters."""
    policy_params, critic_params = split_params(params)

    def grad_fn(critic, minibatch):
        def loss(critic):
            values = network.apply(merge_params(policy_params, critic), minibatch["obs"], method=ActorCritic.value)
            return losses.masked_mean(losses.value_loss(values, minibatch["targets"]), minibatch["mask"])

        value_loss, grads = jax.value_and_grad(loss)(critic)
        return grads, {"value_loss": value_loss}

    critic_params, opt_state, stats = minibatch_epochs(
        grad_fn,
        make_value_optimizer(config),
        critic_params,
        opt_state,
        {k: batch[k] for k in ("obs", "targets", "mask")},
        key,
        config.vf_epochs,
        config.vf_minibatches,
    )
    return merge_params(policy_params, critic_params), opt_state, jax.tree.map(jnp.mean, stats)


def update(config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration: rollout, GAE, a trust-region natural-gradient policy step, value regression."""
    env = make_env(config)
    network = make_network(config, env.spec)
    key, rollout_key, value_key = jax.random.split(state.key, 3)

    act, value = behaviour(network, state.params)
    carry, traj = rollout(env, act, value, state.env, rollout_key, config.num_steps)
    advantages, targets = estimators.gae(
        traj.rewards, traj.values, traj.next_values, traj.terminated, traj.truncated, config.gamma, config.gae_lambda
    )
    batch = {
        "obs": traj.obs,
        "actions": traj.actions,
        "log_probs": traj.log_probs,
        "advantages": advantages,
        "targets": targets,
        "mask": jnp.ones(traj.rewards.shape, bool),
    }
    params, policy_stats = policy_step(config, network, state.params, batch)
    params, opt_state, value_stats = value_regression(config, network, params, state.opt_state, batch, value_key)
    metrics = {**episode_metrics(traj), **policy_stats, **value_stats}
    return TrainState(params, opt_state, carry, key, state.iteration + 1), metrics


def train(config: Config, key: jax.Array) -> tuple[TrainState, dict[str, jax.Array]]:
    """init + `lax.scan` of `update` over `config.num_iterations`; metrics are stacked per iteration."""
    return pg.train(init, update, config, key)


def make_train(config: Config):
    """Validates `config` and returns the pure `train(key) -> (TrainState, metrics)`, ready to jit/vmap."""
    validate(config)
    return functools.partial(train, config)
