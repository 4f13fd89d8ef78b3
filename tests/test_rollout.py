"""Tests for jaxrl.rollout: Trajectory layout, consistency with the network, episode_metrics, determinism."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import eqns_named
from jaxrl import envs, rollout
from jaxrl.algos import ppo
from jaxrl.networks import ActorCritic

N = 4


class Setup:
    """An env, PPO's network with fresh parameters, and jitted `run(key) -> (carry, traj)` from reset."""

    def __init__(self, env_id, num_steps, num_envs=N, **env_kwargs):
        config = ppo.Config(env=env_id, num_envs=num_envs)
        self.env = envs.make(env_id, num_envs, **env_kwargs)
        self.network = ppo.setup(config).network
        dummy_obs = jnp.zeros((1,) + self.env.spec.observation_shape, jnp.float32)
        self.params = jax.jit(self.network.init)(jax.random.key(42), dummy_obs)
        self.num_steps = num_steps
        self.run = jax.jit(self._run)

    def act(self, obs, key):
        dist = self.network.apply(self.params, obs, method=ActorCritic.policy)
        return dist.sample_and_log_prob(seed=key)

    def value(self, obs):
        return self.network.apply(self.params, obs, method=ActorCritic.value)

    def _run(self, key):
        reset_key, rollout_key = jax.random.split(key)
        carry = rollout.reset(self.env, reset_key)
        return rollout.rollout(self.env, self.act, self.value, carry, rollout_key, self.num_steps)


def to_np(tree):
    return jax.tree.map(np.asarray, tree)


@pytest.fixture(scope="module")
def cartpole16():
    return Setup("CartPole-v1", 16)


@pytest.fixture(scope="module")
def cartpole64():
    # A 20-step time limit: the window holds both terminations (falls) and truncations.
    return Setup("CartPole-v1", 64, max_steps_in_episode=20)


@pytest.fixture(scope="module")
def pendulum16():
    return Setup("Pendulum-v1", 16)


@pytest.fixture(scope="module")
def traj64(cartpole64):
    return cartpole64.run(jax.random.key(1))[1]


def check_common(traj, T, obs_dim):
    chex.assert_shape(traj.obs, (T, N, obs_dim))
    chex.assert_type(traj.obs, jnp.float32)
    chex.assert_shape(
        [
            traj.rewards,
            traj.log_probs,
            traj.values,
            traj.next_values,
            traj.episode_return,
            traj.terminated,
            traj.truncated,
            traj.episode_length,
        ],
        (T, N),
    )
    chex.assert_type([traj.rewards, traj.log_probs, traj.values, traj.next_values, traj.episode_return], jnp.float32)
    chex.assert_type([traj.terminated, traj.truncated], bool)
    chex.assert_type(traj.episode_length, jnp.int32)
    chex.assert_tree_all_finite([traj.obs, traj.rewards, traj.log_probs, traj.values, traj.next_values])


@pytest.mark.slow
def test_trajectory_shapes_cartpole(cartpole16):
    carry, traj = cartpole16.run(jax.random.key(0))
    check_common(traj, 16, 4)
    chex.assert_shape(traj.actions, (16, N))
    chex.assert_type(traj.actions, jnp.int32)
    assert set(np.unique(traj.actions)) <= {0, 1}
    chex.assert_shape(carry.obs, (N, 4))
    chex.assert_shape(traj.done, (16, N))


@pytest.mark.slow
def test_trajectory_shapes_pendulum(pendulum16):
    carry, traj = pendulum16.run(jax.random.key(0))
    check_common(traj, 16, 3)
    chex.assert_shape(traj.actions, (16, N, 1))
    chex.assert_type(traj.actions, jnp.float32)
    chex.assert_shape(carry.obs, (N, 3))
    # Pendulum never terminates; 16 < 200 steps: no truncation either.
    assert not np.asarray(traj.done).any()
    # Actions are stored before clipping: a unit-std Gaussian around ~0 stays mostly within [-2, 2] but the
    # log-prob must be the Gaussian's at the stored (unclipped) action, checked below.
    assert np.isfinite(np.asarray(traj.actions)).all()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["cartpole16", "pendulum16"])
