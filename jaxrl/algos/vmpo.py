"""V-MPO: on-policy maximum a posteriori policy optimisation (Song et al. 2019, "V-MPO: On-Policy Maximum a
Posteriori Policy Optimization for Discrete and Continuous Control", arXiv 1909.12238), discrete and continuous.

One iteration, inside the compiled program:
1. Roll out `num_envs` x `num_steps` with the current policy pi_old (the paper's target network: the parameters
   at collection, fixed for the iteration); GAE advantages A and value targets G from its critic
   (`estimators.gae`; gae_lambda = 1 gives the paper's n-step returns to the rollout's end).
2. `update_epochs` x `num_minibatches` gradient steps on, per minibatch D (Song et al. 2019, eqs. 2-7):
   - E-step: D~ = the top half of D by advantage (`losses.vmpo_top_half`); weights
     psi = softmax_{D~}(A / eta) and the temperature dual L_eta = eta eps_eta + eta log mean_{D~} exp(A / eta)
     (`losses.vmpo_temperature_loss`);
   - M-step: weighted maximum likelihood L_pi = -sum_{D~} psi log pi(a|s) (`losses.vmpo_policy_loss`) under the
     trust region KL(pi_old || pi) <= eps_alpha over all of D, as the Lagrangian
     L_alpha = alpha (eps_alpha - sg(KL)) + sg(alpha) KL (`losses.lagrange_loss`). Gaussian policies constrain
     the mean and the covariance part of the KL separately (`losses.gaussian_kl_decomposed`), each with its own
     multiplier and bound (`epsilon_alpha_mu`, `epsilon_alpha_sigma`); categorical ones the whole KL (`epsilon_alpha`);
   - the value regression vf_coef * 0.5 (V(s) - G)^2 alongside.
   The step minimises L_pi + L_eta + L_alpha + vf_coef L_V in the network and the dual variables at once.

The dual variables live in the params as their own collection, `params["duals"]` (the network reads only
`params["params"]`), log-parameterised: eta = exp(log_temperature), alpha = exp(log_alpha), so they stay positive
and Adam's steps on them are multiplicative, which suits multipliers whose scales differ by orders of magnitude.
They have their own Adam at `dual_learning_rate` (no clipping, no annealing); the network keeps the family's
clipped, annealed optimiser (`optax.multi_transform`). Deviation from the paper: advantages are normalised per
minibatch (`normalize_advantages`) in place of PopArt, which keeps eta's scale independent of the reward's.

Data-parallel (`jaxrl.parallel`): the top half, the weights and L_eta are those of the global minibatch (the
advantages gathered from every device), L_pi sums over it, and the KL and value terms average over it.

A minibatch of more than `minibatch.GRADIENT_CHUNKS_FROM` samples takes its gradient in chunks on a CPU
(`chunked_grad`): the E-step over the whole minibatch first, then the network's terms as means over samples.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import losses, parallel
from jaxrl import minibatch as minibatches
from jaxrl.algos.base import hyper, make_train, shared, static, takes_setup, train  # noqa: F401 (re-exports make_train, train)
from jaxrl.algos.families import actor_critic as ac
from jaxrl.algos.families.actor_critic import TrainState, evaluation_policy  # noqa: F401 (the module's surface)
from jaxrl.minibatch import minibatch_epochs
from jaxrl.networks import ActorCritic
from jaxrl.rollout import episode_metrics


@struct.dataclass
class Config(ac.Config):
    total_timesteps: int = shared("total_timesteps", 500_000)
    update_epochs: int = shared("update_epochs", 4)
    num_minibatches: int = static(4, "minibatches per pass (the E-step's batch); must divide num_envs * num_steps")
    anneal_lr: bool = static(True, "decay the network's learning rate linearly to 0 over the run")
    normalize_advantages: bool = static(True, "normalise advantages within each minibatch (in place of PopArt)")
    learning_rate: float = hyper(2.5e-3, "learning rate of the network")
    dual_learning_rate: float = hyper(1e-2, "Adam learning rate of log eta and log alpha")
    gae_lambda: float = hyper(0.95, "GAE lambda (1: n-step returns to the rollout's end)")
    vf_coef: float = shared("vf_coef", 0.5)
    epsilon_eta: float = hyper(0.1, "E-step: the temperature dual's KL bound eps_eta")
    epsilon_alpha: float = hyper(0.01, "M-step trust region KL(pi_old || pi) <= eps_alpha (categorical policies)")
    epsilon_alpha_mu: float = hyper(0.01, "M-step bound on the mean part of the Gaussian KL")
    epsilon_alpha_sigma: float = hyper(1e-4, "M-step bound on the covariance part of the Gaussian KL")
    init_temperature: float = hyper(1.0, "initial temperature eta")
    init_alpha: float = hyper(5.0, "initial Lagrange multiplier(s) alpha")


def validate(config: Config) -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run."""
    ac.validate(config)


