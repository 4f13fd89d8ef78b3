"""GRPO: grouped rollouts, config validation, the off-policy objective's reduction to on-policy, KL reference,
replay, vmap over seeds, continuous actions, learning CartPole."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_trees_close, index, runner_jit
from jaxrl import rollout
from jaxrl.algos import grpo

TINY = grpo.Config(
    num_groups=2,
    group_size=4,
    horizon=16,
    total_timesteps=2 * 4 * 16 * 3,
    update_epochs=2,
    num_minibatches=2,
    hidden_sizes=(16, 16),
)


@pytest.fixture(scope="module")
def policy():
    setup = grpo.setup(TINY)
    params = grpo.init(setup, TINY, jax.random.key(1)).params
    return setup.env, setup.network, params


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(group_size=1), "group_size"),
        (dict(group_mode="tree"), "group_mode"),
        (dict(supervision="dense"), "supervision"),
        (dict(kl_reference="ema"), "kl_reference"),
        (dict(num_minibatches=7), "num_minibatches"),
        (dict(horizon=-1), "horizon"),
        (dict(replay_ratio=-1), "replay_ratio"),
        (dict(rho_bar=0.0), "rho_bar"),
        (dict(env="CartPol-v1"), "CartPole-v1"),
        (dict(total_timesteps=100), "total_timesteps"),
    ],
)
def test_bad_config_raises_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        grpo.make_train(dataclasses.replace(TINY, **overrides))


def test_horizon_defaults_to_the_time_limit():
    assert grpo.Config().num_steps == 500
    assert grpo.Config(env="Pendulum-v1").num_steps == 200
    assert dataclasses.replace(TINY, horizon=7).num_steps == 7


def test_first_episode_mask_matches_a_loop():
    done = jax.random.bernoulli(jax.random.key(0), 0.2, (12, 5))
    mask = np.asarray(rollout.first_episode_mask(done))
    expected = np.zeros((12, 5), bool)
    for n in range(5):
        for t in range(12):
            expected[t, n] = True
            if done[t, n]:
                break
    np.testing.assert_array_equal(mask, expected)


@pytest.mark.slow
def test_group_members_share_their_start_and_then_diverge(policy):
    env, network, params = policy
    starts = rollout.group_starts(env, jax.random.key(2), 3)
    members = rollout.repeat_members(starts, 4)
    keys = jax.random.split(jax.random.key(3), 12)
    _, traj = rollout.grouped_rollout(env, grpo.behaviour(network, params)[0], rollout.zero_value, members, keys, 20)
    assert traj.obs.shape == (20, 12, 4) and traj.actions.shape == (20, 12)
    first = np.asarray(traj.obs[0]).reshape(3, 4, -1)
    np.testing.assert_array_equal(first, np.broadcast_to(first[:, :1], first.shape))  # same start in a group
    assert not np.allclose(first[0, 0], first[1, 0])  # different starts across groups
    later = np.asarray(traj.obs[10]).reshape(3, 4, -1)
    assert all(not np.allclose(later[m, 0], later[m, 1]) for m in range(3))  # own keys: members diverge


@pytest.mark.extended
def test_branch_copies_given_the_parents_keys_reproduce_the_parent(policy):
    env, network, params = policy
    act = grpo.behaviour(network, params)[0]
    parent = rollout.reset(env, jax.random.key(4))
    parent, _ = rollout.rollout(env, act, rollout.zero_value, parent, jax.random.key(5), 7)  # a visited state
    key = jax.random.key(6)
    _, parent_traj = rollout.rollout(env, act, rollout.zero_value, parent, key, 25)
    starts = jax.tree.map(lambda x: x[None], parent)
    keys = jnp.stack([jax.random.key(7), key, jax.random.key(8), key])
    _, traj = rollout.grouped_rollout(env, act, rollout.zero_value, rollout.repeat_members(starts, 4), keys, 25)
    for column in (1, 3):
        assert_trees_close(
            index(jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), traj), column),
            index(jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), parent_traj), 0),
        )
    assert not np.allclose(traj.obs[:, 0], traj.obs[:, 1])


@pytest.fixture(scope="module")
def tiny_runs():
    keys = jax.random.split(jax.random.key(0), 2)
    train = jax.jit(grpo.train)
    separate = [train(TINY, k) for k in keys]
    batched = jax.jit(jax.vmap(grpo.make_train(TINY)))(keys)
    return separate, batched


@pytest.mark.extended
def test_metrics_are_per_iteration(tiny_runs):
    state, metrics = tiny_runs[0][0]
    for name in ("episode_return", "valid_fraction", "policy_loss", "entropy", "approx_kl", "clip_fraction"):
        assert metrics[name].shape == (TINY.num_iterations,), name
        assert np.all(np.isfinite(metrics[name])), name
    assert int(state.iteration) == TINY.num_iterations
    assert set(state.params["params"]) == {"actor"}  # critic-free
    np.testing.assert_allclose(metrics["importance_weight"], 1.0, rtol=1e-6)  # on-policy: w = 1


@pytest.mark.extended  # the default suite vmaps PPO, DQN and PQN; the extended tier every algorithm
def test_vmap_over_seeds_equals_separate_runs(tiny_runs):
    separate, batched = tiny_runs
    for i, run in enumerate(separate):
        assert_trees_close(index(batched, i), run, rtol=1e-4, atol=1e-5)


def grads(config, params, network, batch, proximal):
    batch = {**batch, "proximal_log_probs": proximal}
    loss = functools.partial(grpo.loss_fn, network=network, config=config)
    return jax.grad(lambda p: loss(p, None, batch=batch)[0])(params)


@pytest.mark.slow
def test_off_policy_gradient_equals_on_policy_when_behaviour_is_the_target(policy):
    env, network, params = policy
    setup = grpo.setup(TINY)
    state = grpo.init(setup, TINY, jax.random.key(1))
    batch, _, _ = grpo.collect(setup, TINY, state, jax.random.key(9))
    on_policy = grads(TINY, params, network, batch, batch["log_probs"])
    # The off-policy path anchors at pi_prox computed afresh from the parameters that collected the data.
    prox = grpo.policy_of(network, params)(batch["obs"]).log_prob(batch["actions"])
    off_policy = grads(dataclasses.replace(TINY, replay_ratio=1), params, network, batch, prox)
    assert_trees_close(off_policy, on_policy, rtol=1e-4, atol=1e-7)
    assert max(float(jnp.abs(g).max()) for g in jax.tree.leaves(on_policy)) > 1e-4  # a real gradient
    # A behaviour policy other than the target changes it: importance weights min(rho_bar, pi_prox / mu).
    stale = grads(TINY, params, network, {**batch, "log_probs": batch["log_probs"] + 0.3}, prox)
    assert not np.allclose(jax.tree.leaves(stale)[0], jax.tree.leaves(on_policy)[0])


@pytest.mark.slow
def test_replay_trains_on_past_groups_with_truncated_weights():
    config = dataclasses.replace(TINY, replay_ratio=2, replay_capacity=2, rho_bar=0.9, total_timesteps=2 * 4 * 16 * 4)
    state, metrics = jax.jit(grpo.make_train(config))(jax.random.key(0))
    assert np.all(np.isfinite(metrics["policy_loss"]))
    assert np.all(metrics["importance_weight"] <= 0.9 + 1e-6)
    assert int(np.asarray(state.buffer.current_index)) == 4 % 2 and bool(state.buffer.is_full)


@pytest.mark.extended
def test_kl_reference_initial_stays_and_moving_moves_at_its_interval():
    initial = dataclasses.replace(TINY, kl_reference="initial", total_timesteps=2 * 4 * 16 * 4)
    setup = grpo.setup(initial)
    start = grpo.init(setup, initial, jax.random.key(0))
    update = jax.jit(functools.partial(grpo.update, setup, initial))
    state, metrics = update(start)
    assert_trees_close(state.ref_params, start.params)
    assert np.isfinite(metrics["kl_ref"]) and metrics["kl_ref"] >= 0.0

    moving = dataclasses.replace(initial, kl_reference="moving", ref_update_interval=2, ref_tau=1.0)
    setup = grpo.setup(moving)
    update = jax.jit(functools.partial(grpo.update, setup, moving))
    state = grpo.init(setup, moving, jax.random.key(0))
    one = update(state)[0]
    assert_trees_close(one.ref_params, state.params)  # unchanged after iteration 1
    two = update(one)[0]
    assert_trees_close(two.ref_params, two.params)  # a snapshot after iteration 2


@pytest.mark.extended
def test_branch_mode_continues_the_trunk_and_pendulum_runs():
    branch = dataclasses.replace(TINY, group_mode="branch", supervision="process")
    state, metrics = jax.jit(grpo.make_train(branch))(jax.random.key(0))
    assert state.trunk.obs.shape == (2, 1, 4)
    assert np.all(np.isfinite(metrics["policy_loss"]))
    pendulum = dataclasses.replace(TINY, env="Pendulum-v1")
    state, metrics = jax.jit(grpo.make_train(pendulum))(jax.random.key(0))
    assert np.all(np.isfinite(metrics["policy_loss"])) and np.all(metrics["episode_return"] < 0)


@pytest.mark.extended
def test_image_observations_run():
    """MinAtar's [10, 10, C] observations: the critic-free rollout's zero values are one per env step."""
    minatar = dataclasses.replace(TINY, env="Breakout-MinAtar")
    grpo.validate(minatar)
    _, metrics = jax.jit(grpo.make_train(minatar))(jax.random.key(0))
    assert np.all(np.isfinite(metrics["policy_loss"]))
    assert metrics["policy_loss"].shape == (minatar.num_iterations,)


@pytest.mark.extended
def test_grpo_learns_cartpole():
    """Outcome GRPO, 8 groups x 8 members capped at 200 steps: every one of 3 seeds reaches a mean group return
    >= 190 (of 200) over its last 3 iterations within 2e5 env steps."""
    config = grpo.Config(num_groups=4, group_size=8, horizon=200, total_timesteps=200_000, num_minibatches=4)
    _, metrics = runner_jit(jax.vmap(grpo.make_train(config)))(jax.random.split(jax.random.key(0), 3))
    final = np.asarray(metrics["episode_return"])[:, -3:].mean(1)
    assert np.all(final >= 190.0), final
