"""The lagged behaviour policy (jaxrl.lag) and the V-trace actor-critic (IMPALA)."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_trees_close, index, runner_jit
from jaxrl import estimators, lag
from jaxrl.algos import grpo, impala

TINY = impala.Config(num_envs=4, num_steps=8, total_timesteps=4 * 8 * 4, num_minibatches=2, hidden_sizes=(16, 16))


def test_lag_acts_with_the_parameters_of_k_iterations_ago():
    params = {"w": jnp.array(0.0)}
    ring = lag.init(params, 3)
    history = []
    for i in range(8):
        history.append(float(lag.behaviour_params(ring, params)["w"]))
        ring = lag.push(ring, params)
        params = {"w": jnp.array(float(i + 1))}  # the learner's update of iteration i
    # iteration i acts with the parameters after update i - 3 (the initial ones before that)
    assert history == [0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 4.0]
    assert lag.init(params, 0) is None and lag.behaviour_params(None, params) is params
    with pytest.raises(ValueError, match="lag"):
        lag.init(params, -1)


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(behaviour_lag=-1), "behaviour_lag"),
        (dict(num_minibatches=3), "num_minibatches"),
        (dict(vtrace_lambda=1.5), "vtrace_lambda"),
        (dict(clip_rho=0.0), "clip_rho"),
        (dict(critic="v"), "critic"),
        (dict(env="Pendulum-v1", critic="q"), "critic"),
        (dict(env="CartPol-v1"), "CartPole-v1"),
    ],
)
def test_bad_config_raises_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        impala.make_train(dataclasses.replace(TINY, **overrides))


@pytest.fixture(scope="module")
def runs():
    keys = jax.random.split(jax.random.key(0), 2)
    separate = [jax.jit(impala.train)(TINY, k) for k in keys]
    batched = jax.jit(jax.vmap(impala.make_train(TINY)))(keys)
    return separate, batched


@pytest.mark.extended
def test_metrics_and_lagged_behaviour(runs):
    _, metrics = runs[0][0]
    for name in ("episode_return", "policy_loss", "value_loss", "entropy", "importance_weight"):
        assert metrics[name].shape == (TINY.num_iterations,), name
    assert np.all(np.isfinite(metrics["value_loss"]))
    w = np.asarray(metrics["importance_weight"])
    np.testing.assert_allclose(w[0], 1.0, rtol=1e-5)  # iteration 0 acts with the initial = learner parameters
    assert np.all(np.abs(w[1:] - 1.0) > 1e-7)  # later ones with the initial ones, then with 2 updates old ones


@pytest.mark.extended  # the default suite vmaps PPO, DQN and PQN; the extended tier every algorithm
def test_vmap_over_seeds_equals_separate_runs(runs):
    separate, batched = runs
    for i, run in enumerate(separate):
        assert_trees_close(index(batched, i), run, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_without_lag_the_targets_are_lambda_returns():
    config = dataclasses.replace(TINY, behaviour_lag=0, vtrace_lambda=0.9)
    setup = impala.setup(config)
    state = impala.init(setup, config, jax.random.key(3))
    rollout = setup.collect(dataclasses.replace(config, num_steps=32), state, jax.random.key(4))
    traj = rollout.traj
    batch = impala.vtrace_batch(config, setup, state.params, rollout)
    expected = estimators.lambda_returns(traj.rewards, traj.next_values, traj.terminated, traj.truncated, 0.99, 0.9)
    # lambda-returns bootstrap from next_values; V-trace from v_{t+1}: equal because the rollout's critic gave both
    np.testing.assert_allclose(batch["targets"], expected, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(np.exp(batch["log_rho"]), 1.0, atol=1e-5)


@pytest.mark.slow
def test_q_critic_with_lambda_0_targets_expected_sarsa_on_the_learners_policy():
    config = dataclasses.replace(TINY, critic="q", behaviour_lag=0, vtrace_lambda=0.0)
    setup = impala.setup(config)
    state = impala.init(setup, config, jax.random.key(3))
    network = setup.network
    rollout = setup.collect(dataclasses.replace(config, num_steps=32), state, jax.random.key(4))
    traj = rollout.traj
    batch = impala.vtrace_batch(config, setup, state.params, rollout)
    # E_pi Q(o_{t+1}, .) computed independently from the two heads, on the next observations inside episodes
    logits = network.apply(state.params, traj.obs, method=lambda m, o: m.actor(o))
    q = network.apply(state.params, traj.obs, method="q_values")
    expected_q = np.sum(np.asarray(jax.nn.softmax(logits)) * np.asarray(q), axis=-1)
    inside = ~np.asarray(traj.done[:-1])
    targets = np.asarray(traj.rewards[:-1]) + 0.99 * expected_q[1:]
    np.testing.assert_allclose(np.asarray(batch["targets"])[:-1][inside], targets[inside], rtol=1e-5, atol=1e-5)
    terminal = np.asarray(traj.terminated)
    np.testing.assert_allclose(np.asarray(batch["targets"])[terminal], np.asarray(traj.rewards)[terminal])
    state, metrics = jax.jit(impala.make_train(config))(jax.random.key(0))
    assert np.all(np.isfinite(metrics["value_loss"]))


@pytest.mark.extended
def test_grpo_scheme_2_collects_with_the_lagged_policy_and_corrects():
    config = dataclasses.replace(
        grpo.Config(num_groups=2, group_size=4, horizon=16, update_epochs=2, num_minibatches=2, hidden_sizes=(16,)),
        total_timesteps=2 * 4 * 16 * 4,
        behaviour_lag=2,
        rho_bar=0.8,
    )
    setup = grpo.setup(config)
    update = jax.jit(functools.partial(grpo.update, setup, config))
    state = grpo.init(setup, config, jax.random.key(0))
    params, weights = [state.params], []
    for _ in range(4):
        state, metrics = update(state)
        params.append(state.params)
        weights.append(float(metrics["importance_weight"]))
    assert all(w <= 0.8 + 1e-6 for w in weights)
    assert_trees_close(lag.behaviour_params(state.lagged, state.params), params[2])  # iteration 4 acts with P_2


@pytest.mark.extended
def test_impala_learns_cartpole():
    """Defaults (behaviour lag 2), 5e5 env steps, 4 seeds: the mean of the seeds' returns over their last 10
    iterations is >= 200 and every seed's is >= 100 (a uniform policy gets about 22)."""
    config = impala.Config(total_timesteps=500_000)
    _, metrics = runner_jit(jax.vmap(impala.make_train(config)))(jax.random.split(jax.random.key(0), 4))
    final = np.nanmean(np.asarray(metrics["episode_return"])[:, -10:], axis=1)
    assert final.mean() >= 200.0 and np.all(final >= 100.0), final


