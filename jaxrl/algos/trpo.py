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

Data-parallel (`jaxrl.parallel`): the surrogate, its gradient, the Fisher-vector products and the line
search's KL and surrogate are means over every device's equal share of the batch, so the conjugate gradient and
the line search take the same decisions on every device; the value regression averages its gradients.

A batch of more than `minibatch.GRADIENT_CHUNKS_FROM` samples takes the policy step's means (the surrogate and its
gradient, the Fisher-vector products, the line search's KL and surrogate) over chunks of it on a CPU
(`minibatch.mean_in_chunks`), its advantages normalised over the whole batch first; so do the value regression's
minibatches of more samples than that.

The natural-gradient step acts on the actor's parameters (the actor MLP and, for Gaussian policies, the log
standard deviation); the critic's are split off and have their own Adam state in `TrainState.opt_state`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.flatten_util import ravel_pytree

from jaxrl import config_rules, losses, optim, parallel
from jaxrl import minibatch as minibatches
from jaxrl.algos.base import hyper, make_train, shared, static, takes_setup, train  # noqa: F401 (re-exports make_train, train)
from jaxrl.algos.families import actor_critic as ac
from jaxrl.algos.families.actor_critic import TrainState, evaluation_policy  # noqa: F401 (the module's surface)
from jaxrl.minibatch import minibatch_epochs
from jaxrl.networks import ActorCritic
from jaxrl.rollout import episode_metrics


@struct.dataclass
class Config(ac.Config):
    num_steps: int = shared("num_steps", 128)
    total_timesteps: int = shared("total_timesteps", 150_000)
    cg_iters: int = static(10, "conjugate gradient iterations of the natural-gradient solve")
    backtrack_iters: int = static(10, "step sizes the line search tries (backtrack_coef^i, i = 0 ..)")
    vf_epochs: int = static(5, "passes of the value regression over each rollout")
    vf_minibatches: int = static(8, "minibatches per value pass; must divide num_envs * num_steps")
    optimizer: str = static("adam", "optimiser of the value regression: adam, rmsprop or radam")
    normalize_advantages: bool = static(True, "normalise advantages over the batch")
    max_kl: float = hyper(0.01, "trust region: largest mean KL(pi_old || pi_new) of a policy step")
    damping: float = hyper(0.1, "damping added to the Fisher matrix in the conjugate gradient solve")
    cg_tol: float = hyper(1e-10, "conjugate gradient stops when ||residual|| <= cg_tol * ||gradient||")
    backtrack_coef: float = hyper(0.5, "line search step shrink factor")
    gae_lambda: float = shared("gae_lambda", 0.95)
    vf_learning_rate: float = hyper(1e-3, "learning rate of the value regression")
    max_grad_norm: float = hyper(0.5, "global gradient-norm clipping of the value regression")

    @property
    def updates_per_iteration(self) -> int:
        """Optimiser steps of the value regression per iteration: vf_epochs * vf_minibatches."""
        return self.vf_epochs * self.vf_minibatches


