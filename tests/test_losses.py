"""Tests for jaxrl.losses against NumPy references written from the definitions."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import losses

EPS = 0.2


def surrogate_inputs(seed=0, n=400):
    """Log-probs whose ratios spread over [0.5, 1.6] (inside and outside [0.8, 1.2]), advantages of both signs."""
    rng = np.random.default_rng(seed)
    behaviour = rng.normal(-1.0, 0.5, n).astype(np.float32)
    ratio = rng.uniform(0.5, 1.6, n)
    ratio = ratio[np.abs(np.abs(ratio - 1) - EPS) > 1e-3]  # keep away from the clip boundary (ties)
    behaviour = behaviour[: ratio.size]
    log_prob = (behaviour + np.log(ratio)).astype(np.float32)
    adv = rng.normal(0, 1, ratio.size).astype(np.float32)
    adv[np.abs(adv) < 1e-3] = 0.5
    return log_prob, behaviour, adv


def surrogate_ref(log_prob, behaviour, adv, eps):
    out = np.zeros(log_prob.shape, np.float64)
    clipped = np.zeros(log_prob.shape, bool)
    for i in range(log_prob.size):
        rho = np.exp(np.float64(log_prob[i]) - np.float64(behaviour[i]))
        rho_c = min(max(rho, 1 - eps), 1 + eps)
        out[i] = -min(rho * adv[i], rho_c * adv[i])
        clipped[i] = abs(rho - 1) > eps
    return out, clipped


def test_clipped_surrogate_matches_numpy():
    lp, b, a = surrogate_inputs()
    loss, clipped = losses.clipped_surrogate_loss(jnp.asarray(lp), jnp.asarray(b), jnp.asarray(a), EPS)
    ref, ref_clipped = surrogate_ref(lp, b, a, EPS)
    np.testing.assert_allclose(loss, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(clipped, ref_clipped)
    # The inputs exercise all four regimes.
    rho = np.exp(lp - b)
    assert ((rho > 1 + EPS) & (a > 0)).any() and ((rho > 1 + EPS) & (a < 0)).any()
    assert ((rho < 1 - EPS) & (a > 0)).any() and ((rho < 1 - EPS) & (a < 0)).any()
    assert (~ref_clipped).sum() > 50
    # Pessimism: the loss is never below the unclipped surrogate -rho * A.
    assert (np.asarray(loss) >= -rho * a - 1e-5).all()


def test_clipped_surrogate_identity_at_ratio_one():
    a = jnp.array([1.5, -2.0, 0.0])
    lp = jnp.array([-0.3, -1.2, -2.0])
    loss, clipped = losses.clipped_surrogate_loss(lp, lp, a, EPS)
    np.testing.assert_allclose(loss, -a, atol=1e-7)
    assert not np.asarray(clipped).any()


def test_clipped_surrogate_traced_clip_eps_and_shapes():
    lp, b, a = (x[:24].reshape(4, 6) for x in surrogate_inputs(seed=1))
    f = jax.jit(losses.clipped_surrogate_loss)
    loss, clipped = f(lp, b, a, jnp.float32(EPS))
    ref, ref_clipped = surrogate_ref(lp.ravel(), b.ravel(), a.ravel(), EPS)
    np.testing.assert_allclose(np.asarray(loss).ravel(), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(clipped).ravel(), ref_clipped)
    with pytest.raises(AssertionError):
        losses.clipped_surrogate_loss(lp, b, a[:, :3], EPS)


def test_clipped_surrogate_gradient():
    lp, b, a = surrogate_inputs(seed=2)
    grad = jax.grad(lambda x: losses.clipped_surrogate_loss(x, jnp.asarray(b), jnp.asarray(a), EPS)[0].sum())(
        jnp.asarray(lp)
    )
    grad = np.asarray(grad)
    rho = np.exp(lp.astype(np.float64) - b)
    # Clipped in the direction of the advantage: the min picks the constant clipped term.
    flat = ((a > 0) & (rho > 1 + EPS)) | ((a < 0) & (rho < 1 - EPS))
    assert flat.sum() > 20 and (~flat).sum() > 20
    np.testing.assert_array_equal(grad[flat], 0.0)
    # Elsewhere (inside the range, or clipped against the advantage): d(-rho A)/d log pi = -A rho.
    np.testing.assert_allclose(grad[~flat], -a[~flat] * rho[~flat], rtol=1e-5, atol=1e-6)
    # Clipped against the advantage still carries gradient.
    against = ((a > 0) & (rho < 1 - EPS)) | ((a < 0) & (rho > 1 + EPS))
    assert against.any() and (np.abs(grad[against]) > 0).all()


def value_ref(v, g, old=None, eps=None):
    out = np.zeros(v.shape, np.float64)
    for i in range(v.size):
        err = (v[i] - g[i]) ** 2
        if old is not None:
            vc = old[i] + min(max(v[i] - old[i], -eps), eps)
            err = max(err, (vc - g[i]) ** 2)
        out[i] = 0.5 * err
    return out


def value_inputs(seed=3, n=300):
    rng = np.random.default_rng(seed)
    old = rng.normal(0, 1, n).astype(np.float32)
    v = (old + rng.normal(0, 0.4, n)).astype(np.float32)  # |v - old| both inside and outside eps
    g = (old + rng.normal(0, 1, n)).astype(np.float32)
    return v, g, old


def test_value_loss_unclipped():
    v, g, _ = value_inputs()
    np.testing.assert_allclose(losses.value_loss(jnp.asarray(v), jnp.asarray(g)), value_ref(v, g), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(losses.value_loss(jnp.asarray(g), jnp.asarray(g)), 0.0)


def test_value_loss_clipped():
    v, g, old = value_inputs()
    out = np.asarray(losses.value_loss(jnp.asarray(v), jnp.asarray(g), jnp.asarray(old), EPS))
    np.testing.assert_allclose(out, value_ref(v, g, old, EPS), rtol=1e-5, atol=1e-6)
    unclipped = value_ref(v, g)
    assert (out >= unclipped - 1e-6).all()  # max of the two errors
    assert (out > unclipped + 1e-4).sum() > 10  # the clipped term is active somewhere
    inside = np.abs(v - old) <= EPS
    np.testing.assert_allclose(out[inside], unclipped[inside], rtol=1e-5, atol=1e-6)


def test_value_loss_clipped_gradient_vanishes_when_clipped_term_wins():
    # V moved from V_old = 0 towards the target 3 by more than eps: the clipped prediction V_old + eps = 0.2 has
    # the larger error, constant in V, so V gets no gradient.
    v, g, old = jnp.array([2.0]), jnp.array([3.0]), jnp.array([0.0])
    np.testing.assert_allclose(losses.value_loss(v, g, old, EPS), 0.5 * 2.8**2, rtol=1e-6)
    grad = jax.grad(lambda x: losses.value_loss(x, g, old, EPS).sum())(v)
    np.testing.assert_allclose(grad, 0.0)
    grad_unclipped = jax.grad(lambda x: losses.value_loss(x, g).sum())(v)
    np.testing.assert_allclose(grad_unclipped, v - g)


def test_approx_kl_nonnegative_and_zero_at_equal():
    rng = np.random.default_rng(4)
    lp = jnp.asarray(rng.normal(-1, 2, 1000).astype(np.float32))
    b = jnp.asarray(rng.normal(-1, 2, 1000).astype(np.float32))
    kl = np.asarray(losses.approx_kl(lp, b))
    assert (kl >= 0).all()
    assert (kl[np.abs(lp - b) > 0.1] > 0).all()
    np.testing.assert_array_equal(losses.approx_kl(lp, lp), 0.0)
    # The k3 formula, (rho - 1) - log rho.
    r = np.asarray(lp, np.float64) - np.asarray(b, np.float64)
    np.testing.assert_allclose(kl, np.expm1(r) - r, rtol=1e-4, atol=1e-6)


def test_approx_kl_estimates_kl_mu_pi():
    mu = np.array([0.5, 0.3, 0.15, 0.05])
    pi = np.array([0.25, 0.35, 0.25, 0.15])
    exact = float(np.sum(mu * np.log(mu / pi)))
    samples = np.asarray(jax.random.categorical(jax.random.key(0), jnp.log(mu), shape=(200_000,)))
    np.testing.assert_allclose(np.bincount(samples, minlength=4) / samples.size, mu, atol=5e-3)
    log_pi = jnp.asarray(np.log(pi)[samples], jnp.float32)
    log_mu = jnp.asarray(np.log(mu)[samples], jnp.float32)
    estimate = float(losses.approx_kl(log_pi, log_mu).mean())
    assert estimate == pytest.approx(exact, rel=0.02)
    # Argument order matters: with log pi and log mu swapped the mean is far from KL(mu || pi).
    swapped = float(losses.approx_kl(log_mu, log_pi).mean())
    assert abs(swapped - exact) > 0.05 * exact
