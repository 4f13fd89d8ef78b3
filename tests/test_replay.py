"""jaxrl.replay: only written items come back, wrap-around past capacity, uniform sampling, windows, jit / vmap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats
from test_parallel import run_on_two_devices

from jaxrl import replay

N, CAPACITY = 2, 20  # 10 steps per env


def item():
    return {"id": jnp.zeros((), jnp.int32), "obs": jnp.zeros((3,), jnp.float32)}


def steps(first: int, count: int):
    """`count` steps [T, N] numbered from `first`: id = 100 * env + step, obs = id broadcast to 3 floats."""
    t = jnp.arange(first, first + count)[:, None]
    ids = (100 * jnp.arange(N)[None, :] + t).astype(jnp.int32)
    return {"id": ids, "obs": jnp.broadcast_to(ids[..., None], ids.shape + (3,)).astype(jnp.float32)}


@jax.jit
def fill(counts_key):
    """Adds 7, then 6 steps and samples; `counts_key` only feeds the sample."""
    state = replay.init(item(), N, CAPACITY)
    state = replay.add(state, steps(0, 7))
    first = (replay.size(state), replay.sample(state, counts_key, 4000))
    state = replay.add(state, steps(7, 6))  # 13 > 10 steps per env: wraps, steps 0..2 are overwritten
    second = (replay.size(state), replay.sample(state, counts_key, 4000), replay.sample(state, counts_key, 500, 4))
    return state, first, second


@pytest.fixture(scope="module")
def filled():
    return jax.tree.map(np.asarray, fill(jax.random.key(0)))


def written_ids(first, last):
    return {100 * e + t for e in range(N) for t in range(first, last)}


@pytest.mark.slow
def test_sample_is_time_major_and_consistent(filled):
    _, (_, batch), (_, _, windows) = filled
    assert batch["id"].shape == (1, 4000) and batch["obs"].shape == (1, 4000, 3)
    assert windows["id"].shape == (4, 500)
    np.testing.assert_array_equal(batch["obs"][..., 0], batch["id"])  # leaves of one item stay together


def test_only_written_items_come_back(filled):
    _, (size, batch), _ = filled
    assert size == 14
    assert set(np.unique(batch["id"])) == written_ids(0, 7)


def test_wraps_past_capacity(filled):
    state, _, (size, batch, _) = filled
    assert size == CAPACITY
    assert set(np.unique(batch["id"])) == written_ids(3, 13)  # the 3 oldest steps of each env are gone
    # ring layout: step t of env e sits at slot t % 10
    expected = np.array([[100 * e + (t if t >= 3 else t + 10) for t in range(10)] for e in range(N)])
    np.testing.assert_array_equal(state.experience["id"], expected)


def test_windows_are_consecutive_steps_of_one_env_and_never_cross_the_write_position(filled):
    _, _, (_, _, windows) = filled
    ids = windows["id"]  # [4, 500]
    np.testing.assert_array_equal(np.diff(ids, axis=0), np.ones((3, 500)))
    assert ids.min() % 100 >= 3 and ids.max() % 100 <= 12
    # every valid start (steps 3..9 of either env) is drawn
    assert set(np.unique(ids[0])) == {100 * e + t for e in range(N) for t in range(3, 10)}


@pytest.mark.parametrize("stage", [0, 1])
def test_sampling_is_uniform(filled, stage):
    """Chi-square goodness of fit of the sampled ids to the uniform distribution over the written items."""
    batch = filled[1 + stage][1]["id"].ravel()
    written = sorted(written_ids(0, 7) if stage == 0 else written_ids(3, 13))
    counts = np.array([(batch == i).sum() for i in written])
    assert counts.sum() == batch.size
    _, p_value = stats.chisquare(counts)
    assert p_value > 1e-3, counts


@pytest.mark.parametrize("bound", [0, 1, 3, 7, 1000, 2**31 - 1])
def test_uniform_below_is_the_high_word_of_words_times_bound(bound):
    """Against 64-bit NumPy: floor(u * bound / 2^32) of the same `jax.random.bits` words, inside [0, bound)."""
    key = jax.random.key(7)
    words = np.asarray(jax.random.bits(key, (5000,), jnp.uint32)).astype(np.uint64)
    drawn = np.asarray(jax.jit(replay.uniform_below, static_argnums=1)(key, (5000,), jnp.int32(bound)))
    assert drawn.dtype == np.int32
    np.testing.assert_array_equal(drawn, (words * np.uint64(bound)) >> np.uint64(32))
    assert drawn.min() >= 0 and drawn.max() <= max(bound - 1, 0)


SHARDED_DRAWS = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from jaxrl import replay
split = NamedSharding(Mesh(np.array(jax.devices()[:2]), ("seeds",)), P("seeds"))
keys, bounds = jax.random.split(jax.random.key(0), 4), jnp.array([1, 7, 1000, 2**31 - 1], jnp.int32)
draw = jax.jit(jax.vmap(lambda key, bound: replay.uniform_below(key, (128,), bound)))
whole = np.asarray(draw(keys, bounds))
halves = np.asarray(draw(jax.device_put(keys, split), jax.device_put(bounds, split)))
np.testing.assert_array_equal(halves, whole)
assert (whole >= 0).all() and (whole < np.asarray(bounds)[:, None]).all()
print("ok")
"""


