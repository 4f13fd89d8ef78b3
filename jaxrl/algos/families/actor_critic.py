"""The feed-forward on-policy actor-critic family: what PPO, A2C, REINFORCE, TRPO, IMPALA and V-MPO share.

- `Config`: the fields of a learner that steps one batch of `num_envs` environments `num_steps` per iteration
  with an actor-critic network (each algorithm subclasses it; a subclass redeclares a field only to change its
  default or help). `validate`: the checks the family shares, one valid range per field wherever a Config has it.
- `Setup`, built once per Config by `setup`: the env batch (`make_env`, the family's one place that builds it)
  and the network (`ActorCritic` on the torso `Config.torso` names). Its methods are the steps whose shape
  depends on the network: `collect` (the rollout of the behaviour policy, valued by the critic), `forward`
  (pi and V on a minibatch), `rollout_policy`, `updates` (minibatch epochs) and `next_state`;
  `jaxrl.algos.families.actor_critic_recurrent.Setup` is the same surface for a recurrent network, so an algorithm's
  `update` is written once for both.
- The optimiser (`optim.clipped_optimizer` at `optim.learning_rate_schedule`, per iteration), built from the
  Config's traced hyperparameters where it is used, and `init`.
- The masked actor-critic loss (the importance-weighted policy gradient, an entropy bonus and a value
  regression over a validity mask) and its minibatch step (A2C, REINFORCE), and the exact KL between two
  parameter sets.

A Setup is built inside the traced `train` (`base.train`, the runner's chunk): with `normalize_rewards` its env
holds the reward normaliser's discount, `Config.gamma`, as traced there, so a vmapped Config still compiles once.
Everything else in it depends on static fields only; the learning rate and the other hyperparameters are read
from `config` at each use.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxrl import config_rules, envs, estimators, lag, losses, optim, parallel
from jaxrl import minibatch as minibatches
from jaxrl.algos import base
from jaxrl.algos.base import (
    check_common,
    shared,
    static,
    takes_setup,
)
from jaxrl.minibatch import minibatch_epochs
from jaxrl.networks import ActorCritic, init_params, make_torso
from jaxrl.rollout import EnvCarry, RecurrentCarry, Sequences, reset, rollout
from jaxrl.types import Trajectory


@struct.dataclass
class Config(base.Config):
    """The fields of the family's learners on one vectorised rollout (PPO, A2C, REINFORCE, TRPO, IMPALA). Each
    declares its own optimisation fields (`update_epochs`, `num_minibatches`, `learning_rate`, `anneal_lr`, ...)
    and redeclares one of these only to change its default or help."""

    num_envs: int = shared("num_envs", 16)
    num_steps: int = shared("num_steps", 64)
    torso: str = shared("torso", "mlp")
    hidden_sizes: tuple[int, ...] = static((64, 64), "hidden layer sizes of the actor and of the critic MLP")
    activation: str = shared("activation", "tanh")
    bound_mean: bool = static(
        False,
        "continuous actions: keep the Gaussian's mean inside the action box (low + (tanh(x) + 1) (high - low) / 2); "
        "unbounded, a mean that leaves the box gets no gradient back (every clipped sample acts the same)",
    )
    optimizer: str = shared("optimizer", "adam")
    normalize_observations: bool = static(False, "normalise observations by running mean and std")
    normalize_rewards: bool = static(
        False, "scale the learner's rewards by the running std of the discounted return (episode stats stay raw)"
    )
    gamma: float = shared("gamma", 0.99)
    max_grad_norm: float = shared("max_grad_norm", 0.5)

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


def validate(config, rules=config_rules.actor_critic) -> None:
    """The family's checks: `base.check_common` (each field's type and rule, the env id, then `rules`, the
    algorithm's rules across its fields and with its env: `jaxrl.config_rules`)."""
    check_common(config, rules)


def make_env(config):
    """The env batch of `config`: `num_envs` copies with the Config's observation and reward normalisation."""
    return envs.make(
        config.env,
        config.num_envs,
        normalize_observations=config.normalize_observations,
        normalize_rewards=getattr(config, "normalize_rewards", False),
        reward_gamma=config.gamma,
        axis_name=parallel.axis_name(),
    )


def torso(config, spec: envs.EnvSpec):
    """The encoder `config.torso` names (`networks.make_torso`): the MLP, or a CNN for image observations."""
    return make_torso(config.torso, config.hidden_sizes, config.activation, False, spec.observation_shape)


def make_network(config, spec: envs.EnvSpec, box: envs.EnvSpec | None = None) -> ActorCritic:
    """`ActorCritic` on the Config's torso; with `bound_mean` (continuous actions) its Gaussian mean stays in the
    action box of `box`, a spec whose bounds are concrete."""
    bounds = None
    if box is not None:
        bounds = (tuple(np.asarray(box.action_low).tolist()), tuple(np.asarray(box.action_high).tolist()))
    return ActorCritic(spec.action_dim, spec.discrete, torso(config, spec), spec.action_mask, bounds)


