"""The Q-learning family: what DQN, PQN and SARSA share.

All three (`Config`, `validate_common`, `make_env`, `make_network`, `epsilon_at`, `behaviour`,
`q_evaluation_policy`): discrete actions, a Q-network (`networks.QNetwork` on the torso the `torso` field names:
an MLP, or a CNN for images), and `num_envs` envs acting epsilon-greedily in it, with epsilon decayed linearly
from `epsilon_start` to `epsilon_end` over the first `epsilon_decay_fraction` of the run. Evaluation is greedy
(or epsilon_end-greedy).

PQN and SARSA (`LambdaConfig`, `LambdaState`, `lambda_update`): the replay-free, target-free iteration of Gallici
et al. 2024 ("Simplifying Deep Temporal Difference Learning", arXiv 2407.04811). Every env takes `num_steps`
epsilon-greedy steps; the rollout gets lambda-return targets (`estimators.lambda_returns`)

    G_t = r_t + gamma (1 - term_t) [(1 - lambda) next_v_t + lambda G_{t+1}],   cut at episode and window ends,

and `update_epochs` passes of shuffled minibatches regress Q(o, a) on them. The two differ only in the bootstrap
value next_v_t: PQN's max_a Q(o', a) gives Peng's Q(lambda) (Peng & Williams 1996), SARSA's values of the
epsilon-greedy behaviour policy give SARSA(lambda) / Expected SARSA(lambda).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import envs, estimators, losses, optim
from jaxrl.algos import base
from jaxrl.algos.base import (
    check_action_space,
    check_common,
    check_divides,
    check_range,
    check_torso,
    hyper,
    recurrent,
    static,
)
from jaxrl.minibatch import minibatch_epochs, sequence_minibatch_epochs
from jaxrl.networks import QNetwork, epsilon_greedy, make_torso
from jaxrl.networks.recurrent import RecurrentQNetwork, initial_state, make_core
from jaxrl.rollout import (
    EnvCarry,
    RecurrentAct,
    RecurrentCarry,
    episode_metrics,
    initial_memory,
    recurrent_rollout,
    reset,
    rollout,
)
from jaxrl.types import Trajectory

# value(q_values [..., A], epsilon) -> [...]: the bootstrap value of a successor observation from its action values
BootstrapValue = Callable[[jax.Array, Any], jax.Array]
# next_values(traj, q_values [T, N, A]) -> [T, N]: rewrites a rollout's next values from Q(o_t, .) of its steps
NextValues = Callable[[Trajectory, jax.Array], jax.Array]


@struct.dataclass
class Config(base.Config):
    """The fields every Q-learning algorithm shares; a subclass redeclares one only to change its default or help."""

    env: str = static("CartPole-v1", "gymnax environment id (discrete actions)")
    num_envs: int = static(32, "parallel environments")
    num_steps: int = static(32, "rollout length T per iteration, per environment")
    total_timesteps: int = static(200_000, "environment steps of the whole run")
    torso: str = static("mlp", "observation encoder: mlp, or cnn / cnn_large for image observations [H, W, C]")
    hidden_sizes: tuple[int, ...] = static((128, 128), "hidden layer sizes of the Q-network (torso=mlp)")
    activation: str = static("relu", "hidden activation: tanh, relu, gelu or silu")
    layer_norm: bool = static(True, "LayerNorm before each hidden activation (stabilises bootstrapping)")
    learning_rate: float = hyper(5e-4, "learning rate of the optimiser")
    gamma: float = hyper(0.99, "discount factor")
    epsilon_start: float = hyper(1.0, "exploration epsilon at the start")
    epsilon_end: float = hyper(0.05, "exploration epsilon after the decay")
    epsilon_decay_fraction: float = hyper(0.2, "fraction of total_timesteps over which epsilon decays linearly")
    max_grad_norm: float = hyper(10.0, "global gradient-norm clipping threshold")


def validate_common(config: Config, algorithm: str, positive_ints: tuple[str, ...] = ()) -> None:
    """The checks every Q-learning Config shares (`algorithm` names the algorithm in the messages): a registered
    env with discrete actions, positive integer `num_envs`, `num_steps` and `positive_ints`, and the ranges of the
    shared hyperparameters."""
    check_common(config, ("num_envs", "num_steps", *positive_ints))
    spec = make_env(config).spec
    check_action_space(config, spec.discrete, True, algorithm)
    check_torso(config, spec.observation_shape)
    check_range(config, "learning_rate", 0.0, low_open=True)
    check_range(config, "gamma", 0.0, 1.0)
    check_range(config, "epsilon_start", 0.0, 1.0)
    check_range(config, "epsilon_end", 0.0, 1.0)
    check_range(config, "epsilon_decay_fraction", 0.0, 1.0)
    check_range(config, "max_grad_norm", 0.0, low_open=True)


def make_env(config: Config):
    return envs.make(config.env, config.num_envs)


def make_network(config: Config, spec: envs.EnvSpec, dueling: bool = False) -> QNetwork | RecurrentQNetwork:
    """`QNetwork` on the Config's torso, or `RecurrentQNetwork` (torso -> core -> Q) when it names a `core`."""
    torso = make_torso(config.torso, config.hidden_sizes, config.activation, config.layer_norm, spec.observation_shape)
    if recurrent(config):
        core = make_core(config.core, config.core_size)
        return RecurrentQNetwork(spec.action_dim, torso, core, dueling, spec.action_mask)
    return QNetwork(spec.action_dim, torso, dueling, spec.action_mask)


