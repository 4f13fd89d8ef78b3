"""PPO: config validation, determinism, vmap over seeds and hyperparameters, learning."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_trees_close, index, runner_jit
from jaxrl.algos import ppo

TINY = ppo.Config(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 3, update_epochs=2, num_minibatches=2)


def run_tiny(config, key):
    return jax.jit(ppo.train)(config, key)


@pytest.fixture(scope="module")
def tiny_runs():
    keys = jax.random.split(jax.random.key(0), 4)
    separate = [run_tiny(TINY, k) for k in keys]
    batched = jax.jit(jax.vmap(ppo.make_train(TINY)))(keys)
    return keys, separate, batched


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(num_minibatches=3), "num_minibatches"),
        (dict(env="CartPol-v1"), "CartPole-v1"),
        (dict(total_timesteps=10), "total_timesteps"),
        (dict(gamma=1.5), "gamma"),
        (dict(learning_rate=-1.0), "learning_rate"),
        (dict(num_envs=0), "num_envs"),
        (dict(activation="sigmoid"), "activation"),
        (dict(env="Pendulum-v1", bound_mean=True, core="gru"), "bound_mean"),
    ],
)
def test_bad_config_raises_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        ppo.make_train(dataclasses.replace(ppo.Config(), **overrides))


@pytest.mark.extended
def test_metrics_are_per_iteration(tiny_runs):
    _, separate, _ = tiny_runs
    state, metrics = separate[0]
    for name in (
        "episode_return",
        "episode_length",
        "episodes",
        "policy_loss",
        "value_loss",
        "entropy",
        "approx_kl",
        "clip_fraction",
    ):
        assert metrics[name].shape == (TINY.num_iterations,), name
    assert int(state.iteration) == TINY.num_iterations
    assert np.all(np.isfinite(metrics["value_loss"]))


@pytest.mark.slow
def test_same_key_same_result_different_key_different(tiny_runs):
    keys, separate, _ = tiny_runs
    again = run_tiny(TINY, keys[0])
    assert_trees_close(again, separate[0], rtol=0, atol=0)
    a = jax.tree.leaves(separate[0][0].params)
    b = jax.tree.leaves(separate[1][0].params)
    assert any(not np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.slow
def test_vmap_over_keys_equals_separate_runs(tiny_runs):
    _, separate, batched = tiny_runs
    for i, run in enumerate(separate):
        assert_trees_close(index(batched, i), run)


@pytest.mark.slow
def test_hyperparameters_vmap_without_recompiling():
    configs = [dataclasses.replace(TINY, learning_rate=lr, clip_eps=eps) for lr, eps in [(1e-3, 0.1), (3e-3, 0.3)]]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *configs)
    key = jax.random.key(1)
    train = jax.jit(ppo.train)
    batched = jax.jit(jax.vmap(ppo.train, in_axes=(0, None)))(stacked, key)
    for i, config in enumerate(configs):
        single = train(config, key)
        assert_trees_close(index(batched, i), single)
    # the learning rate is a traced leaf: a new value reuses the compiled program
    before = train._cache_size()
    train(dataclasses.replace(TINY, learning_rate=7e-4), key)
    assert train._cache_size() == before


@pytest.mark.extended
def test_continuous_actions_run():
    config = dataclasses.replace(TINY, env="Pendulum-v1", normalize_observations=True)
    state, metrics = jax.jit(ppo.make_train(config))(jax.random.key(0))
    assert state.params["params"]["log_std"].shape == (1,)
    assert np.all(np.isfinite(metrics["policy_loss"]))


@pytest.mark.slow
def test_ppo_learns_cartpole():
    """Defaults: mean return of completed episodes >= 475 within the default 2e5 steps on >= 3 of 4 seeds."""
    config = ppo.Config()
    _, metrics = runner_jit(jax.vmap(ppo.make_train(config)))(jax.random.split(jax.random.key(42), 4))
    best = np.nanmax(np.asarray(metrics["episode_return"]), axis=1)
    final = np.nanmean(np.asarray(metrics["episode_return"])[:, -5:], axis=1)
    assert (best >= 475).sum() >= 3, best
    assert (final >= 400).sum() >= 3, final


@pytest.mark.extended
def test_cnn_torso_on_minatar_runs_and_refuses_vector_observations():
    """torso="cnn": PPO's actor and critic read Breakout-MinAtar's [10, 10, 4] images through the MinAtar network;
    an image torso on CartPole's vector observations is refused before compiling, naming the field."""
    config = ppo.Config(env="Breakout-MinAtar", torso="cnn", num_envs=4, num_steps=8, total_timesteps=64)
    state, metrics = jax.jit(ppo.make_train(config))(jax.random.key(0))
    assert state.params["params"]["actor"]["Conv_0"]["kernel"].shape == (3, 3, 4, 16)
    assert state.params["params"]["critic"]["Conv_0"]["kernel"].shape == (3, 3, 4, 16)
    assert metrics["value_loss"].shape == (2,) and np.isfinite(metrics["value_loss"]).all()
    with pytest.raises(ValueError, match="Config.torso.*image observations"):
        ppo.make_train(ppo.Config(torso="cnn"))
