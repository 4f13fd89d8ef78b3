"""The registered memory tasks (`jaxrl.envs.memory`): MemoryChain at memory length n shows the context bit in the
first two observations only, rewards only the last of its n + 1 steps, +1 for the bit and -1 otherwise."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import envs, presets
from jaxrl.algos import ppo
from jaxrl.envs.memory import MEMORY_LENGTHS, memory_chain_id


@pytest.mark.parametrize("length", [10, 20])
def test_memory_chain_at_length_n(length):
    env = envs.make(memory_chain_id(length), 8)
    assert env.spec.discrete and env.spec.action_dim == 2

    @jax.jit
    def play(key):
        obs, state = env.reset(jax.random.key(0))

        def step(carry, k):
            obs, state = carry
            action = jnp.zeros(8, jnp.int32)  # always report bit 0
            new_obs, state, reward, terminated, truncated, info = env.step(k, state, action)
            return (new_obs, state), (obs, reward, terminated)

        return jax.lax.scan(step, (obs, state), jax.random.split(key, length + 1))[1]

    obs, reward, terminated = (np.asarray(a) for a in play(jax.random.key(1)))
    context = obs[0, :, 2]  # +-1: the bit 1 or 0
    assert np.all(context != 0) and np.all(obs[1, :, 2] == context) and np.all(obs[2:, :, 2] == 0), "first two only"
    assert np.all(reward[:-1] == 0) and np.all(np.abs(reward[-1]) == 1), "only the last step is rewarded, +-1"
    assert np.all(terminated[-1]) and not np.any(terminated[:-1]), f"an episode is {length} + 1 steps"
    np.testing.assert_array_equal(reward[-1], np.where(context < 0, 1.0, -1.0))
    np.testing.assert_allclose(obs[:, 0, 0], 1.0 - np.maximum(np.arange(length + 1) - 1, 0) / length, rtol=1e-6)


def test_memory_chain_ids_are_known_to_configs():
    for length in MEMORY_LENGTHS:
        envs.check_env_id(memory_chain_id(length))
    config = ppo.Config(**{**presets.overrides("ppo", "MemoryChain-bsuite"), "env": memory_chain_id(20)})
    ppo.validate(config)


def test_builtin_memory_ids_are_not_gymnax_ids():
    from jaxrl.envs import gymnax as gymnax_adapter
    from jaxrl.envs.memory import MEMORY_LENGTHS, memory_chain_id

    assert not {memory_chain_id(n) for n in MEMORY_LENGTHS} & set(gymnax_adapter.ids())