def validate(config: Config) -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run."""
    ac.validate(config, config_rules.trpo)


def value_optimizer(config: Config) -> optax.GradientTransformation:
    return optim.clipped_optimizer(config.optimizer, config.vf_learning_rate, config.max_grad_norm)


def split_params(params) -> tuple[dict, dict]:
    """(actor's parameters, critic's parameters) of ActorCritic params; `merge_params` inverts it."""
    inner = params["params"]
    return {"params": {k: v for k, v in inner.items() if k != "critic"}}, {"params": {"critic": inner["critic"]}}


def merge_params(policy_params, critic_params):
    return {"params": {**policy_params["params"], **critic_params["params"]}}


setup = ac.setup  # the env batch and the actor-critic network


@takes_setup
def init(setup: ac.Setup, config: Config, key: jax.Array) -> TrainState:
    """`actor_critic.init` with the value regression's optimiser state, of the critic's parameters only."""
    return ac.init(setup, config, key, optimizer=value_optimizer(config), trainable=lambda p: split_params(p)[1])


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
        advantages = parallel.normalize(advantages, mask)

    def objectives(b, mean):
        """(L, KL, the entropy of pi_old) on the samples of `b`, each a `mean` over them."""

        def policy(theta):
            return network.apply(merge_params(unravel(theta), critic_params), b["obs"], method=ActorCritic.policy)

        old = policy(jax.lax.stop_gradient(theta_old))

        def surrogate(theta):  # L(theta) = E[pi_theta / pi_old * A], to be maximised
            log_prob = policy(theta).log_prob(b["actions"])
            return -mean(losses.policy_gradient_loss(log_prob, b["log_probs"], b["advantages"]))

        def kl(theta):
            return mean(old.kl_divergence(policy(theta)))

        return surrogate, kl, lambda: mean(old.entropy())

    batch = {**batch, "advantages": advantages}
    if mask.size > minibatches.GRADIENT_CHUNKS_FROM:  # each mean over chunks of the batch, its samples weighted
        weighted = {**batch, "weights": losses.mask_weights(mask)}
        weighted = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), weighted)  # [T, N, ...] -> [T N, ...]

        def in_chunks(fn):  # x -> the batch's mean of fn(x, surrogate, kl, entropy) over its chunks
            def on_chunk(x, chunk):
                return fn(x, *objectives(chunk, losses.valid_mean(chunk["mask"], chunk["weights"])))

            return lambda x: minibatches.mean_in_chunks(on_chunk, minibatches.GRADIENT_CHUNK_ROWS)(x, weighted)

        surrogate_and_grad = in_chunks(lambda theta, surrogate, kl, entropy: jax.value_and_grad(surrogate)(theta))
        fisher_product = lambda: in_chunks(  # noqa: E731 (each chunk's KL linearised per product, in its cache)
            lambda v, surrogate, kl, entropy: optim.fisher_vector_product(kl, theta_old, config.damping)(v)
        )
        kl_and_surrogate = in_chunks(lambda theta, surrogate, kl, entropy: (kl(theta), surrogate(theta)))
        old_entropy = lambda: in_chunks(lambda theta, surrogate, kl, entropy: entropy())(theta_old)  # noqa: E731
    else:
        surrogate, kl, entropy = objectives(batch, losses.valid_mean(mask))
        surrogate_and_grad = jax.value_and_grad(surrogate)
        fisher_product = lambda: optim.fisher_vector_product(kl, theta_old, config.damping)  # noqa: E731
        kl_and_surrogate = lambda theta: (kl(theta), surrogate(theta))  # noqa: E731
        old_entropy = entropy

    # under data parallelism each device's surrogate and KL are means over its equal share of the batch: their
    # device means, and those of their gradients and Fisher-vector products, are the whole batch's
    surrogate_old, g = parallel.pmean(surrogate_and_grad(theta_old))
    local_fvp = fisher_product()  # the whole batch's KL linearised once, after the gradient
    fvp = lambda v: parallel.pmean(local_fvp(v))  # noqa: E731
    direction = optim.conjugate_gradient(fvp, g, config.cg_iters, config.cg_tol)
    f_direction = fvp(direction)
    scale = jnp.sqrt(2.0 * config.max_kl / jnp.maximum(direction @ f_direction, 1e-20))
    full_step = scale * direction

    def accept(theta):
        step_kl, candidate = parallel.pmean(kl_and_surrogate(theta))
        improvement = candidate - surrogate_old
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
        "entropy": old_entropy(),
    }
    return merge_params(unravel(theta), critic_params), stats


def value_regression(config: Config, network: ActorCritic, params, opt_state, batch, key):
    """`vf_epochs` x `vf_minibatches` Adam steps of 0.5 (V(s) - G)^2 on the critic's parameters."""
    policy_params, critic_params = split_params(params)

    def value_loss(critic, minibatch, mean):
        values = network.apply(merge_params(policy_params, critic), minibatch["obs"], method=ActorCritic.value)
        return mean(losses.value_loss(values, minibatch["targets"]))

    def grad_fn(critic, minibatch):
        loss, grads = jax.value_and_grad(value_loss)(critic, minibatch, losses.valid_mean(minibatch["mask"]))
        return grads, {"value_loss": loss}

    if batch["mask"].size // config.vf_minibatches > minibatches.GRADIENT_CHUNKS_FROM:

        def sample_mean_loss(critic, minibatch):  # a chunk's, its samples weighted by `losses.mask_weights`
            loss = value_loss(critic, minibatch, losses.valid_mean(minibatch["mask"], minibatch["weights"]))
            return loss, {"value_loss": loss}

        def weighted(minibatch):
            return {**minibatch, "weights": losses.mask_weights(minibatch["mask"])}

        grad_fn = minibatches.chunked_gradient(weighted, sample_mean_loss, minibatches.GRADIENT_CHUNK_ROWS)

    critic_params, opt_state, stats = minibatch_epochs(
        grad_fn,
        value_optimizer(config),
        critic_params,
        opt_state,
        {k: batch[k] for k in ("obs", "targets", "mask")},
        key,
        config.vf_epochs,
        config.vf_minibatches,
    )
    return merge_params(policy_params, critic_params), opt_state, jax.tree.map(jnp.mean, stats)


@takes_setup
def update(setup: ac.Setup, config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration: rollout, GAE, a trust-region natural-gradient policy step, value regression."""
    key, rollout_key, value_key = jax.random.split(state.key, 3)
    rollout = setup.collect(config, state, rollout_key)
    traj = rollout.traj
    batch = ac.rollout_batch(traj, *ac.gae(config, traj))
    params, policy_stats = policy_step(config, setup.network, state.params, batch)
    params, opt_state, value_stats = value_regression(config, setup.network, params, state.opt_state, batch, value_key)
    metrics = {**episode_metrics(traj), **policy_stats, **value_stats}
    return setup.next_state(state, params, opt_state, rollout, key), metrics
