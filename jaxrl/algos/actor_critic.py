"""The on-policy actor-critic family: what PPO, A2C, REINFORCE, TRPO, IMPALA and GRPO share.

- `Config`: the fields of a learner that steps one batch of `num_envs` environments `num_steps` per iteration
  with an actor-critic MLP (PPO, A2C, REINFORCE, TRPO, IMPALA subclass it; a subclass redeclares a field only
  to change its default or help). GRPO's and DPO's members are groups of 1-env rollouts, so their `num_envs`
  and `num_steps` are derived properties of `GroupConfig`, which subclasses `base.Config` directly; the
  functions here read only the fields they name.
- `validate`: the checks the family shares, and one valid range per field wherever a Config has that field.
- The env, the network (`ActorCritic` on the torso `Config.torso` names), the rollout's behaviour policy, the
  evaluation policy, the optimiser (`optim.clipped_optimizer` at `optim.learning_rate_schedule`, per iteration)
  and `init`.
- The masked actor-critic loss (the importance-weighted policy gradient, an entropy bonus and a value
  regression over a validity mask) and its minibatch step (A2C, REINFORCE), masked advantage normalisation
  and the exact KL between two parameter sets.
- Grouped collection (GRPO, DPO): `GroupConfig`, `time_limit`, `make_group_env`, `init_trunk` and
  `collect_groups` (starts, members, the grouped rollout, the first-episode mask and the group metrics).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxrl import envs, estimators, lag, losses, optim, parallel
from jaxrl.algos import base
from jaxrl.algos.base import (
    check_choice,
    check_common,
    check_core,
    check_divides,
    check_range,
    check_torso,
    hyper,
    recurrent,
    static,
)
from jaxrl.minibatch import minibatch_epochs, sequence_minibatch_epochs
from jaxrl.networks import ActorCritic, make_torso
from jaxrl.networks.recurrent import RecurrentActorCritic, initial_hidden, make_core
from jaxrl.rollout import (
    EnvCarry,
    RecurrentAct,
    RecurrentCarry,
    Sequences,
    episode_metrics,
    first_episode_mask,
    group_starts,
    grouped_rollout,
    initial_memory,
    no_critic,
    recurrent_rollout,
    repeat_members,
    reset,
    rollout,
)
from jaxrl.types import Trajectory


@struct.dataclass
class Config(base.Config):
    """The fields of the family's learners on one vectorised rollout (PPO, A2C, REINFORCE, TRPO, IMPALA). Each
    declares its own optimisation fields (`update_epochs`, `num_minibatches`, `learning_rate`, `anneal_lr`, ...)
    and redeclares one of these only to change its default or help."""

    num_envs: int = static(16, "parallel environments")
    num_steps: int = static(64, "rollout length T per iteration, per environment")
    torso: str = static("mlp", "observation encoder: mlp, or cnn / cnn_large for image observations [H, W, C]")
    hidden_sizes: tuple[int, ...] = static((64, 64), "hidden layer sizes of the actor and of the critic MLP")
    activation: str = static("tanh", "hidden activation: tanh, relu, gelu or silu")
    bound_mean: bool = static(
        False,
        "continuous actions: keep the Gaussian's mean inside the action box (low + (tanh(x) + 1) (high - low) / 2); "
        "unbounded, a mean that leaves the box gets no gradient back (every clipped sample acts the same)",
    )
    optimizer: str = static("adam", "optimiser after global-norm clipping: adam, rmsprop or radam")
    normalize_observations: bool = static(False, "normalise observations by running mean and std")
    normalize_rewards: bool = static(
        False, "scale the learner's rewards by the running std of the discounted return (episode stats stay raw)"
    )
    gamma: float = hyper(0.99, "discount factor")
    max_grad_norm: float = hyper(0.5, "global gradient-norm clipping threshold")

    @property
    def updates_per_iteration(self) -> int:
        """Gradient steps per iteration: update_epochs * num_minibatches (TRPO: its value regression's)."""
        return self.update_epochs * self.num_minibatches


@struct.dataclass
class TrainState:
    params: Any
    opt_state: optax.OptState
    env: EnvCarry
    key: jax.Array
    iteration: jax.Array
    lagged: lag.ParamsLag | None = None  # IMPALA: the learner's last `behaviour_lag` parameters (None: no lag)
    memory: RecurrentCarry | None = None  # a recurrent policy's hidden state and episode starts (None: no core)


# field: (low, high, low_open), checked wherever a Config has the field
RANGES = {
    "learning_rate": (0.0, None, True),
    "max_grad_norm": (0.0, None, True),
    "clip_eps": (0.0, None, True),
    "gamma": (0.0, 1.0, False),
    "gae_lambda": (0.0, 1.0, False),
    "ent_coef": (0.0, None, False),
    "vf_coef": (0.0, None, False),
}


def validate(
    config,
    positive_ints: tuple[str, ...] = ("num_envs", "num_steps", "update_epochs", "num_minibatches"),
    minibatches: str | None = "num_minibatches",
    what: str = "num_envs * num_steps",
) -> None:
    """The family's checks: `base.check_common` on `positive_ints`, `minibatches` (unless None) divides the
    rollout batch, a known optimiser, and each field of `RANGES` the config has in its range."""
    check_common(config, positive_ints)
    if minibatches is not None:
        check_divides(config, minibatches, what=what)
    check_choice(config, "optimizer", optim.OPTIMIZERS)
    check_torso(config, envs.make(config.env, 1).spec.observation_shape)
    if hasattr(config, "core"):
        check_core(config)
    if getattr(config, "bound_mean", False) and recurrent(config):
        raise ValueError("bound_mean=True applies to the MLP policy only; set core='none' or bound_mean=False.")
    for field, (low, high, low_open) in RANGES.items():
        if hasattr(config, field):
            check_range(config, field, low, high, low_open)


def make_env(config: Config):
    return envs.make(
        config.env,
        config.num_envs,
        normalize_observations=config.normalize_observations,
        normalize_rewards=getattr(config, "normalize_rewards", False),
        reward_gamma=config.gamma,
    )


def torso(config, spec: envs.EnvSpec):
    """The encoder `config.torso` names (`networks.make_torso`): the MLP, or a CNN for image observations."""
    return make_torso(config.torso, config.hidden_sizes, config.activation, False, spec.observation_shape)


def make_network(config, spec: envs.EnvSpec) -> ActorCritic | RecurrentActorCritic:
    """`ActorCritic` on the Config's torso, or `RecurrentActorCritic` (torso -> core -> head) when the Config
    names a recurrent `core`."""
    if recurrent(config):
        return RecurrentActorCritic(spec.action_dim, spec.discrete, torso(config, spec), core(config), spec.action_mask)
    bounds = None
    if getattr(config, "bound_mean", False) and not spec.discrete:
        with jax.ensure_compile_time_eval():  # the box as constants of the module, also under jit
            box = envs.make(config.env, 1).spec
            bounds = (tuple(np.asarray(box.action_low).tolist()), tuple(np.asarray(box.action_high).tolist()))
    return ActorCritic(spec.action_dim, spec.discrete, torso(config, spec), spec.action_mask, bounds)


def policy_of(network, params) -> Callable:
    """`obs -> pi(.|obs)`, the action distribution at `params`."""
    return functools.partial(network.apply, params, method="policy")


def behaviour(network, params) -> tuple[Callable, Callable]:
    """The rollout's policy `act(obs, key) -> (action, log_prob)` and critic `value(obs)` at `params`."""

    def act(obs, key):
        return policy_of(network, params)(obs).sample_and_log_prob(seed=key)

    return act, functools.partial(network.apply, params, method="value")


def evaluation_act(network, params, deterministic: bool = True) -> Callable:
    """`act(obs, key) -> action` of the policy at `params`: its mode when `deterministic`, else a sample."""

    def act(obs, key):
        dist = policy_of(network, params)(obs)
        return dist.mode() if deterministic else dist.sample(seed=key)

    return act


def evaluation_policy(config: Config, state: TrainState, deterministic: bool = True, network=None):
    """`act(obs, key) -> action` of the trained policy and the observation normalisation it was trained with,
    for `jaxrl.run.evaluate.evaluate`."""
    network = make_network(config, make_env(config).spec) if network is None else network
    if recurrent(config):
        act = recurrent_evaluation_act(network, state.params, deterministic)
    else:
        act = evaluation_act(network, state.params, deterministic)
    return act, envs.observation_normalizer(state.env.state)


def make_optimizer(config) -> optax.GradientTransformation:
    """`config.optimizer` after clipping at `max_grad_norm`, at `learning_rate`, annealed per iteration with
    `anneal_lr` (`optim.learning_rate_schedule` over `updates_per_iteration` steps an iteration)."""
    schedule = optim.learning_rate_schedule(
        config.learning_rate, config.anneal_lr, config.updates_per_iteration, config.num_iterations
    )
    return optim.clipped_optimizer(config.optimizer, schedule, config.max_grad_norm)


def init(config: Config, key: jax.Array, network=None, optimizer=None, trainable=None) -> TrainState:
    """Fresh network parameters, env batch and optimiser state (of `trainable(params)`; all by default).
    `network` defaults to `make_network`, `optimizer` to `make_optimizer`."""
    env = make_env(config)
    network = make_network(config, env.spec) if network is None else network
    optimizer = make_optimizer(config) if optimizer is None else optimizer
    key, net_key, env_key = jax.random.split(key, 3)
    carry = reset(env, env_key)
    memory = None
    if recurrent(config):
        memory = initial_memory(initial_hidden(network.core, config.num_envs))
        params = network.init(net_key, initial_hidden(network.core, 1), carry.obs[None, :1], jnp.ones((1, 1), bool))
    else:
        params = network.init(net_key, carry.obs[:1])
    opt_state = optimizer.init(params if trainable is None else trainable(params))
    return TrainState(params, opt_state, carry, key, jnp.zeros((), jnp.int32), memory=memory)


def collect(config: Config, state: TrainState, key: jax.Array) -> tuple[ActorCritic, EnvCarry, Trajectory]:
    """(network, env batch after, trajectory) of `num_steps` steps of the policy at `state.params`, valued by
    its critic."""
    env = make_env(config)
    network = make_network(config, env.spec)
    act, value = behaviour(network, state.params)
    return (network, *rollout(env, act, value, state.env, key, config.num_steps))


def gae(config, traj: Trajectory) -> tuple[jax.Array, jax.Array]:
    """(advantages, value targets) of `estimators.gae` with `config.gamma` and `config.gae_lambda`."""
    return estimators.gae(
        traj.rewards, traj.values, traj.next_values, traj.terminated, traj.truncated, config.gamma, config.gae_lambda
    )


def next_state(state: TrainState, params, opt_state, env: EnvCarry, key: jax.Array) -> TrainState:
    """The state after one iteration."""
    return state.replace(params=params, opt_state=opt_state, env=env, key=key, iteration=state.iteration + 1)


def rollout_batch(traj: Trajectory, advantages: jax.Array, targets: jax.Array, mask=None) -> dict[str, jax.Array]:
    """What the masked actor-critic loss reads of a rollout; `mask` defaults to every step valid."""
    mask = jnp.ones(traj.rewards.shape, bool) if mask is None else mask
    return {
        "obs": traj.obs,
        "actions": traj.actions,
        "log_probs": traj.log_probs,
        "advantages": advantages,
        "targets": targets,
        "mask": mask,
    }


def normalize(x: jax.Array, mask: jax.Array) -> jax.Array:
    """(x - mean) / (std + 1e-8) over the elements where `mask`."""
    mean = parallel.masked_mean(x, mask, losses.masked_mean)  # over every device's elements
    std = jnp.sqrt(parallel.masked_mean(jnp.square(x - mean), mask, losses.masked_mean))
    return (x - mean) / (std + 1e-8)


def actor_critic_loss(params, network: ActorCritic, config, batch: dict[str, jax.Array], critic: bool = True):
    """Masked mean of the policy-gradient loss - ent_coef * entropy (+ vf_coef * 0.5 (V - G)^2 with `critic`).

    The policy term is `losses.policy_gradient_loss`, -rho A with rho = pi / mu from the stored behaviour
    log-probabilities: on the first gradient step of a rollout rho = 1 and its gradient is the score-function
    estimate -A grad log pi; later epochs (if any) stay importance-corrected. `batch` holds obs, actions,
    log_probs, advantages, targets and a validity mask; advantages are normalised over the valid elements when
    `config.normalize_advantages`.
    """
    mask = batch["mask"]
    if critic:
        dist, values = network.apply(params, batch["obs"])
    else:
        dist = network.apply(params, batch["obs"], method=ActorCritic.policy)
    log_prob = dist.log_prob(batch["actions"])
    advantages = batch["advantages"]
    if config.normalize_advantages:
        advantages = normalize(advantages, mask)
    policy_loss = losses.masked_mean(losses.policy_gradient_loss(log_prob, batch["log_probs"], advantages), mask)
    entropy = losses.masked_mean(dist.entropy(), mask)
    total = policy_loss - config.ent_coef * entropy
    value_loss = jnp.zeros(())
    if critic:
        value_loss = losses.masked_mean(losses.value_loss(values, batch["targets"]), mask)
        total = total + config.vf_coef * value_loss
    return total, {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy}


def policy_kl(network: ActorCritic, old_params, new_params, obs: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean over the valid observations of the exact KL(pi_old(.|s) || pi_new(.|s))."""
    old = network.apply(old_params, obs, method=ActorCritic.policy)
    new = network.apply(new_params, obs, method=ActorCritic.policy)
    return losses.masked_mean(old.kl_divergence(new), mask)


def minibatch_updates(config, loss: Callable, params, opt_state, batch, key: jax.Array, num_minibatches=None):
    """`config.update_epochs` passes of `num_minibatches` (default `config.num_minibatches`) shuffled minibatches,
    one `make_optimizer` step each on `loss(params, minibatch) -> (total, stats)`. Returns (params, opt_state,
    stats averaged over the steps)."""
    num_minibatches = config.num_minibatches if num_minibatches is None else num_minibatches
    params, opt_state, stats = minibatch_epochs(
        jax.grad(loss, has_aux=True),
        make_optimizer(config),
        params,
        opt_state,
        batch,
        key,
        config.update_epochs,
        num_minibatches,
    )
    return params, opt_state, jax.tree.map(jnp.mean, stats)


def actor_critic_step(config, network, params, opt_state, batch, key, critic: bool = True):
    """`minibatch_updates` of `actor_critic_loss` (1 x 1: one gradient step on the whole rollout). Returns
    (params, opt_state, stats) with the stats averaged over the steps and `kl`, the exact mean KL from the
    rollout's policy to the updated one on the rollout's states."""

    def loss(p, minibatch):
        return actor_critic_loss(p, network, config, minibatch, critic)

    new_params, opt_state, stats = minibatch_updates(config, loss, params, opt_state, batch, key)
    stats["kl"] = policy_kl(network, params, new_params, batch["obs"], batch["mask"])
    return new_params, opt_state, stats


# ---------------------------------------------------------------------------------------------------------------
# Recurrent policies (a Config with `core` != "none", e.g. PPO's): torso -> core -> heads, the memory carried in
# TrainState.memory across steps and iterations, minibatches of whole environment sequences.
# ---------------------------------------------------------------------------------------------------------------


def core(config):
    """The core `config.core` names, of `config.core_size` units (`networks.recurrent.make_core`)."""
    return make_core(config.core, config.core_size)


def recurrent_behaviour(network: RecurrentActorCritic, params) -> tuple[Callable, Callable]:
    """The recurrent rollout's `step(h, obs, start, key) -> (h', action, log_prob, value)` and critic
    `value(h, obs, start) -> V` at `params` (`rollout.recurrent_rollout`), one step each (T = 1)."""

    def step(hidden, obs, start, key):
        hidden, dist, value = network.apply(params, hidden, obs[None], start[None])
        action, log_prob = dist.sample_and_log_prob(seed=key)
        return hidden, action[0], log_prob[0], value[0]

    def value(hidden, obs, start):
        h_critic = hidden[1]
        return network.apply(params, h_critic, obs[None], start[None], method="value")[1][0]

    return step, value


def collect_recurrent(
    config, state: TrainState, key: jax.Array
) -> tuple[RecurrentActorCritic, EnvCarry, RecurrentCarry, Trajectory, Sequences]:
    """(network, env batch after, memory after, trajectory, sequences) of `num_steps` steps of the recurrent policy
    at `state.params` from `state.memory` (`rollout.recurrent_rollout`)."""
    env = make_env(config)
    network = make_network(config, env.spec)
    step, value = recurrent_behaviour(network, state.params)
    return (network, *recurrent_rollout(env, step, value, state.env, state.memory, key, config.num_steps))


def recurrent_evaluation_act(network: RecurrentActorCritic, params, deterministic: bool = True) -> RecurrentAct:
    """The actor alone with its memory (`rollout.RecurrentAct`): the mode when `deterministic`, else a sample."""

    def step(h, obs, start, key):
        h, dist = network.apply(params, h, obs[None], start[None], method="policy")
        action = dist.mode() if deterministic else dist.sample(seed=key)
        return h, action[0]

    return RecurrentAct(step, lambda batch: initial_hidden(network.core, batch)[0])


def sequence_minibatch_updates(config, loss: Callable, params, opt_state, steps, initial, key: jax.Array):
    """`minibatch_updates` over whole environment sequences (`minibatch.sequence_minibatch_epochs`):
    `loss(params, (steps [T, B, ...], initial [B, ...])) -> (total, stats)`."""
    params, opt_state, stats = sequence_minibatch_epochs(
        jax.grad(loss, has_aux=True),
        make_optimizer(config),
        params,
        opt_state,
        steps,
        initial,
        key,
        config.update_epochs,
        config.num_minibatches,
    )
    return params, opt_state, jax.tree.map(jnp.mean, stats)


def next_recurrent_state(state: TrainState, params, opt_state, env: EnvCarry, memory: RecurrentCarry, key):
    """The state after one iteration of a recurrent learner."""
    return next_state(state, params, opt_state, env, key).replace(memory=memory)


# ---------------------------------------------------------------------------------------------------------------
# Grouped collection (GRPO, DPO): M groups of G members that share a start, each a 1-env rollout of num_steps.
# ---------------------------------------------------------------------------------------------------------------

GROUP_MODES = ("start", "branch")


@struct.dataclass
class GroupConfig(base.Config):
    """The fields of a learner on grouped rollouts; GRPO and DPO subclass it and add their own."""

    num_groups: int = static(4, "groups M per iteration")
    group_size: int = static(8, "members G per group (rollouts sharing a start)")
    group_mode: str = static("start", "start: groups start from fresh resets; branch: from states along rollouts")
    horizon: int = static(0, "steps each member runs; 0 = the env's time limit (whole episodes)")
    torso: str = static("mlp", "observation encoder: mlp, or cnn / cnn_large for image observations [H, W, C]")

    @property
    def num_envs(self) -> int:
        """Members (environments) per iteration, M * G."""
        return self.num_groups * self.group_size

    @property
    def num_steps(self) -> int:
        """Steps per member per iteration: `horizon`, or the env's time limit when it is 0."""
        return self.horizon or time_limit(self.env)


@functools.lru_cache(maxsize=None)
def time_limit(env_id: str) -> int:
    limit = getattr(envs.make(env_id, 1).params, "max_steps_in_episode", None)
    if not isinstance(limit, int) or limit < 1:
        raise ValueError(f"Config.horizon: {env_id} has no time limit; set horizon to the steps per member.")
    return limit


def make_group_env(config: GroupConfig):
    """One environment: members are vmapped 1-env rollouts (see `rollout.grouped_rollout`)."""
    return envs.make(config.env, 1)


def init_trunk(config: GroupConfig, key: jax.Array) -> EnvCarry | None:
    """Branch mode: the M ordinary rollouts groups branch from, leaves [M, 1, ...] (None in start mode)."""
    return group_starts(make_group_env(config), key, config.num_groups) if config.group_mode == "branch" else None


def init_group_actor(config: GroupConfig, key: jax.Array):
    """A critic-free group learner's start (GRPO, DPO): (key, actor-only params, optimiser state, trunk)."""
    env = make_group_env(config)
    network = make_network(config, env.spec)
    key, net_key, trunk_key = jax.random.split(key, 3)
    dummy_obs = jnp.zeros((1, *env.spec.observation_shape), jnp.float32)
    params = network.init(net_key, dummy_obs, method=ActorCritic.policy)  # the actor only: no critic
    opt_state = make_optimizer(config).init(params)
    return key, params, opt_state, init_trunk(config, trunk_key)


def group_evaluation_policy(config: GroupConfig, state, deterministic: bool = True):
    """`act(obs, key) -> action` of a group learner's policy (the mode when `deterministic`) and the identity
    normalisation (its members see raw observations), for `jaxrl.run.evaluate`."""
    network = make_network(config, make_group_env(config).spec)
    return evaluation_act(network, state.params, deterministic), lambda obs: obs


def collect_groups(
    config: GroupConfig, act: Callable, trunk: EnvCarry | None, key: jax.Array
) -> tuple[Trajectory, jax.Array, EnvCarry | None, dict[str, jax.Array]]:
    """One iteration's grouped rollout with the behaviour policy `act(obs, key) -> (action, log_prob)`.

    1. Starts. `group_mode="start"`: M fresh reset states. `"branch"`: the current states of the M trunk
       rollouts, so groups branch from states the policy visits; member 0 of each group carries the trunk on.
    2. Each start is copied G times and each member runs `num_steps` steps with its own key. Steps after a
       member's first episode ends are masked out.

    Returns (trajectory [T, M * G, ...], first-episode mask [T, M * G], new trunk (None in start mode), metrics:
    the members' first-episode return and length in start mode, the trunk's completed episodes in branch mode,
    and `valid_fraction`)."""
    env = make_group_env(config)
    starts_key, member_key = jax.random.split(key)
    if config.group_mode == "start":
        starts = group_starts(env, starts_key, config.num_groups)
    else:
        starts = trunk
    members = repeat_members(starts, config.group_size)
    member_keys = jax.random.split(member_key, config.num_envs)
    final, traj = grouped_rollout(env, act, no_critic(env), members, member_keys, config.num_steps)
    mask = first_episode_mask(traj.done)
    if config.group_mode == "start":
        returns = jnp.where(mask, traj.rewards, 0.0).sum(0)  # [N] return of each member's first episode
        lengths = mask.sum(0)
        metrics = {
            "episode_return": returns.mean(),
            "episode_length": lengths.mean(),
            "episodes": (mask & traj.done).sum(),
        }
        trunk = None
    else:  # member 0 of each group is an ordinary rollout: its episodes are the policy's
        trunk = jax.tree.map(lambda x: x[:: config.group_size], final)
        metrics = episode_metrics(jax.tree.map(lambda x: x[:, :: config.group_size], traj))
    metrics["valid_fraction"] = mask.mean()
    return traj, mask, trunk, metrics
