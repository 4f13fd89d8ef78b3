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


@pytest.mark.slow
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
        "vtrace_vs": lambda r, v, nv, te, tr: est.vtrace(v, nv, r, te, tr, _fixed_log_rho(r), gamma, lam)[0],
        "vtrace_pg": lambda r, v, nv, te, tr: est.vtrace(v, nv, r, te, tr, _fixed_log_rho(r), gamma, lam)[1],
        "retrace": lambda r, v, nv, te, tr: est.retrace(v, nv, r, te, tr, _fixed_log_rho(r), gamma, lam),
    }.values()


def _fixed_log_rho(x):
    """Deterministic log ratios in [-0.7, 0.7] (ratios both sides of 1), a function of the shape only."""
    return (0.7 * np.sin(np.arange(np.size(x)))).reshape(np.shape(x)).astype(np.float32)


def _flags_at(t, term_val, trunc_val):
    term = np.zeros((T, 1), bool)
    trunc = np.zeros((T, 1), bool)
    term[t, 0], trunc[t, 0] = term_val, trunc_val
    return term, trunc


@pytest.mark.slow
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


@pytest.mark.slow
@pytest.mark.parametrize("trunc_too", [False, True])
@pytest.mark.parametrize("t", [4, T - 1])
def test_terminated_step_ignores_next_v(t, trunc_too):
    r, v, next_v, _, _ = make_batch(8, shape=(T, 1))
    term, trunc = _flags_at(t, True, trunc_too)
    next_v2 = next_v.copy()
    next_v2[t] += 10.0
    for f in _all_estimators():
        np.testing.assert_allclose(f(r, v, next_v2, term, trunc), f(r, v, next_v, term, trunc), **TOL)


@pytest.mark.slow
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
    names = ["td", "mc", "n_step", "n_step_3", "lambda", "gae_adv", "gae_targets", "vs", "pg", "retrace"]
    for name, f in zip(names, _all_estimators(), strict=True):
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


@pytest.mark.slow
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


# ---------------------------------------------------------------------------
# Group-relative advantages (GRPO).
# ---------------------------------------------------------------------------

G = 4  # group size
NG = 3 * G


def make_groups(seed, lengths=None, shape=(T, NG)):
    """Rewards and prefix masks (episode lengths in [1, T]); garbage after the episode end."""
    rng = np.random.default_rng(seed)
    r = rng.normal(size=shape).astype(np.float32)
    if lengths is None:
        lengths = rng.integers(1, T + 1, size=shape[1:])
    mask = np.arange(T).reshape((T,) + (1,) * (len(shape) - 1)) < lengths
    r[~mask] = rng.normal(size=(~mask).sum()) * 100.0
    return r, mask


def ref_group_relative(r, mask, group_size, mode, eps=1e-8):
    out = np.zeros(r.shape, np.float64)
    r = r.astype(np.float64)
    for g0 in range(0, r.shape[1], group_size):
        members = [i for i in range(g0, g0 + group_size) if mask[:, i].any()]
        if mode == "outcome":
            ret = {i: sum(r[t, i] for t in range(r.shape[0]) if mask[t, i]) for i in members}
            vals = np.array(list(ret.values()))
            for i in members:
                for t in range(r.shape[0]):
                    if mask[t, i]:
                        out[t, i] = (ret[i] - vals.mean()) / (vals.std() + eps)
        else:
            vals = np.array([r[t, i] for i in members for t in range(r.shape[0]) if mask[t, i]])
            for i in members:
                for t in range(r.shape[0]):
                    if mask[t, i]:
                        future = [r[k, i] for k in range(t, r.shape[0]) if mask[k, i]]
                        out[t, i] = sum((x - vals.mean()) / (vals.std() + eps) for x in future)
    return out


@pytest.mark.parametrize("mode", ["outcome", "process"])
@pytest.mark.parametrize("seed", [20, 21])
def test_group_relative_reference(mode, seed):
    r, mask = make_groups(seed)
    mask[:, 5] = False  # A member with no valid step takes no part.
    adv = est.group_relative_advantages(r, mask, G, mode)
    chex.assert_shape(adv, (T, NG))
    chex.assert_type(adv, jnp.float32)
    np.testing.assert_allclose(adv, ref_group_relative(r, mask, G, mode), rtol=1e-4, atol=1e-5)


