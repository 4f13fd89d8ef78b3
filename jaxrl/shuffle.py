"""Uniform random permutations: `jax.random.permutation`'s exact order, at about a third of its cost on a CPU.

JAX shuffles `arange(n)` in ceil(3 ln n / ln(2^32 - 1)) rounds, each a stable sort of the current order on fresh
random 32-bit keys k. A stable sort on k orders (k_i, i) pairs; so does a sort of the single 64-bit numbers
k_i * 2^32 + i (all distinct, so stable or not, one order), which XLA's CPU sort runs with its built-in comparison
instead of calling a compiled comparator per pair. The minibatch shuffles use it.
"""

import jax
import jax.numpy as jnp
import numpy as np


def permutation(key: jax.Array, n: int) -> jax.Array:
    """`jax.random.permutation(key, n)`, bit for bit (see the module docstring); other backends than the CPU keep
    JAX's sort. `x[permutation(key, len(x))]` is `jax.random.permutation(key, x)` for a vector `x`."""
    if jax.default_backend() != "cpu":
        return jax.random.permutation(key, n)
    order = jnp.arange(n, dtype=jnp.int32)
    for _ in range(int(np.ceil(3 * np.log(max(1, n)) / np.log(np.iinfo(np.uint32).max)))):
        key, subkey = jax.random.split(key)
        order = order[stable_argsort(jax.random.bits(subkey, (n,), jnp.uint32))]
    return order


def stable_argsort(sort_keys: jax.Array) -> jax.Array:
    """int32 positions that stably sort the uint32 vector `sort_keys`: one sort of k_i * 2^32 + i."""
    with jax.enable_x64(True):
        packed = (sort_keys.astype(jnp.uint64) << 32) | jnp.arange(sort_keys.shape[0], dtype=jnp.uint64)
        return (jnp.sort(packed) & 0xFFFFFFFF).astype(jnp.int32)