def test_log_probs_and_values_match_network(name, request):
    setup = request.getfixturevalue(name)
    _, traj = setup.run(jax.random.key(3))
    dist, values = setup.network.apply(setup.params, traj.obs)
    np.testing.assert_allclose(dist.log_prob(traj.actions), traj.log_probs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(values, traj.values, rtol=1e-5, atol=1e-5)
    # The fresh actor's output layer is tiny (gain 0.01): discrete policies are ~uniform over 2 actions.
    if name == "cartpole16":
        np.testing.assert_allclose(traj.log_probs, np.log(0.5), atol=0.05)


@pytest.mark.parametrize("num_envs", [64, 128, 300])
def test_critic_over_many_envs_runs_in_chunks_of_time_steps_bit_for_bit(num_envs, monkeypatch):
    """Beyond 4 x CRITIC_CHUNK_ROWS rows the critic's pass over a rollout's [T + 1, N] observations is a
    `lax.map` over chunks of whole time steps (the last one shorter where they do not divide), giving the values
    of one pass: bit for bit where a chunk's rows are a multiple of the products' row tile (128 envs), else within
    float32 rounding; at or under it, one pass, the same program as the critic alone. Lowered for a GPU, one pass."""
    monkeypatch.setattr(rollout, "CRITIC_CHUNK_ROWS", 256)  # chunks beyond 1024 rows: 9 steps of 128 envs
    critic = ppo.setup(ppo.Config(env="CartPole-v1")).network
    obs = jax.random.normal(jax.random.key(0), (9, num_envs, 4))
    params = jax.jit(critic.init)(jax.random.key(1), obs[0])

    def value(o):
        return critic.apply(params, o, method=ActorCritic.value)

    def lowered_loops(platform):
        exported = jax.export.export(jax.jit(lambda o: rollout.values_of(value, o)), platforms=(platform,))(obs)
        return exported.mlir_module().count("stablehlo.while")

    maps = eqns_named(jax.make_jaxpr(lambda o: rollout.values_of(value, o))(obs).jaxpr, "scan")
    assert len(maps) == (1 if obs.shape[0] * obs.shape[1] > 4 * 256 else 0)
    assert lowered_loops("cpu") == len(maps) and lowered_loops("cuda") == 0
    if maps:
        assert maps[0].params["length"] == obs.shape[0] // max(1, 256 // obs.shape[1])
    chunked, whole = jax.jit(lambda o: rollout.values_of(value, o))(obs), jax.jit(value)(obs)
    if num_envs % 16 == 0:
        np.testing.assert_array_equal(chunked, whole)
    np.testing.assert_allclose(chunked, whole, rtol=1e-6, atol=1e-7)


@pytest.mark.slow
def test_next_values_are_successor_values(cartpole64, traj64):
    traj = to_np(traj64)
    done = traj.terminated | traj.truncated
    assert done[:-1].sum() >= 3, "need some completed episodes inside the window"
    assert traj.truncated[:-1].any() and traj.terminated[:-1].any()
    not_done = ~done[:-1]
    np.testing.assert_allclose(traj.next_values[:-1][not_done], traj.values[1:][not_done], rtol=1e-5, atol=1e-5)
    # Where an episode ended, the next row holds the value of the reset observation, not of the successor.
    gap = np.abs(traj.next_values[:-1][done[:-1]] - traj.values[1:][done[:-1]])
    assert (gap > 1e-6).all()


@pytest.mark.slow
def test_terminal_successors_have_value_zero(traj64):
    traj = to_np(traj64)
    assert traj.terminated.any()
    np.testing.assert_array_equal(traj.next_values[traj.terminated], 0.0)


@pytest.mark.slow
def test_truncated_successors_bootstrap_from_final_observation(cartpole64):
    """Replays the rollout step by step in Python (same keys) and evaluates the critic on every
    `final_observation` densely: the rollout's gathered evaluation must agree at every truncated step."""
    setup = cartpole64
    key = jax.random.key(1)
    reset_key, rollout_key = jax.random.split(key)
    traj = to_np(setup.run(key)[1])
    carry = rollout.reset(setup.env, reset_key)
    step = jax.jit(setup.env.step)
    act = jax.jit(setup.act)
    final_obs = []
    for keys in jax.random.split(rollout_key, (setup.num_steps, 2)):
        action, _ = act(carry.obs, keys[0])
        obs, state, *_, info = step(keys[1], carry.state, action)
        final_obs.append(info["final_observation"])
        carry = rollout.EnvCarry(state, obs)
    dense = np.asarray(setup.value(jnp.stack(final_obs)))
    trunc = traj.truncated & ~traj.terminated
    assert trunc.sum() >= 2
    np.testing.assert_allclose(traj.next_values[trunc], dense[trunc], rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_bootstrap_truncated_gathers_only_masked_entries():
    values = jnp.arange(12.0).reshape(4, 3)
    mask = jnp.zeros((4, 3), bool).at[1, 2].set(True).at[3, 0].set(True)
    final_obs = jnp.arange(24.0).reshape(4, 3, 2)
    out = rollout.bootstrap_truncated(values, mask, final_obs, lambda o: o.sum(-1) * 100, max_count=3)
    expected = np.arange(12.0).reshape(4, 3)
    expected[1, 2] = (10 + 11) * 100
    expected[3, 0] = (18 + 19) * 100
    np.testing.assert_array_equal(out, expected)


@pytest.mark.slow
def test_carry_continues_rollout(cartpole16):
    # Two consecutive rollouts: the second starts where the first stopped.
    env, T = cartpole16.env, 16
    carry = rollout.reset(env, jax.random.key(10))
    run = jax.jit(lambda c, k: rollout.rollout(env, cartpole16.act, cartpole16.value, c, k, T))
    carry1, traj1 = run(carry, jax.random.key(11))
    _, traj2 = run(carry1, jax.random.key(12))
    np.testing.assert_array_equal(traj1.obs[0], carry.obs)
    np.testing.assert_array_equal(traj2.obs[0], carry1.obs)
    # Episode statistics carry over too: the lengths of the episodes ending in the second window count the
    # steps of the first window.
    running = np.zeros(N, np.int64)
    for traj in (to_np(traj1), to_np(traj2)):
        for t in range(T):
            running += 1
            d = traj.terminated[t] | traj.truncated[t]
            np.testing.assert_array_equal(traj.episode_length[t], np.where(d, running, 0))
            running[d] = 0


# ---------------------------------------------------------------------------
# episode_metrics
# ---------------------------------------------------------------------------


def metrics_ref(traj):
    traj = to_np(traj)
    done = traj.terminated | traj.truncated
    if not done.any():
        return np.nan, np.nan, 0
    return traj.episode_return[done].mean(), traj.episode_length[done].mean(), int(done.sum())


@pytest.mark.slow
def test_episode_metrics_against_numpy(traj64):
    ret, length, count = metrics_ref(traj64)
    traj = to_np(traj64)
    assert count >= 3 and traj.truncated.any() and traj.terminated.any()
    assert (traj.episode_length[traj.done] <= 20).all()
    m = to_np(jax.jit(rollout.episode_metrics)(traj64))
    assert int(m["episodes"]) == count
    np.testing.assert_allclose(m["episode_return"], ret, rtol=1e-5)
    np.testing.assert_allclose(m["episode_length"], length, rtol=1e-5)
    assert np.isfinite(m["episode_return"])


@pytest.mark.slow
def test_episode_metrics_nan_when_no_episode_completed(cartpole16):
    # The first 5 steps of a rollout from reset: CartPole cannot fall that soon, so no episode completes.
    _, traj = cartpole16.run(jax.random.key(0))
    short = jax.tree.map(lambda x: x[:5], traj)
    assert not np.asarray(short.done).any()
    m = rollout.episode_metrics(short)
    assert np.isnan(m["episode_return"]) and np.isnan(m["episode_length"])
    assert int(m["episodes"]) == 0


# ---------------------------------------------------------------------------
# Determinism and vmap
# ---------------------------------------------------------------------------


def test_same_key_same_trajectory(cartpole16):
    a = to_np(cartpole16.run(jax.random.key(5)))
    b = to_np(cartpole16.run(jax.random.key(5)))
    jax.tree.map(np.testing.assert_array_equal, a, b)
    c = to_np(cartpole16.run(jax.random.key(6)))
    assert not np.array_equal(a[1].obs, c[1].obs)
    assert not np.array_equal(a[1].actions, c[1].actions)


@pytest.mark.slow
def test_vmap_over_keys_equals_separate_rollouts(cartpole16):
    keys = jax.random.split(jax.random.key(9), 3)
    batched = to_np(jax.jit(jax.vmap(cartpole16._run))(keys))
    for i in range(3):
        single = to_np(cartpole16.run(keys[i]))
        jax.tree.map(lambda b, s, i=i: np.testing.assert_allclose(b[i], s, rtol=1e-5, atol=1e-6), batched, single)
    assert not np.array_equal(batched[1].obs[0], batched[1].obs[1])
