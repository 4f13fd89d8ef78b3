"""jaxrl.networks.weight_gradient: a Dense layer's products; a narrow layer's as matrix-vector products (forward,
dL/dx, dL/dW), a wide layer's weight gradient as a plain product of a materialised x^T."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxrl.networks import torsos, weight_gradient

DENSE = lambda x: (((x.ndim - 1,), (0,)), ((), ()))  # noqa: E731 (flax Dense's dimension numbers)


def loss(dot_general, x, w):
    return jnp.sum(jnp.tanh(dot_general(x, w, DENSE(x))) ** 2)


@pytest.mark.parametrize("shape", [(4, 64), (128, 64), (128, 84), (16, 8, 64), (1, 128, 84)])
@pytest.mark.parametrize("outputs", [1, 2, 6, 16, 64])
def test_gradients_equal_the_plain_products(shape, outputs):
    """x W, dL/dx and dL/dW through `dense_dot_general` (narrow and wide forms) are those of `lax.dot_general` to
    float32 rounding (the sums may run in another order), and those of a float64 NumPy reference."""
    x = jax.random.normal(jax.random.key(0), shape)
    w = jax.random.normal(jax.random.key(1), (shape[-1], outputs)) / np.sqrt(shape[-1])  # tanh not saturated
    plain = jax.jit(jax.grad(lambda x, w: loss(lax.dot_general, x, w), (0, 1)))(x, w)
    fast = jax.jit(jax.grad(lambda x, w: loss(weight_gradient.dense_dot_general, x, w), (0, 1)))(x, w)
    for a, b in zip(plain, fast, strict=True):  # float32 sums of up to 128 terms, in another order
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-5 * np.abs(np.asarray(a)).max())
    x64, w64 = np.asarray(x, np.float64), np.asarray(w, np.float64)
    y = np.tanh(x64 @ w64)
    forward = jax.jit(lambda x, w: weight_gradient.dense_dot_general(x, w, DENSE(x)))(x, w)
    np.testing.assert_allclose(np.asarray(forward), x64 @ w64, rtol=1e-4, atol=1e-4)
    g = 2 * y * (1 - y**2)  # dL/d(x W)
    np.testing.assert_allclose(np.asarray(fast[0]), g @ w64.T, rtol=1e-4, atol=1e-4)
    rows = x64.reshape(-1, shape[-1]), g.reshape(-1, outputs)
    np.testing.assert_allclose(np.asarray(fast[1]), rows[0].T @ rows[1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows", [4, 128, 2048])
def test_a_narrow_layer_calls_no_library_product(rows):
    """A narrow layer's forward and gradient programs hold none of the library calls (XLA's custom fusions:
    YNNPACK's products) that `lax.dot_general` of the same layer compiles to; XLA emits its products itself."""
    x, w = jnp.ones((rows, 64)), jnp.ones((64, 2))

    def kinds(dot_general):
        forward = lambda x, w: dot_general(x, w, DENSE(x))  # noqa: E731
        gradient = jax.grad(lambda x, w: loss(dot_general, x, w), (0, 1))
        return "".join(jax.jit(f).lower(x, w).compile().as_text() for f in (forward, gradient))

    if "kind=kCustom" not in kinds(lax.dot_general):
        pytest.skip("XLA calls no library for this layer's plain products on this CPU: nothing to compare")
    assert "kind=kCustom" not in kinds(weight_gradient.dense_dot_general)


