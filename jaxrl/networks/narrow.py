"""The product of a narrow layer (few output features: a policy's logits, a Q-head) whose weight gradient is one
matrix-vector product per output feature.

For y = x W with x [..., k] and W [k, n], reverse mode needs dL/dW = x^T g (g = dL/dy [..., n]), a product that
contracts the rows of both operands. XLA's CPU backend runs it with its own dot emitter, which for a narrow W
(n of 2 to 6) is slower than the n products x^T g_j it contains, each of which XLA turns into a multiply and a
reduction over the rows (from 4 to 1000s of rows; at 8 outputs and more the dot can be the faster):

    dL/dW[:, j] = x^T g[..., j],    j = 0 .. n-1.

Both are float32 sums of the same terms; where XLA emits the reductions in the dot's order the bits are the same (in
every golden case of `tests/golden_cases.py`), elsewhere (many rows; a reduction fused with its neighbours) the last
bits can differ. The forward product and dL/dx are JAX's own, unchanged. `narrow_dot_general`
is a `jax.custom_jvp` whose tangent in W is written as those n products, so reverse mode (their transpose) takes
the fast form and forward mode (`jax.jvp`, `jax.linearize`: TRPO's Fisher-vector products) still works.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

NARROW_FEATURES = 6  # layers with at most this many outputs take `narrow_dot_general` (benchmarks.narrow_products)


def _dense(x: jax.Array):
    """The dimension numbers of a Dense product: x's last axis against the kernel's first."""
    return (((x.ndim - 1,), (0,)), ((), ()))


def _rows_dot_columns(x: jax.Array, w: jax.Array) -> jax.Array:
    """x W as n matrix-vector products, [..., k] x [k, n] -> [..., n]: column j is x w[:, j]."""
    return jnp.stack([lax.dot_general(x, w[:, j], _dense(x)) for j in range(w.shape[1])], axis=-1)


@jax.custom_jvp
def _narrow_product(x: jax.Array, w: jax.Array) -> jax.Array:
    return lax.dot_general(x, w, _dense(x))


def _narrow_product_jvp(primals, tangents):
    """d(x W) = dx W + x dW, the second term as n matrix-vector products (zero tangents skipped)."""
    x, w = primals
    dx, dw = (None if isinstance(t, jax.custom_derivatives.SymbolicZero) else t for t in tangents)
    terms = ([lax.dot_general(dx, w, _dense(dx))] if dx is not None else []) + (
        [_rows_dot_columns(x, dw)] if dw is not None else []
    )
    return lax.dot_general(x, w, _dense(x)), sum(terms[1:], terms[0])


_narrow_product.defjvp(_narrow_product_jvp, symbolic_zeros=True)


def narrow_dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    """`lax.dot_general` for `flax.linen.Dense(dot_general=...)`: the Dense product x W ([..., k] x [k, n]) with
    W's gradient as n matrix-vector products (module docstring) on a CPU; any other product, and every product on
    other backends (whose own libraries were not measured slower at it), is `lax.dot_general`'s."""
    plain = precision is not None or preferred_element_type is not None or rhs.ndim != 2
    if plain or dimension_numbers != _dense(lhs) or jax.default_backend() != "cpu":
        return lax.dot_general(lhs, rhs, dimension_numbers, precision, preferred_element_type)
    return _narrow_product(lhs, rhs)
