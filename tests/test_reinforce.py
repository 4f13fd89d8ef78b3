"""REINFORCE: the score-function gradient on a bandit, Monte Carlo returns and their cuts, config validation,
metrics, vmap over seeds, learning."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_trees_close, index, runner_jit
from jaxrl.algos import reinforce
from jaxrl.algos.families import actor_critic
from jaxrl.networks import ActorCritic, MLPTorso
from jaxrl.types import Trajectory

# the non-default paths (whole episodes, no critic); the learning test runs the defaults
TINY = reinforce.Config(
    num_envs=4, num_steps=32, total_timesteps=4 * 32 * 3, hidden_sizes=(16,), whole_episodes=True, baseline=False
)


@pytest.fixture(scope="module")
def tiny_runs():
    keys = jax.random.split(jax.random.key(0), 2)
    batched = jax.jit(jax.vmap(reinforce.make_train(TINY)))(keys)
    train = jax.jit(reinforce.train)
    separate = [train(TINY, k) for k in keys]
    return separate, batched


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(num_minibatches=3), "num_minibatches"),
        (dict(env="CartPol-v1"), "CartPole-v1"),
        (dict(total_timesteps=10), "total_timesteps"),
        (dict(gamma=1.5), "gamma"),
        (dict(learning_rate=0.0), "learning_rate"),
        (dict(num_steps=0), "num_steps"),
        (dict(optimizer="sgd"), "optimizer"),
        (dict(whole_episodes=True, normalize_observations=True), "normalize_observations"),
        (dict(activation="sigmoid"), "activation"),
    ],
)
def test_bad_config_raises_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        reinforce.make_train(dataclasses.replace(reinforce.Config(), **overrides))


def _fake_trajectory(rewards, terminated, truncated, values=None, next_values=None):
    zeros = jnp.zeros_like(rewards)
    return Trajectory(
        obs=zeros[..., None],
        actions=zeros.astype(jnp.int32),
        rewards=rewards,
        terminated=terminated,
        truncated=truncated,
        log_probs=zeros,
        values=zeros if values is None else values,
        next_values=zeros if next_values is None else next_values,
        episode_return=zeros,
        episode_length=zeros.astype(jnp.int32),
    )


def _bandit():
    """A softmax policy over 3 arms with fixed logits (a bias-only linear layer on a constant observation)."""
    network = ActorCritic(3, True, MLPTorso(()))
    params = network.init(jax.random.key(0), jnp.ones((1, 1)))
    logits = jnp.array([0.3, -0.5, 1.1])
    params["params"]["actor"]["Dense_0"] = {"kernel": jnp.zeros((1, 3)), "bias": logits}
    rewards = jnp.array([1.0, 0.2, -0.4])
    return network, params, jax.nn.softmax(logits), rewards


@functools.partial(jax.jit, static_argnums=0)
def _reinforce_grad(network, params, actions, rewards_of_actions):
    """Gradient (on the logits) of REINFORCE's loss on one-step episodes with actions `actions`."""
    config = dataclasses.replace(reinforce.Config(baseline=False), normalize_advantages=False)
    traj = _fake_trajectory(rewards_of_actions[None], jnp.ones((1, actions.size), bool), jnp.zeros((1, actions.size)))
    advantages, _ = reinforce.advantages(config, traj)
    obs = jnp.ones((actions.size, 1))
    log_probs = network.apply(params, obs, method=ActorCritic.policy).log_prob(actions)
    batch = {
        "obs": obs,
        "actions": actions,
        "log_probs": log_probs,
        "advantages": advantages[0],
        "targets": advantages[0],
        "mask": jnp.ones(actions.size, bool),
    }
    grads, _ = jax.grad(actor_critic.actor_critic_loss, has_aux=True)(params, network, config, batch, False)
    return grads["params"]["actor"]["Dense_0"]["bias"]


