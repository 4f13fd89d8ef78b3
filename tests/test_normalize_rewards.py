"""Reward normalisation (`envs.NormalizeReward`, `Config.normalize_rewards`): against a NumPy loop, episode
statistics stay raw, and the on-policy learners read the scaled rewards."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import runner_jit
from jaxrl import envs
from jaxrl.algos import ppo


def play(env, steps: int, seed: int = 0):
    """Random actions for `steps` steps: (rewards, terminated, truncated, info episode returns, episode done)."""

    def step(carry, key):
        obs, state = carry
        k_act, k_env = jax.random.split(key)
        action = jax.random.uniform(k_act, (env.num_envs, env.spec.action_dim), minval=-2.0, maxval=2.0)
        obs, state, reward, terminated, truncated, info = env.step(k_env, state, action)
        return (obs, state), (reward, terminated, truncated, info["episode_return"], info["episode_done"])

    carry = env.reset(jax.random.key(seed))
    return jax.jit(lambda c: jax.lax.scan(step, c, jax.random.split(jax.random.key(seed + 1), steps))[1])(carry)


def numpy_normalize_reward(rewards, dones, gamma, epsilon=1e-8):
    """gym's NormalizeReward as CleanRL uses it, in float64: per step G = gamma G + r, RunningMeanStd.update(G)
    over the batch, r / sqrt(var + eps), G = 0 where done."""
    mean, var, count = 0.0, 1.0, 1e-4
    returns = np.zeros(rewards.shape[1])
    out = np.zeros_like(rewards, dtype=np.float64)
    for t in range(rewards.shape[0]):
        returns = gamma * returns + rewards[t]
        batch_mean, batch_var, batch_count = returns.mean(), returns.var(), returns.size
        delta = batch_mean - mean
        total = count + batch_count
        mean = mean + delta * batch_count / total
        var = (var * count + batch_var * batch_count + delta**2 * count * batch_count / total) / total
        count = total
        out[t] = rewards[t] / np.sqrt(var + epsilon)
        returns[dones[t]] = 0.0
    return out


@pytest.mark.slow
def test_matches_numpy_loop_and_keeps_raw_episode_statistics():
    gamma, steps = 0.9, 450  # Pendulum: dense negative rewards, time limit 200, so two episode ends per env
    raw = play(envs.make("Pendulum-v1", 3), steps)
    scaled = play(envs.make("Pendulum-v1", 3, normalize_rewards=True, reward_gamma=gamma), steps)
    r, terminated, truncated, episode_return, done = map(np.asarray, raw)
    assert done.sum() == 6
    np.testing.assert_array_equal(np.asarray(scaled[1]), terminated)  # same dynamics, same keys
    expected = numpy_normalize_reward(r.astype(np.float64), terminated | truncated, gamma)
    np.testing.assert_allclose(np.asarray(scaled[0]), expected, rtol=2e-5)
    assert not np.allclose(expected, r, rtol=0.1), "the scaling did something"
    np.testing.assert_array_equal(np.asarray(scaled[3]), episode_return)  # episode returns stay raw
    np.testing.assert_allclose(episode_return[199], r[:200].sum(0), rtol=1e-5)  # the raw sums of the episodes
    np.testing.assert_allclose(episode_return[399], r[200:400].sum(0), rtol=1e-5)
    assert np.all(np.asarray(scaled[4]) == done)


@pytest.mark.slow
def test_is_pure_and_shared_across_the_batch():
    env = envs.make("CartPole-v1", 5, normalize_rewards=True, reward_gamma=0.99)
    obs, state = env.reset(jax.random.key(0))
    assert state.reward_stats.var.shape == () and state.returns.shape == (5,)
    action = jnp.zeros(5, jnp.int32)
    a = env.step(jax.random.key(1), state, action)
    b = env.step(jax.random.key(1), state, action)
    jax.tree.map(np.testing.assert_array_equal, a, b)
    # CartPole's reward is 1 everywhere: one shared scale, applied to every env alike
    np.testing.assert_allclose(a[2], np.full(5, a[2][0]))
    assert float(a[1].reward_stats.count) == pytest.approx(5 + 1e-4)


@pytest.mark.slow
def test_on_policy_config_switch_wraps_the_learners_env():
    config = ppo.Config(env="Pendulum-v1", normalize_rewards=True, gamma=0.95)
    env = ppo.setup(config).env
    assert isinstance(env, envs.NormalizeReward) and env.gamma == 0.95
    assert isinstance(env.inner, envs.EpisodeStatistics)
    assert not isinstance(ppo.setup(dataclasses.replace(config, normalize_rewards=False)).env, envs.NormalizeReward)
    # observation normalisation is still found beneath it (evaluation reads it)
    both = ppo.setup(dataclasses.replace(config, normalize_observations=True)).env
    _, state = both.reset(jax.random.key(0))
    assert envs.observation_normalizer(state)(jnp.zeros(3)).shape == (3,)
    assert "stats" not in {f.name for f in dataclasses.fields(state)}, "reward stats must not shadow obs stats"


@pytest.mark.extended
def test_ppo_reports_raw_returns_and_learns_from_scaled_rewards():
    config = ppo.Config(env="Pendulum-v1", num_envs=4, num_steps=200, total_timesteps=4 * 200 * 2, num_minibatches=4)
    raw = runner_jit(ppo.train)(config, jax.random.key(0))[1]
    scaled = runner_jit(ppo.train)(dataclasses.replace(config, normalize_rewards=True), jax.random.key(0))[1]
    # iteration 0 acts with the same initial parameters and keys: the same episodes, reported raw in both
    np.testing.assert_allclose(scaled["episode_return"][0], raw["episode_return"][0], rtol=1e-6)
    assert float(raw["episode_return"][0]) < -100  # Pendulum's raw scale, not the normalised one
    # the value targets are on the scaled rewards' scale: a much smaller value loss
    assert float(scaled["value_loss"][0]) < 0.1 * float(raw["value_loss"][0])