def init_duals(config: Config, discrete: bool) -> dict[str, jax.Array]:
    """log eta, and log alpha (categorical) or log alpha_mu, log alpha_sigma (Gaussian)."""
    names = ("log_alpha",) if discrete else ("log_alpha_mu", "log_alpha_sigma")
    log_alpha = jnp.log(jnp.asarray(config.init_alpha, jnp.float32))
    return {"log_temperature": jnp.log(jnp.asarray(config.init_temperature, jnp.float32))} | dict.fromkeys(
        names, log_alpha
    )


def labels(params) -> dict:
    """ "duals" on `params["duals"]`, "network" on every other collection (for `optax.multi_transform`)."""
    return {k: jax.tree.map(lambda _: "network", v) for k, v in params.items() if k != "duals"} | {
        "duals": jax.tree.map(lambda _: "duals", params["duals"])
    }


def make_optimizer(config: Config) -> optax.GradientTransformation:
    """The family's optimiser (`ac.make_optimizer`) on `params["params"]`, Adam at dual_learning_rate on the duals."""
    return optax.multi_transform(
        {
            "network": ac.make_optimizer(config),
            "duals": parallel.average_gradients(optax.adam(config.dual_learning_rate)),
        },
        labels,
    )


setup = ac.setup  # the env batch and the actor-critic network


@takes_setup
def init(setup: ac.Setup, config: Config, key: jax.Array) -> TrainState:
    """`actor_critic.init` with the dual variables in `params["duals"]` and the optimiser of `make_optimizer`."""
    state = ac.init(setup, config, key, optimizer=optax.identity())
    params = {**state.params, "duals": init_duals(config, setup.env.spec.discrete)}
    return state.replace(params=params, opt_state=make_optimizer(config).init(params))


def old_policy(network: ActorCritic, params, obs: jax.Array) -> dict[str, jax.Array]:
    """What the trust region needs of pi_old on each state: its logits, or its Gaussian mean and std."""
    dist = network.apply(params, obs, method=ActorCritic.policy)
    if network.discrete:
        return {"old_logits": dist.logits}
    return {"old_mean": dist.loc, "old_std": jnp.broadcast_to(dist.scale_diag, dist.loc.shape)}


def trust_region(network: ActorCritic, config: Config, dist, duals, batch, mean=None) -> tuple[jax.Array, dict]:
    """sum of L_alpha over the constraints: the categorical KL, or the Gaussian's mean and covariance parts.
    `mean`: the mean over the valid samples (default the masked mean; `losses.valid_mean`)."""
    mean = mean or losses.valid_mean(batch["mask"])
    if network.discrete:
        import distrax  # on first use, as in jaxrl.networks.heads

        kl = mean(distrax.Categorical(logits=batch["old_logits"]).kl_divergence(dist))
        alpha = jnp.exp(duals["log_alpha"])
        return losses.lagrange_loss(alpha, kl, config.epsilon_alpha), {"kl": kl, "alpha": alpha}
    kl_mu, kl_sigma = losses.gaussian_kl_decomposed(batch["old_mean"], batch["old_std"], dist.loc, dist.scale_diag)
    kl_mu, kl_sigma = mean(kl_mu), mean(kl_sigma)
    alpha_mu, alpha_sigma = jnp.exp(duals["log_alpha_mu"]), jnp.exp(duals["log_alpha_sigma"])
    loss = losses.lagrange_loss(alpha_mu, kl_mu, config.epsilon_alpha_mu)
    loss = loss + losses.lagrange_loss(alpha_sigma, kl_sigma, config.epsilon_alpha_sigma)
    stats = {
        "kl": kl_mu + kl_sigma,
        "kl_mu": kl_mu,
        "kl_sigma": kl_sigma,
        "alpha_mu": alpha_mu,
        "alpha_sigma": alpha_sigma,
    }
    return loss, stats


