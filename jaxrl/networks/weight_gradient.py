"""A Dense layer's products on a CPU in the forms XLA's CPU backend runs fastest: its weight gradient, and a narrow
layer's forward product and input gradient.

For y = x W with x [..., k] and W [k, n], reverse mode needs dL/dW = x^T g (g = dL/dy [..., n]), a product that
contracts the rows of both operands. XLA's CPU backend runs that product with its own dot emitter, while YNNPACK
runs the plain products (the forward x W and dL/dx = g W^T). Two other forms of the same sums are faster
(`benchmarks.weight_gradient`):

- **narrow** (n <= NARROW_FEATURES: a policy's logits or mean, a Q-head): n matrix-vector products, which XLA turns
  into a multiply and a reduction over the rows each,

      dL/dW[:, j] = x^T g[..., j],    j = 0 .. n-1;

- **wide** (n a multiple of WIDE_MULTIPLE: 64, 256 units; at most WIDE_MAX_ROWS rows, a minibatch): x^T
  materialised behind an optimisation barrier (so that XLA does not fold the transpose back into the dot), then
  the plain product [k, rows] x [rows, n], which YNNPACK runs.

Other widths (84, 120 outputs: PureJaxRL's DQN) and more rows keep XLA's dot: YNNPACK was measured no faster at
them, and it sums them in another order. Each form is a float32 sum of the same terms. Where the kernels add them
in the same order the bits are the same; elsewhere (many rows; a reduction fused with its neighbours) the last bits
can differ.

A narrow layer's other two products take the same column form, so that none of its products is a library call
(each costs more to call than its arithmetic at these widths):

    y[..., j] = x W[:, j],    dL/dx = sum_j g[..., j] W[:, j]^T  (the transpose: a multiply and an add per column).

Wider layers' forward product and dL/dx are JAX's own. `dense_dot_general` is a `jax.custom_jvp` whose tangents are
written in these forms, so reverse mode (their transpose) takes the fast ones and forward mode (`jax.jvp`,
`jax.linearize`: TRPO's Fisher-vector products) still works.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

NARROW_FEATURES = 6  # layers with at most this many outputs take the narrow form
WIDE_MULTIPLE = 16  # layers whose outputs are a multiple of this take the wide form ...
WIDE_MAX_ROWS = 128  # ... for products of at most this many rows


def _dense(x: jax.Array):
    """The dimension numbers of a Dense product: x's last axis against the kernel's first."""
    return (((x.ndim - 1,), (0,)), ((), ()))


def takes_fast_form(features: int, rows: int = 1) -> bool:
    """Whether a Dense layer of `features` outputs, over `rows` rows, takes a faster weight-gradient form on a CPU
    (module docstring)."""
    return features <= NARROW_FEATURES or (features % WIDE_MULTIPLE == 0 and rows <= WIDE_MAX_ROWS)


def _narrow(w: jax.Array) -> bool:
    return w.shape[1] <= NARROW_FEATURES


def _columns(x: jax.Array, w: jax.Array) -> jax.Array:
    """x W ([..., k] x [k, n], n small) as n matrix-vector products: column j is x W[:, j]."""
    return jnp.stack([lax.dot_general(x, w[:, j], _dense(x)) for j in range(w.shape[1])], axis=-1)


def _plain_or_columns(x: jax.Array, w: jax.Array) -> jax.Array:
    """x W: the column form for a narrow W, else XLA's dot."""
    return _columns(x, w) if _narrow(w) else lax.dot_general(x, w, _dense(x))


def _tangent_in_w(x: jax.Array, dw: jax.Array) -> jax.Array:
    """x dW, written so that its transpose, x^T g, takes the narrow or the wide form."""
    if _narrow(dw):
        return _columns(x, dw)
    rows_t = lax.optimization_barrier(x.reshape(-1, x.shape[-1]).T)  # x^T, [k, rows]
    product = lax.dot_general(rows_t, dw, (((0,), (0,)), ((), ())))
    return product.reshape(x.shape[:-1] + (dw.shape[1],))


@jax.custom_jvp
def _product(x: jax.Array, w: jax.Array) -> jax.Array:
    return _plain_or_columns(x, w)


def _product_jvp(primals, tangents):
    """d(x W) = dx W + x dW: the first term in the column form for a narrow W, the second in the form of
    `_tangent_in_w` (zero tangents skipped)."""
    x, w = primals
    dx, dw = (None if isinstance(t, jax.custom_derivatives.SymbolicZero) else t for t in tangents)
    terms = ([_plain_or_columns(dx, w)] if dx is not None else []) + ([_tangent_in_w(x, dw)] if dw is not None else [])
    return _plain_or_columns(x, w), sum(terms[1:], terms[0])


_product.defjvp(_product_jvp, symbolic_zeros=True)


def dense_dot_general(lhs, rhs, dimension_numbers, precision=None, preferred_element_type=None):
    """`lax.dot_general` for `flax.linen.Dense(dot_general=...)`: on a CPU, the Dense product x W ([..., k] x [k, n])
    of a layer that `takes_fast_form`, with W's gradient in that form and a narrow layer's every product in the
    column form (module docstring); any other product, and every product on other backends (whose own libraries
    were not measured slower at it), is `lax.dot_general`'s."""
    plain = precision is not None or preferred_element_type is not None or rhs.ndim != 2
    plain = plain or dimension_numbers != _dense(lhs) or jax.default_backend() != "cpu"
    if plain or not takes_fast_form(rhs.shape[1], lhs.size // max(1, lhs.shape[-1])):
        return lax.dot_general(lhs, rhs, dimension_numbers, precision, preferred_element_type)
    return _product(lhs, rhs)
