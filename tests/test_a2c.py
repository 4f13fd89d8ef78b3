"""A2C: estimators, the PPO surrogate's gradient at ratio 1, config validation, metrics, vmap over seeds,
learning."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_trees_close, index, runner_jit
from jaxrl import losses
from jaxrl.algos import a2c
from jaxrl.algos.families import actor_critic
from jaxrl.networks import ActorCritic, MLPTorso
from jaxrl.types import Trajectory

TINY = a2c.Config(num_envs=4, num_steps=5, total_timesteps=4 * 5 * 4, hidden_sizes=(16,))


@pytest.fixture(scope="module")
def tiny_runs():
    keys = jax.random.split(jax.random.key(0), 2)
    batched = jax.jit(jax.vmap(a2c.make_train(TINY)))(keys)
    train = jax.jit(a2c.train)
    separate = [train(TINY, k) for k in keys]
    return separate, batched


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(advantage="td"), "advantage"),
        (dict(n_step=-1), "n_step"),
        (dict(optimizer="sgd"), "optimizer"),
        (dict(num_minibatches=3), "num_minibatches"),
        (dict(env="CartPol-v1"), "CartPole-v1"),
        (dict(total_timesteps=10), "total_timesteps"),
        (dict(gae_lambda=1.5), "gae_lambda"),
        (dict(max_grad_norm=0.0), "max_grad_norm"),
        (dict(ent_coef=-0.1), "ent_coef"),
    ],
)
def test_bad_config_raises_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        a2c.make_train(dataclasses.replace(a2c.Config(), **overrides))


@pytest.mark.slow
def test_ppo_surrogate_gradient_at_ratio_one_is_the_importance_weighted_policy_gradient():
    """At pi = mu the clipped surrogate is unclipped and its gradient -A grad rho = -rho A grad log pi equals the
    importance-weighted policy gradient's, and (rho = 1) the score-function gradient -A grad log pi."""
    network = ActorCritic(3, True, MLPTorso((8,)))
    obs = jax.random.normal(jax.random.key(0), (32, 4))
    params = network.init(jax.random.key(1), obs)
    actions = jax.random.randint(jax.random.key(2), (32,), 0, 3)
    advantages = jax.random.normal(jax.random.key(3), (32,))
    behaviour = network.apply(params, obs, method=ActorCritic.policy).log_prob(actions)

    def grad_of(loss, p):
        def objective(p):
            log_prob = network.apply(p, obs, method=ActorCritic.policy).log_prob(actions)
            return loss(log_prob).mean()

        return jax.grad(objective)(p)

    @jax.jit
    def gradients(p):
        return (
            grad_of(lambda lp: losses.clipped_surrogate_loss(lp, behaviour, advantages, 0.2)[0], p),
            grad_of(lambda lp: losses.policy_gradient_loss(lp, behaviour, advantages), p),
            grad_of(lambda lp: -advantages * lp, p),
        )

    ppo, importance, score = gradients(params)
    assert_trees_close(ppo, importance, rtol=1e-5, atol=1e-7)
    assert_trees_close(importance, score, rtol=1e-5, atol=1e-7)
    assert max(float(jnp.abs(x).max()) for x in jax.tree.leaves(score)) > 1e-3


@pytest.mark.slow
def test_n_step_to_the_window_end_equals_gae_with_lambda_one():
    keys = jax.random.split(jax.random.key(0), 4)
    shape = (6, 3)
    zeros = jnp.zeros(shape)
    traj = Trajectory(
        obs=zeros[..., None],
        actions=zeros.astype(jnp.int32),
        rewards=jax.random.normal(keys[0], shape),
        terminated=jax.random.bernoulli(keys[1], 0.2, shape),
        truncated=jax.random.bernoulli(keys[2], 0.1, shape),
        log_probs=zeros,
        values=jax.random.normal(keys[3], shape),
        next_values=jnp.roll(jax.random.normal(keys[3], shape), -1, axis=0),
        episode_return=zeros,
        episode_length=zeros.astype(jnp.int32),
    )
    config = a2c.Config(num_steps=6, gamma=0.9)
    advantages = jax.jit(a2c.advantages)
    n_step = advantages(config, traj)
    gae = advantages(dataclasses.replace(config, advantage="gae", gae_lambda=1.0), traj)
    assert_trees_close(n_step, gae, rtol=1e-5, atol=1e-5)
    _, one_step = advantages(dataclasses.replace(config, n_step=1), traj)
    td = traj.rewards + 0.9 * (1.0 - traj.terminated) * traj.next_values
    np.testing.assert_allclose(one_step, td, rtol=1e-6, atol=1e-6)


@pytest.mark.extended
def test_metrics_are_per_iteration(tiny_runs):
    separate, _ = tiny_runs
    state, metrics = separate[0]
    for name in ("episode_return", "episode_length", "episodes", "policy_loss", "value_loss", "entropy", "kl"):
        assert metrics[name].shape == (TINY.num_iterations,), name
    assert int(state.iteration) == TINY.num_iterations
    assert np.all(np.isfinite(metrics["value_loss"])) and np.all(metrics["kl"] >= 0)


@pytest.mark.extended  # the actor-critic family's vmap check is PPO's, in the default suite
def test_vmap_over_keys_equals_separate_runs(tiny_runs):
    separate, batched = tiny_runs
    for i, run in enumerate(separate):
        assert_trees_close(index(batched, i), run)
    a, b = (jax.tree.leaves(run[0].params) for run in separate)
    assert any(not np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_annealed_learning_rate_is_constant_within_an_iteration():
    """The one schedule (`optim.learning_rate_schedule`): each of the update_epochs x num_minibatches steps of
    iteration i uses lr (1 - i / num_iterations). With a constant gradient (below the clipping norm) Adam's step
    is lr g / (|g| + eps), so the steps read the rate off."""
    config = a2c.Config(
        num_envs=4,
        num_steps=8,
        total_timesteps=4 * 8 * 3,
        optimizer="adam",
        anneal_lr=True,
        update_epochs=2,
        num_minibatches=2,
        learning_rate=1e-2,
    )
    k, n = config.updates_per_iteration, config.num_iterations
    assert (k, n) == (4, 3)
    optimizer = actor_critic.make_optimizer(config)
    params = jnp.zeros(3)
    opt_state = optimizer.init(params)
    update = jax.jit(optimizer.update)
    rates = []
    for _ in range(k * n):
        updates, opt_state = update(jnp.full(3, 0.1), opt_state, params)
        rates.append(-float(updates[0]) * (0.1 + 1e-5) / 0.1)
    expected = [1e-2 * (1.0 - (t // k) / n) for t in range(k * n)]
    np.testing.assert_allclose(rates, expected, rtol=1e-4)


@pytest.mark.extended
def test_a2c_learns_cartpole():
    """Defaults (16 envs x 5 steps, RMSprop 7e-4, 3e5 steps), 3 seeds vmapped: mean return over the last 200
    iterations >= 400 on every seed (measured over the last 187: 467, 497, 495)."""
    config = a2c.Config()  # 16 envs x 5 steps, RMSprop 7e-4, 3e5 steps
    _, metrics = runner_jit(jax.vmap(a2c.make_train(config)))(jax.random.split(jax.random.key(0), 3))
    returns = np.asarray(metrics["episode_return"])
    final = np.nanmean(returns[:, -200:], axis=1)
    assert (final >= 400).all(), final
