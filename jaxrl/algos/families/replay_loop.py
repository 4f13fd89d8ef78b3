"""The replay loop of the off-policy learners: DQN (`jaxrl.algos.dqn`) and DDPG / TD3 / SAC (through
`jaxrl.algos.families.off_policy`).

One iteration: every one of `num_envs` envs takes `num_steps` steps of the behaviour policy, and the transitions
(with their true successor observations, `info["final_observation"]`) go into the replay buffer (`jaxrl.replay`);
once `learning_starts` env steps are in and every env has written a sampling window, `updates_per_iteration`
gradient steps each learn from replayed batches. Before that the learner is unchanged and its stats read 0 (NaN
would look like a divergence).

The algorithm supplies the behaviour policy (or, for a policy with memory, its whole rollout), how a rollout goes
into the buffer, and its gradient step; the loop owns the order of the key splits and of the steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl import replay
from jaxrl.rollout import EnvCarry, no_critic, rollout
from jaxrl.types import Trajectory

# step(learner, key) -> (learner, stats): one gradient step on replayed data
Step = Callable[[Any, jax.Array], tuple[Any, dict[str, jax.Array]]]
# learning(buffer) -> (learner, step): what the gradient steps carry, and the step, for the buffer after storing
Learning = Callable[[Any], tuple[Any, Step]]


class Iteration(NamedTuple):
    """What one iteration of the loop leaves: the state's next key, the env carry, the rollout, the buffer, the
    learner after the gradient steps and their stats (averaged over the steps). With a `collect` of its own the
    env carry and the rollout are what it returns."""

    key: jax.Array
    env: EnvCarry | Any
    traj: Trajectory | Any
    buffer: Any
    learner: Any
    stats: dict[str, jax.Array]


def iteration(
    config,
    env,
    act: Callable,
    env_carry: EnvCarry,
    key: jax.Array,
    iteration: jax.Array,
    store: Callable[[Trajectory], Any],
    learning: Learning,
    window: int = 1,
    collect: Callable[[Any, jax.Array], tuple[Any, Any]] | None = None,
) -> Iteration:
    """One iteration of the replay loop from the state's `key`, `env_carry` and `iteration` count.

    `act(obs, key) -> (action, log_prob)` is the behaviour policy; `store(traj)` returns the buffer with the
    rollout's transitions added; `learning(buffer)` returns the learner the gradient steps carry and the step
    `step(learner, key) -> (learner, stats)` that learns from that buffer; `window` is the number of steps a
    sample spans (n-step returns), which every env must have written before the first gradient step.
    `collect(env_carry, key) -> (env_carry, traj)`, when given, replaces the rollout of `act` (a behaviour with
    memory: the carry then holds the memory too); `store` receives the `traj` it returns.
    """
    key, rollout_key, learn_key = jax.random.split(key, 3)
    if collect is None:
        carry, traj = rollout(env, act, no_critic(env), env_carry, rollout_key, config.num_steps, keep_next_obs=True)
    else:
        carry, traj = collect(env_carry, rollout_key)
    buffer = store(traj)
    learner, step = learning(buffer)

    def learn(learner):
        learner, stats = jax.lax.scan(step, learner, jax.random.split(learn_key, config.updates_per_iteration))
        return learner, jax.tree.map(jnp.mean, stats)

    stats_shape = jax.eval_shape(learn, learner)[1]

    def wait(learner):  # before learning starts: no gradient step; the stats read 0
        return learner, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), stats_shape)

    env_steps = (iteration + 1) * config.env_steps_per_iteration
    ready = (env_steps >= config.learning_starts) & replay.can_sample(buffer, window)
    learner, stats = jax.lax.cond(ready, learn, wait, learner)
    return Iteration(key, carry, traj, buffer, learner, stats)
