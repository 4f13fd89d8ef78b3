"""jaxrl's shuffle is jax.random.permutation, bit for bit: of indices, and of vectors with repeated values."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import shuffle


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 2, 7, 128, 512, 4096])  # 4096 takes two sorting rounds, the rest one
def test_permutation_equals_jax_random_permutation(n):
    keys = jax.random.split(jax.random.key(n), 6)
    ours = jax.jit(jax.vmap(shuffle.permutation, in_axes=(0, None)), static_argnums=1)(keys, n)
    theirs = jax.vmap(jax.random.permutation, in_axes=(0, None))(keys, n)
    assert ours.dtype == theirs.dtype
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(np.sort(np.asarray(ours), axis=1), np.broadcast_to(np.arange(n), (6, n)))


def test_stable_argsort_keeps_tied_keys_in_place_order():
    """Random 32-bit keys rarely tie, so the tie-break is checked on keys drawn from {0, 1, 2} and near 2^32."""
    rng = np.random.default_rng(0)
    for sort_keys in (rng.integers(0, 3, 300), rng.integers(2**32 - 3, 2**32, 300), np.zeros(5)):
        sort_keys = sort_keys.astype(np.uint32)
        ours = jax.jit(shuffle.stable_argsort)(jnp.asarray(sort_keys))
        np.testing.assert_array_equal(ours, np.argsort(sort_keys, kind="stable"))
        assert ours.dtype == jnp.int32


@pytest.mark.slow
def test_indexing_a_vector_by_the_permutation_shuffles_it_as_jax_does():
    """`x[permutation(key, len(x))]` is `jax.random.permutation(key, x)`, repeated values and all."""
    deck = np.arange(156) % 4
    for seed in range(5):
        key = jax.random.key(seed)
        np.testing.assert_array_equal(deck[shuffle.permutation(key, 156)], jax.random.permutation(key, deck))