@pytest.mark.slow
def test_gradient_on_a_bandit_is_the_policy_gradient():
    """One-step episodes: the expectation of REINFORCE's gradient equals -grad J for J = sum_a pi(a) r(a), whose
    exact form is sum_a pi(a) r(a) grad log pi(a) = pi * (r - pi . r) on softmax logits."""
    network, params, probs, rewards = _bandit()
    analytic = probs * (rewards - probs @ rewards)
    by_autodiff = jax.grad(lambda z: jax.nn.softmax(z) @ rewards)(jnp.log(probs))
    np.testing.assert_allclose(by_autodiff, analytic, rtol=1e-5, atol=1e-7)

    # exact expectation over the enumerated actions: each action's one-sample gradient weighted by pi(a)
    arms = jnp.arange(3)
    per_action = jax.vmap(lambda a: _reinforce_grad(network, params, a[None], rewards[a][None]))(arms)
    np.testing.assert_allclose(-(probs @ per_action), analytic, rtol=1e-5, atol=1e-6)
    # per action: -r(a) grad log pi(a) = -r(a) (onehot(a) - pi)
    np.testing.assert_allclose(per_action, -rewards[:, None] * (jnp.eye(3) - probs), rtol=1e-5, atol=1e-6)

    # Monte Carlo: the batch-mean gradient of 40000 sampled pulls is within ~5 standard errors
    actions = jax.random.categorical(jax.random.key(1), jnp.log(probs), shape=(40_000,))
    sampled = _reinforce_grad(network, params, actions, rewards[actions])
    np.testing.assert_allclose(-sampled, analytic, atol=0.02)


def test_returns_are_cut_at_the_window_without_baseline_and_bootstrap_with_it():
    config = reinforce.Config(gamma=0.5)
    rewards = jnp.array([[1.0], [2.0], [4.0], [8.0]])
    terminated = jnp.array([[False], [True], [False], [False]])
    truncated = jnp.zeros((4, 1), bool)
    _, pure = reinforce.advantages(config, _fake_trajectory(rewards, terminated, truncated))
    np.testing.assert_allclose(pure[:, 0], [1 + 0.5 * 2, 2, 4 + 0.5 * 8, 8])
    values = jnp.full((4, 1), 3.0)
    next_values = jnp.array([[3.0], [0.0], [3.0], [10.0]])
    adv, returns = reinforce.advantages(config, _fake_trajectory(rewards, terminated, truncated, values, next_values))
    np.testing.assert_allclose(returns[:, 0], [2, 2, 4 + 0.5 * (8 + 0.5 * 10), 8 + 0.5 * 10])
    np.testing.assert_allclose(adv, returns - 3.0)


@pytest.mark.extended
def test_metrics_are_per_iteration(tiny_runs):
    separate, _ = tiny_runs
    state, metrics = separate[0]
    for name in ("episode_return", "episode_length", "episodes", "policy_loss", "value_loss", "entropy", "kl"):
        assert metrics[name].shape == (TINY.num_iterations,), name
    assert int(state.iteration) == TINY.num_iterations
    assert np.all(metrics["kl"] >= 0) and np.all(np.isfinite(metrics["policy_loss"]))
    # whole episodes: CartPole's random episodes end well before 32 steps, and the rest is masked out
    assert np.all((0.0 < metrics["valid_fraction"]) & (metrics["valid_fraction"] < 1.0))
    assert np.all(metrics["value_loss"] == 0.0)  # no critic without a baseline


@pytest.mark.extended  # the actor-critic family's vmap check is PPO's, in the default suite
def test_vmap_over_keys_equals_separate_runs(tiny_runs):
    separate, batched = tiny_runs
    for i, run in enumerate(separate):
        assert_trees_close(index(batched, i), run)
    a, b = (jax.tree.leaves(run[0].params) for run in separate)
    assert any(not np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@pytest.mark.extended
def test_reinforce_learns_cartpole():
    """Defaults (8 envs x 64 steps, baseline, Adam 3e-3 annealed, 3e5 steps), 3 seeds vmapped: mean return over
    the last 20 iterations >= 400 on every seed (measured over the last 29: 500, 500, 499)."""
    config = reinforce.Config()  # 8 envs x 64 steps, Adam 3e-3 annealed, 3e5 steps
    _, metrics = runner_jit(jax.vmap(reinforce.make_train(config)))(jax.random.split(jax.random.key(0), 3))
    returns = np.asarray(metrics["episode_return"])
    final = np.nanmean(returns[:, -20:], axis=1)
    assert (final >= 400).all(), final