def init_network(config: Config, network: QNetwork, key: jax.Array):
    """(key, parameters, env carry): a fresh env batch and Q-network parameters from `key`."""
    key, net_key, env_key = jax.random.split(key, 3)
    carry = reset(make_env(config), env_key)
    return key, network.init(net_key, carry.obs[:1]), carry


def epsilon_at(config: Config, iteration: jax.Array) -> jax.Array:
    """Linear decay from epsilon_start to epsilon_end over the first epsilon_decay_fraction of the env steps."""
    steps = iteration * config.env_steps_per_iteration
    decay_steps = jnp.maximum(config.epsilon_decay_fraction * config.total_timesteps, 1.0)
    fraction = jnp.clip(steps / decay_steps, 0.0, 1.0)
    return config.epsilon_start + fraction * (config.epsilon_end - config.epsilon_start)


def behaviour(network: QNetwork, params, epsilon):
    """The rollout's `act(obs, key) -> (action, log_prob)`: epsilon-greedy in the online Q-values."""

    def act(obs, key):
        return epsilon_greedy(network.apply(params, obs), epsilon).sample_and_log_prob(seed=key)

    return act


def q_evaluation_policy(network: QNetwork, params, env_state, epsilon, deterministic: bool):
    """`(act(obs, key) -> action, normalize)` for `jaxrl.run.evaluate`: greedy, or epsilon-greedy at `epsilon`."""

    def act(obs, key):
        q_values = network.apply(params, obs)
        if deterministic:
            return jnp.argmax(q_values, axis=-1)
        return epsilon_greedy(q_values, epsilon).sample(seed=key)

    return act, envs.observation_normalizer(env_state)


# ---------------------------------------------------------------------------------------------------------------
# The replay-free lambda-return iteration (PQN, SARSA)
# ---------------------------------------------------------------------------------------------------------------


@struct.dataclass
class LambdaConfig(Config):
    """The family's fields plus those of the lambda-return iteration (PQN, SARSA)."""

    learning_rate: float = hyper(5e-4, "RAdam learning rate")
    update_epochs: int = static(2, "passes over each rollout")
    num_minibatches: int = static(8, "minibatches per pass; must divide num_envs * num_steps")
    anneal_lr: bool = static(True, "decay the learning rate linearly to 0 over the run")
    q_lambda: float = hyper(0.95, "lambda of the Q(lambda) targets")
    reward_scale: float = hyper(0.1, "rewards are multiplied by this before the targets")

    @property
    def updates_per_iteration(self) -> int:
        """Gradient steps per iteration: update_epochs * num_minibatches."""
        return self.update_epochs * self.num_minibatches


@struct.dataclass
class LambdaState:
    params: Any
    opt_state: optax.OptState
    env: EnvCarry
    key: jax.Array
    iteration: jax.Array
    memory: RecurrentCarry | None = None  # a recurrent Q-network's hidden state and episode starts (None: no core)


def validate_lambda(config: LambdaConfig, algorithm: str) -> None:
    """`validate_common` and the checks of the lambda-return iteration."""
    validate_common(config, algorithm, ("update_epochs", "num_minibatches"))
    check_divides(config, "num_minibatches")
    check_range(config, "q_lambda", 0.0, 1.0)
    check_range(config, "reward_scale", 0.0, low_open=True)