def e_step(config: Config, duals, batch: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(L_eta, psi of this device's samples, eta) over the global minibatch: every device selects and weighs on
    every device's advantages (normalised where the Config asks), the same L_eta on each."""
    mask, advantages = batch["mask"], batch["advantages"]
    if config.normalize_advantages:
        advantages = parallel.normalize(advantages, mask)
    every_advantage = parallel.gather(advantages)
    selected = losses.vmpo_top_half(every_advantage, parallel.gather(mask))
    temperature = jnp.exp(duals["log_temperature"])
    temperature_loss, every_weight = losses.vmpo_temperature_loss(
        temperature, every_advantage, selected, config.epsilon_eta
    )
    return temperature_loss, parallel.own_block(every_weight, advantages.shape[0]), temperature


def loss_fn(params, network: ActorCritic, config: Config, batch: dict[str, jax.Array]):
    """L_pi + L_eta + L_alpha + vf_coef L_V on one minibatch (the module docstring's equations)."""
    mask, duals = batch["mask"], params["duals"]
    dist, values = network.apply(params, batch["obs"])
    temperature_loss, weights, temperature = e_step(config, duals, batch)  # L_pi sums over every device's samples
    policy_loss = parallel.share_of_sum(losses.vmpo_policy_loss(dist.log_prob(batch["actions"]), weights))
    alpha_loss, kl_stats = trust_region(network, config, dist, duals, batch)
    value_loss = losses.masked_mean(losses.value_loss(values, batch["targets"]), mask)
    total = policy_loss + temperature_loss + alpha_loss + config.vf_coef * value_loss
    stats = {
        "policy_loss": policy_loss,
        "temperature_loss": temperature_loss,
        "alpha_loss": alpha_loss,
        "value_loss": value_loss,
        "temperature": temperature,
        "entropy": losses.masked_mean(dist.entropy(), mask),
        **kl_stats,
    }
    return total, stats


def sample_mean_loss(params, network: ActorCritic, config: Config, batch: dict[str, jax.Array]):
    """L_pi + L_alpha + vf_coef L_V as a mean over samples, which chunks of them can average: `batch` holds the
    E-step's weights as per-sample terms ("scaled_weights", n psi: the mean of n psi log pi is the sum of
    psi log pi) and the samples' `losses.mask_weights` ("weights"). L_eta is the whole minibatch's (`chunked_grad`)."""
    mean = losses.valid_mean(batch["mask"], batch["weights"])
    dist, values = network.apply(params, batch["obs"])
    log_prob = dist.log_prob(batch["actions"])
    policy_loss = parallel.share_of_sum(-jnp.mean(batch["scaled_weights"] * log_prob))
    alpha_loss, kl_stats = trust_region(network, config, dist, params["duals"], batch, mean)
    value_loss = mean(losses.value_loss(values, batch["targets"]))
    total = policy_loss + alpha_loss + config.vf_coef * value_loss
    stats = {
        "policy_loss": policy_loss,
        "alpha_loss": alpha_loss,
        "value_loss": value_loss,
        "entropy": mean(dist.entropy()),
        **kl_stats,
    }
    return total, stats


def chunked_grad(network: ActorCritic, config: Config):
    """`grad(params, minibatch) -> (grads, stats)` of `loss_fn`, its network's terms taken over chunks of
    `minibatch.GRADIENT_CHUNK_ROWS` samples (`minibatch.gradient_in_chunks`): the E-step (the top half, psi and
    L_eta's gradient in log eta) over the whole minibatch first, then `sample_mean_loss` in chunks."""
    in_chunks = minibatches.gradient_in_chunks(
        jax.grad(lambda p, b: sample_mean_loss(p, network, config, b), has_aux=True), minibatches.GRADIENT_CHUNK_ROWS
    )

    def grad(params, batch):
        def temperature_loss(log_temperature):
            loss, weights, temperature = e_step(config, {"log_temperature": log_temperature}, batch)
            return loss, (weights, temperature)

        log_temperature = params["duals"]["log_temperature"]
        (l_eta, (weights, temperature)), d_eta = jax.value_and_grad(temperature_loss, has_aux=True)(log_temperature)
        mask = batch["mask"]
        weighted = {**batch, "scaled_weights": weights * mask.size, "weights": losses.mask_weights(mask)}
        grads, stats = in_chunks(params, weighted)
        duals = {**grads["duals"], "log_temperature": grads["duals"]["log_temperature"] + d_eta}
        return {**grads, "duals": duals}, {**stats, "temperature_loss": l_eta, "temperature": temperature}

    return grad


@takes_setup
def update(setup: ac.Setup, config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration: rollout, GAE, `update_epochs` x `num_minibatches` V-MPO steps (E-step, M-step, duals, value)."""
    network = setup.network
    key, rollout_key, shuffle_key = jax.random.split(state.key, 3)
    rollout = setup.collect(config, state, rollout_key)
    traj = rollout.traj
    batch = ac.rollout_batch(traj, *ac.gae(config, traj)) | old_policy(network, state.params, traj.obs)

    def grad_fn(params, minibatch):
        grads, stats = jax.grad(loss_fn, has_aux=True)(params, network, config, minibatch)
        return grads, stats

    if config.num_envs * config.num_steps // config.num_minibatches > minibatches.GRADIENT_CHUNKS_FROM:
        grad_fn = chunked_grad(network, config)

    params, opt_state, stats = minibatch_epochs(
        grad_fn,
        make_optimizer(config),
        state.params,
        state.opt_state,
        batch,
        shuffle_key,
        config.update_epochs,
        config.num_minibatches,
    )
    stats = jax.tree.map(jnp.mean, stats)
    stats["step_kl"] = ac.policy_kl(network, state.params, params, batch["obs"], batch["mask"])
    metrics = {**episode_metrics(traj), **stats}
    return setup.next_state(state, params, opt_state, rollout, key), metrics
