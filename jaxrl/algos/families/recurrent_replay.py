"""Recurrent replay of the Q-learning family (DQN with `core`): R2D2's learner (Kapturowski et al. 2019,
"Recurrent Experience Replay in Distributed Reinforcement Learning").

The behaviour is the recurrent Q-network (`q_learning_recurrent.make_network`) acting epsilon-greedily, its state
carried from step to step and reset where an episode starts (`rollout.recurrent_rollout`). The replay keeps each
env's stream of steps together with the behaviour's state h_t before every step (`collect`), so a sampled window of
`sequence_length` = m consecutive steps comes with the state the behaviour had at its first step: R2D2's stored
state, for sequences overlapping by all but one step.

The learner (`td_errors`) first unrolls the online and the target networks over the window's first `burn_in` = b
steps from that stored state, without a loss and without a gradient, to refresh it for the current parameters
("burn-in"); from the refreshed states it unrolls both over the remaining m - b steps, with the episode starts
stored in the window resetting the state exactly as in the rollout (the cores' contract, `networks.recurrent`).
On those steps the loss is DQN's, with n-step (double) Q-learning targets cut at episode and window ends:

    h_b = core_theta(h_0; o_0..o_{b-1}),  h'_b = core_theta'(h_0; o_0..o_{b-1})          (burn-in, no gradient)
    delta_t = G_t - Q_theta(h_t, o_t, a_t),   t = b .. m - 1,
    G_t = sum_{k<n'} gamma^k r_{t+k} + gamma^n' (1 - term_{t+n'-1}) Q_theta'(h'_{t+n'}, o'_{t+n'-1}, a*),
    a* = argmax_a Q_theta'(...) (or, double, argmax_a Q_theta(h_{t+n'}, o'_{t+n'-1}, a)),

where o'_t is step t's true successor observation (the final one at a truncation) and h_{t+1} the state after the
core consumed o_t, so the successor's value is one more core step from it, also at the window's end and at a
truncation. Prioritised replay gives a sequence the priority p = eta max_t |delta_t| + (1 - eta) mean_t |delta_t|
with eta = 0.9 (`sequence_priority`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxrl import estimators, losses
from jaxrl.networks import epsilon_greedy
from jaxrl.networks.recurrent import RecurrentQNetwork
from jaxrl.rollout import EnvCarry, RecurrentCarry, recurrent_rollout

PRIORITY_ETA = 0.9  # R2D2's mixture of the max and the mean absolute TD error of a sequence


def collect(num_steps: int, env, network: RecurrentQNetwork, params, epsilon):
    """The behaviour's rollout for `replay_loop.iteration(collect=...)`: `(env_carry, key) -> (env_carry, (traj,
    sequences))` with `env_carry` = (EnvCarry, RecurrentCarry), `num_steps` epsilon-greedy steps of every env with
    the true successor observations (`traj.next_obs`) and the state before every step (`sequences.hidden`)."""

    def step(h, obs, start, key):
        h, q = network.apply(params, h, obs[None], start[None])
        action, log_prob = epsilon_greedy(q[0], epsilon).sample_and_log_prob(seed=key)
        return h, action, log_prob, jnp.zeros(log_prob.shape, jnp.float32)

    def no_value(h, obs, start):
        return jnp.zeros(start.shape, jnp.float32)

    def run(env_carry: tuple[EnvCarry, RecurrentCarry], key: jax.Array):
        carry, memory = env_carry
        carry, memory, traj, sequences = recurrent_rollout(
            env, step, no_value, carry, memory, key, num_steps, keep_next_obs=True, keep_hidden=True
        )
        return (carry, memory), (traj, sequences)

    return run


def burn_in(network: RecurrentQNetwork, params, h: Any, obs: jax.Array, starts: jax.Array) -> Any:
    """The state after the core consumed `obs` [b, B, ...] from `h` with the episode `starts` [b, B] (b may be 0:
    `h` itself), without a gradient."""
    if obs.shape[0] == 0:
        return h
    h, _ = network.apply(jax.lax.stop_gradient(params), h, obs, starts)
    return jax.lax.stop_gradient(h)


def unroll(network: RecurrentQNetwork, params, h: Any, obs: jax.Array, starts: jax.Array, next_obs: jax.Array):
    """Q-values along a sequence and at each step's successor: (Q(h_t, o_t) [T, B, A], Q(h_{t+1}, o'_t) [T, B, A])
    from `h` over `obs` [T, B, ...] with the episode `starts` [T, B], h_{t+1} the state after consuming o_t and
    o'_t = `next_obs`[t] fed as the continuation of the episode (one more core step, no reset)."""
    continuing = jnp.zeros(starts.shape[1:], bool)[None]

    def step(h, inputs):
        o, start, o_next = inputs
        h, q = network.apply(params, h, o[None], start[None])
        _, q_next = network.apply(params, h, o_next[None], continuing)
        return h, (q[0], q_next[0])

    _, (q, q_next) = jax.lax.scan(step, h, (obs, starts, next_obs))
    return q, q_next


def td_errors(params, target_params, network: RecurrentQNetwork, config, batch: dict[str, Any]):
    """TD errors of a batch of windows `[sequence_length, B, ...]` (with their stored states `batch["hidden"]` and
    episode starts `batch["starts"]`) on the steps after the burn-in: (delta [m - b, B], Q(h_t, o_t, a_t)
    [m - b, B]), with `config`'s burn_in, gamma, n_step and double (see the module docstring)."""
    b = config.burn_in
    h0 = jax.tree.map(lambda x: x[0], batch["hidden"])
    obs, starts, next_obs = batch["obs"], batch["starts"], batch["next_obs"]
    h_online = burn_in(network, params, h0, obs[:b], starts[:b])
    h_target = burn_in(network, target_params, h0, obs[:b], starts[:b])
    _, q_next = unroll(network, jax.lax.stop_gradient(target_params), h_target, obs[b:], starts[b:], next_obs[b:])
    if config.double:
        q, q_next_online = unroll(network, params, h_online, obs[b:], starts[b:], next_obs[b:])
        next_v = losses.action_value(q_next, jnp.argmax(jax.lax.stop_gradient(q_next_online), axis=-1))
    else:
        q = network.apply(params, h_online, obs[b:], starts[b:])[1]
        next_v = q_next.max(-1)
    returns = estimators.n_step_returns(
        batch["rewards"][b:], next_v, batch["terminated"][b:], batch["truncated"][b:], config.gamma, config.n_step
    )
    q_a = losses.action_value(q, batch["actions"][b:])
    return jax.lax.stop_gradient(returns) - q_a, q_a


def sequence_priority(td: jax.Array, eta=PRIORITY_ETA) -> jax.Array:
    """R2D2's priority of each sequence from its TD errors [T, B]: eta max_t |delta_t| + (1 - eta) mean_t |delta_t|."""
    magnitude = jnp.abs(td)
    return eta * magnitude.max(0) + (1.0 - eta) * magnitude.mean(0)
