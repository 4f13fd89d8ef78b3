"""jaxrl.envs.wrappers over a named device axis: `make(..., axis_name=...)` gives each device its own key stream
(fold_in(key, axis index)) and global running statistics, with the arithmetic of `jaxrl.parallel`'s helpers."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import envs, parallel
from jaxrl.envs import wrappers

D = 2


def on_devices(fn, in_axes=0):
    """`fn` on D emulated devices (a named vmap over `parallel.AXIS`), outputs stacked [D, ...]."""
    return jax.jit(parallel.emulate(fn, D, in_axes=in_axes, out_axes=0))


def test_mean_var_over_an_axis_is_the_data_parallel_arithmetic():
    batch = jax.random.normal(jax.random.key(0), (D, 8, 3)) * jnp.array([1.0, 5.0, 0.1]) + 2.0
    ours = on_devices(lambda b: wrappers.mean_var(b, parallel.AXIS))(batch)
    reference = on_devices(parallel.mean_var)(batch)
    for a, b in zip(ours, reference, strict=True):
        np.testing.assert_array_equal(a, b)
    assert int(ours[2][0]) == D * 8
    local = wrappers.mean_var(batch[0])
    np.testing.assert_array_equal(local[0], batch[0].mean(0))
    assert local[2] == 8


def test_device_keys_fold_in_the_axis_index():
    env = envs.make("CartPole-v1", 3, axis_name=parallel.AXIS)
    plain = envs.make("CartPole-v1", 3)
    key = jax.random.key(1)
    obs, _ = on_devices(env.reset, in_axes=None)(key)
    for d in range(D):
        np.testing.assert_array_equal(obs[d], plain.reset(jax.random.fold_in(key, d))[0])
    assert not np.array_equal(obs[0], obs[1])


def test_without_an_axis_name_every_device_draws_the_same_stream():
    """The env layer reads no trace-time context: the axis reaches it only as `make`'s argument."""
    env = envs.make("CartPole-v1", 3)
    obs, _ = on_devices(env.reset, in_axes=None)(jax.random.key(1))
    np.testing.assert_array_equal(obs[0], obs[1])
    assert isinstance(env.inner, envs.GymnaxVecEnv)  # one device: no DeviceKeys layer


def test_normalizers_keep_global_statistics():
    """Observation and reward statistics over the axis are those of the D devices' envs together."""
    env = envs.make("Pendulum-v1", 4, normalize_observations=True, normalize_rewards=True, axis_name=parallel.AXIS)
    key = jax.random.key(2)

    def run(key):
        obs, state = env.reset(key)
        action = jnp.zeros((env.num_envs, 1))
        return env.step(jax.random.key(3), state, action)[1]

    state = on_devices(run, in_axes=None)(key)
    obs_stats, reward_stats = state.inner.inner.stats, state.reward_stats
    for stats in (obs_stats, reward_stats):
        for leaf in jax.tree.leaves(stats):
            np.testing.assert_array_equal(leaf[0], leaf[1])  # replicated: every device holds the global statistics
    np.testing.assert_allclose(obs_stats.count[0], 1e-4 + 2 * D * 4, rtol=1e-6)
