"""DPO for control: preference pairs against a NumPy loop (ties, margins, never across groups), the DPO loss and
its gradient against NumPy on a hand-built group (ties and masked steps), chex shape checks, the behaviour
reference, the moving reference, config validation, vmap over seeds (discrete and continuous) and learning
CartPole."""

import dataclasses
import itertools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_trees_close, index, runner_jit
from jaxrl import estimators, losses, rollout
from jaxrl.algos import algorithm_of, dpo
from jaxrl.run.report import final_return

TINY = dpo.Config(
    num_groups=2, group_size=4, horizon=16, total_timesteps=2 * 4 * 16 * 3, update_epochs=2, hidden_sizes=(16, 16)
)


def numpy_pairs(returns, group_size, mode, margin):
    """(winner, loser) member pairs of each group, by a plain loop."""
    pairs, valid = [], []
    for g in range(len(returns) // group_size):
        members = range(g * group_size, (g + 1) * group_size)
        if mode == "best_worst":
            group = returns[g * group_size : (g + 1) * group_size]
            candidates = [(g * group_size + int(np.argmax(group)), g * group_size + int(np.argmin(group)))]
        else:
            candidates = [(i, j) if returns[i] >= returns[j] else (j, i) for i, j in itertools.combinations(members, 2)]
        for w, lose in candidates:
            pairs.append((w, lose))
            valid.append(returns[w] - returns[lose] > margin)
    return np.array(pairs), np.array(valid)


@pytest.mark.parametrize("mode", estimators.PAIR_MODES)
@pytest.mark.parametrize("margin", [0.0, 1.0])
def test_preference_pairs_match_a_loop_and_never_cross_groups(mode, margin):
    group_size = 4
    returns = np.array(jax.random.randint(jax.random.key(0), (5 * group_size,), 0, 4), np.float32)  # many ties
    returns[:group_size] = 2.0  # a group of ties: no pair at all
    winners, losers, valid = estimators.preference_pairs(jnp.asarray(returns), group_size, mode, margin)
    pairs, expected_valid = numpy_pairs(returns, group_size, mode, margin)
    np.testing.assert_array_equal(np.stack([winners, losers], 1), pairs)
    np.testing.assert_array_equal(valid, expected_valid)
    np.testing.assert_array_equal(np.asarray(winners) // group_size, np.asarray(losers) // group_size)
    assert not np.asarray(valid)[: 1 if mode == "best_worst" else 6].any()  # the tied group
    assert np.all(returns[winners][valid] - returns[losers][valid] > margin)
    if mode == "all":  # every ordered pair of one group with a gap > margin, exactly once
        ordered = {
            (i, j)
            for i, j in itertools.permutations(range(len(returns)), 2)
            if i // group_size == j // group_size and returns[i] - returns[j] > margin
        }
        assert set(map(tuple, pairs[expected_valid].tolist())) == ordered


def test_preference_pairs_and_dpo_loss_check_shapes():
    with pytest.raises(AssertionError):
        estimators.preference_pairs(jnp.zeros((4, 2)), 2)  # one return per member, rank 1
    with pytest.raises(ValueError, match="group_size"):
        estimators.preference_pairs(jnp.zeros(6), 4)
    with pytest.raises(ValueError, match="mode"):
        estimators.preference_pairs(jnp.zeros(4), 2, "median")
    with pytest.raises(AssertionError):
        losses.dpo_loss(jnp.zeros(3), jnp.zeros(3), jnp.zeros(4), jnp.zeros(3), 0.1)
    w, lose, valid = estimators.preference_pairs(jnp.zeros(12), 4, "all")
    chex.assert_shape([w, lose, valid], (3 * 6,))
    chex.assert_type([w, lose], jnp.int32)


class FakeDist:
    def __init__(self, log_prob):
        self._log_prob = log_prob

    def log_prob(self, actions):
        return self._log_prob

    def entropy(self):
        return jnp.zeros_like(self._log_prob)


class FakeNetwork:
    """A 'policy' whose per-step log-probabilities [T, N] are its parameters."""

    def apply(self, params, obs, method=None):
        return FakeDist(params["log_prob"])


def hand_built_group():
    """3 groups of 3 members, 5 steps; members end their first episode at different steps, and the rewards after
    it (masked) are large, so they would change the ranking if counted."""
    t, n = 5, 9
    done = np.zeros((t, n), bool)
    done[1, 1] = done[2, 3] = done[0, 8] = True
    mask = np.asarray(rollout.first_episode_mask(jnp.asarray(done)))
    valid_rewards = np.array(
        [
            [1, 1, 1, 1, 1, 1, 0, 0, 0],
            [1, 1, 1, 1, 1, 1, 0, 0, 0],
            [1, 0, 1, 2, 1, 1, 0, 0, 0],
            [0, 0, 1, 0, 1, 1, 0, 0, 0],
            [0, 0, 1, 0, 0, 1, 0, 0, 0],
        ],
        np.float32,
    )  # returns: group 0 3, 2, 5 (no tie); group 1 4, 4, 5 (a tie); group 2 0, 0, 0 (all tied: no pair)
    rewards = np.where(mask, valid_rewards, 100.0).astype(np.float32)
    log_prob = np.asarray(jax.random.normal(jax.random.key(1), (t, n)), np.float32) - 1.0
    ref_log_prob = log_prob + np.asarray(jax.random.normal(jax.random.key(2), (t, n)), np.float32) * 0.3
    return rewards, mask, log_prob, ref_log_prob


@pytest.mark.slow
@pytest.mark.parametrize("mode", estimators.PAIR_MODES)
def test_dpo_loss_and_gradient_match_numpy_on_a_hand_built_group(mode):
    rewards, mask, log_prob, ref_log_prob = hand_built_group()
    config = dataclasses.replace(TINY, group_size=3, num_groups=3, pairs=mode, beta=0.7)
    batch = dpo.pairs_batch(config, jnp.zeros((5, 9, 1)), jnp.zeros((5, 9)), rewards, mask, ref_log_prob)

    def loss(lp):
        return dpo.loss_fn({"log_prob": lp}, FakeNetwork(), config, batch)

    (value, stats), grad = jax.value_and_grad(loss, has_aux=True)(jnp.asarray(log_prob))

    # NumPy: log pi(y) summed over valid steps; pairs by the masked returns; the formula of the issue.
    returns = (rewards * mask).sum(0)
    np.testing.assert_array_equal(returns[:6], [3, 2, 5, 4, 4, 5])
    pairs, valid = numpy_pairs(returns, 3, mode, 0.0)
    assert valid.sum() > 0 and not valid.all()  # ties give no pair
    seq, ref = (log_prob * mask).sum(0), (ref_log_prob * mask).sum(0)
    w, lose = pairs[valid, 0], pairs[valid, 1]
    h = 0.7 * ((seq[w] - ref[w]) - (seq[lose] - ref[lose]))
    expected_loss = np.mean(np.log1p(np.exp(-h)))  # -log sigmoid(h)
    # d loss / d log pi(a_t|s_t) of member n = mean over pairs of -beta sigmoid(-h) ([n = w] - [n = l]) on valid steps
    coef = np.zeros(9)
    np.add.at(coef, w, -0.7 / (1 + np.exp(h)) / valid.sum())
    np.add.at(coef, lose, 0.7 / (1 + np.exp(h)) / valid.sum())
    expected_grad = coef[None] * mask
    np.testing.assert_allclose(value, expected_loss, rtol=1e-5)
    np.testing.assert_allclose(grad, expected_grad, rtol=1e-5, atol=1e-7)
    assert np.all(np.asarray(grad)[~mask] == 0)  # masked steps get no gradient
    np.testing.assert_allclose(stats["reward_accuracy"], np.mean(h > 0), rtol=1e-6)


@pytest.mark.slow
def test_the_behaviour_reference_is_the_stored_log_probs():
    """With reference="behaviour" the stored log-probs are the collecting policy's: before any step h = 0 on every
    pair, the loss is log 2 and the reward accuracy 0."""
    config = dataclasses.replace(TINY, reference="behaviour", horizon=30)
    setup = dpo.setup(config)
    network = setup.network
    state = dpo.init(setup, config, jax.random.key(3))
    batch, _, metrics = dpo.collect(setup, config, state, jax.random.key(4))
    assert float(metrics["pair_fraction"]) > 0
    loss, stats = dpo.loss_fn(state.params, network, config, batch)
    np.testing.assert_allclose(loss, np.log(2.0), rtol=1e-5)
    np.testing.assert_allclose(stats["reward_margin"], 0.0, atol=1e-5)
    assert state.ref_params is None


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(group_size=1), "group_size"),
        (dict(group_mode="tree"), "group_mode"),
        (dict(pairs="median"), "pairs"),
        (dict(reference="ema"), "reference"),
        (dict(beta=0.0), "beta"),
        (dict(margin=-1.0), "margin"),
        (dict(horizon=-1), "horizon"),
        (dict(update_epochs=0), "update_epochs"),
        (dict(total_timesteps=100), "total_timesteps"),
    ],
)
def test_bad_config_raises_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        dpo.make_train(dataclasses.replace(TINY, **overrides))


