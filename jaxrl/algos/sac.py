"""Soft Actor-Critic (Haarnoja, Zhou, Abbeel & Levine 2018, "Soft Actor-Critic: Off-Policy Maximum Entropy Deep
Reinforcement Learning with a Stochastic Actor"; automatic temperature from Haarnoja et al. 2018, "Soft
Actor-Critic Algorithms and Applications"): a tanh-squashed Gaussian policy, twin soft Q critics with Polyak
targets, and a temperature alpha tuned toward a target entropy.

Each gradient step, on a replayed batch (actions normalised to [-1, 1]^A; the family module
`jaxrl.algos.families.off_policy` holds the iteration, the replay, the critic targets and Polyak updates):

1. Critics: Q_k(o, a) regress on y = r + gamma (1 - terminated) (min_k Q'_k(o', a') - alpha log pi(a'|o')),
   a' ~ pi(.|o') (the soft Bellman backup with clipped double Q).
2. Actor: minimise E_a~pi [alpha log pi(a|o) - min_k Q_k(o, a)] through the reparameterised sample
   a = tanh(mean + std eps) (with the just-updated critics).
3. Temperature (with `autotune`): minimise -log(alpha) (log pi(a|o) + target_entropy) with log pi held fixed,
   i.e. the gradient on log alpha is -(log pi + target_entropy) = entropy - target_entropy: alpha shrinks while
   the policy's entropy -E log pi is above the target and grows while it is below. target_entropy =
   -target_entropy_scale * |A| (the paper's heuristic -|A| at scale 1).
4. The critics' targets move by tau.

log pi of the squashed sample is log N(u) - sum_i log(1 - tanh(u_i)^2)
(`networks.squashed_gaussian`, distrax's Tanh bijector), the density of the normalised action.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import config_rules, envs, parallel
from jaxrl.algos.base import check, hyper, make_train, static, takes_setup, train  # noqa: F401 (re-exports make_train, train)
from jaxrl.algos.families import off_policy
from jaxrl.networks import GaussianActor, squashed_gaussian

TrainState = off_policy.TrainState
Setup = off_policy.Setup


@struct.dataclass
class Config(off_policy.Config):
    autotune: bool = static(True, "tune the temperature alpha toward the target entropy (else alpha stays fixed)")
    alpha: float = hyper(1.0, "entropy temperature: its initial value with autotune, else the fixed value")
    alpha_learning_rate: float = hyper(1e-3, "Adam learning rate of log(alpha)")
    target_entropy_scale: float = hyper(1.0, "target entropy = -target_entropy_scale * |A| (nats)")


def validate(config: Config) -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run."""
    off_policy.validate(config, config_rules.sac)
    check(isinstance(config.autotune, bool), "autotune", f"got {config.autotune!r}, must be True or False.")


def setup(config: Config) -> Setup:
    """The env in normalised actions, a GaussianActor (mean and log std of the pre-squash Gaussian) and the
    critics."""
    return off_policy.setup(config, GaussianActor)


def optimizers(config: Config) -> dict[str, optax.GradientTransformation]:
    log_alpha = parallel.average_gradients(optax.adam(config.alpha_learning_rate))
    return {**off_policy.optimizers(config), "log_alpha": log_alpha}


def target_entropy(config: Config, action_dim: int):
    return -config.target_entropy_scale * action_dim


@takes_setup
def init(setup: Setup, config: Config, key: jax.Array) -> TrainState:
    log_alpha = jnp.log(jnp.asarray(config.alpha, jnp.float32))
    return off_policy.init(setup, config, key, optimizers(config), {"log_alpha": log_alpha}, target_actor=False)


def policy(networks: off_policy.Networks, actor_params, obs: jax.Array):
    """pi(.|o): the tanh-squashed Gaussian on (-1, 1)^A."""
    return squashed_gaussian(*networks.actor.apply(actor_params, obs))


