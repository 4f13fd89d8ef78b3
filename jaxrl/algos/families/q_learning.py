"""The Q-learning family: what DQN, PQN and SARSA share.

All three (`Config`, `validate_common`, `Setup`, `setup`, `epsilon_at`, `behaviour`, `q_evaluation_policy`):
discrete actions, a Q-network (`networks.QNetwork` on the torso the `torso` field names: an MLP, or a CNN for
images), and `num_envs` envs acting epsilon-greedily in it, with epsilon decayed linearly from `epsilon_start` to
`epsilon_end` over the first `epsilon_decay_fraction` of the run. Evaluation is greedy (or epsilon_end-greedy).

PQN and SARSA (`LambdaConfig`, `LambdaState`, `lambda_update`): the replay-free, target-free iteration of Gallici
et al. 2024 ("Simplifying Deep Temporal Difference Learning", arXiv 2407.04811). Every env takes `num_steps`
epsilon-greedy steps; the rollout gets lambda-return targets (`estimators.lambda_returns`)

    G_t = r_t + gamma (1 - term_t) [(1 - lambda) next_v_t + lambda G_{t+1}],   cut at episode and window ends,

and `update_epochs` passes of shuffled minibatches regress Q(o, a) on them. The two differ only in the bootstrap
value next_v_t: PQN's max_a Q(o', a) gives Peng's Q(lambda) (Peng & Williams 1996), SARSA's values of the
epsilon-greedy behaviour policy give SARSA(lambda) / Expected SARSA(lambda). The recurrent twin of this
iteration (PQN with `core="gru"`) is `jaxrl.algos.families.q_learning_recurrent`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl import config_rules, envs, estimators, losses, networks, optim, parallel
from jaxrl.algos import base
from jaxrl.algos.base import (
    check_common,
    hyper,
    shared,
    static,
    takes_setup,
)
from jaxrl.minibatch import minibatch_epochs
from jaxrl.networks import QNetwork, epsilon_greedy
from jaxrl.networks.recurrent import RecurrentQNetwork
from jaxrl.rollout import EnvCarry, RecurrentCarry, episode_metrics, reset, rollout
from jaxrl.types import Trajectory

# value(q_values [..., A], epsilon) -> [...]: the bootstrap value of a successor observation from its action values
BootstrapValue = Callable[[jax.Array, Any], jax.Array]
# next_values(traj, q_values [T, N, A]) -> [T, N]: rewrites a rollout's next values from Q(o_t, .) of its steps
NextValues = Callable[[Trajectory, jax.Array], jax.Array]


@struct.dataclass
class Config(base.Config):
    """The fields every Q-learning algorithm shares; a subclass redeclares one only to change its default or help."""

    env: str = static("CartPole-v1", "gymnax environment id (discrete actions)")
    num_envs: int = shared("num_envs", 32)
    num_steps: int = shared("num_steps", 32)
    total_timesteps: int = shared("total_timesteps", 200_000)
    torso: str = shared("torso", "mlp")
    hidden_sizes: tuple[int, ...] = static((128, 128), "hidden layer sizes of the Q-network (torso=mlp)")
    activation: str = shared("activation", "relu")
    layer_norm: bool = static(True, "LayerNorm before each hidden activation (stabilises bootstrapping)")
    learning_rate: float = hyper(5e-4, "learning rate of the optimiser")
    gamma: float = shared("gamma", 0.99)
    epsilon_start: float = hyper(1.0, "exploration epsilon at the start")
    epsilon_end: float = hyper(0.05, "exploration epsilon after the decay")
    epsilon_decay_fraction: float = hyper(0.2, "fraction of total_timesteps over which epsilon decays linearly")
    max_grad_norm: float = shared("max_grad_norm", 10.0)


def validate_common(config: Config, rules=config_rules.q_learning) -> None:
    """The checks every Q-learning Config shares: `check_common` (each field's type and rule, the env id, then
    `rules`, the algorithm's rules across its fields and with its env: discrete actions, a torso that fits)."""
    check_common(config, rules)


@struct.dataclass
class Setup:
    """The static pieces of a Config, built once by `setup`: the env batch and the Q-network."""

    env: envs.VecEnv = struct.field(pytree_node=False)
    network: QNetwork | RecurrentQNetwork = struct.field(pytree_node=False)


def make_env(config: Config) -> envs.VecEnv:
    """`num_envs` copies of the env (the family's one place that builds its env)."""
    return envs.make(config.env, config.num_envs, axis_name=parallel.axis_name())


def make_torso(config: Config, spec: envs.EnvSpec):
    """The observation encoder the `torso` field names, with the Config's sizes, activation and LayerNorm."""
    return networks.make_torso(
        config.torso, config.hidden_sizes, config.activation, config.layer_norm, spec.observation_shape
    )


def make_network(config: Config, spec: envs.EnvSpec, dueling: bool = False) -> QNetwork:
    """`QNetwork` (torso -> Q head, `dueling`: V + A - mean(A)) for the env's actions and action mask."""
    return QNetwork(spec.action_dim, make_torso(config, spec), dueling, spec.action_mask)


def setup(config: Config, dueling: bool = False) -> Setup:
    """The env (`make_env`) and the feed-forward Q-network (`make_network`) of `config`."""
    env = make_env(config)
    return Setup(env, make_network(config, env.spec, dueling))


def init_network(setup: Setup, key: jax.Array):
    """(key, parameters, env carry): a fresh env batch and Q-network parameters from `key`."""
    key, net_key, env_key = jax.random.split(key, 3)
    carry = reset(setup.env, env_key)
    return key, networks.init_params(setup.network, net_key, carry.obs[:1]), carry


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
    """`(act(obs, key) -> action, normalize)` for `jaxrl.episodes.evaluate`: greedy, or epsilon-greedy at `epsilon`."""

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
    update_epochs: int = shared("update_epochs", 2)
    num_minibatches: int = shared("num_minibatches", 8)
    anneal_lr: bool = shared("anneal_lr", True)
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


def validate_lambda(config: LambdaConfig, rules=config_rules.q_lambda) -> None:
    """`validate_common` with the rules of the lambda-return iteration."""
    validate_common(config, rules)


def lambda_optimizer(config: LambdaConfig) -> optax.GradientTransformation:
    """Clipped RAdam (Liu et al. 2020), with `anneal_lr` decayed per iteration (`optim.learning_rate_schedule`)."""
    schedule = optim.learning_rate_schedule(
        config.learning_rate, config.anneal_lr, config.updates_per_iteration, config.num_iterations
    )
    return optim.clipped_optimizer("radam", schedule, config.max_grad_norm)


def evaluation_policy(setup: Setup, config: Config, state, deterministic: bool = True):
    """The greedy policy (or epsilon_end-greedy when not `deterministic`) of the (online) Q-network."""
    return q_evaluation_policy(setup.network, state.params, state.env.state, config.epsilon_end, deterministic)


@takes_setup
def lambda_init(setup: Setup, config: LambdaConfig, key: jax.Array) -> LambdaState:
    key, params, carry = init_network(setup, key)
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


@takes_setup
def lambda_update(
    setup: Setup,
    config: LambdaConfig,
    state: LambdaState,
    value: BootstrapValue,
    next_values: NextValues | None = None,
) -> tuple[LambdaState, dict[str, jax.Array]]:
    """One iteration: epsilon-greedy rollout, lambda-return targets with the bootstrap values `value` and
    `next_values` (see `collect`), then `update_epochs` x `num_minibatches` regression steps."""
    env, network = setup.env, setup.network
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
