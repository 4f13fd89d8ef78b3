"""Parallelised Q-Network (Gallici et al. 2024, "Simplifying Deep Temporal Difference Learning", arXiv 2407.04811):
Q-learning without a replay buffer or a target network, stabilised by LayerNorm and many parallel environments.

One iteration: every one of `num_envs` envs takes `num_steps` epsilon-greedy steps of the Q-network; the rollout
gets Q(lambda) targets (Peng & Williams 1996; `estimators.lambda_returns` with next values max_a Q(o', a) of the
true successors, 0 after termination), then `update_epochs` passes of shuffled minibatches regress Q(o, a) on
them. Discrete actions only.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import envs, estimators, losses
from jaxrl.algos.dqn import behaviour, epsilon_at, q_evaluation_policy
from jaxrl.configs import check, check_common, check_minibatches, check_range, hyper, static
from jaxrl.minibatch import minibatch_epochs
from jaxrl.networks import QNetwork
from jaxrl.rollout import EnvCarry, episode_metrics, reset, rollout


@struct.dataclass
class Config:
    env: str = static("CartPole-v1", "gymnax environment id (discrete actions)")
    num_envs: int = static(32, "parallel environments")
    num_steps: int = static(32, "rollout length T per iteration, per environment")
    total_timesteps: int = static(200_000, "environment steps of the whole run")
    update_epochs: int = static(2, "passes over each rollout")
    num_minibatches: int = static(8, "minibatches per pass; must divide num_envs * num_steps")
    hidden_sizes: tuple[int, ...] = static((128, 128), "hidden layer sizes of the Q-network")
    activation: str = static("relu", "hidden activation: tanh, relu, gelu or silu")
    layer_norm: bool = static(True, "LayerNorm before each hidden activation (PQN's stabiliser)")
    anneal_lr: bool = static(True, "decay the learning rate linearly to 0 over the run")
    learning_rate: float = hyper(5e-4, "RAdam learning rate")
    gamma: float = hyper(0.99, "discount factor")
    q_lambda: float = hyper(0.95, "lambda of the Q(lambda) targets")
    epsilon_start: float = hyper(1.0, "exploration epsilon at the start")
    epsilon_end: float = hyper(0.05, "exploration epsilon after the decay")
    epsilon_decay_fraction: float = hyper(0.2, "fraction of total_timesteps over which epsilon decays linearly")
    reward_scale: float = hyper(0.1, "rewards are multiplied by this before the targets")
    max_grad_norm: float = hyper(10.0, "global gradient-norm clipping threshold")

    @property
    def batch_size(self) -> int:
        return self.num_envs * self.num_steps

    @property
    def steps_per_iteration(self) -> int:
        return self.batch_size

    @property
    def num_iterations(self) -> int:
        return self.total_timesteps // self.batch_size


@struct.dataclass
class TrainState:
    params: Any
    opt_state: optax.OptState
    env: EnvCarry
    key: jax.Array
    iteration: jax.Array


def validate(config: Config, algorithm: str = "PQN") -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run (`algorithm` names the
    algorithm in the messages: SARSA reuses these checks)."""
    check_common(config, ("num_envs", "num_steps", "update_epochs", "num_minibatches"), config.batch_size)
    check_minibatches(config)
    check(
        make_env(config).spec.discrete,
        "env",
        f"{config.env} has continuous actions; {algorithm} needs a discrete action space (e.g. CartPole-v1).",
    )
    check_range(config, "learning_rate", 0.0, low_open=True)
    check_range(config, "gamma", 0.0, 1.0)
    check_range(config, "q_lambda", 0.0, 1.0)
    check_range(config, "epsilon_start", 0.0, 1.0)
    check_range(config, "epsilon_end", 0.0, 1.0)
    check_range(config, "epsilon_decay_fraction", 0.0, 1.0)
    check_range(config, "reward_scale", 0.0, low_open=True)
    check_range(config, "max_grad_norm", 0.0, low_open=True)


def make_env(config: Config):
    return envs.make(config.env, config.num_envs)


def make_network(config: Config, spec: envs.EnvSpec) -> QNetwork:
    return QNetwork(
        spec.action_dim,
        config.hidden_sizes,
        config.activation,
        layer_norm=config.layer_norm,
        obs_ndim=len(spec.observation_shape),
    )


