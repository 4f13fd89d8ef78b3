"""REINFORCE: the Monte Carlo policy gradient (Williams 1992), optionally with a learned value baseline.

One iteration: roll out `num_envs` x `num_steps`, compute discounted returns G_t (`estimators.discounted_returns`)
and take one gradient step (or `update_epochs` x `num_minibatches`) on -(G_t - b(s_t)) log pi(a_t|s_t) averaged
over the steps, minus an entropy bonus, plus the baseline's regression 0.5 (V(s_t) - G_t)^2.

Returns and windows (`num_steps`):
- `baseline=True` (default): b = V, and G_t bootstraps from V where the data stops short of the episode's end: at
  the window's end from V(o_T), at a time-limit truncation from V(final observation). This is REINFORCE with
  baseline (Sutton & Barto 2018, Sec. 13.4) whose tails beyond the window are estimated by the critic: no bias
  from the cut beyond the critic's error.
- `baseline=False`: b = 0 and no critic is evaluated (`rollout.zero_value`), so G_t is the pure Monte Carlo return
  up to the episode's end or the window's end, whichever comes first. Steps whose episode runs past the window
  lose the rewards after it: their returns are biased low, by at most gamma^(T - t) of the tail's value, so the
  bias concerns the last ~1 / (1 - gamma) steps of each window. Time-limit truncations end the return as the
  episode does (the finite-horizon objective). `whole_episodes` removes the window's bias.
- `whole_episodes=True`: every env is reset at the start of the rollout and only its first episode in the window
  is learned from (later steps are masked out, still simulated and counted in `total_timesteps`). With
  `num_steps` >= the env's time limit (500 for CartPole-v1) every return is that of a complete episode: textbook
  episodic REINFORCE, exact without a critic, at the price of simulating masked steps.

As usual, the gamma^t factor of the discounted policy-gradient theorem is dropped (Thomas 2014). Advantages are
normalised over the batch by default (`normalize_advantages`), a common variance reduction; with `update_epochs`
> 1 the later steps are importance-weighted by pi / mu (`losses.policy_gradient_loss`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import config_rules, estimators
from jaxrl.algos.base import check, hyper, make_train, shared, static, takes_setup, train  # noqa: F401 (re-exports make_train, train)
from jaxrl.algos.families import actor_critic as ac
from jaxrl.algos.families.actor_critic import TrainState, behaviour, evaluation_policy, init  # noqa: F401
from jaxrl.rollout import episode_metrics, first_episode_mask, no_critic, reset, rollout
from jaxrl.types import Trajectory


@struct.dataclass
class Config(ac.Config):
    num_envs: int = shared("num_envs", 8)
    num_steps: int = static(64, "rollout window T per iteration, per environment (returns are cut at its end)")
    total_timesteps: int = shared("total_timesteps", 300_000)
    baseline: bool = static(True, "learn a value baseline V(s); returns bootstrap from it at window ends")
    whole_episodes: bool = static(False, "reset envs each rollout; learn from each env's first episode only")
    update_epochs: int = static(1, "passes over each rollout (1: one gradient step, plain REINFORCE)")
    num_minibatches: int = shared("num_minibatches", 1)
    anneal_lr: bool = shared("anneal_lr", True)
    normalize_advantages: bool = static(True, "normalise advantages (returns without a baseline) over the batch")
    learning_rate: float = shared("learning_rate", 3e-3)
    ent_coef: float = shared("ent_coef", 0.0)
    vf_coef: float = hyper(0.5, "value (baseline) loss coefficient")


def validate(config: Config) -> None:
    """Raises a ValueError naming the field and the fix for a config that cannot run."""
    ac.validate(config, config_rules.reinforce)


setup = ac.setup  # the env batch and the actor-critic network


def advantages(config: Config, traj: Trajectory) -> tuple[jax.Array, jax.Array]:
    """(advantages G_t - V(s_t), returns G_t). Without a baseline the rollout's values are 0, so both are the
    Monte Carlo returns cut at the window's end."""
    returns = estimators.discounted_returns(
        traj.rewards, traj.next_values, traj.terminated, traj.truncated, config.gamma
    )
    return returns - traj.values, returns


@takes_setup
def update(setup: ac.Setup, config: Config, state: TrainState) -> tuple[TrainState, dict[str, jax.Array]]:
    """One iteration: rollout, Monte Carlo returns, one (or epochs x minibatches) policy-gradient step."""
    env, network = setup.env, setup.network
    key, reset_key, rollout_key, step_key = jax.random.split(state.key, 4)

    carry = reset(env, reset_key) if config.whole_episodes else state.env
    act, value = behaviour(network, state.params)
    if not config.baseline:
        value = no_critic(env)
    carry, traj = rollout(env, act, value, carry, rollout_key, config.num_steps)
    mask = first_episode_mask(traj.done) if config.whole_episodes else jnp.ones(traj.rewards.shape, bool)
    batch = ac.rollout_batch(traj, *advantages(config, traj), mask)
    params, opt_state, stats = ac.actor_critic_step(
        config, network, state.params, state.opt_state, batch, step_key, config.baseline
    )
    metrics = {**episode_metrics(traj), **stats, "valid_fraction": mask.mean()}
    return ac.next_state(state, params, opt_state, carry, key), metrics