def test_uniform_below_compiles_with_two_devices_and_split_seeds():
    """In a process with 2 XLA devices (`jaxrl train --seeds 8` on 2 cores), seeds split over them draw what one
    device draws: the draw lowers to operations every partitioner knows."""
    assert "ok" in run_on_two_devices(SHARDED_DRAWS)


def test_sample_reads_the_windows_its_words_name():
    """Window w = floor(u * N * starts / 2^32) of the wrapped buffer is env w % N from start w // N (oldest first)."""
    state = replay.add(replay.add(replay.init(item(), N, CAPACITY), steps(0, 7)), steps(7, 6))  # wrapped at step 3
    key, length, window = jax.random.key(3), CAPACITY // N, 4
    windows = replay.sample(state, key, 300, window)["id"]  # [4, 300]
    words = np.asarray(jax.random.bits(key, (300,), jnp.uint32)).astype(np.uint64)
    w = ((words * np.uint64(N * (length - window + 1))) >> np.uint64(32)).astype(np.int64)
    env, start = w % N, w // N
    oldest = 13 % length
    slots = (oldest + start[None, :] + np.arange(window)[:, None]) % length
    np.testing.assert_array_equal(windows, np.asarray(state.experience["id"])[env[None, :], slots])


@pytest.mark.slow
def test_can_sample_and_steps_stored():
    state = replay.init(item(), N, CAPACITY)
    assert not replay.can_sample(state)
    state = replay.add(state, steps(0, 3))
    assert replay.can_sample(state, 3) and not replay.can_sample(state, 4)
    assert replay.steps_stored(state) == 3 and replay.size(state) == 6


@pytest.mark.slow
def test_vmap_over_buffers_equals_separate():
    def run(offset, key):
        state = replay.init(item(), N, CAPACITY)
        for first in (0, 6):  # 12 steps > 10: wraps
            state = replay.add(state, jax.tree.map(lambda x: x + offset, steps(first, 6)))
        return replay.sample(state, key, 16, 2)

    keys = jax.random.split(jax.random.key(3), 2)
    offsets = jnp.array([0, 1000], jnp.int32)
    batched = jax.jit(jax.vmap(run))(offsets, keys)
    for i in range(2):
        single = jax.jit(run)(offsets[i], keys[i])
        jax.tree.map(lambda b, s, i=i: np.testing.assert_array_equal(b[i], s), batched, single)


def test_bad_capacity_raises():
    with pytest.raises(ValueError, match="capacity"):
        replay.init(item(), 3, 20)


# ---------------------------------------------------------------------------------------------------------------
# Prioritised replay
# ---------------------------------------------------------------------------------------------------------------

ALPHA = 0.6


@jax.jit
def prioritized(key):
    """7 steps of 2 envs (14 windows of 1 step: index 10 * env + step), priorities 1..14 set at alpha = 0.6, then
    8000 draws; then 2 more steps whose new windows get the largest priority^alpha so far, and 8000 draws."""
    state = replay.init_prioritized(item(), N, CAPACITY)
    state = replay.add_prioritized(state, steps(0, 7))
    indices = jnp.array([10 * e + t for e in range(N) for t in range(7)])
    priorities = jnp.arange(1, 15, dtype=jnp.float32)
    state = replay.set_priorities(state, indices, priorities, ALPHA)
    first = replay.sample_prioritized(state, key, 8000)
    state = replay.add_prioritized(state, steps(7, 2))
    second = replay.sample_prioritized(state, key, 8000)
    return first, second, replay.size(state)


@pytest.fixture(scope="module")
def prioritized_samples():
    return jax.tree.map(np.asarray, prioritized(jax.random.key(1)))