def test_registered_as_dpo():
    assert algorithm_of(TINY) is dpo
    assert dpo.Config().num_steps == 500 and dpo.Config(env="Pendulum-v1").num_steps == 200


@pytest.mark.extended  # the default suite vmaps PPO, DQN and PQN; the extended tier every algorithm
@pytest.mark.parametrize(
    "config",
    [
        TINY,
        dataclasses.replace(TINY, group_mode="branch", pairs="all", reference="initial"),
        dataclasses.replace(TINY, env="Pendulum-v1", reference="behaviour"),
    ],
    ids=["start", "branch-all-initial", "pendulum"],
)
def test_vmap_over_seeds_equals_separate_runs(config):
    keys = jax.random.split(jax.random.key(0), 2)
    train = jax.jit(dpo.train)
    separate = [train(config, k) for k in keys]
    batched = jax.jit(jax.vmap(dpo.make_train(config)))(keys)
    # reward_accuracy counts the pairs whose implicit-reward margin is > 0: a margin within float32 rounding of 0 may
    # fall either side in the vmapped program, so that metric may differ by one pair in one epoch
    one_pair = 1.0 / (config.num_groups * config.update_epochs)

    def split(metrics):  # (reward_accuracy, the other metrics)
        return metrics["reward_accuracy"], {k: v for k, v in metrics.items() if k != "reward_accuracy"}

    for i, (state, metrics) in enumerate(separate):
        batched_state, batched_metrics = index(batched, i)
        (batched_accuracy, batched_rest), (accuracy, rest) = split(batched_metrics), split(metrics)
        np.testing.assert_allclose(np.asarray(batched_accuracy), np.asarray(accuracy), atol=one_pair + 1e-6)
        assert_trees_close((batched_state, batched_rest), (state, rest), rtol=1e-4, atol=1e-5)
    state, metrics = separate[0]
    for name in ("episode_return", "dpo_loss", "reward_accuracy", "pair_fraction", "entropy", "valid_fraction"):
        assert metrics[name].shape == (config.num_iterations,), name
    assert np.all(np.isfinite(metrics["dpo_loss"]))
    assert "critic" not in state.params["params"]  # critic-free