def lambda_optimizer(config: LambdaConfig) -> optax.GradientTransformation:
    """Clipped RAdam (Liu et al. 2020), with `anneal_lr` decayed per iteration (`optim.learning_rate_schedule`)."""
    schedule = optim.learning_rate_schedule(
        config.learning_rate, config.anneal_lr, config.updates_per_iteration, config.num_iterations
    )
    return optim.clipped_optimizer("radam", schedule, config.max_grad_norm)


def evaluation_policy(config: LambdaConfig, state: LambdaState, deterministic: bool = True):
    """The greedy policy (or epsilon_end-greedy when not `deterministic`) of the Q-network."""
    network = make_network(config, make_env(config).spec)
    if recurrent(config):
        return recurrent_q_act(network, state.params, config.epsilon_end, deterministic), envs.observation_normalizer(
            state.env.state
        )
    return q_evaluation_policy(network, state.params, state.env.state, config.epsilon_end, deterministic)


def lambda_init(config: LambdaConfig, key: jax.Array) -> LambdaState:
    network = make_network(config, make_env(config).spec)
    if recurrent(config):
        key, net_key, env_key = jax.random.split(key, 3)
        carry = reset(make_env(config), env_key)
        params = network.init(net_key, initial_state(network.core, 1), carry.obs[None, :1], jnp.ones((1, 1), bool))
        memory = initial_memory(initial_state(network.core, config.num_envs))
        opt_state = lambda_optimizer(config).init(params)
        return LambdaState(params, opt_state, carry, key, jnp.zeros((), jnp.int32), memory)
    key, params, carry = init_network(config, network, key)
    opt_state = lambda_optimizer(config).init(params)
    return LambdaState(params, opt_state, carry, key, jnp.zeros((), jnp.int32))


def lambda_targets(config: LambdaConfig, traj: Trajectory) -> jax.Array:
    """Lambda-return targets [T, N] of a rollout from its `next_values` (with PQN's max_a Q(o', a) of the true
    successors, Q(lambda)): G_t = r_t + gamma (1 - term_t) [(1 - lambda) next_v_t + lambda G_{t+1}], cut at
    episode ends, with the rewards scaled by `reward_scale`."""
    return estimators.lambda_returns(
        traj.rewards * config.reward_scale,
        traj.next_values,
        traj.terminated,
        traj.truncated,
        config.gamma,
        config.q_lambda,
    )


def regression_loss(params, batch: dict[str, jax.Array], network: QNetwork):
    """0.5 (G - Q(o, a))^2 averaged over the minibatch."""
    q = losses.action_value(network.apply(params, batch["obs"]), batch["actions"])
    loss = losses.l2(jax.lax.stop_gradient(batch["targets"]) - q).mean()
    return loss, {"loss": loss, "q_mean": q.mean()}


def collect(
    config: LambdaConfig,
    env,
    network: QNetwork,
    params,
    epsilon,
    carry: EnvCarry,
    key: jax.Array,
    value: BootstrapValue,
    next_values: NextValues | None = None,
    keep_next_obs: bool = False,
):
    """The epsilon-greedy rollout of one iteration and its lambda-return targets: (carry, traj, targets [T, N]).

    `value(q_values [..., A], epsilon) -> [...]` is the value of a successor observation from its action values
    (the rollout takes it at the window end and at truncations, 0 after termination); PQN uses max_a Q.
    `next_values(traj, q_values [T, N, A]) -> [T, N]`, when given, then rewrites the trajectory's next values
    from the action values Q(o_t, .) of its observations (SARSA: Q(o_{t+1}, a_{t+1}) inside the window).
    """
    act = behaviour(network, params, epsilon)

    def successor_value(obs):
        return value(network.apply(params, obs), epsilon)

    carry, traj = rollout(env, act, successor_value, carry, key, config.num_steps, keep_next_obs=keep_next_obs)
    if next_values is not None:
        traj = traj.replace(next_values=next_values(traj, network.apply(params, traj.obs)))
    return carry, traj, lambda_targets(config, traj)