class Rollout(NamedTuple):
    """One iteration's collection: the trajectory [T, N, ...], the env batch after it and, for a recurrent
    policy, its memory after it and the sequences its learner re-runs the core over."""

    traj: Trajectory
    env: EnvCarry
    memory: RecurrentCarry | None = None
    sequences: Sequences | None = None


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


@dataclasses.dataclass(frozen=True)
class Setup:
    """The static pieces of a feed-forward learner: the env batch and the actor-critic network."""

    env: Any
    network: Any

    def init_params(self, key: jax.Array, obs: jax.Array):
        """The network's initial parameters, from a batch of observations [N, ...] (`networks.init_params`)."""
        return init_params(self.network, key, obs[:1])

    def initial_memory(self, config) -> RecurrentCarry | None:
        return None

    def collect(self, config, state: TrainState, key: jax.Array, behaviour_params=None) -> Rollout:
        """`num_steps` steps of the policy at `behaviour_params` (default `state.params`), valued by the critic at
        `state.params`."""
        act, value = behaviour(self.network, state.params)
        if behaviour_params is not None:
            act, _ = behaviour(self.network, behaviour_params)
        env, traj = rollout(self.env, act, value, state.env, key, config.num_steps)
        return Rollout(traj, env)

    def forward(self, params, minibatch) -> tuple[Any, jax.Array, dict[str, jax.Array]]:
        """(pi, the critic's output, the minibatch's steps) of a minibatch of steps at `params`."""
        dist, values = self.network.apply(params, minibatch["obs"])
        return dist, values, minibatch

    def rollout_policy(self, params, rollout: Rollout):
        """pi(.|o_t) at `params` on every step of the rollout."""
        return policy_of(self.network, params)(rollout.traj.obs)

    def updates(self, config, loss: Callable, params, opt_state, rollout: Rollout, steps, key: jax.Array, chunked=None):
        """`minibatch_updates` of `loss(params, minibatch)` on the rollout's `steps` ([T, N, ...] leaves), large
        minibatches in chunks where `chunked` is given (see there)."""
        return minibatch_updates(config, loss, params, opt_state, steps, key, chunked=chunked)

    def next_state(self, state: TrainState, params, opt_state, rollout: Rollout, key: jax.Array) -> TrainState:
        """The state after one iteration."""
        return next_state(state, params, opt_state, rollout.env, key)

    def evaluation_act(self, params, deterministic: bool = True):
        return evaluation_act(self.network, params, deterministic)


def setup(config, network: Callable = make_network) -> Setup:
    """The env batch (`make_env`) and `network(config, spec, box)` (default `make_network`), where `box` is the
    env's spec with concrete action bounds when the Config has `bound_mean` on continuous actions (else None)."""
    env = make_env(config)
    box = None
    if getattr(config, "bound_mean", False) and not env.spec.discrete:
        with jax.ensure_compile_time_eval():  # the box as constants of the module, also under jit
            box = envs.make(config.env, 1).spec
    return Setup(env, network(config, env.spec, box))


def evaluation_policy(setup: Setup, config, state: TrainState, deterministic: bool = True):
    """`act(obs, key) -> action` of the trained policy and the observation normalisation it was trained with,
    for `jaxrl.episodes.evaluate`."""
    return setup.evaluation_act(state.params, deterministic), envs.observation_normalizer(state.env.state)


def make_optimizer(config) -> optax.GradientTransformation:
    """`config.optimizer` after clipping at `max_grad_norm`, at `learning_rate`, annealed per iteration with
    `anneal_lr` (`optim.learning_rate_schedule` over `updates_per_iteration` steps an iteration)."""
    schedule = optim.learning_rate_schedule(
        config.learning_rate, config.anneal_lr, config.updates_per_iteration, config.num_iterations
    )
    return optim.clipped_optimizer(config.optimizer, schedule, config.max_grad_norm)


@takes_setup
def init(setup: Setup, config, key: jax.Array, optimizer=None, trainable=None) -> TrainState:
    """Fresh network parameters, env batch and optimiser state (of `trainable(params)`; all by default).
    `optimizer` defaults to `make_optimizer`."""
    optimizer = make_optimizer(config) if optimizer is None else optimizer
    key, net_key, env_key = jax.random.split(key, 3)
    carry = reset(setup.env, env_key)
    memory = setup.initial_memory(config)
    params = setup.init_params(net_key, carry.obs)
    opt_state = optimizer.init(params if trainable is None else trainable(params))
    return TrainState(params, opt_state, carry, key, jnp.zeros((), jnp.int32), memory=memory)


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


