"""Deep Q-Network with experience replay and a target network (Mnih et al. 2015, "Human-level control through
deep reinforcement learning"), optionally double (van Hasselt et al. 2016), dueling (Wang et al. 2016) and
n-step (Sutton 1988; as in Rainbow, Hessel et al. 2018) and with prioritised replay (Schaul et al. 2016).

One iteration is the replay loop (`jaxrl.algos.families.replay_loop`, shared with DDPG, TD3 and SAC): every one of
`num_envs` envs takes `num_steps` epsilon-greedy steps of the online Q-network; the transitions (with their true
successor observations) go into the replay buffer; once `learning_starts` env steps have been collected,
`updates_per_iteration` gradient steps each fit Q(s, a) to n-step targets on a uniformly sampled batch; every
`target_update_interval` iterations the target network moves to the online one (`tau` = 1: a copy; `tau` < 1:
Polyak averaging). Discrete actions only.

With `prioritized`, batches are drawn with probability proportional to p^alpha, p = |TD error| + eps of the last
time a window was replayed (new windows get the largest p^alpha so far; `replay.sample_prioritized`), and each
element's loss is weighted by the importance-sampling weight (N P(i))^-beta normalised by the batch's max, with beta
annealed linearly from `priority_beta` to `priority_beta_end` over the run.

With `core` (gru, lstm, lru or gtrxl) it is R2D2's recurrent replay (Kapturowski et al. 2019, "Recurrent Experience
Replay in Distributed Reinforcement Learning"; `jaxrl.algos.families.recurrent_replay`): the Q-network is torso ->
core -> Q head, the behaviour carries its state and the replay stores it with every step; a sample is a window of
`sequence_length` steps and the behaviour's state at its first step, the learner unrolls the online and the target
networks over the first `burn_in` steps to refresh that state, and the n-step (double) Q-learning loss is taken on
the remaining steps,

    L = mean_{t = burn_in .. sequence_length - 1} loss(G_t - Q(h_t, o_t, a_t)),

`replay_batch_size` such windows per gradient step. With `prioritized`, a window's priority is
0.9 max_t |delta_t| + 0.1 mean_t |delta_t|.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import config_rules, estimators, losses, optim, replay
from jaxrl.algos.base import (  # noqa: F401 (re-exports make_train, train)
    check,
    core_field,
    hyper,
    make_train,
    recurrent,
    shared,
    static,
    takes_setup,
    train,
)
from jaxrl.algos.families import q_learning, q_learning_recurrent, recurrent_replay, replay_loop
from jaxrl.algos.families.q_learning import Setup, behaviour, epsilon_at  # noqa: F401 (the module's surface)
from jaxrl.networks import QNetwork
from jaxrl.networks.recurrent import RecurrentQNetwork
from jaxrl.rollout import EnvCarry, RecurrentCarry, episode_metrics


@struct.dataclass
class Config(q_learning.Config):
    """The Q-learning family's fields at DQN's defaults, plus replay, target network and the variants.

    The defaults follow PureJaxRL's CartPole DQN: 10 envs, one gradient step of 128 transitions per 10 env
    steps, a 1e4 buffer, a target copy every 500 env steps, Adam at 2.5e-4, one-step targets, an L2 TD loss and
    no LayerNorm (measured: `benchmarks/results/dqn_defaults.md`)."""

    num_envs: int = shared("num_envs", 10)
    num_steps: int = static(1, "env steps per environment per iteration (the train frequency)")
    total_timesteps: int = shared("total_timesteps", 50_000)
    layer_norm: bool = static(False, "LayerNorm before each hidden activation")
    learning_rate: float = hyper(2.5e-4, "Adam learning rate")
    anneal_lr: bool = static(False, "decay the learning rate linearly to 0 over the run (optim.learning_rate_schedule)")
    buffer_size: int = static(10_000, "replay capacity in transitions; a multiple of num_envs")
    replay_batch_size: int = static(128, "transitions per gradient step (with a core: sequences)")
    updates_per_iteration: int = static(1, "gradient steps per iteration")
    learning_starts: int = static(1_000, "environment steps collected before the first gradient step")
    target_update_interval: int = static(50, "iterations between target network updates")
    double: bool = static(False, "double Q-learning: the online network picks the bootstrap action")
    dueling: bool = static(False, "dueling head: Q = V + A - mean(A)")
    n_step: int = static(1, "steps of real rewards before bootstrapping (n-step returns)")
    prioritized: bool = static(False, "prioritised replay (Schaul et al. 2016): sample by |TD error| + eps")
    td_loss: str = static("l2", "loss of the TD error: l2 or huber (delta 1)")
    tau: float = hyper(1.0, "target update step size: 1 copies, < 1 is Polyak averaging")
    priority_alpha: float = hyper(0.6, "prioritised replay: sampling probability ~ priority^alpha (0: uniform)")
    priority_beta: float = hyper(0.4, "prioritised replay: importance-sampling exponent beta at the start")
    priority_beta_end: float = hyper(1.0, "prioritised replay: beta at the end (linear anneal; = beta: constant)")
    priority_eps: float = hyper(1e-6, "prioritised replay: priority = |TD error| + priority_eps")
    core: str = core_field("Q head (R2D2)")
    core_size: int = shared("core_size", 128)
    sequence_length: int = static(16, "with a core: steps of a replayed sequence, burn-in included")
    burn_in: int = static(8, "with a core: first steps of a sequence that only refresh its stored state (no loss)")


@struct.dataclass
class TrainState:
    params: Any
    target_params: Any
    opt_state: optax.OptState
    buffer: replay.ReplayState  # replay.PrioritizedReplayState with `prioritized`
    env: EnvCarry
    key: jax.Array
    iteration: jax.Array
    memory: RecurrentCarry | None = None  # the behaviour's hidden state and episode starts (None: no core)


def validate(config: Config) -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run."""
    q_learning.validate_common(config, config_rules.dqn)
    check(isinstance(config.prioritized, bool), "prioritized", f"got {config.prioritized!r}, must be True or False.")