def make_optimizer(config: Config) -> optax.GradientTransformation:
    learning_rate: Any = config.learning_rate
    if config.anneal_lr:
        steps_per_iteration = config.update_epochs * config.num_minibatches

        def learning_rate(count):
            done = (count // steps_per_iteration) / config.num_iterations
            return config.learning_rate * (1.0 - done)

    return optax.chain(optax.clip_by_global_norm(config.max_grad_norm), optax.radam(learning_rate))


def evaluation_policy(config: Config, state, deterministic: bool = True):
    """The greedy policy (or epsilon_end-greedy when not `deterministic`) of the Q-network."""
    network = make_network(config, make_env(config).spec)
    return q_evaluation_policy(network, state.params, state.env.state, config.epsilon_end, deterministic)


def init(config: Config, key: jax.Array) -> TrainState:
    env = make_env(config)
    network = make_network(config, env.spec)
    key, net_key, env_key = jax.random.split(key, 3)
    carry = reset(env, env_key)
    params = network.init(net_key, carry.obs[:1])
    opt_state = make_optimizer(config).init(params)
    return TrainState(params, opt_state, carry, key, jnp.zeros((), jnp.int32))


def q_lambda_targets(config, traj) -> jax.Array:
    """Q(lambda) targets [T, N] of a rollout whose `next_values` are max_a Q(o', a) of the true successors:
    G_t = r_t + gamma (1 - term_t) [(1 - lambda) max_a Q(o_{t+1}, a) + lambda G_{t+1}], cut at episode ends."""
    return estimators.lambda_returns(
        traj.rewards * config.reward_scale,
        traj.next_values,
        traj.terminated,
        traj.truncated,
        config.gamma,
        config.q_lambda,
    )


def loss_fn(params, network: QNetwork, batch: dict[str, jax.Array]):
    """0.5 (G - Q(o, a))^2 averaged over the minibatch."""
    q = losses.action_value(network.apply(params, batch["obs"]), batch["actions"])
    loss = losses.l2(jax.lax.stop_gradient(batch["targets"]) - q).mean()
    return loss, {"loss": loss, "q_mean": q.mean()}


def greedy_value(q_values: jax.Array, epsilon) -> jax.Array:
    """max_a Q(o, a): the bootstrap value of Q-learning (`epsilon` is unused)."""
    return q_values.max(-1)


def collect(
    config,
    env,
    network: QNetwork,
    params,
    epsilon,
    carry: EnvCarry,
    key: jax.Array,
    value=greedy_value,
    next_values=None,
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
    return carry, traj, q_lambda_targets(config, traj)


def update(
    config: Config, state: TrainState, value=greedy_value, next_values=None
) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration: epsilon-greedy rollout, Q(lambda) targets, `update_epochs` x `num_minibatches` steps.

    `value` and `next_values` choose the bootstrap values of the targets (see `collect`); the defaults give
    PQN's Q(lambda), `jaxrl.algos.sarsa` passes its on-policy ones.
    """
    env = make_env(config)
    network = make_network(config, env.spec)
    optimizer = make_optimizer(config)
    key, rollout_key, shuffle_key = jax.random.split(state.key, 3)

    epsilon = epsilon_at(config, state.iteration)
    carry, traj, targets = collect(
        config, env, network, state.params, epsilon, state.env, rollout_key, value, next_values
    )
    batch = {"obs": traj.obs, "actions": traj.actions, "targets": targets}
    grad_fn = jax.grad(functools.partial(loss_fn, network=network), has_aux=True)
    params, opt_state, stats = minibatch_epochs(
        lambda params, minibatch: grad_fn(params, batch=minibatch),
        optimizer,
        state.params,
        state.opt_state,
        batch,
        shuffle_key,
        config.update_epochs,
        config.num_minibatches,
    )
    metrics = {**episode_metrics(traj), **jax.tree.map(jnp.mean, stats), "epsilon": epsilon}
    return TrainState(params, opt_state, carry, key, state.iteration + 1), metrics


def train(config: Config, key: jax.Array) -> tuple[TrainState, dict[str, jax.Array]]:
    """init + `lax.scan` of `update` over `config.num_iterations`; metrics are stacked per iteration."""
    state = init(config, key)
    return jax.lax.scan(lambda s, _: update(config, s), state, None, length=config.num_iterations)


def make_train(config: Config):
    """Validates `config` and returns the pure `train(key) -> (TrainState, metrics)`, ready to jit/vmap."""
    validate(config)
    return functools.partial(train, config)
