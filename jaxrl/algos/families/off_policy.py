"""The continuous-control off-policy actor-critic family (DDPG, TD3, SAC: `jaxrl.algos.ddpg`, `td3`, `sac`): the
config fields, the training state, the setup (the env in normalised actions, the actor and the critics), the
iteration, critic targets, Polyak target updates, and the deterministic-policy-gradient step, exploration and
evaluation policy of DDPG and TD3.

One iteration (`update`) is DQN's replay loop (`jaxrl.algos.families.replay_loop`): every one of `num_envs` envs takes
`num_steps` steps (uniformly random actions until `learning_starts` env steps have been collected, then the
algorithm's exploration policy); the transitions with their true successor observations go into the replay
buffer (`jaxrl.replay`); once `learning_starts` env steps are in, `updates_per_iteration` gradient steps each fit
the critics and the actor on a uniformly sampled batch of `replay_batch_size` transitions and move the target
networks by Polyak averaging. The algorithm supplies its gradient step and its exploration policy; everything
else is here.

Actions: the networks, the replay and the losses work in the normalised box [-1, 1]^A; `envs.ScaleAction` maps an
action u to the env's a = low + (u + 1) (high - low) / 2 as it is applied, so every algorithm is right for any
Box bounds and exploration noise is in fractions of the half-range.

Bootstrapping: a transition stores its true successor observation (`info["final_observation"]`), so a truncated
step (Pendulum's 200-step time limit) bootstraps from it and only a terminated one uses 0:
y = r + gamma (1 - terminated) V'(o').
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import envs, estimators, parallel, replay
from jaxrl.algos import base
from jaxrl.algos.base import (
    check,
    check_common,
    hyper,
    shared,
    static,
    takes_setup,
)
from jaxrl.algos.families import replay_loop
from jaxrl.losses import critic_loss
from jaxrl.networks import Critics, DeterministicActor, MLPTorso
from jaxrl.rollout import EnvCarry, episode_metrics, reset


@struct.dataclass
class Config(base.Config):
    """The fields every continuous off-policy algorithm has; `ddpg.Config`, `td3.Config` and `sac.Config` add
    their own (and may change defaults)."""

    env: str = static("Pendulum-v1", "gymnax environment id (continuous, Box actions)")
    num_envs: int = shared("num_envs", 4)
    num_steps: int = static(4, "env steps per environment per iteration (the train frequency)")
    total_timesteps: int = shared("total_timesteps", 20_000)
    buffer_size: int = static(100_000, "replay capacity in transitions; a multiple of num_envs")
    replay_batch_size: int = static(128, "transitions per gradient step (a sampled replay batch)")
    updates_per_iteration: int = static(16, "gradient steps per iteration (per num_envs * num_steps env steps)")
    learning_starts: int = static(1_000, "env steps of uniformly random actions before the first gradient step")
    num_critics: int = static(2, "Q-networks; targets take their minimum (clipped double Q-learning; 1: DDPG)")
    hidden_sizes: tuple[int, ...] = static((64, 64), "hidden layer sizes of the actor and the critics")
    activation: str = shared("activation", "relu")
    critic_layer_norm: bool = static(False, "LayerNorm before each hidden activation of the critics")
    actor_learning_rate: float = hyper(1e-3, "Adam learning rate of the actor")
    critic_learning_rate: float = hyper(1e-3, "Adam learning rate of the critics")
    gamma: float = shared("gamma", 0.99)
    tau: float = hyper(0.005, "Polyak step of the target networks: target <- tau online + (1 - tau) target")


@struct.dataclass
class DPGConfig(Config):
    """The family fields plus what the deterministic-policy-gradient algorithms (DDPG, TD3) share."""

    exploration_noise: float = hyper(0.1, "std of the Gaussian exploration noise, in units of the half-range")


@struct.dataclass
class TrainState:
    params: dict[str, Any]  # "actor", "critic" (critic leaves stacked [num_critics, ...]); SAC adds "log_alpha"
    target_params: dict[str, Any]  # "critic" and, for deterministic actors, "actor"
    opt_state: dict[str, optax.OptState]  # one Adam state per entry of `params`
    buffer: replay.ReplayState | None  # None inside the gradient-step scan (it does not change there)
    env: EnvCarry
    key: jax.Array
    iteration: jax.Array
    gradient_steps: jax.Array  # gradient steps taken so far (TD3's policy delay counts them)


class Networks(NamedTuple):
    actor: nn.Module
    critic: Critics


@struct.dataclass
class Setup:
    """The static pieces of a Config, built once by `setup`: the env batch in normalised actions and the
    networks."""

    env: envs.ScaleAction = struct.field(pytree_node=False)
    networks: Networks = struct.field(pytree_node=False)


# (config, networks, state without buffer, batch [B, ...], key) -> (state, stats)
GradientStep = Callable[[Any, Networks, TrainState, dict, jax.Array], tuple[TrainState, dict]]
# (config, networks, params) -> act(obs [N, ...], key) -> (normalised action [N, A], log_prob [N])
Explore = Callable[[Any, Networks, dict], Callable]


def make_env(config: Config) -> envs.ScaleAction:
    """`num_envs` copies of the env taking actions in [-1, 1]^A (the family's one place that builds its env)."""
    return envs.ScaleAction(envs.make(config.env, config.num_envs, axis_name=parallel.axis_name()))


def make_critic(config: Config, spec: envs.EnvSpec) -> Critics:
    torso = MLPTorso(config.hidden_sizes, config.activation, config.critic_layer_norm, len(spec.observation_shape))
    return Critics(config.num_critics, torso)


def make_networks(config: Config, spec: envs.EnvSpec, actor: type[nn.Module] = DeterministicActor) -> Networks:
    """`actor(action_dim, MLP torso)` (DeterministicActor for DDPG / TD3, GaussianActor for SAC) and the critics."""
    obs_ndim = len(spec.observation_shape)
    head = actor(spec.action_dim, MLPTorso(config.hidden_sizes, config.activation, False, obs_ndim))
    return Networks(head, make_critic(config, spec))


def setup(config: Config, actor: type[nn.Module] = DeterministicActor) -> Setup:
    """The env (`make_env`) and the networks (`make_networks` with `actor`) of `config`."""
    env = make_env(config)
    return Setup(env, make_networks(config, env.spec, actor))


def validate(config: Config, rules) -> None:
    """The checks the family shares: `check_common` with the algorithm's `rules` (`jaxrl.config_rules.td3`, ...:
    a buffer that holds a rollout per env, continuous actions), and positive hidden sizes."""
    check_common(config, rules)
    check(
        all(isinstance(h, int) and h >= 1 for h in config.hidden_sizes),
        "hidden_sizes",
        f"got {config.hidden_sizes!r}, must be positive integers.",
    )


def optimizers(config: Config) -> dict[str, optax.GradientTransformation]:
    """Adam (optax's defaults) for the actor and for the critics (their own learning rates; no clipping, no
    annealing)."""
    adam = {"actor": optax.adam(config.actor_learning_rate), "critic": optax.adam(config.critic_learning_rate)}
    return {name: parallel.average_gradients(tx) for name, tx in adam.items()}


@takes_setup
def init(
    setup: Setup,
    config: Config,
    key: jax.Array,
    optimizers: dict[str, optax.GradientTransformation],
    extra_params: dict[str, Any] | None = None,
    target_actor: bool = True,
) -> TrainState:
    """Fresh networks (plus `extra_params`, e.g. SAC's log temperature), targets equal to them (the actor's only
    with `target_actor`), one optimizer state per entry of `optimizers`, an empty replay and reset envs."""
    env, networks = setup.env, setup.networks
    key, actor_key, critic_key, env_key = jax.random.split(key, 4)
    carry = reset(env, env_key)
    action = jnp.zeros((1, env.spec.action_dim), jnp.float32)
    params = {
        "actor": networks.actor.init(actor_key, carry.obs[:1]),
        "critic": networks.critic.init(critic_key, carry.obs[:1], action),
        **(extra_params or {}),
    }
    target_params = {"critic": params["critic"], **({"actor": params["actor"]} if target_actor else {})}
    opt_state = {name: optimizer.init(params[name]) for name, optimizer in optimizers.items()}
    item = {
        "obs": carry.obs[0],
        "actions": action[0],
        "rewards": jnp.zeros((), jnp.float32),
        "terminated": jnp.zeros((), bool),
        "next_obs": carry.obs[0],
    }
    buffer = replay.init(item, config.num_envs, config.buffer_size)
    zero = jnp.zeros((), jnp.int32)
    return TrainState(params, target_params, opt_state, buffer, carry, key, zero, zero)


def uniform_act(action_dim: int):
    """Uniform actions on [-1, 1]^A (the warm-up before `learning_starts`); log_prob is that of the uniform."""

    def act(obs, key):
        action = jax.random.uniform(key, obs.shape[:1] + (action_dim,), jnp.float32, -1.0, 1.0)
        return action, jnp.full(obs.shape[:1], -action_dim * jnp.log(2.0))

    return act


@takes_setup
def update(
    setup: Setup,
    config: Config,
    state: TrainState,
    gradient_step: GradientStep,
    explore: Explore,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration of the replay loop (`replay_loop.iteration`): `num_steps` steps of every env (uniform before
    `learning_starts` env steps, else `explore`) into the replay, then, once `learning_starts` env steps are in,
    `updates_per_iteration` `gradient_step`s on uniformly sampled batches. Metrics: the episodes completed in the
    iteration and the gradient steps' stats averaged (zeros before learning starts)."""
    env, networks = setup.env, setup.networks
    warmup = state.iteration * config.env_steps_per_iteration < config.learning_starts
    policy, random = explore(config, networks, state.params), uniform_act(env.spec.action_dim)

    def act(obs, key):
        return select(warmup, random(obs, key), policy(obs, key))

    def learning(buffer):  # the buffer does not change in the gradient steps: they carry the state without it
        def step(learner, step_key):
            sample_key, step_key = jax.random.split(step_key)
            batch = jax.tree.map(lambda x: x[0], replay.sample(buffer, sample_key, config.replay_batch_size))
            return gradient_step(config, networks, learner, batch, step_key)

        return state.replace(buffer=None), step

    def store(traj):
        return replay.add(state.buffer, transitions(traj))

    out = replay_loop.iteration(config, env, act, state.env, state.key, state.iteration, store, learning)
    state = out.learner.replace(buffer=out.buffer, env=out.env, key=out.key, iteration=state.iteration + 1)
    return state, {**episode_metrics(out.traj), **out.stats}


def transitions(traj) -> dict[str, jax.Array]:
    """What the replay stores of each step: (o_t, u_t in [-1, 1]^A, r_t, terminated, true o_{t+1})."""
    return {name: getattr(traj, name) for name in ("obs", "actions", "rewards", "terminated", "next_obs")}


def select(flag: jax.Array, on_true, on_false):
    """Leaf-wise `jnp.where(flag, on_true, on_false)` of two pytrees of one structure."""
    return jax.tree.map(functools.partial(jnp.where, flag), on_true, on_false)


# ---------------------------------------------------------------------------------------------------------------
# Critic targets and target-network updates
# ---------------------------------------------------------------------------------------------------------------


def critic_targets(batch: dict[str, jax.Array], next_value: jax.Array, gamma) -> jax.Array:
    """y = r + gamma (1 - terminated) V'(o') [B] (`estimators.td_targets` with a length-1 time axis)."""
    rewards, terminated = batch["rewards"][None], batch["terminated"][None]
    return estimators.td_targets(rewards, next_value[None], terminated, gamma)[0]


def fit_critics(networks: Networks, critic, opt_state, optimizer, batch: dict[str, jax.Array], y: jax.Array):
    """One optimizer step of every critic Q_k on `losses.critic_loss` towards the targets y [B]:
    (critic, opt_state, loss, q [K, B])."""

    def q_loss(critic):
        q = networks.critic.apply(critic, batch["obs"], batch["actions"])
        return critic_loss(q, y), q

    (loss, q), grads = jax.value_and_grad(q_loss, has_aux=True)(critic)
    critic, opt_state = apply_gradients(optimizer, critic, opt_state, grads)
    return critic, opt_state, loss, q


def polyak(online, target, tau):
    """target <- tau online + (1 - tau) target (`optax.incremental_update`)."""
    return optax.incremental_update(online, target, tau)


def apply_gradients(optimizer: optax.GradientTransformation, params, opt_state, grads):
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state


# ---------------------------------------------------------------------------------------------------------------
# DDPG / TD3: deterministic policy gradient with target networks
# ---------------------------------------------------------------------------------------------------------------


@takes_setup
def dpg_init(setup: Setup, config: DPGConfig, key: jax.Array) -> TrainState:
    """`init` with Adam for actor and critics, and target networks of both."""
    return init(setup, config, key, optimizers(config))


def dpg_step(
    config: Config,
    networks: Networks,
    state: TrainState,
    batch: dict[str, jax.Array],
    key: jax.Array,
    *,
    policy_noise=0.0,
    noise_clip=0.0,
    policy_delay: int = 1,
) -> tuple[TrainState, dict[str, jax.Array]]:
    """One gradient step of DDPG (Lillicrap et al. 2016) or, with TD3's additions (Fujimoto et al. 2018),
    of TD3, on a batch of transitions [B, ...]:

    1. Critics: each Q_k regresses on y = r + gamma (1 - terminated) min_k Q'_k(o', a'), with the target actor's
       a' = clip(mu'(o') + clip(eps, -noise_clip, noise_clip), -1, 1), eps ~ N(0, policy_noise^2) (target policy
       smoothing; DDPG: policy_noise 0 and one critic, so y = r + gamma (1 - terminated) Q'(o', mu'(o'))).
    2. Every `policy_delay`-th step (counting this one; DDPG: every step), the actor ascends
       Q_1(o, mu(o)) of the just-updated first critic (the deterministic policy gradient, Silver et al. 2014),
       and both targets move by Polyak averaging with step tau. In between, actor and targets are unchanged.
    """
    optimizer = optimizers(config)
    params, targets = state.params, state.target_params

    noise = policy_noise * jax.random.normal(key, batch["actions"].shape)
    next_action = networks.actor.apply(targets["actor"], batch["next_obs"])
    next_action = jnp.clip(next_action + jnp.clip(noise, -noise_clip, noise_clip), -1.0, 1.0)
    next_q = networks.critic.apply(targets["critic"], batch["next_obs"], next_action).min(0)
    y = critic_targets(batch, next_q, config.gamma)
    critic, critic_opt, loss_q, q = fit_critics(
        networks, params["critic"], state.opt_state["critic"], optimizer["critic"], batch, y
    )

    def actor_loss(actor):
        return -networks.critic.apply(critic, batch["obs"], networks.actor.apply(actor, batch["obs"]))[0].mean()

    steps = state.gradient_steps + 1

    def improve(actor_and_opt):
        actor, actor_opt = actor_and_opt
        loss, grads = jax.value_and_grad(actor_loss)(actor)
        actor, actor_opt = apply_gradients(optimizer["actor"], actor, actor_opt, grads)
        moved = polyak({"actor": actor, "critic": critic}, targets, config.tau)
        return actor, actor_opt, moved, loss

    def keep(actor_and_opt):
        actor, actor_opt = actor_and_opt
        return actor, actor_opt, targets, actor_loss(actor)

    actor, actor_opt, targets, loss_pi = jax.lax.cond(
        steps % policy_delay == 0, improve, keep, (params["actor"], state.opt_state["actor"])
    )
    state = state.replace(
        params={**params, "actor": actor, "critic": critic},
        target_params=targets,
        opt_state={**state.opt_state, "actor": actor_opt, "critic": critic_opt},
        gradient_steps=steps,
    )
    return state, {"critic_loss": loss_q, "actor_loss": loss_pi, "q_mean": q.mean()}


def gaussian_explore(config: DPGConfig, networks: Networks, params) -> Callable:
    """DDPG / TD3 exploration: u = clip(mu(o) + N(0, sigma^2), -1, 1) with sigma = `exploration_noise`
    (Gaussian noise, as Fujimoto et al. 2018 found as good as Lillicrap et al.'s Ornstein-Uhlenbeck process)."""
    sigma = config.exploration_noise

    def act(obs, key):
        mu = networks.actor.apply(params["actor"], obs)
        action = jnp.clip(mu + sigma * jax.random.normal(key, mu.shape), -1.0, 1.0)
        return action, jnp.zeros(obs.shape[:1], jnp.float32)

    return act


def dpg_evaluation_policy(setup: Setup, config: DPGConfig, state: TrainState, deterministic: bool = True):
    """`(act(obs, key) -> env action, normalize)` for `jaxrl.episodes.evaluate`: mu(o) scaled to the env's bounds, plus
    the exploration noise when not `deterministic`."""
    networks, spec = setup.networks, setup.env.spec
    explore = gaussian_explore(config, networks, state.params)

    def act(obs, key):
        u = networks.actor.apply(state.params["actor"], obs) if deterministic else explore(obs, key)[0]
        return envs.scale_action(u, spec)

    return act, envs.observation_normalizer(state.env.state)
