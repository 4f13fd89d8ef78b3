"""PQN: config validation, metrics, determinism, vmap over seeds and hyperparameters, Q(lambda) targets, learning."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_trees_close, index, runner_jit
from jaxrl import envs, rollout
from jaxrl.algos import pqn
from jaxrl.algos.families import q_learning

TINY = pqn.Config(
    num_envs=4, num_steps=16, total_timesteps=4 * 16 * 3, update_epochs=2, num_minibatches=2, hidden_sizes=(16, 16)
)


@pytest.fixture(scope="module")
def runs():
    """Separate runs (2 keys of TINY, and TINY with another learning rate) and one vmapped program holding them."""
    keys = jax.random.split(jax.random.key(0), 2)
    other = dataclasses.replace(TINY, learning_rate=2e-3, q_lambda=0.5)
    train = jax.jit(pqn.train)
    separate = [train(TINY, keys[0]), train(TINY, keys[1]), train(other, keys[1])]
    configs = jax.tree.map(lambda *xs: jnp.stack(xs), TINY, TINY, other)
    batched = jax.jit(jax.vmap(pqn.train))(configs, jnp.stack([keys[0], keys[1], keys[1]]))
    return keys, train, separate, batched


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(env="Pendulum-v1"), "env"),
        (dict(env="CartPol-v1"), "CartPole-v1"),
        (dict(num_minibatches=3), "num_minibatches"),
        (dict(total_timesteps=10), "total_timesteps"),
        (dict(q_lambda=1.5), "q_lambda"),
        (dict(gamma=-0.1), "gamma"),
        (dict(epsilon_start=2.0), "epsilon_start"),
        (dict(reward_scale=0.0), "reward_scale"),
        (dict(activation="sigmoid"), "activation"),
        (dict(num_envs=0), "num_envs"),
    ],
)
def test_bad_config_raises_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        pqn.make_train(dataclasses.replace(pqn.Config(), **overrides))


@pytest.mark.extended
def test_metrics_are_per_iteration(runs):
    _, _, separate, _ = runs
    state, metrics = separate[0]
    for name in ("episode_return", "episode_length", "episodes", "loss", "q_mean", "epsilon"):
        assert metrics[name].shape == (TINY.num_iterations,), name
    assert int(state.iteration) == TINY.num_iterations
    assert np.all(np.isfinite(metrics["loss"]))
    assert "LayerNorm_0" in state.params["params"]
    expected = 1.0 - 0.95 * np.arange(3) * TINY.env_steps_per_iteration / (0.2 * TINY.total_timesteps)
    np.testing.assert_allclose(metrics["epsilon"], np.maximum(expected, 0.05), rtol=1e-5)


@pytest.mark.slow
def test_same_key_same_result_different_key_different(runs):
    keys, train, separate, _ = runs
    assert_trees_close(train(TINY, keys[0]), separate[0], rtol=0, atol=0)
    a, b = jax.tree.leaves(separate[0][0].params), jax.tree.leaves(separate[1][0].params)
    assert any(not np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.slow
def test_vmap_over_seeds_and_hyperparameters_equals_separate_runs(runs):
    keys, train, separate, batched = runs
    for i, run in enumerate(separate):
        assert_trees_close(index(batched, i), run)
    before = train._cache_size()
    train(dataclasses.replace(TINY, q_lambda=0.3), keys[0])
    assert train._cache_size() == before


@pytest.mark.slow
def test_q_lambda_targets_match_a_numpy_reference():
    """On a rollout with terminations and truncations (12-step time limit): next values are max_a Q of the true
    successor (0 after termination), and the targets follow Peng's Q(lambda) recursion, cut at episode ends."""
    config = dataclasses.replace(TINY, num_steps=48, gamma=0.9, q_lambda=0.7, reward_scale=0.5)
    env = envs.make(config.env, config.num_envs, max_steps_in_episode=12)
    network = pqn.setup(config).network

    @jax.jit
    def run(key):
        carry = rollout.reset(env, key)
        params = network.init(key, carry.obs[:1])
        act = q_learning.behaviour(network, params, 0.5)
        _, traj = rollout.rollout(
            env, act, lambda o: network.apply(params, o).max(-1), carry, key, config.num_steps, keep_next_obs=True
        )
        return traj, network.apply(params, traj.next_obs).max(-1), q_learning.lambda_targets(config, traj)

    traj, v_next, targets = jax.tree.map(np.asarray, run(jax.random.key(3)))
    assert traj.terminated.any() and (traj.truncated & ~traj.terminated).any()
    np.testing.assert_allclose(traj.next_values, np.where(traj.terminated, 0.0, v_next), rtol=1e-5, atol=1e-6)
    g, lam = config.gamma, config.q_lambda
    expected = np.zeros_like(targets)
    for n in range(config.num_envs):
        after = 0.0
        for t in reversed(range(config.num_steps)):
            r = 0.5 * traj.rewards[t, n]
            if traj.terminated[t, n]:
                after = r
            elif traj.truncated[t, n] or t == config.num_steps - 1:
                after = r + g * v_next[t, n]
            else:
                after = r + g * ((1 - lam) * v_next[t, n] + lam * after)
            expected[t, n] = after
    np.testing.assert_allclose(targets, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_pqn_learns_cartpole():
    """Defaults (200k env steps): mean return of the episodes in the last 10% of iterations >= 400 on >= 2 of 3
    seeds."""
    config = pqn.Config()
    _, metrics = runner_jit(jax.vmap(pqn.make_train(config)))(jax.random.split(jax.random.key(0), 3))
    returns = np.asarray(metrics["episode_return"])
    final = np.nanmean(returns[:, -returns.shape[1] // 10 :], axis=1)
    assert (final >= 400).sum() >= 2, final


@pytest.mark.extended
def test_cnn_torso_on_minatar_runs_and_refuses_vector_observations():
    """torso="cnn": PQN trains on Breakout-MinAtar's [10, 10, 4] images with the MinAtar network; an image torso
    on CartPole's vector observations is refused before compiling, naming the field."""
    config = pqn.Config(
        env="Breakout-MinAtar", torso="cnn", num_envs=4, num_steps=8, total_timesteps=64, num_minibatches=2
    )
    state, metrics = jax.jit(pqn.make_train(config))(jax.random.key(0))
    assert state.params["params"]["Conv_0"]["kernel"].shape == (3, 3, 4, 16)
    assert metrics["loss"].shape == (2,) and np.isfinite(metrics["loss"]).all()
    with pytest.raises(ValueError, match="Config.torso.*image observations"):
        pqn.make_train(pqn.Config(torso="cnn"))