def test_group_relative_outcome_zero_mean_unit_std():
    r, mask = make_groups(22)
    adv = np.asarray(est.group_relative_advantages(r, mask, G, "outcome"))
    per_member = adv[0].reshape(-1, G)  # Every member is valid at t = 0.
    np.testing.assert_allclose(per_member.mean(axis=1), 0.0, atol=1e-6)
    np.testing.assert_allclose(per_member.std(axis=1), 1.0, atol=1e-5)
    # Constant over each member's valid steps.
    np.testing.assert_array_equal(adv, np.where(mask, adv[:1], 0.0))


@pytest.mark.slow
@pytest.mark.parametrize("group_size", [4, 6])
@pytest.mark.parametrize("eps", [1e-8, 0.0])
@pytest.mark.parametrize("mode", ["outcome", "process"])
def test_group_relative_identical_values_give_exact_zero(mode, eps, group_size):
    _, mask = make_groups(23, lengths=np.full(NG, T))
    # Sums and means of 0.1 or 0.7 are inexact in float32: a naive (R - mean) / (std + eps) gives about +-0.9 here.
    r = np.full((T, NG), 0.1, np.float32)
    r[:, group_size : 2 * group_size] = 0.7
    if mode == "outcome" and NG // group_size > 2:  # The same reward sequence for every member.
        r[:, 2 * group_size :] = np.random.default_rng(0).normal(size=(T, 1))
    adv = est.group_relative_advantages(r, mask, group_size, mode, eps)
    np.testing.assert_array_equal(adv, np.zeros((T, NG)))
    grads = jax.grad(lambda x: est.group_relative_advantages(x, mask, group_size, mode, eps).sum())(r)
    assert np.isfinite(grads).all()


@pytest.mark.slow
def test_group_relative_single_member_groups():
    r, mask = make_groups(24)
    np.testing.assert_array_equal(est.group_relative_advantages(r, mask, 1, "outcome"), np.zeros((T, NG)))
    # Process mode pools a lone member's own steps: normalised rewards sum to 0 over the episode.
    adv = est.group_relative_advantages(r, mask, 1, "process")
    np.testing.assert_allclose(adv[0], 0.0, atol=1e-5)
    np.testing.assert_allclose(adv, ref_group_relative(r, mask, 1, "process"), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["outcome", "process"])
def test_group_relative_masked_steps_ignored(mode):
    r, mask = make_groups(25)
    adv = est.group_relative_advantages(r, mask, G, mode)
    r2 = r.copy()
    r2[~mask] = np.where(np.arange((~mask).sum()) % 2, np.nan, 1e6)
    adv2 = est.group_relative_advantages(r2, mask, G, mode)
    np.testing.assert_array_equal(adv2, adv)
    np.testing.assert_array_equal(np.asarray(adv)[~mask], 0.0)
    assert (np.asarray(adv)[mask] != 0).mean() > 0.9
    # Float 0/1 masks behave like bool masks.
    np.testing.assert_array_equal(est.group_relative_advantages(r2, mask.astype(np.float32), G, mode), adv)


def test_group_relative_groups_are_independent_and_adjacent():
    r, mask = make_groups(26)
    adv = est.group_relative_advantages(r, mask, G, "outcome")
    r2 = r.copy()
    r2[:, 0] += 3.0  # Only group 0 (columns 0..G-1) sees it.
    adv2 = est.group_relative_advantages(r2, mask, G, "outcome")
    np.testing.assert_array_equal(adv2[:, G:], adv[:, G:])
    assert not np.allclose(adv2[:, 1:G][mask[:, 1:G]], adv[:, 1:G][mask[:, 1:G]])


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["outcome", "process"])
def test_group_relative_trailing_dims_and_jit(mode):
    r, mask = make_groups(27, shape=(T, NG, 3))
    f = jax.jit(est.group_relative_advantages, static_argnames=("group_size", "mode"))
    adv = f(r, mask, group_size=G, mode=mode, eps=jnp.float32(1e-6))
    chex.assert_shape(adv, (T, NG, 3))
    for k in range(3):
        np.testing.assert_allclose(
            adv[..., k], est.group_relative_advantages(r[..., k], mask[..., k], G, mode, 1e-6), **TOL
        )
    # vmap over a leading stack of rollouts.
    stacked = jax.vmap(lambda x, m: est.group_relative_advantages(x, m, G, mode))(
        np.moveaxis(r, 2, 0), np.moveaxis(mask, 2, 0)
    )
    np.testing.assert_allclose(np.moveaxis(np.asarray(stacked), 0, 2), adv, rtol=1e-4, atol=1e-5)


