"""The recurrent lambda-return iteration of the Q-learning family (PQN with `core="gru"`, PQN-RNN as in
purejaxql): the Q-network is torso -> core -> Q head (`networks.recurrent.RecurrentQNetwork`), its state carried
through the rollout and reset where an episode starts; the lambda-return targets (`q_learning.lambda_targets`)
come from the Q-values the rollout saw, and the regression re-runs the core over minibatches of whole environment
sequences from their initial states. The feed-forward twin is `q_learning.lambda_update`.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxrl import envs, losses
from jaxrl.algos.base import takes_setup
from jaxrl.algos.families import q_learning
from jaxrl.algos.families.q_learning import BootstrapValue, LambdaConfig, LambdaState, Setup, epsilon_at, lambda_targets
from jaxrl.minibatch import sequence_minibatch_epochs
from jaxrl.networks import epsilon_greedy, init_params
from jaxrl.networks.recurrent import RecurrentQNetwork, initial_state, make_core
from jaxrl.rollout import RecurrentAct, episode_metrics, initial_memory, recurrent_rollout, reset


def make_network(config: q_learning.Config, spec: envs.EnvSpec, dueling: bool = False) -> RecurrentQNetwork:
    """`RecurrentQNetwork`: the Config's torso, its `core` of `core_size` units, a Q head (`dueling`: V + A -
    mean(A))."""
    core = make_core(config.core, config.core_size)
    return RecurrentQNetwork(spec.action_dim, q_learning.make_torso(config, spec), core, dueling, spec.action_mask)


def setup(config: q_learning.Config, dueling: bool = False) -> Setup:
    """The env (`q_learning.make_env`) and the recurrent Q-network of `config`."""
    env = q_learning.make_env(config)
    return Setup(env, make_network(config, env.spec, dueling))


def init_network(setup: Setup, config: q_learning.Config, key: jax.Array):
    """(key, parameters, env carry, memory): a fresh env batch, Q-network parameters from `key`, and the core's
    initial state for every env, each at an episode start."""
    network = setup.network
    key, net_key, env_key = jax.random.split(key, 3)
    carry = reset(setup.env, env_key)
    params = init_params(network, net_key, initial_state(network.core, 1), carry.obs[None, :1], jnp.ones((1, 1), bool))
    memory = initial_memory(initial_state(network.core, config.num_envs))
    return key, params, carry, memory


@takes_setup
def init(setup: Setup, config: LambdaConfig, key: jax.Array) -> LambdaState:
    """Fresh Q-network parameters, reset envs and the core's initial state for every env."""
    key, params, carry, memory = init_network(setup, config, key)
    opt_state = q_learning.lambda_optimizer(config).init(params)
    return LambdaState(params, opt_state, carry, key, jnp.zeros((), jnp.int32), memory)


def q_act(network: RecurrentQNetwork, params, epsilon, deterministic: bool) -> RecurrentAct:
    """Greedy (or `epsilon`-greedy) in the recurrent Q-values, with memory (`rollout.RecurrentAct`)."""

    def step(h, obs, start, key):
        h, q = network.apply(params, h, obs[None], start[None])
        action = jnp.argmax(q[0], axis=-1) if deterministic else epsilon_greedy(q[0], epsilon).sample(seed=key)
        return h, action

    return RecurrentAct(step, lambda batch: initial_state(network.core, batch))


def evaluation_policy(setup: Setup, config: LambdaConfig, state: LambdaState, deterministic: bool = True):
    """The greedy policy (or epsilon_end-greedy when not `deterministic`) of the recurrent Q-network."""
    act = q_act(setup.network, state.params, config.epsilon_end, deterministic)
    return act, envs.observation_normalizer(state.env.state)


def regression_loss(params, minibatch, network: RecurrentQNetwork):
    """`q_learning.regression_loss` over sequences: Q(h_t, o_t, a_t) from the core re-run over steps [T, B, ...]
    from the minibatch's initial states with the rollout's episode starts."""
    steps, initial = minibatch
    _, q_values = network.apply(params, initial, steps["obs"], steps["starts"])
    q = losses.action_value(q_values, steps["actions"])
    loss = losses.l2(jax.lax.stop_gradient(steps["targets"]) - q).mean()
    return loss, {"loss": loss, "q_mean": q.mean()}


@takes_setup
def update(
    setup: Setup, config: LambdaConfig, state: LambdaState, value: BootstrapValue
) -> tuple[LambdaState, dict[str, jax.Array]]:
    """`q_learning.lambda_update` of a recurrent Q-network: next values `value(Q(h_{t+1}, o_{t+1}), epsilon)`
    from the rollout's own states (at a truncation, one more core step from h'_t on the final observation),
    lambda-return targets, then `update_epochs` x `num_minibatches` regression steps on whole environment
    sequences."""
    env, network = setup.env, setup.network
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
    grad_fn = jax.grad(functools.partial(regression_loss, network=network), has_aux=True)
    params, opt_state, stats = sequence_minibatch_epochs(
        grad_fn,
        q_learning.lambda_optimizer(config),
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