@pytest.mark.extended
def test_moving_reference_is_refreshed_every_interval():
    config = dataclasses.replace(TINY, ref_update_interval=3, total_timesteps=TINY.env_steps_per_iteration * 3)
    setup = dpo.setup(config)
    state = dpo.init(setup, config, jax.random.key(0))
    initial = state.ref_params
    for _ in range(2):
        state, _ = dpo.update(setup, config, state)
        assert_trees_close(state.ref_params, initial, rtol=0, atol=0)
    state, _ = dpo.update(setup, config, state)
    assert_trees_close(state.ref_params, state.params, rtol=0, atol=0)
    fixed = dataclasses.replace(config, reference="initial")
    setup = dpo.setup(fixed)
    state = dpo.init(setup, fixed, jax.random.key(0))
    for _ in range(3):
        state, _ = dpo.update(setup, fixed, state)
    assert_trees_close(state.ref_params, initial, rtol=0, atol=0)


@pytest.mark.extended
def test_learns_cartpole():
    """Defaults (4 groups of 8 whole episodes, moving reference, beta 0.2) at 300k env steps, 3 seeds: each seed's
    final return (the last 10% of iterations) > 400 (measured: 487, 500, 500; ~10 s on 2 CPU cores)."""
    config = dpo.Config(total_timesteps=300_000)
    _, metrics = runner_jit(jax.vmap(dpo.make_train(config)))(jax.random.split(jax.random.key(0), 3))
    final = final_return(np.asarray(metrics["episode_return"]))
    assert final.min() > 400, final