def setup(config: Config) -> Setup:
    """The env and the Q-network (with a dueling head under `dueling`): feed-forward, or recurrent with `core`."""
    if recurrent(config):
        return q_learning_recurrent.setup(config, config.dueling)
    return q_learning.setup(config, config.dueling)


window = config_rules.dqn_window  # steps a replayed sample spans: n_step, or with a core sequence_length


def evaluation_policy(setup: Setup, config: Config, state: TrainState, deterministic: bool = True):
    """The greedy policy (or epsilon_end-greedy when not `deterministic`) of the online Q-network."""
    if recurrent(config):
        return q_learning_recurrent.evaluation_policy(setup, config, state, deterministic)
    return q_learning.evaluation_policy(setup, config, state, deterministic)


def make_optimizer(config: Config) -> optax.GradientTransformation:
    schedule = optim.learning_rate_schedule(
        config.learning_rate, config.anneal_lr, config.updates_per_iteration, config.num_iterations
    )
    return optim.clipped_optimizer("adam", schedule, config.max_grad_norm, eps=1e-8)


def transitions(traj) -> dict[str, jax.Array]:
    """What the replay stores of each step: (o_t, a_t, r_t, terminated, truncated, true o_{t+1})."""
    return {
        "obs": traj.obs,
        "actions": traj.actions,
        "rewards": traj.rewards,
        "terminated": traj.terminated,
        "truncated": traj.truncated,
        "next_obs": traj.next_obs,
    }


def sequence_items(traj, sequences) -> dict[str, Any]:
    """What the replay stores of each step with a core: `transitions` plus the episode start flag and the
    behaviour's state before the step (`rollout.Sequences`)."""
    return {**transitions(traj), "starts": sequences.starts, "hidden": sequences.hidden}


@takes_setup
def init(setup: Setup, config: Config, key: jax.Array) -> TrainState:
    memory = None
    if recurrent(config):
        key, params, carry, memory = q_learning_recurrent.init_network(setup, config, key)
    else:
        key, params, carry = q_learning.init_network(setup, key)
    item = {
        "obs": carry.obs[0],
        "actions": jnp.zeros((), jnp.int32),
        "rewards": jnp.zeros((), jnp.float32),
        "terminated": jnp.zeros((), bool),
        "truncated": jnp.zeros((), bool),
        "next_obs": carry.obs[0],
    }
    if recurrent(config):
        item |= {"starts": jnp.zeros((), bool), "hidden": jax.tree.map(lambda h: h[0], memory.hidden)}
    if config.prioritized:
        buffer = replay.init_prioritized(item, config.num_envs, config.buffer_size)
    else:
        buffer = replay.init(item, config.num_envs, config.buffer_size)
    opt_state = make_optimizer(config).init(params)
    return TrainState(params, params, opt_state, buffer, carry, key, jnp.zeros((), jnp.int32), memory)


def td_errors(params, target_params, network: QNetwork, config: Config, batch: dict[str, jax.Array]):
    """TD errors of a batch of windows `[n_step, B, ...]`: G - Q(o_0, a_0), with G the n-step return
    (`estimators.n_step_returns`, cut at episode ends) bootstrapped from the target network at the true successor
    observations, max_a Q_target(o', a) or, with `double`, Q_target(o', argmax_a Q_online(o', a)). With n_step = 1
    this is the one-step Q-learning / double Q-learning TD error. Returns (td [B], Q(o_0, a_0) [B])."""
    q_tm1_a = losses.action_value(network.apply(params, batch["obs"][0]), batch["actions"][0])
    q_next = network.apply(target_params, batch["next_obs"])  # [n, B, A]
    if config.double:
        next_v = losses.action_value(q_next, jnp.argmax(network.apply(params, batch["next_obs"]), axis=-1))
    else:
        next_v = q_next.max(-1)
    returns = estimators.n_step_returns(
        batch["rewards"], next_v, batch["terminated"], batch["truncated"], config.gamma, config.n_step
    )
    return jax.lax.stop_gradient(returns[0]) - q_tm1_a, q_tm1_a