def test_group_relative_bad_args_raise():
    r, mask = make_groups(28)
    with pytest.raises(ValueError, match="mode"):
        est.group_relative_advantages(r, mask, G, "token")
    for bad in [5, 0, 2.0]:
        with pytest.raises(ValueError, match="group_size"):
            est.group_relative_advantages(r, mask, bad)
    with pytest.raises(ValueError):
        est.group_relative_advantages(r[:, 0], mask[:, 0], 1)
    with pytest.raises(AssertionError):
        est.group_relative_advantages(r, mask[:, :G], G)


# ---------------------------------------------------------------------------
# V-trace and Retrace.
# ---------------------------------------------------------------------------


def make_log_rho(seed, shape=(T, N), scale=0.8):
    return (np.random.default_rng(seed).normal(size=shape) * scale).astype(np.float32)


def ref_vtrace(v, next_v, r, term, trunc, log_rho, gamma, lam, clip_rho=1.0, clip_c=1.0, clip_pg=1.0):
    """Eq. 1 of Espeholt et al.: vs_t = v_t + sum_k gamma^{k-t} (prod_{i<k} c_i) delta_k, as explicit sums."""
    ratio = np.exp(log_rho.astype(np.float64))
    rho = ratio if clip_rho is None else np.minimum(clip_rho, ratio)
    pg_rho = ratio if clip_pg is None else np.minimum(clip_pg, ratio)
    c = lam * (ratio if clip_c is None else np.minimum(clip_c, ratio))
    delta = rho * (r + gamma * (1 - term) * next_v - v)
    vs = np.zeros(r.shape, np.float64)
    pg = np.zeros(r.shape, np.float64)
    for t in range(r.shape[0]):
        for i in range(r.shape[1]):
            m = _steps_to_end(term, trunc, t, i)
            vs[t, i] = v[t, i] + sum(gamma**k * np.prod(c[t : t + k, i]) * delta[t + k, i] for k in range(m))
    for t in range(r.shape[0]):
        for i in range(r.shape[1]):
            boot = vs[t + 1, i] if _steps_to_end(term, trunc, t, i) > 1 else next_v[t, i]
            pg[t, i] = pg_rho[t, i] * (r[t, i] + gamma * (1 - term[t, i]) * boot - v[t, i])
    return vs, pg


def ref_retrace(q, next_eq, r, term, trunc, log_rho, gamma, lam):
    """Munos et al. Eq. 4: G_t = q_t + sum_k gamma^{k-t} (prod_{t<i<=k} c_i) (r_k + gamma E_pi Q_{k+1} - q_k)."""
    c = lam * np.minimum(1.0, np.exp(log_rho.astype(np.float64)))
    delta = r + gamma * (1 - term) * next_eq - q
    out = np.zeros(r.shape, np.float64)
    for t in range(r.shape[0]):
        for i in range(r.shape[1]):
            m = _steps_to_end(term, trunc, t, i)
            out[t, i] = q[t, i] + sum(gamma**k * np.prod(c[t + 1 : t + k + 1, i]) * delta[t + k, i] for k in range(m))
    return out