def lambda_update(
    config: LambdaConfig, state: LambdaState, value: BootstrapValue, next_values: NextValues | None = None
) -> tuple[LambdaState, dict[str, jax.Array]]:
    """One iteration: epsilon-greedy rollout, lambda-return targets with the bootstrap values `value` and
    `next_values` (see `collect`), then `update_epochs` x `num_minibatches` regression steps."""
    env = make_env(config)
    network = make_network(config, env.spec)
    optimizer = lambda_optimizer(config)
    key, rollout_key, shuffle_key = jax.random.split(state.key, 3)

    epsilon = epsilon_at(config, state.iteration)
    carry, traj, targets = collect(
        config, env, network, state.params, epsilon, state.env, rollout_key, value, next_values
    )
    batch = {"obs": traj.obs, "actions": traj.actions, "targets": targets}
    grad_fn = jax.grad(functools.partial(regression_loss, network=network), has_aux=True)
    epochs, minibatches = config.update_epochs, config.num_minibatches
    params, opt_state, stats = minibatch_epochs(
        grad_fn, optimizer, state.params, state.opt_state, batch, shuffle_key, epochs, minibatches
    )
    metrics = {**episode_metrics(traj), **jax.tree.map(jnp.mean, stats), "epsilon": epsilon}
    return LambdaState(params, opt_state, carry, key, state.iteration + 1), metrics


# ---------------------------------------------------------------------------------------------------------------
# The recurrent lambda-return iteration (PQN with `core="gru"`, PQN-RNN as in purejaxql): the Q-network's state is
# carried through the rollout (reset where an episode starts), the targets come from the Q-values the rollout saw,
# and the regression re-runs the core over minibatches of whole environment sequences from their initial states.
# ---------------------------------------------------------------------------------------------------------------


def recurrent_q_act(network: RecurrentQNetwork, params, epsilon, deterministic: bool) -> RecurrentAct:
    """Greedy (or `epsilon`-greedy) in the recurrent Q-values, with memory (`rollout.RecurrentAct`)."""

    def step(h, obs, start, key):
        h, q = network.apply(params, h, obs[None], start[None])
        action = jnp.argmax(q[0], axis=-1) if deterministic else epsilon_greedy(q[0], epsilon).sample(seed=key)
        return h, action

    return RecurrentAct(step, lambda batch: initial_state(network.core, batch))


def recurrent_regression_loss(params, minibatch, network: RecurrentQNetwork):
    """`regression_loss` over sequences: Q(h_t, o_t, a_t) from the core re-run over steps [T, B, ...] from the
    minibatch's initial states with the rollout's episode starts."""
    steps, initial = minibatch
    _, q_values = network.apply(params, initial, steps["obs"], steps["starts"])
    q = losses.action_value(q_values, steps["actions"])
    loss = losses.l2(jax.lax.stop_gradient(steps["targets"]) - q).mean()
    return loss, {"loss": loss, "q_mean": q.mean()}


def recurrent_lambda_update(
    config: LambdaConfig, state: LambdaState, value: BootstrapValue
) -> tuple[LambdaState, dict[str, jax.Array]]:
    """`lambda_update` of a recurrent Q-network: next values `value(Q(h_{t+1}, o_{t+1}), epsilon)` from the
    rollout's own states (at a truncation, one more core step from h'_t on the final observation), lambda-return
    targets, then `update_epochs` x `num_minibatches` regression steps on whole environment sequences."""
    env = make_env(config)
    network = make_network(config, env.spec)
    key, rollout_key, shuffle_key = jax.random.split(state.key, 3)
    epsilon = epsilon_at(config, state.iteration)

    def step(h, obs, start, k):
        h, q = network.apply(state.params, h, obs[None], start[None])
        action, log_prob = epsilon_greedy(q[0], epsilon).sample_and_log_prob(seed=k)
        return h, action, log_prob, value(q[0], epsilon)

    def successor_value(h, obs, start):
        return value(network.apply(state.params, h, obs[None], start[None])[1][0], epsilon)

    carry, memory, traj, sequences = recurrent_rollout(
        env, step, successor_value, state.env, state.memory, rollout_key, config.num_steps
    )
    targets = lambda_targets(config, traj)
    steps = {"obs": traj.obs, "actions": traj.actions, "targets": targets, "starts": sequences.starts}
    grad_fn = jax.grad(functools.partial(recurrent_regression_loss, network=network), has_aux=True)
    params, opt_state, stats = sequence_minibatch_epochs(
        grad_fn,
        lambda_optimizer(config),
        state.params,
        state.opt_state,
        steps,
        sequences.initial_hidden,
        shuffle_key,
        config.update_epochs,
        config.num_minibatches,
    )
    metrics = {**episode_metrics(traj), **jax.tree.map(jnp.mean, stats), "epsilon": epsilon}
    return LambdaState(params, opt_state, carry, key, state.iteration + 1, memory), metrics