def loss_fn(params, target_params, network: QNetwork, config: Config, batch: dict[str, jax.Array], weights=None):
    """Mean TD loss of a batch, each element weighted by `weights` [B] when given (prioritised replay's
    importance-sampling weights). Returns (loss, (stats, TD errors [B], with a core [T, B] after the burn-in:
    `recurrent_replay.td_errors`))."""
    errors = recurrent_replay.td_errors if recurrent(config) else td_errors
    td, q = errors(params, target_params, network, config, batch)
    loss = losses.huber(td) if config.td_loss == "huber" else losses.l2(td)
    if weights is not None:
        loss = jax.lax.stop_gradient(weights) * loss
    return loss.mean(), ({"loss": loss.mean(), "q_mean": q.mean()}, td)


def beta_at(config: Config, iteration: jax.Array) -> jax.Array:
    """Importance-sampling exponent: linear from priority_beta to priority_beta_end over the iterations."""
    fraction = jnp.clip(iteration / jnp.maximum(config.num_iterations - 1, 1), 0.0, 1.0)
    return config.priority_beta + fraction * (config.priority_beta_end - config.priority_beta)


def gradient_step(
    config: Config, network: QNetwork | RecurrentQNetwork, optimizer, target_params, buffer, beta, learner, key
):
    """One gradient step on a replayed batch: `learner` = (params, opt_state, prioritized_buffer) -> (learner, stats).

    Uniform replay samples from `buffer` and carries `prioritized_buffer` = None. Prioritised replay samples from
    `prioritized_buffer` (`buffer` is then unused), weights each element's loss by its importance-sampling weight
    at exponent `beta`, and sets the priorities of the drawn windows to |TD error| + priority_eps (with a core,
    `recurrent_replay.sequence_priority` of the window's TD errors + priority_eps).
    """
    params, opt_state, prioritized_buffer = learner
    if config.prioritized:
        batch, indices, probabilities = replay.sample_prioritized(
            prioritized_buffer, key, config.replay_batch_size, window(config)
        )
        weights = replay.importance_weights(probabilities, replay.size(prioritized_buffer), beta)
    else:
        batch, weights = replay.sample(buffer, key, config.replay_batch_size, window(config)), None
    grad_fn = jax.grad(functools.partial(loss_fn, network=network, config=config), has_aux=True)
    grads, (stats, td) = grad_fn(params, target_params, batch=batch, weights=weights)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    if config.prioritized:
        magnitude = recurrent_replay.sequence_priority(td) if recurrent(config) else jnp.abs(td)
        priorities = magnitude + config.priority_eps
        prioritized_buffer = replay.set_priorities(prioritized_buffer, indices, priorities, config.priority_alpha)
    return (optax.apply_updates(params, updates), opt_state, prioritized_buffer), stats


@takes_setup
def update(setup: Setup, config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration of the replay loop (`replay_loop.iteration`): `num_steps` epsilon-greedy steps of every env
    into the replay, then (once `learning_starts` env steps are in) `updates_per_iteration` gradient steps, then
    the target update. With a core the behaviour's rollout carries its memory and the replay stores sequences
    (`recurrent_replay`)."""
    network, optimizer = setup.network, make_optimizer(config)
    epsilon = epsilon_at(config, state.iteration)
    beta = beta_at(config, state.iteration)
    if recurrent(config):
        act, env_carry = None, (state.env, state.memory)
        collect = recurrent_replay.collect(config.num_steps, setup.env, network, state.params, epsilon)
    else:
        act, env_carry, collect = behaviour(network, state.params, epsilon), state.env, None

    def store(traj):
        items = sequence_items(*traj) if recurrent(config) else transitions(traj)
        if config.prioritized:
            return replay.add_prioritized(state.buffer, items, window(config))
        return replay.add(state.buffer, items)

    def learning(buffer):  # prioritised replay changes the buffer's priorities: the gradient steps carry it
        step = functools.partial(gradient_step, config, network, optimizer, state.target_params, buffer, beta)
        return (state.params, state.opt_state, buffer if config.prioritized else None), step

    out = replay_loop.iteration(
        config, setup.env, act, env_carry, state.key, state.iteration, store, learning, window(config), collect
    )
    (params, opt_state, prioritized_buffer), stats, traj = out.learner, out.stats, out.traj
    buffer = prioritized_buffer if config.prioritized else out.buffer
    env, memory = out.env if recurrent(config) else (out.env, None)
    if recurrent(config):
        traj = traj[0]

    update_target = (state.iteration + 1) % config.target_update_interval == 0
    moved = optax.incremental_update(params, state.target_params, config.tau)
    target_params = jax.tree.map(lambda new, old: jnp.where(update_target, new, old), moved, state.target_params)

    metrics = {**episode_metrics(traj), **stats, "epsilon": epsilon}
    if config.prioritized:
        metrics["priority_beta"] = beta
    state = TrainState(params, target_params, opt_state, buffer, env, out.key, state.iteration + 1, memory)
    return state, metrics