@pytest.mark.slow
def test_prioritized_sampling_follows_priorities_to_the_alpha(prioritized_samples):
    """Chi-square goodness of fit of the drawn ids to P(i) = p_i^alpha / sum_k p_k^alpha, and the returned
    probabilities are those P(i)."""
    (batch, indices, probabilities), _, _ = prioritized_samples
    ids = batch["id"].ravel()
    written = [100 * e + t for e in range(N) for t in range(7)]
    p = np.arange(1, 15) ** ALPHA
    expected = p / p.sum()
    counts = np.array([(ids == i).sum() for i in written])
    assert counts.sum() == ids.size
    _, p_value = stats.chisquare(counts, expected * ids.size)
    assert p_value > 1e-3, (counts, expected * ids.size)
    # far from uniform: the largest priority is drawn 14^0.6 / 1 = 4.9 times as often as the smallest
    assert counts[-1] > 3 * counts[0]
    np.testing.assert_array_equal(indices, 10 * (ids // 100) + ids % 100)  # indices point at the drawn windows
    np.testing.assert_allclose(probabilities, expected[[written.index(i) for i in ids]], rtol=1e-5)


def test_new_windows_get_the_maximum_priority(prioritized_samples):
    _, (batch, _, probabilities), size = prioritized_samples
    assert size == 18
    ids = batch["id"].ravel()
    p = np.concatenate([np.arange(1, 15) ** ALPHA, np.full(4, 14**ALPHA)])  # 4 new windows at max p^alpha
    written = [100 * e + t for e in range(N) for t in range(7)] + [100 * e + t for e in range(N) for t in (7, 8)]
    counts = np.array([(ids == i).sum() for i in written])
    assert counts.sum() == ids.size
    _, p_value = stats.chisquare(counts, p / p.sum() * ids.size)
    assert p_value > 1e-3
    np.testing.assert_allclose(probabilities, (p / p.sum())[[written.index(i) for i in ids]], rtol=1e-5)


def test_importance_weights_are_normalised_by_their_max():
    probabilities = jnp.array([0.1, 0.2, 0.4, 0.05])
    for beta in (0.0, 0.4, 1.0):
        w = np.asarray(replay.importance_weights(probabilities, 20, beta))
        raw = (20 * np.asarray(probabilities)) ** (-beta)
        np.testing.assert_allclose(w, raw / raw.max(), rtol=1e-6)
        assert w.max() == pytest.approx(1.0) and (beta == 0 or w.argmax() == 3)  # the least likely weighs most
    np.testing.assert_allclose(replay.importance_weights(probabilities, 20, 0.0), np.ones(4))
    assert np.isfinite(replay.importance_weights(jnp.array([0.0, 0.5]), 2, 1.0)).all()


@pytest.mark.slow
def test_prioritized_windows_never_cross_the_write_position():
    """Windows of 3 steps: every drawn window is 3 consecutive steps of one env, also after wrapping; with
    uniform priorities the valid starts are all drawn."""

    @jax.jit
    def run(key):
        state = replay.init_prioritized(item(), N, CAPACITY)
        state = replay.add_prioritized(state, steps(0, 7), 3)
        state = replay.add_prioritized(state, steps(7, 6), 3)  # 13 steps in 10 slots: wraps
        return replay.sample_prioritized(state, key, 2000, 3)

    windows, _, probabilities = jax.tree.map(np.asarray, run(jax.random.key(2)))
    ids = windows["id"]  # [3, 2000]
    np.testing.assert_array_equal(np.diff(ids, axis=0), np.ones((2, 2000)))
    assert ids.min() % 100 >= 3 and ids.max() % 100 <= 12
    assert set(np.unique(ids[0])) == {100 * e + t for e in range(N) for t in range(3, 11)}
    np.testing.assert_allclose(probabilities, 1 / 16, rtol=1e-5)


@pytest.mark.slow
def test_prioritized_vmap_over_buffers_equals_separate():
    def run(offset, key):
        state = replay.init_prioritized(item(), N, CAPACITY)
        state = replay.add_prioritized(state, jax.tree.map(lambda x: x + offset, steps(0, 6)))
        _, indices, _ = replay.sample_prioritized(state, key, 8)
        state = replay.set_priorities(state, indices, jnp.arange(1.0, 9.0) + offset, 0.5)
        return replay.sample_prioritized(state, key, 16)

    keys = jax.random.split(jax.random.key(3), 2)
    offsets = jnp.array([0, 1000], jnp.int32)
    batched = jax.jit(jax.vmap(run))(offsets, keys)
    for i in range(2):
        single = jax.jit(run)(offsets[i], keys[i])
        jax.tree.map(lambda b, s, i=i: np.testing.assert_allclose(b[i], s, rtol=1e-6), batched, single)