def explore(config: Config, networks: off_policy.Networks, params):
    """Samples of the current policy (and their log-probabilities)."""

    def act(obs, key):
        return policy(networks, params["actor"], obs).sample_and_log_prob(seed=key)

    return act


def gradient_step(config: Config, networks: off_policy.Networks, state: TrainState, batch, key):
    """Critics, then actor, then temperature, then the critics' targets (see the module docstring)."""
    optimizer = optimizers(config)
    params = state.params
    alpha = jnp.exp(params["log_alpha"])
    next_key, actor_key = jax.random.split(key)

    next_action, next_log_prob = policy(networks, params["actor"], batch["next_obs"]).sample_and_log_prob(seed=next_key)
    next_q = networks.critic.apply(state.target_params["critic"], batch["next_obs"], next_action).min(0)
    y = off_policy.critic_targets(batch, next_q - alpha * next_log_prob, config.gamma)
    critic, critic_opt, loss_q, q = off_policy.fit_critics(
        networks, params["critic"], state.opt_state["critic"], optimizer["critic"], batch, y
    )

    def actor_loss(actor):
        action, log_prob = policy(networks, actor, batch["obs"]).sample_and_log_prob(seed=actor_key)
        q_pi = networks.critic.apply(critic, batch["obs"], action).min(0)
        return jnp.mean(alpha * log_prob - q_pi), log_prob

    (loss_pi, log_prob), grads = jax.value_and_grad(actor_loss, has_aux=True)(params["actor"])
    actor, actor_opt = off_policy.apply_gradients(optimizer["actor"], params["actor"], state.opt_state["actor"], grads)

    entropy_target = target_entropy(config, batch["actions"].shape[-1])
    log_alpha, alpha_opt = params["log_alpha"], state.opt_state["log_alpha"]
    alpha_loss = temperature_loss(log_alpha, log_prob, entropy_target)
    if config.autotune:
        grad = jax.grad(temperature_loss)(log_alpha, log_prob, entropy_target)
        log_alpha, alpha_opt = off_policy.apply_gradients(optimizer["log_alpha"], log_alpha, alpha_opt, grad)

    state = state.replace(
        params={"actor": actor, "critic": critic, "log_alpha": log_alpha},
        target_params={"critic": off_policy.polyak(critic, state.target_params["critic"], config.tau)},
        opt_state={"actor": actor_opt, "critic": critic_opt, "log_alpha": alpha_opt},
        gradient_steps=state.gradient_steps + 1,
    )
    stats = {
        "critic_loss": loss_q,
        "actor_loss": loss_pi,
        "alpha_loss": alpha_loss,
        "q_mean": q.mean(),
        "entropy": -log_prob.mean(),
    }
    return state, stats


def temperature_loss(log_alpha: jax.Array, log_prob: jax.Array, entropy_target) -> jax.Array:
    """-log(alpha) E[log pi(a|o) + target_entropy] with log pi fixed (Haarnoja et al. 2018b, eq. 18, in log alpha,
    as SB3 does): its gradient on log alpha is (entropy - target_entropy)."""
    return -jnp.mean(log_alpha * jax.lax.stop_gradient(log_prob + entropy_target))


@takes_setup
def update(setup: Setup, config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration: collect `num_steps` steps of every env from the policy, then `updates_per_iteration` SAC
    gradient steps."""
    state, metrics = off_policy.update(setup, config, state, gradient_step, explore)
    return state, {**metrics, "alpha": jnp.exp(state.params["log_alpha"])}


def evaluation_policy(setup: Setup, config: Config, state: TrainState, deterministic: bool = True):
    """tanh(mean) (deterministic) or a policy sample, scaled to the env's bounds."""
    networks, spec = setup.networks, setup.env.spec

    def act(obs, key):
        mean, log_std = networks.actor.apply(state.params["actor"], obs)
        u = jnp.tanh(mean) if deterministic else squashed_gaussian(mean, log_std).sample(seed=key)
        return envs.scale_action(u, spec)

    return act, envs.observation_normalizer(state.env.state)
