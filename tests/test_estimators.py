"""Tests for jaxrl.estimators: NumPy references, rlax oracle, relations."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import rlax

from jaxrl import estimators as est

T, N = 13, 5
TOL = dict(rtol=1e-5, atol=1e-5)


def make_batch(seed, shape=(T, N), p_term=0.15, p_trunc=0.15):
    rng = np.random.default_rng(seed)
    r = rng.normal(size=shape).astype(np.float32)
    v = rng.normal(size=shape).astype(np.float32)
    next_v = rng.normal(size=shape).astype(np.float32)
    term = rng.random(shape) < p_term
    trunc = rng.random(shape) < p_trunc
    if p_term > 0 and p_trunc > 0:  # Make sure some steps have both flags set.
        flat_t, flat_tr = term.reshape(T, -1), trunc.reshape(T, -1)
        for t, i in [(2, 0), (6, 1), (T - 1, 2)]:
            i = i % flat_t.shape[1]
            flat_t[t, i] = flat_tr[t, i] = True
    return r, v, next_v, term, trunc


# ---------------------------------------------------------------------------
# Independent NumPy references, written straight from the definitions.
# Columns are independent trajectories; loops are explicit.
# ---------------------------------------------------------------------------


def ref_td(r, next_v, term, gamma):
    out = np.zeros(r.shape, np.float64)
    for t in range(r.shape[0]):
        for i in range(r.shape[1]):
            out[t, i] = r[t, i] + gamma * (1 - term[t, i]) * next_v[t, i]
    return out


def _ref_n_step_single(r, next_v, term, trunc, gamma, t, i, n):
    """sum_{k<m} gamma^k r_{t+k} + gamma^m (1 - term_{t+m-1}) next_v_{t+m-1}."""
    g, k = 0.0, 0
    while True:
        g += gamma**k * r[t + k, i]
        end = term[t + k, i] or trunc[t + k, i] or t + k == r.shape[0] - 1
        if end or k + 1 == n:
            return g + gamma ** (k + 1) * (1 - term[t + k, i]) * next_v[t + k, i]
        k += 1


def ref_n_step(r, next_v, term, trunc, gamma, n):
    out = np.zeros(r.shape, np.float64)
    for t in range(r.shape[0]):
        for i in range(r.shape[1]):
            out[t, i] = _ref_n_step_single(r, next_v, term, trunc, gamma, t, i, n)
    return out


def ref_discounted(r, next_v, term, trunc, gamma):
    return ref_n_step(r, next_v, term, trunc, gamma, n=10**9)


def _steps_to_end(term, trunc, t, i):
    """M = number of steps from t to the episode's or window's end, inclusive."""
    m = 1
    while not (term[t + m - 1, i] or trunc[t + m - 1, i] or t + m - 1 == term.shape[0] - 1):
        m += 1
    return m


def ref_lambda(r, next_v, term, trunc, gamma, lam):
    """Forward view: (1-lam) sum_{n<M} lam^{n-1} G^(n) + lam^{M-1} G^(M)."""
    out = np.zeros(r.shape, np.float64)
    for t in range(r.shape[0]):
        for i in range(r.shape[1]):
            m = _steps_to_end(term, trunc, t, i)
            g = lam ** (m - 1) * _ref_n_step_single(r, next_v, term, trunc, gamma, t, i, m)
            for n in range(1, m):
                g += (1 - lam) * lam ** (n - 1) * _ref_n_step_single(r, next_v, term, trunc, gamma, t, i, n)
            out[t, i] = g
    return out


def ref_gae(r, v, next_v, term, trunc, gamma, lam):
    """A_t = sum_{k<M} (gamma lam)^k delta_{t+k}."""
    delta = r + gamma * (1 - term) * next_v - v
    adv = np.zeros(r.shape, np.float64)
    for t in range(r.shape[0]):
        for i in range(r.shape[1]):
            m = _steps_to_end(term, trunc, t, i)
            adv[t, i] = sum((gamma * lam) ** k * delta[t + k, i] for k in range(m))
    return adv, adv + v


# ---------------------------------------------------------------------------
# Against the references.
# ---------------------------------------------------------------------------

GAMMAS = [0.9, 0.99]
LAMBDAS = [0.0, 0.7, 0.95]


@pytest.mark.parametrize("gamma", GAMMAS)
def test_td_targets_reference(gamma):
    r, _, next_v, term, _ = make_batch(0)
    np.testing.assert_allclose(est.td_targets(r, next_v, term, gamma), ref_td(r, next_v, term, gamma), **TOL)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("gamma", GAMMAS)
def test_discounted_returns_reference(seed, gamma):
    r, _, next_v, term, trunc = make_batch(seed)
    np.testing.assert_allclose(
        est.discounted_returns(r, next_v, term, trunc, gamma), ref_discounted(r, next_v, term, trunc, gamma), **TOL
    )


def test_discounted_returns_pure_mc_hand_computed():
    r = np.array([[1.0], [2.0], [3.0], [4.0]], np.float32)
    next_v = np.array([[9.0], [9.0], [9.0], [9.0]], np.float32)
    trunc = np.array([[0], [1], [0], [0]], bool)
    term = np.array([[0], [0], [1], [0]], bool)
    g = est.discounted_returns(r, np.zeros_like(next_v), term, trunc, 0.5)
    np.testing.assert_allclose(g[:, 0], [2.0, 2.0, 3.0, 4.0])
    g = est.discounted_returns(r, next_v, term, trunc, 0.5)
    np.testing.assert_allclose(g[:, 0], [1 + 0.5 * 6.5, 2 + 4.5, 3.0, 4 + 4.5])


@pytest.mark.parametrize("n", [1, 3, 20])
@pytest.mark.parametrize("gamma", GAMMAS)
def test_n_step_returns_reference(n, gamma):
    r, _, next_v, term, trunc = make_batch(3)
    np.testing.assert_allclose(
        est.n_step_returns(r, next_v, term, trunc, gamma, n), ref_n_step(r, next_v, term, trunc, gamma, n), **TOL
    )


@pytest.mark.parametrize("lam", LAMBDAS + [1.0])
@pytest.mark.parametrize("gamma", GAMMAS)
def test_lambda_returns_reference(lam, gamma):
    r, _, next_v, term, trunc = make_batch(4)
    np.testing.assert_allclose(
        est.lambda_returns(r, next_v, term, trunc, gamma, lam), ref_lambda(r, next_v, term, trunc, gamma, lam), **TOL
    )


@pytest.mark.parametrize("lam", LAMBDAS)
@pytest.mark.parametrize("gamma", GAMMAS)
def test_gae_reference(lam, gamma):
    r, v, next_v, term, trunc = make_batch(5)
    adv, targets = est.gae(r, v, next_v, term, trunc, gamma, lam)
    ref_adv, ref_targets = ref_gae(r, v, next_v, term, trunc, gamma, lam)
    np.testing.assert_allclose(adv, ref_adv, **TOL)
    np.testing.assert_allclose(targets, ref_targets, **TOL)


def test_float_flags_match_bool_flags():
    r, v, next_v, term, trunc = make_batch(6)
    tf, trf = term.astype(np.float32), trunc.astype(np.float32)
    for f in _all_estimators():
        np.testing.assert_allclose(f(r, v, next_v, term, trunc), f(r, v, next_v, tf, trf), **TOL)


# ---------------------------------------------------------------------------
# Semantics: truncation bootstraps, termination doesn't, no leaks.
# ---------------------------------------------------------------------------


def _all_estimators(gamma=0.9, lam=0.8, n=20):
    """Uniform (r, v, next_v, term, trunc) -> [T, ...] wrappers."""
    return {
        "td": lambda r, v, nv, te, tr: est.td_targets(r, nv, te, gamma),
        "mc": lambda r, v, nv, te, tr: est.discounted_returns(r, nv, te, tr, gamma),
        "n_step": lambda r, v, nv, te, tr: est.n_step_returns(r, nv, te, tr, gamma, n),
        "n_step_3": lambda r, v, nv, te, tr: est.n_step_returns(r, nv, te, tr, gamma, 3),
        "lambda": lambda r, v, nv, te, tr: est.lambda_returns(r, nv, te, tr, gamma, lam),
        "gae_adv": lambda r, v, nv, te, tr: est.gae(r, v, nv, te, tr, gamma, lam)[0],
        "gae_targets": lambda r, v, nv, te, tr: est.gae(r, v, nv, te, tr, gamma, lam)[1],
    }.values()


def _flags_at(t, term_val, trunc_val):
    term = np.zeros((T, 1), bool)
    trunc = np.zeros((T, 1), bool)
    term[t, 0], trunc[t, 0] = term_val, trunc_val
    return term, trunc


@pytest.mark.parametrize("t", [4, T - 1])
def test_truncated_step_bootstraps_from_next_v(t):
    r, v, next_v, _, _ = make_batch(7, shape=(T, 1))
    term, trunc = _flags_at(t, False, True)
    next_v2 = next_v.copy()
    next_v2[t] += 10.0
    for f in _all_estimators():
        before, after = f(r, v, next_v, term, trunc), f(r, v, next_v2, term, trunc)
        assert abs(float(after[t, 0] - before[t, 0])) > 1.0
        # The next episode does not see it.
        np.testing.assert_allclose(after[t + 1 :], before[t + 1 :], **TOL)


@pytest.mark.parametrize("trunc_too", [False, True])
@pytest.mark.parametrize("t", [4, T - 1])
def test_terminated_step_ignores_next_v(t, trunc_too):
    r, v, next_v, _, _ = make_batch(8, shape=(T, 1))
    term, trunc = _flags_at(t, True, trunc_too)
    next_v2 = next_v.copy()
    next_v2[t] += 10.0
    for f in _all_estimators():
        np.testing.assert_allclose(f(r, v, next_v2, term, trunc), f(r, v, next_v, term, trunc), **TOL)


@pytest.mark.parametrize("flags", [(True, False), (False, True), (True, True)])
def test_nothing_leaks_across_episode_boundary(flags):
    t = 5
    r, v, next_v, _, _ = make_batch(9, shape=(T, 1))
    term, trunc = _flags_at(t, *flags)
    r2, v2, next_v2 = r.copy(), v.copy(), next_v.copy()
    r2[t + 1 :] += 5.0
    v2[t + 1 :] -= 3.0
    next_v2[t + 1 :] += 7.0
    for f in _all_estimators():
        before = f(r, v, next_v, term, trunc)
        after = f(r2, v2, next_v2, term, trunc)
        np.testing.assert_allclose(after[: t + 1], before[: t + 1], **TOL)
        assert not np.allclose(after[t + 1 :], before[t + 1 :])


def test_inside_episode_future_does_matter():
    r, v, next_v, _, _ = make_batch(10, shape=(T, 1))
    term, trunc = _flags_at(T - 1, False, False)
    r2 = r.copy()
    r2[5] += 5.0
    names = ["td", "mc", "n_step", "n_step_3", "lambda", "gae_adv", "gae_targets"]
    for name, f in zip(names, _all_estimators(), strict=False):
        changed = ~np.isclose(f(r2, v, next_v, term, trunc)[:, 0], f(r, v, next_v, term, trunc)[:, 0])
        expected = {"td": [5], "n_step_3": [3, 4, 5]}.get(name, range(6))
        np.testing.assert_array_equal(np.flatnonzero(changed), expected)


# ---------------------------------------------------------------------------
# Relations between estimators.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("lam", LAMBDAS)
def test_gae_targets_equal_lambda_returns_with_consistent_values(lam):
    r, v, next_v, term, trunc = make_batch(11)
    done = term | trunc
    next_v = next_v.copy()
    inside = ~done[:-1]
    next_v[:-1][inside] = v[1:][inside]  # next_v_t == v_{t+1} within episodes.
    adv, targets = est.gae(r, v, next_v, term, trunc, 0.97, lam)
    lam_ret = est.lambda_returns(r, next_v, term, trunc, 0.97, lam)
    np.testing.assert_allclose(targets, lam_ret, **TOL)
    np.testing.assert_allclose(adv, lam_ret - v, **TOL)


def test_gae_targets_differ_from_lambda_returns_with_inconsistent_values():
    r, v, next_v, term, trunc = make_batch(11)
    _, targets = est.gae(r, v, next_v, term, trunc, 0.97, 0.9)
    lam_ret = est.lambda_returns(r, next_v, term, trunc, 0.97, 0.9)
    assert not np.allclose(targets, lam_ret)


@pytest.mark.parametrize("gamma", GAMMAS)
def test_special_cases_relations(gamma):
    r, _, next_v, term, trunc = make_batch(12)
    td = est.td_targets(r, next_v, term, gamma)
    np.testing.assert_allclose(
        est.lambda_returns(r, next_v, term, trunc, gamma, 1.0),
        est.discounted_returns(r, next_v, term, trunc, gamma),
        **TOL,
    )
    np.testing.assert_allclose(est.lambda_returns(r, next_v, term, trunc, gamma, 0.0), td, **TOL)
    np.testing.assert_allclose(est.n_step_returns(r, next_v, term, trunc, gamma, 1), td, **TOL)
    np.testing.assert_allclose(
        est.n_step_returns(r, next_v, term, trunc, gamma, T),
        est.discounted_returns(r, next_v, term, trunc, gamma),
        **TOL,
    )


# ---------------------------------------------------------------------------
# Shapes, dtypes, batch dims, jit / vmap.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("f", list(_all_estimators()))
def test_trailing_batch_dims(f):
    r, v, next_v, term, trunc = make_batch(13, shape=(T, 3, 4))
    out = f(r, v, next_v, term, trunc)
    chex.assert_shape(out, (T, 3, 4))
    flat = f(*(x.reshape(T, 12) for x in (r, v, next_v, term, trunc)))
    np.testing.assert_allclose(np.reshape(out, (T, 12)), flat, **TOL)


@pytest.mark.parametrize("shape", [(T,), (T, N)])
def test_output_dtype_and_shape(shape):
    r, v, next_v, term, trunc = make_batch(14, shape=shape)
    r64, v64, nv64 = (x.astype(np.float64) for x in (r, v, next_v))
    outs = [
        est.td_targets(r64, nv64, term, 0.9),
        est.discounted_returns(r64, nv64, term, trunc, 0.9),
        est.n_step_returns(r64, nv64, term, trunc, 0.9, 3),
        est.lambda_returns(r64, nv64, term, trunc, 0.9, 0.9),
        *est.gae(r64, v64, nv64, term, trunc, 0.9, 0.9),
    ]
    chex.assert_type(outs, jnp.float32)
    chex.assert_shape(outs, shape)


def test_shape_mismatch_and_bad_args_raise():
    r, v, next_v, term, trunc = make_batch(15)
    with pytest.raises(AssertionError):
        est.lambda_returns(r, next_v[:-1], term, trunc, 0.9, 0.9)
    with pytest.raises(AssertionError):
        est.gae(r, v, next_v, term[:, :2], trunc, 0.9, 0.9)
    with pytest.raises(AssertionError):
        est.td_targets(r, next_v, term, np.array([0.9, 0.99]))
    with pytest.raises(AssertionError):  # Integer rewards.
        est.discounted_returns(r.astype(np.int32), next_v, term, trunc, 0.9)
    with pytest.raises(ValueError):
        est.n_step_returns(r, next_v, term, trunc, 0.9, 0)


def test_jit_and_vmap_over_gamma():
    r, v, next_v, term, trunc = make_batch(16)
    gammas = jnp.array([0.9, 0.99])
    gae_jit = jax.jit(est.gae)
    adv, targets = jax.vmap(gae_jit, in_axes=(None,) * 5 + (0, None))(r, v, next_v, term, trunc, gammas, 0.95)
    for k, g in enumerate([0.9, 0.99]):
        a, tg = est.gae(r, v, next_v, term, trunc, g, 0.95)
        np.testing.assert_allclose(adv[k], a, **TOL)
        np.testing.assert_allclose(targets[k], tg, **TOL)
    assert not np.allclose(adv[0], adv[1])

    # Traced gamma and lambda together, and a static n under jit.
    lam_ret = jax.jit(jax.vmap(est.lambda_returns, in_axes=(None,) * 4 + (0, 0)))(
        r, next_v, term, trunc, gammas, jnp.array([0.5, 0.9])
    )
    np.testing.assert_allclose(lam_ret[1], est.lambda_returns(r, next_v, term, trunc, 0.99, 0.9), **TOL)
    n_step = jax.jit(est.n_step_returns, static_argnames="n")
    np.testing.assert_allclose(
        n_step(r, next_v, term, trunc, jnp.float32(0.9), n=3), ref_n_step(r, next_v, term, trunc, 0.9, 3), **TOL
    )


# ---------------------------------------------------------------------------
# rlax as an oracle where the semantics coincide (no truncation).
# rlax works on single trajectories [T]; vmap over the batch axis 1.
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("lam", [0.0, 0.95])
def test_gae_matches_rlax_without_truncation(lam):
    r, v, next_v, term, trunc = make_batch(17, p_trunc=0.0)
    assert term.any() and not trunc.any()
    gamma = 0.99
    # rlax needs values for t in [0, T]: values[t+1] = v[t+1] even when an
    # episode ended at t (discount 0 kills it), values[T] = next_v[T-1].
    values = np.concatenate([v, next_v[-1:]], axis=0)
    next_v_ours = values[1:]
    discount = (gamma * (1 - term)).astype(np.float32)
    expected = jax.vmap(rlax.truncated_generalized_advantage_estimation, in_axes=(1, 1, None, 1), out_axes=1)(
        r, discount, lam, values
    )
    adv, _ = est.gae(r, v, next_v_ours, term, trunc, gamma, lam)
    np.testing.assert_allclose(adv, expected, **TOL)


@pytest.mark.parametrize("lam", [0.0, 0.6, 1.0])
def test_lambda_returns_match_rlax_without_truncation(lam):
    r, _, next_v, term, trunc = make_batch(18, p_trunc=0.0)
    discount = (0.95 * (1 - term)).astype(np.float32)
    expected = jax.vmap(rlax.lambda_returns, in_axes=(1, 1, 1, None), out_axes=1)(r, discount, next_v, lam)
    np.testing.assert_allclose(est.lambda_returns(r, next_v, term, trunc, 0.95, lam), expected, **TOL)


@pytest.mark.parametrize("p_term", [0.0, 0.15])
@pytest.mark.parametrize("n", [1, 3, 20])
def test_n_step_matches_rlax_without_truncation(n, p_term):
    r, _, next_v, term, trunc = make_batch(19, p_term=p_term, p_trunc=0.0)
    discount = (0.95 * (1 - term)).astype(np.float32)
    expected = jax.vmap(lambda r_, d_, v_: rlax.n_step_bootstrapped_returns(r_, d_, v_, n), in_axes=1, out_axes=1)(
        r, discount, next_v
    )
    np.testing.assert_allclose(est.n_step_returns(r, next_v, term, trunc, 0.95, n), expected, **TOL)
