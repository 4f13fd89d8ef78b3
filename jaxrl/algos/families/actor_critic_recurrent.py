"""The recurrent twin of the on-policy actor-critic family (a Config with `core` != "none", e.g. PPO's, IMPALA's):
torso -> core -> heads (`networks.recurrent.RecurrentActorCritic`), the memory carried in `TrainState.memory`
across steps and iterations, minibatches of whole environment sequences.

`Setup` has the surface of `families.actor_critic.Setup`, so an algorithm's `update` is written once for both:
- `collect`: `rollout.recurrent_rollout` from `state.memory`, the memory reset where an episode starts;
- `forward`: the core re-run over a minibatch's sequences (steps [T, B, ...]) from the states the rollout
  started them with and the rollout's episode starts, giving pi(.|o_0..o_t) and V(o_0..o_t);
- `updates`: `minibatch.sequence_minibatch_epochs`, minibatches of num_envs / num_minibatches sequences in
  time order, a large one's gradient taken over chunks of whole sequences in a data-parallel program;
- `next_state`: the state after the iteration, its memory included.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp

from jaxrl import envs
from jaxrl import minibatch as minibatches
from jaxrl.algos.families import actor_critic as ac
from jaxrl.algos.families.actor_critic import Rollout, TrainState
from jaxrl.networks import init_params
from jaxrl.networks.recurrent import RecurrentActorCritic, initial_hidden, make_core
from jaxrl.rollout import RecurrentAct, initial_memory, recurrent_rollout


def make_network(config, spec: envs.EnvSpec) -> RecurrentActorCritic:
    """`RecurrentActorCritic` on the Config's torso and the core `config.core` names, of `config.core_size` units
    (`networks.recurrent.make_core`)."""
    core = make_core(config.core, config.core_size)
    return RecurrentActorCritic(spec.action_dim, spec.discrete, ac.torso(config, spec), core, spec.action_mask)


def behaviour(network: RecurrentActorCritic, params) -> tuple[Callable, Callable]:
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


def split_behaviour(network: RecurrentActorCritic, mu_params, params) -> tuple[Callable, Callable]:
    """`behaviour` with the actor at `mu_params` (e.g. lagged parameters) sampling and the critic at `params`
    valuing, each stepping its own state (h_actor, h_critic)."""

    def step(hidden, obs, start, key):
        h_actor, dist = network.apply(mu_params, hidden[0], obs[None], start[None], method="policy")
        h_critic, value = network.apply(params, hidden[1], obs[None], start[None], method="value")
        action, log_prob = dist.sample_and_log_prob(seed=key)
        return (h_actor, h_critic), action[0], log_prob[0], value[0]

    def value(hidden, obs, start):
        return network.apply(params, hidden[1], obs[None], start[None], method="value")[1][0]

    return step, value


def evaluation_act(network: RecurrentActorCritic, params, deterministic: bool = True) -> RecurrentAct:
    """The actor alone with its memory (`rollout.RecurrentAct`): the mode when `deterministic`, else a sample."""

    def step(h, obs, start, key):
        h, dist = network.apply(params, h, obs[None], start[None], method="policy")
        action = dist.mode() if deterministic else dist.sample(seed=key)
        return h, action[0]

    return RecurrentAct(step, lambda batch: initial_hidden(network.core, batch)[0])


@dataclasses.dataclass(frozen=True)
class Setup(ac.Setup):
    """The static pieces of a recurrent learner: the env batch and the recurrent actor-critic network."""

    def init_params(self, key: jax.Array, obs: jax.Array):
        return init_params(
            self.network, key, initial_hidden(self.network.core, 1), obs[None, :1], jnp.ones((1, 1), bool)
        )

    def initial_memory(self, config):
        return initial_memory(initial_hidden(self.network.core, config.num_envs))

    def collect(self, config, state: TrainState, key: jax.Array, behaviour_params=None) -> Rollout:
        """`num_steps` steps from `state.memory` of the recurrent policy at `behaviour_params` (default
        `state.params`, one network pass a step), valued by the critic at `state.params`."""
        if behaviour_params is None:
            step, value = behaviour(self.network, state.params)
        else:
            step, value = split_behaviour(self.network, behaviour_params, state.params)
        out = recurrent_rollout(self.env, step, value, state.env, state.memory, key, config.num_steps)
        env, memory, traj, sequences = out
        return Rollout(traj, env, memory, sequences)

    def forward(self, params, minibatch):
        steps, initial = minibatch
        _, dist, values = self.network.apply(params, initial, steps["obs"], steps["starts"])
        return dist, values, steps

    def rollout_policy(self, params, rollout: Rollout):
        """pi(.|o_0..o_t) of the actor at `params`, re-run over the whole rollout from its stored start states."""
        sequences = rollout.sequences
        return self.network.apply(
            params, sequences.initial_hidden[0], rollout.traj.obs, sequences.starts, method="policy"
        )[1]

    def updates(self, config, loss: Callable, params, opt_state, rollout: Rollout, steps, key: jax.Array, chunked=None):
        """`update_epochs` passes of `num_minibatches` minibatches of whole environment sequences
        (`minibatch.sequence_minibatch_epochs`): `loss(params, (steps [T, B, ...], initial [B, ...]))`.

        `chunked`: (prepare, sample_mean_loss) as in `actor_critic.minibatch_updates`, `prepare` taking the
        minibatch's steps. Where `minibatch.sequence_chunks_pay` (large minibatches, data-parallel), a minibatch
        then takes its gradient in chunks of whole sequences, about `minibatch.GRADIENT_SEQUENCE_CHUNK_SAMPLES`
        samples each."""
        sequences = rollout.sequences
        grad = jax.grad(loss, has_aux=True)
        num_steps, num_envs = jax.tree.leaves(steps)[0].shape[:2]
        if chunked is not None and minibatches.sequence_chunks_pay(num_steps * num_envs // config.num_minibatches):
            prepare, sample_mean_loss = chunked
            per_chunk = max(1, minibatches.GRADIENT_SEQUENCE_CHUNK_SAMPLES // num_steps)

            def prepare_sequences(sequence_minibatch):
                steps, initial = sequence_minibatch
                return prepare(steps), initial

            grad = minibatches.chunked_gradient(prepare_sequences, sample_mean_loss, per_chunk, axes=(1, 0))

        params, opt_state, stats = minibatches.sequence_minibatch_epochs(
            grad,
            ac.make_optimizer(config),
            params,
            opt_state,
            steps | {"starts": sequences.starts},
            sequences.initial_hidden,
            key,
            config.update_epochs,
            config.num_minibatches,
        )
        return params, opt_state, jax.tree.map(jnp.mean, stats)

    def next_state(self, state: TrainState, params, opt_state, rollout: Rollout, key: jax.Array) -> TrainState:
        return ac.next_state(state, params, opt_state, rollout.env, key).replace(memory=rollout.memory)

    def evaluation_act(self, params, deterministic: bool = True):
        return evaluation_act(self.network, params, deterministic)


def setup(config) -> Setup:
    """The env batch (`actor_critic.make_env`) and the recurrent network (`make_network`)."""
    env = ac.make_env(config)
    return Setup(env, make_network(config, env.spec))