@pytest.mark.parametrize(
    "lam, clips", [(1.0, (1.0, 1.0, 1.0)), (0.9, (1.0, 1.0, 1.0)), (0.7, (2.0, 0.8, 1.5)), (1.0, (None, None, None))]
)
def test_vtrace_reference(lam, clips):
    r, v, next_v, term, trunc = make_batch(30)
    log_rho = make_log_rho(30)
    vs, pg = est.vtrace(v, next_v, r, term, trunc, log_rho, 0.95, lam, *clips)
    ref_vs, ref_pg = ref_vtrace(v, next_v, r, term, trunc, log_rho, 0.95, lam, *clips)
    chex.assert_type([vs, pg], jnp.float32)
    chex.assert_shape([vs, pg], (T, N))
    np.testing.assert_allclose(vs, ref_vs, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(pg, ref_pg, rtol=1e-5, atol=1e-4)


def test_vtrace_clipping():
    r, v, next_v, term, trunc = make_batch(31)
    log_rho = make_log_rho(31, scale=2.0)
    args = (v, next_v, r, term, trunc, log_rho, 0.95, 0.9)
    huge = est.vtrace(*args, 1e30, 1e30, 1e30)
    none = est.vtrace(*args, None, None, None)
    np.testing.assert_allclose(none[0], huge[0], **TOL)
    np.testing.assert_allclose(none[1], huge[1], **TOL)
    clipped = est.vtrace(*args)
    assert not np.allclose(clipped[0], none[0]) and not np.allclose(clipped[1], none[1])
    # Ratios below every clip level are untouched: only where exp(log_rho) > 1 do clip levels >= 1 matter.
    low = np.minimum(log_rho, 0.0)
    a, b = (
        est.vtrace(v, next_v, r, term, trunc, low, 0.95, 0.9),
        est.vtrace(v, next_v, r, term, trunc, low, 0.95, 0.9, None, None, None),
    )
    np.testing.assert_allclose(a[0], b[0], **TOL)


@pytest.mark.parametrize("lam", [0.0, 0.8, 1.0])
def test_vtrace_matches_rlax_without_truncation(lam):
    r, v, next_v, term, trunc = make_batch(32, p_trunc=0.0)
    log_rho = make_log_rho(32)
    gamma = 0.97
    values = np.concatenate([v, next_v[-1:]], axis=0)  # rlax: v_t = v_{t+1}, bootstrap at T-1.
    discount = (gamma * (1 - term)).astype(np.float32)

    def rlax_vtrace(v_tm1, v_t, r_t, discount_t, rho_tm1):
        return rlax.vtrace_td_error_and_advantage(v_tm1, v_t, r_t, discount_t, rho_tm1, lam, 1.0, 1.0)

    out = jax.vmap(rlax_vtrace, in_axes=1, out_axes=1)(v, values[1:], r, discount, np.exp(log_rho))
    vs, pg = est.vtrace(v, values[1:], r, term, trunc, log_rho, gamma, lam)
    np.testing.assert_allclose(vs - v, out.errors, **TOL)
    if lam == 1.0:  # rlax bootstraps pg from lam vs_{t+1} + (1 - lam) v_{t+1}; the paper (and we) from vs_{t+1}.
        np.testing.assert_allclose(pg, out.pg_advantage, **TOL)


def test_vtrace_single_episode_matches_rlax_vtrace():
    r, v, next_v, _, _ = make_batch(33, shape=(T,))
    log_rho = make_log_rho(33, shape=(T,))
    flags = np.zeros(T, bool)
    next_v[:-1] = v[1:]
    errors = rlax.vtrace(v, next_v, r, np.full(T, 0.9, np.float32), np.exp(log_rho), 0.85)
    vs, _ = est.vtrace(v, next_v, r, flags, flags, log_rho, 0.9, 0.85)
    np.testing.assert_allclose(vs - v, errors, **TOL)


@pytest.mark.parametrize("lam", LAMBDAS + [1.0])
def test_vtrace_on_policy_is_gae(lam):
    """log_rho = 0: rho = 1, c = lambda, so V-trace is GAE (for any next_v)."""
    r, v, next_v, term, trunc = make_batch(34)
    zeros = np.zeros_like(r)
    vs, pg = est.vtrace(v, next_v, r, term, trunc, zeros, 0.95, lam)
    _, targets = est.gae(r, v, next_v, term, trunc, 0.95, lam)
    np.testing.assert_allclose(vs, targets, **TOL)
    # pg with rho = 1: r + gamma (1 - term) vs' - v, vs' = vs_{t+1} inside an episode and window, else next_v.
    inside = ~(term | trunc)
    inside[-1] = False
    vs_next = np.where(inside, np.concatenate([np.asarray(vs)[1:], np.zeros((1, N))]), next_v)
    np.testing.assert_allclose(pg, r + 0.95 * (1 - term) * vs_next - v, **TOL)
    # With next_v_t == v_{t+1} inside episodes: lambda returns (discounted returns at lambda = 1).
    next_v = next_v.copy()
    next_v[:-1][inside[:-1]] = v[1:][inside[:-1]]
    vs, pg = est.vtrace(v, next_v, r, term, trunc, zeros, 0.95, lam)
    np.testing.assert_allclose(vs, est.lambda_returns(r, next_v, term, trunc, 0.95, lam), **TOL)
    if lam == 1.0:
        np.testing.assert_allclose(vs, est.discounted_returns(r, next_v, term, trunc, 0.95), **TOL)
        np.testing.assert_allclose(pg, vs - v, **TOL)  # = the GAE(1) advantages.
        np.testing.assert_allclose(pg, est.gae(r, v, next_v, term, trunc, 0.95, 1.0)[0], **TOL)


def make_q_batch(seed, num_actions=3, shape=(T, N)):
    """Q tables, taken actions and pi / mu probabilities for T+1 states; ours and rlax's views of them."""
    rng = np.random.default_rng(seed)
    ext = (shape[0] + 1,) + shape[1:]
    q_all = rng.normal(size=ext + (num_actions,)).astype(np.float32)
    a = rng.integers(0, num_actions, size=ext).astype(np.int32)
    pi = np.asarray(jax.nn.softmax(rng.normal(size=ext + (num_actions,)).astype(np.float32)))
    mu_all = np.asarray(jax.nn.softmax(rng.normal(size=ext + (num_actions,)).astype(np.float32)))
    take = lambda x: np.take_along_axis(x, a[..., None], axis=-1)[..., 0]  # noqa: E731
    q_a, pi_a, mu_a = take(q_all), take(pi), take(mu_all)
    ours = dict(
        q_t=q_a[:-1],
        next_expected_q_t=(pi * q_all).sum(-1)[1:],
        log_rho_t=(np.log(pi_a) - np.log(mu_a))[:-1],
    )
    return ours, (q_all, a, pi, mu_a)


@pytest.mark.parametrize("lam", LAMBDAS + [1.0])
def test_retrace_reference(lam):
    r, _, _, term, trunc = make_batch(40)
    ours, _ = make_q_batch(40)
    g = est.retrace(ours["q_t"], ours["next_expected_q_t"], r, term, trunc, ours["log_rho_t"], 0.95, lam)
    chex.assert_type(g, jnp.float32)
    chex.assert_shape(g, (T, N))
    ref = ref_retrace(ours["q_t"], ours["next_expected_q_t"], r, term, trunc, ours["log_rho_t"], 0.95, lam)
    np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("p_term", [0.0, 0.15])
@pytest.mark.parametrize("lam", [0.0, 0.9, 1.0])
def test_retrace_matches_rlax_without_truncation(lam, p_term):
    r, _, _, term, trunc = make_batch(41, p_term=p_term, p_trunc=0.0)
    ours, (q_all, a, pi, mu_a) = make_q_batch(41)
    gamma = 0.95
    discount = (gamma * (1 - term)).astype(np.float32)

    def rlax_retrace(q, act, r_t, discount_t, pi_, mu_):
        return rlax.retrace(q[:-1], q[1:], act[:-1], act[1:], r_t, discount_t, pi_[1:], mu_[1:], lam, eps=0.0)

    errors = jax.vmap(rlax_retrace, in_axes=1, out_axes=1)(q_all, a, r, discount, pi, mu_a)
    g = est.retrace(ours["q_t"], ours["next_expected_q_t"], r, term, trunc, ours["log_rho_t"], gamma, lam)
    np.testing.assert_allclose(g - ours["q_t"], errors, **TOL)


def test_retrace_special_cases():
    r, _, _, term, trunc = make_batch(42)
    ours, _ = make_q_batch(42)
    q, next_eq, log_rho = ours["q_t"], ours["next_expected_q_t"], ours["log_rho_t"]
    expected_sarsa = est.td_targets(r, next_eq, term, 0.95)
    # c = 0: lambda = 0, or pi(a_{t+1}) = 0.
    np.testing.assert_allclose(est.retrace(q, next_eq, r, term, trunc, log_rho, 0.95, 0.0), expected_sarsa, **TOL)
    never = np.full_like(log_rho, -100.0)
    np.testing.assert_allclose(est.retrace(q, next_eq, r, term, trunc, never, 0.95, 1.0), expected_sarsa, **TOL)
    # Traces are capped at 1: ratios above 1 act as 1.
    zeros = np.zeros_like(log_rho)
    np.testing.assert_allclose(
        est.retrace(q, next_eq, r, term, trunc, np.abs(log_rho) + 0.1, 0.95, 0.8),
        est.retrace(q, next_eq, r, term, trunc, zeros, 0.95, 0.8),
        **TOL,
    )
    # log_rho_0 is never read.
    shifted = log_rho.copy()
    shifted[0] += 5.0
    np.testing.assert_allclose(
        est.retrace(q, next_eq, r, term, trunc, shifted, 0.95, 0.8),
        est.retrace(q, next_eq, r, term, trunc, log_rho, 0.95, 0.8),
        **TOL,
    )


@pytest.mark.parametrize("lam", LAMBDAS + [1.0])
def test_retrace_on_policy_with_consistent_q_is_lambda_returns(lam):
    """log_rho = 0 and E_pi Q(s_{t+1}) == Q(s_{t+1}, a_{t+1}): Retrace is TD(lambda) on those values."""
    r, q, next_eq, term, trunc = make_batch(43)
    inside = ~(term | trunc)[:-1]
    next_eq = next_eq.copy()
    next_eq[:-1][inside] = q[1:][inside]
    g = est.retrace(q, next_eq, r, term, trunc, np.zeros_like(r), 0.95, lam)
    np.testing.assert_allclose(g, est.lambda_returns(r, next_eq, term, trunc, 0.95, lam), **TOL)
    if lam == 1.0:
        np.testing.assert_allclose(g, est.discounted_returns(r, next_eq, term, trunc, 0.95), **TOL)


def test_off_policy_bad_args_raise():
    r, v, next_v, term, trunc = make_batch(44)
    log_rho = make_log_rho(44)
    with pytest.raises(AssertionError):
        est.vtrace(v, next_v, r, term, trunc, log_rho[:-1], 0.9)
    with pytest.raises(AssertionError):
        est.vtrace(v, next_v, r, term, trunc, log_rho, 0.9, 1.0, np.ones(2, np.float32))
    with pytest.raises(AssertionError):
        est.retrace(v, next_v, r, term, trunc, log_rho[:, :2], 0.9)
    with pytest.raises(AssertionError):
        est.retrace(v, next_v, r.astype(np.int32), term, trunc, log_rho, 0.9)


@pytest.mark.slow
def test_off_policy_jit_vmap_over_gamma_and_batch_dims():
    r, v, next_v, term, trunc = make_batch(45)
    log_rho = make_log_rho(45)
    gammas = jnp.array([0.9, 0.99])
    clip = jnp.array([1.0, 2.0])
    vt = jax.jit(jax.vmap(est.vtrace, in_axes=(None,) * 6 + (0, None, 0)))
    vs, pg = vt(v, next_v, r, term, trunc, log_rho, gammas, 0.9, clip)
    for k in range(2):
        ref_vs, ref_pg = est.vtrace(v, next_v, r, term, trunc, log_rho, float(gammas[k]), 0.9, float(clip[k]))
        np.testing.assert_allclose(vs[k], ref_vs, **TOL)
        np.testing.assert_allclose(pg[k], ref_pg, **TOL)
    rt = jax.jit(jax.vmap(est.retrace, in_axes=(None,) * 6 + (0, 0)))
    g = rt(v, next_v, r, term, trunc, log_rho, gammas, jnp.array([0.5, 0.9]))
    np.testing.assert_allclose(g[1], est.retrace(v, next_v, r, term, trunc, log_rho, 0.99, 0.9), **TOL)
    # vmap over the trailing batch axis: single [T] sequences give the batched result.
    per_column = jax.vmap(est.vtrace, in_axes=(1,) * 6 + (None,), out_axes=1)(v, next_v, r, term, trunc, log_rho, 0.97)
    batched = est.vtrace(v, next_v, r, term, trunc, log_rho, 0.97)
    np.testing.assert_allclose(per_column[0], batched[0], **TOL)
    np.testing.assert_allclose(per_column[1], batched[1], **TOL)
    per_column = jax.vmap(est.retrace, in_axes=(1,) * 6 + (None,), out_axes=1)(v, next_v, r, term, trunc, log_rho, 0.97)
    np.testing.assert_allclose(per_column, est.retrace(v, next_v, r, term, trunc, log_rho, 0.97), **TOL)


@pytest.mark.parametrize("shape", [(T,), (T, N), (T, 2, 3)])
def test_off_policy_output_dtype_and_shape(shape):
    r, v, next_v, term, trunc = make_batch(46, shape=shape)
    r64, v64, nv64 = (x.astype(np.float64) for x in (r, v, next_v))
    log_rho = make_log_rho(46, shape=shape).astype(np.float64)
    outs = [
        *est.vtrace(v64, nv64, r64, term, trunc, log_rho, 0.9),
        est.retrace(v64, nv64, r64, term, trunc, log_rho, 0.9),
    ]
    chex.assert_type(outs, jnp.float32)
    chex.assert_shape(outs, shape)