@pytest.mark.parametrize("outputs", [2, 64])
def test_many_rows_agree_to_float32_rounding_and_vmap_matches(outputs):
    """Over many rows a narrow layer's gradient to float32 rounding, a wide layer's the plain product's own (more
    than WIDE_MAX_ROWS rows keep XLA's dot); vmapped over seeds, each seed's own gradient."""
    x, w = jax.random.normal(jax.random.key(2), (2048, 64)), jax.random.normal(jax.random.key(3), (64, outputs)) / 8
    plain = jax.jit(jax.grad(lambda w: loss(lax.dot_general, x, w)))(w)
    fast = jax.jit(jax.grad(lambda w: loss(weight_gradient.dense_dot_general, x, w)))(w)
    if outputs <= weight_gradient.NARROW_FEATURES:
        np.testing.assert_allclose(np.asarray(fast), np.asarray(plain), rtol=1e-5, atol=1e-3)
    else:
        np.testing.assert_array_equal(np.asarray(fast), np.asarray(plain))
    ws = jnp.stack([w, 2 * w])
    batched = jax.jit(jax.vmap(jax.grad(lambda w: loss(weight_gradient.dense_dot_general, x[:128], w))))(ws)
    for i in range(2):
        alone = jax.jit(jax.grad(lambda w: loss(weight_gradient.dense_dot_general, x[:128], w)))(ws[i])
        np.testing.assert_allclose(np.asarray(batched[i]), np.asarray(alone), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("outputs", [2, 64])
def test_forward_over_reverse_works_and_matches(outputs):
    """`jax.linearize` of the gradient (TRPO's Fisher-vector products) differentiates the custom rule forward: the
    Hessian-vector product is the plain product's (to float32 rounding)."""
    x, w = jax.random.normal(jax.random.key(4), (128, 64)), jax.random.normal(jax.random.key(5), (64, outputs))
    v = jax.random.normal(jax.random.key(6), w.shape)

    def hvp(dot_general):
        return jax.jit(lambda w, v: jax.linearize(jax.grad(lambda w: loss(dot_general, x, w)), w)[1](v))(w, v)

    fast, plain = np.asarray(hvp(weight_gradient.dense_dot_general)), np.asarray(hvp(lax.dot_general))
    np.testing.assert_allclose(fast, plain, rtol=1e-4, atol=1e-5 * np.abs(plain).max())
    assert np.abs(plain).max() > 1e-2  # not a vacuous comparison of zeros


@pytest.mark.parametrize(
    "features, fast", [(1, True), (6, True), (7, False), (16, True), (64, True), (84, False), (120, False), (256, True)]
)
def test_dense_takes_a_fast_form_only_for_narrow_and_wide_layers(features, fast):
    """`torsos.dense` gives narrow layers (at most NARROW_FEATURES outputs) and wide ones (a multiple of
    WIDE_MULTIPLE) `dense_dot_general`, whose weight gradient in the wide form goes through a materialised x^T
    (an optimisation barrier in the gradient's program); other widths keep flax's own product."""
    layer = torsos.dense(features, 1.0)
    assert (layer.dot_general is weight_gradient.dense_dot_general) == fast
    x = jnp.ones((3, 5))
    params = layer.init(jax.random.key(0), x)
    np.testing.assert_array_equal(
        np.asarray(layer.apply(params, x)), np.asarray(nn.Dense(features).apply(params, x))
    )  # the forward product is the plain one
    grad = jax.make_jaxpr(jax.grad(lambda p: layer.apply(p, x).sum()))(params)
    assert ("optimization_barrier" in str(grad)) == (fast and features > weight_gradient.NARROW_FEATURES)


def test_other_products_are_the_plain_ones():
    """A product with other dimension numbers, of a width with no fast form, or of a wide layer over more than
    WIDE_MAX_ROWS rows, is `lax.dot_general`'s."""
    a, b = jnp.ones((4, 3)), jnp.ones((4, 2))
    np.testing.assert_array_equal(
        np.asarray(weight_gradient.dense_dot_general(a, b, (((0,), (0,)), ((), ())))), np.full((3, 2), 4.0)
    )
    rows = weight_gradient.WIDE_MAX_ROWS
    for width, x, custom in (
        (84, (4, 3), False),
        (64, (rows, 3), True),
        (64, (2, rows, 3), False),
        (2, (2, rows, 3), True),
    ):
        jaxpr = jax.make_jaxpr(lambda w, x: weight_gradient.dense_dot_general(x, w, (((x.ndim - 1,), (0,)), ((), ()))))
        assert ("custom_jvp_call" in str(jaxpr(jnp.ones((3, width)), jnp.ones(x)))) == custom