def actor_critic_loss(
    params, network: ActorCritic, config, batch: dict[str, jax.Array], critic: bool = True, weighted: bool = False
):
    """Masked mean of the policy-gradient loss - ent_coef * entropy (+ vf_coef * 0.5 (V - G)^2 with `critic`).

    The policy term is `losses.policy_gradient_loss`, -rho A with rho = pi / mu from the stored behaviour
    log-probabilities: on the first gradient step of a rollout rho = 1 and its gradient is the score-function
    estimate -A grad log pi; later epochs (if any) stay importance-corrected. `batch` holds obs, actions,
    log_probs, advantages, targets and a validity mask; advantages are normalised over the valid elements when
    `config.normalize_advantages`.

    `weighted`: `batch` is `sample_weighted(config, batch)`'s instead, and every masked mean a plain mean of the
    weighted samples, so that the loss is a mean over samples that `minibatch.gradient_in_chunks` can cut.
    """
    mask = batch["mask"]
    mean = losses.valid_mean(mask, batch["weights"] if weighted else None)
    if critic:
        dist, values = network.apply(params, batch["obs"])
    else:
        dist = network.apply(params, batch["obs"], method=ActorCritic.policy)
    log_prob = dist.log_prob(batch["actions"])
    advantages = batch["advantages"]
    if config.normalize_advantages and not weighted:
        advantages = parallel.normalize(advantages, mask)  # over the valid elements of every device
    policy_loss = mean(losses.policy_gradient_loss(log_prob, batch["log_probs"], advantages))
    entropy = mean(dist.entropy())
    total = policy_loss - config.ent_coef * entropy
    value_loss = jnp.zeros(())
    if critic:
        value_loss = mean(losses.value_loss(values, batch["targets"]))
        total = total + config.vf_coef * value_loss
    return total, {"policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy}


def sample_weighted(config, batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """`batch` with its advantages normalised over its valid elements (where the Config asks) and its samples'
    `losses.mask_weights`, with which mean(w * x) = `losses.masked_mean(x, mask)`."""
    mask = batch["mask"]
    advantages = batch["advantages"]
    if config.normalize_advantages:
        advantages = parallel.normalize(advantages, mask)
    return {**batch, "advantages": advantages, "weights": losses.mask_weights(mask)}


def policy_kl(network: ActorCritic, old_params, new_params, obs: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean over the valid observations of the exact KL(pi_old(.|s) || pi_new(.|s))."""
    old = network.apply(old_params, obs, method=ActorCritic.policy)
    new = network.apply(new_params, obs, method=ActorCritic.policy)
    return losses.masked_mean(old.kl_divergence(new), mask)


def minibatch_updates(
    config, loss: Callable, params, opt_state, batch, key: jax.Array, num_minibatches=None, chunked=None
):
    """`config.update_epochs` passes of `num_minibatches` (default `config.num_minibatches`) shuffled minibatches,
    one `make_optimizer` step each on `loss(params, minibatch) -> (total, stats)`. Returns (params, opt_state,
    stats averaged over the steps).

    `chunked`: (prepare, sample_mean_loss), where `sample_mean_loss(params, prepare(minibatch))` is `loss` as a
    mean over samples (the statistics across the minibatch, such as its advantage normalisation, taken by
    `prepare`). Minibatches of more than `minibatch.GRADIENT_CHUNKS_FROM` samples then take their gradient in
    chunks (`minibatch.gradient_in_chunks`); smaller ones use `loss` as it is."""
    num_minibatches = config.num_minibatches if num_minibatches is None else num_minibatches
    grad = jax.grad(loss, has_aux=True)
    samples = math.prod(jax.tree.leaves(batch)[0].shape[:2]) // num_minibatches
    if chunked is not None and samples > minibatches.GRADIENT_CHUNKS_FROM:
        grad = minibatches.chunked_gradient(*chunked, minibatches.GRADIENT_CHUNK_ROWS)

    params, opt_state, stats = minibatch_epochs(
        grad,
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
    """`minibatch_updates` of `actor_critic_loss` (1 x 1: one gradient step on the whole rollout; a minibatch of
    more than `minibatch.GRADIENT_CHUNKS_FROM` samples in chunks, its samples weighted by `sample_weighted`).
    Returns (params, opt_state, stats) with the stats averaged over the steps and `kl`, the exact mean KL from the
    rollout's policy to the updated one on the rollout's states."""

    def loss(p, minibatch):
        return actor_critic_loss(p, network, config, minibatch, critic)

    def sample_mean_loss(p, minibatch):
        return actor_critic_loss(p, network, config, minibatch, critic, weighted=True)

    chunked = (functools.partial(sample_weighted, config), sample_mean_loss)
    new_params, opt_state, stats = minibatch_updates(config, loss, params, opt_state, batch, key, chunked=chunked)
    stats["kl"] = policy_kl(network, params, new_params, batch["obs"], batch["mask"])
    return new_params, opt_state, stats