@pytest.mark.extended
@pytest.mark.parametrize("normalize", [False, True])
def test_truncated_weights_times_an_advantage_offset_drift_the_gaussian_mean(normalize):
    """The cause of IMPALA's Pendulum failure (mean |m| 8.9 outside the bounds [-2, 2], return -1600): for
    pi = N(m, 1), mu = N(0, 1) and advantages A = c min(1, pi/mu) (a constant TD error c, as a critic at 0 gives
    on Pendulum's negative rewards), dL/dm = c m P / 2 with P = E_mu[min(1, pi/mu)], so with c < 0 gradient
    descent moves m away from the behaviour mean. Standardised advantages (`normalize_advantages`) turn it back."""
    config = impala.Config(env="Pendulum-v1", normalize_advantages=normalize)
    setup = impala.setup(config)
    params = setup.network.init(jax.random.key(0), jnp.zeros((1, 3)))
    m, c, count = 0.5, -10.0, 200_000
    head = params["params"]["actor"]["Dense_2"]
    head = {"kernel": jnp.zeros_like(head["kernel"]), "bias": jnp.full_like(head["bias"], m)}
    params = {"params": {**params["params"], "actor": {**params["params"]["actor"], "Dense_2": head}}}
    actions = jax.random.normal(jax.random.key(1), (count, 1))  # a ~ mu = N(0, 1): log_std is 0 at init
    log_mu = jax.scipy.stats.norm.logpdf(actions[:, 0])
    log_rho = jax.scipy.stats.norm.logpdf(actions[:, 0], m) - log_mu
    batch = {
        "obs": jax.random.normal(jax.random.key(2), (count, 3)),
        "actions": actions,
        "targets": jnp.zeros(count),
        "advantages": c * jnp.minimum(1.0, jnp.exp(log_rho)),
        "log_rho": log_rho,
    }
    grads = jax.grad(lambda p: impala.loss_fn(p, setup, config, batch)[0])(params)
    dloss_dm = float(grads["params"]["actor"]["Dense_2"]["bias"][0])
    if normalize:
        assert dloss_dm > 0.05  # descent moves m back towards 0
    else:
        overlap = float(jnp.mean(jnp.minimum(1.0, jnp.exp(log_rho))))
        np.testing.assert_allclose(dloss_dm, c * m * overlap / 2, rtol=0.05)
        assert dloss_dm < 0  # descent moves m further from 0
