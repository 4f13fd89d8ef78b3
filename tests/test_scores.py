"""Tests of jaxrl.scores: the aggregate metrics and their stratified bootstrap intervals.

Two oracles. rliable, which the test extra installs: its metrics on the same matrices, and its bootstrap run on the very
resampling indices jaxrl draws (injected into rliable's `update_indices`), so intervals must agree to rounding;
its own random draws agree within bootstrap noise. Plain NumPy / SciPy loops written here, which always run.
"""

import functools
import importlib.util
import inspect

import numpy as np
import pytest
import scipy.stats

from jaxrl import scores as S

RNG = np.random.default_rng(20211210)
MATRICES = {
    "normal": RNG.normal(size=(10, 5)),
    "ties": RNG.integers(0, 3, size=(8, 4)).astype(float),
    "one_task": RNG.normal(size=(7, 1)),
    "one_run": RNG.normal(size=(1, 6)),
    "one_cell": np.array([[0.3]]),
    "odd": RNG.uniform(-0.5, 1.5, size=(5, 3)),
}
TAUS = np.array([-1.0, 0.0, 0.5, 1.0, 1.0 + 1e-9, 2.0])


@pytest.fixture
def rliable(monkeypatch):
    """`rliable.metrics` and `rliable.library`; a skip only where rliable is not installed (the test extra installs
    it), so an rliable that is installed but fails to import (arch 7 with pandas 3) fails the test, not skips it."""
    if importlib.util.find_spec("rliable") is None:
        pytest.skip("rliable is not installed (pip install -e '.[test]')")
    import arch.bootstrap as arch_bs
    from rliable import library, metrics

    # rliable 1.2 passes random_state=None to arch's bootstraps; arch 8 dropped that argument.
    for cls in (arch_bs.IIDBootstrap, arch_bs.IndependentSamplesBootstrap):
        if "random_state" not in inspect.signature(cls.__init__).parameters:
            monkeypatch.setattr(cls, "__init__", _dropping_random_state(cls.__init__))
    return metrics, library


def _dropping_random_state(init):
    def wrapped(self, *args, random_state=None, **kwargs):
        init(self, *args, **kwargs)

    return wrapped


def jaxrl_indices(groups, reps, seed, steps=None):
    """The per-resample index arrays that `stratified_bootstrap_ci` draws for `groups` (each a tuple of the
    score shapes of one entry), in order; with `steps`, broadcast to rliable's [runs, tasks, steps] layout."""
    rng = np.random.default_rng(seed)
    for shapes in groups:
        for chunk in S._resample_indices(rng, reps, shapes):
            for b in range(len(chunk[0])):
                idx = [c[b] for c in chunk]
                if steps is not None:
                    idx = [np.broadcast_to(i[..., None], (*i.shape, steps)) for i in idx]
                yield idx


def inject(monkeypatch, library, stream):
    """Makes rliable's stratified bootstraps use the resampling indices of `stream`."""
    it = iter(stream)
    monkeypatch.setattr(
        library.StratifiedBootstrap, "update_indices", lambda self: (next(it)[0], *self._strata_indices)
    )
    monkeypatch.setattr(
        library.StratifiedIndependentBootstrap,
        "update_indices",
        lambda self: ([(i, *s) for i, s in zip(next(it), self._args_strata_indices, strict=True)], {}),
    )
    return it


# ----------------------------------------------------------------------------------------------- point estimates


@pytest.mark.parametrize("name", list(MATRICES))
def test_point_metrics_match_rliable(rliable, name):
    metrics, library = rliable
    x = MATRICES[name]
    np.testing.assert_allclose(S.iqm(x), metrics.aggregate_iqm(x), rtol=1e-6)
    np.testing.assert_allclose(S.median(x), metrics.aggregate_median(x), rtol=1e-6)
    np.testing.assert_allclose(S.mean(x), metrics.aggregate_mean(x), rtol=1e-6)
    np.testing.assert_allclose(S.optimality_gap(x), metrics.aggregate_optimality_gap(x), rtol=1e-6)
    np.testing.assert_allclose(S.optimality_gap(x, 0.5), metrics.aggregate_optimality_gap(x, 0.5), rtol=1e-6)
    np.testing.assert_allclose(S.performance_profile(x, TAUS), library.score_distributions(x, TAUS), rtol=1e-6)


@pytest.mark.parametrize("name", list(MATRICES))
def test_point_metrics_match_numpy_and_scipy(name):
    x = MATRICES[name]
    task_means = [np.mean(x[:, m]) for m in range(x.shape[1])]
    np.testing.assert_allclose(S.iqm(x), scipy.stats.trim_mean(x, 0.25, axis=None), rtol=1e-12)
    np.testing.assert_allclose(S.median(x), np.median(task_means), rtol=1e-12)
    np.testing.assert_allclose(S.mean(x), np.mean(task_means), rtol=1e-12)
    np.testing.assert_allclose(S.optimality_gap(x), 1 - np.mean([min(v, 1.0) for v in x.ravel()]), rtol=1e-12)
    profile = [sum(v > tau for v in x.ravel()) / x.size for tau in TAUS]
    np.testing.assert_allclose(S.performance_profile(x, TAUS), profile, rtol=1e-12)
    assert S.performance_profile(x, 0.5).shape == ()


def test_iqm_drops_a_quarter_at_each_end():
    x = np.arange(8.0).reshape(4, 2)  # 8 scores: drop 0, 1 and 6, 7
    assert S.iqm(x) == np.mean([2.0, 3.0, 4.0, 5.0])
    assert S.iqm(np.array([[5.0, 1.0, 3.0]])) == 3.0  # n = 3: floor(3 / 4) = 0 dropped, the plain mean


PAIRS = {
    "normal": (RNG.normal(size=(6, 4)), RNG.normal(0.3, size=(9, 4))),
    "ties": (RNG.integers(0, 3, size=(5, 3)).astype(float), RNG.integers(0, 3, size=(4, 3)).astype(float)),
    "identical": (MATRICES["normal"], MATRICES["normal"]),
    "one_task": (RNG.normal(size=(3, 1)), RNG.normal(size=(5, 1))),
    "one_run": (RNG.normal(size=(1, 4)), RNG.normal(size=(1, 4))),
}


@pytest.mark.parametrize("name", list(PAIRS))
def test_probability_of_improvement_matches_rliable(rliable, name):
    metrics, _ = rliable
    x, y = PAIRS[name]
    np.testing.assert_allclose(S.probability_of_improvement(x, y), metrics.probability_of_improvement(x, y), rtol=1e-6)


@pytest.mark.parametrize("name", list(PAIRS))
def test_probability_of_improvement_matches_mann_whitney(name):
    x, y = PAIRS[name]
    per_task = [
        scipy.stats.mannwhitneyu(x[:, m], y[:, m], alternative="greater").statistic / (len(x) * len(y))
        for m in range(x.shape[1])
    ]
    np.testing.assert_allclose(S.probability_of_improvement(x, y), np.mean(per_task), rtol=1e-12)
    np.testing.assert_allclose(S.probability_of_improvement(x, y) + S.probability_of_improvement(y, x), 1.0)


def test_metrics_batch_over_leading_dims():
    batch = RNG.normal(size=(3, 2, 7, 4))
    other = RNG.normal(size=(3, 2, 5, 4))
    for metric in (S.iqm, S.median, S.mean, S.optimality_gap, functools.partial(S.performance_profile, taus=TAUS)):
        expected = np.array([[metric(batch[i, j]) for j in range(2)] for i in range(3)])
        np.testing.assert_allclose(metric(batch), expected, rtol=1e-12)
    expected = [[S.probability_of_improvement(batch[i, j], other[i, j]) for j in range(2)] for i in range(3)]
    np.testing.assert_allclose(S.probability_of_improvement(batch, other), expected, rtol=1e-12)


# ----------------------------------------------------------------------------------------------- intervals


def rliable_metric(metric):
    """rliable's form of a scalar metric: a function returning a 1-D array."""
    return lambda *scores: np.atleast_1d(metric(*scores))


@pytest.mark.parametrize("confidence", [0.95, 0.8])
def test_intervals_match_rliable_on_the_same_indices(rliable, monkeypatch, confidence):
    metrics, library = rliable
    monkeypatch.setattr(S, "_CHUNK_ELEMENTS", 100)  # several chunks of reps
    algos = {name: MATRICES[name] for name in ("normal", "ties", "one_task", "one_run")}
    groups = [(x.shape,) for x in algos.values()]
    reps, seed = 300, 7
    cases = [
        (S.iqm, metrics.aggregate_iqm),
        (S.median, metrics.aggregate_median),
        (S.mean, metrics.aggregate_mean),
        (S.optimality_gap, metrics.aggregate_optimality_gap),
    ]
    for ours, theirs in cases:
        stream = inject(monkeypatch, library, jaxrl_indices(groups, reps, seed))
        points, cis = S.stratified_bootstrap_ci(algos, ours, reps, confidence, seed)
        r_points, r_cis = library.get_interval_estimates(
            algos, rliable_metric(theirs), reps=reps, confidence_interval_size=confidence
        )
        assert next(stream, None) is None
        for name in algos:
            np.testing.assert_allclose(points[name], r_points[name][0], rtol=1e-6)
            np.testing.assert_allclose(cis[name], r_cis[name][:, 0], rtol=1e-6, atol=1e-12)

    inject(monkeypatch, library, jaxrl_indices(groups, reps, seed))
    profile = functools.partial(S.performance_profile, taus=TAUS)
    profiles, bands = S.stratified_bootstrap_ci(algos, profile, reps, confidence, seed)
    r_profiles, r_bands = library.create_performance_profile(
        algos, TAUS, reps=reps, confidence_interval_size=confidence
    )
    for name in algos:
        np.testing.assert_allclose(profiles[name], r_profiles[name], rtol=1e-6)
        np.testing.assert_allclose(bands[name], r_bands[name], rtol=1e-6, atol=1e-12)


def test_probability_of_improvement_interval_matches_rliable_on_the_same_indices(rliable, monkeypatch):
    metrics, library = rliable
    monkeypatch.setattr(S, "_CHUNK_ELEMENTS", 100)
    pairs = {name: PAIRS[name] for name in ("normal", "ties")}
    groups = [tuple(a.shape for a in pair) for pair in pairs.values()]
    reps, seed = 100, 3
    stream = inject(monkeypatch, library, jaxrl_indices(groups, reps, seed))
    points, cis = S.stratified_bootstrap_ci(pairs, S.probability_of_improvement, reps, seed=seed)
    r_points, r_cis = library.get_interval_estimates(
        {k: list(v) for k, v in pairs.items()}, rliable_metric(metrics.probability_of_improvement), reps=reps
    )
    assert next(stream, None) is None  # rliable used every resample jaxrl drew, and no other
    for name in pairs:
        np.testing.assert_allclose(points[name], r_points[name][0], rtol=1e-6)
        np.testing.assert_allclose(cis[name], r_cis[name][:, 0], rtol=1e-6, atol=1e-12)


def test_sample_efficiency_curve_matches_rliable_on_the_same_indices(rliable, monkeypatch):
    metrics, library = rliable
    monkeypatch.setattr(S, "_CHUNK_ELEMENTS", 500)
    steps = 4
    curves = {"a": RNG.normal(size=(6, 3, steps)), "b": RNG.normal(size=(4, 2, steps))}
    groups = [((steps, *c.shape[:2]),) for c in curves.values()]
    reps, seed = 200, 11
    stream = inject(monkeypatch, library, jaxrl_indices(groups, reps, seed, steps=steps))
    points, cis = S.sample_efficiency_curve(curves, reps=reps, seed=seed)

    def iqm_per_step(scores):
        return np.array([metrics.aggregate_iqm(scores[..., t]) for t in range(scores.shape[-1])])

    r_points, r_cis = library.get_interval_estimates(curves, iqm_per_step, reps=reps)
    assert next(stream, None) is None
    for name in curves:
        assert points[name].shape == (steps,) and cis[name].shape == (2, steps)
        np.testing.assert_allclose(points[name], r_points[name], rtol=1e-6)
        np.testing.assert_allclose(cis[name], r_cis[name], rtol=1e-6, atol=1e-12)


def loop_interval(arrays, metric, reps, rng, confidence=0.95):
    """A percentile interval from a plain loop: per resample, per task, draw runs with replacement."""
    values = []
    for _ in range(reps):
        resampled = []
        for a in arrays:
            r = np.empty_like(a)
            for m in range(a.shape[1]):
                r[:, m] = a[rng.integers(0, a.shape[0], size=a.shape[0]), m]
            resampled.append(r)
        values.append(metric(*resampled))
    alpha = (1 - confidence) / 2
    return np.percentile(values, [100 * alpha, 100 * (1 - alpha)], axis=0), np.std(values, axis=0)


def quantile_tolerance(sd, reps, p=0.025, sigmas=5.0):
    """`sigmas` standard errors of the difference of two independent bootstrap estimates of the p-quantile of a
    roughly normal statistic with standard deviation `sd`, each from `reps` resamples."""
    se = sd * np.sqrt(p * (1 - p) / reps) / scipy.stats.norm.pdf(scipy.stats.norm.ppf(p))
    return sigmas * np.sqrt(2) * se


@pytest.mark.parametrize("metric", [S.iqm, S.mean])
def test_intervals_agree_with_an_independent_loop_within_bootstrap_noise(metric):
    x = MATRICES["normal"]
    reps = 2000
    expected, sd = loop_interval((x,), metric, reps, np.random.default_rng(1))
    _, cis = S.stratified_bootstrap_ci({"x": x}, metric, reps, seed=2)
    np.testing.assert_allclose(cis["x"], expected, atol=quantile_tolerance(sd, reps))


def test_intervals_agree_with_rliable_own_draws_within_bootstrap_noise(rliable):
    metrics, library = rliable
    x = MATRICES["normal"]
    reps = 2000
    np.random.seed(0)  # rliable resamples with the global NumPy state
    _, r_cis = library.get_interval_estimates({"x": x}, rliable_metric(metrics.aggregate_iqm), reps=reps)
    sd = np.std(S.bootstrap_replicates((x,), S.iqm, reps, np.random.default_rng(5)))
    _, cis = S.stratified_bootstrap_ci({"x": x}, S.iqm, reps, seed=0)
    np.testing.assert_allclose(cis["x"], r_cis["x"][:, 0], atol=quantile_tolerance(sd, reps))


def test_intervals_match_a_loop_on_the_same_indices(monkeypatch):
    monkeypatch.setattr(S, "_CHUNK_ELEMENTS", 64)
    x, y = PAIRS["normal"]
    reps, seed = 150, 4
    values = []
    for ix, iy in jaxrl_indices([(x.shape, y.shape)], reps, seed):
        rx = np.array([[x[ix[i, m], m] for m in range(x.shape[1])] for i in range(x.shape[0])])
        ry = np.array([[y[iy[i, m], m] for m in range(y.shape[1])] for i in range(y.shape[0])])
        values.append(S.probability_of_improvement(rx, ry))
    _, cis = S.stratified_bootstrap_ci({"xy": (x, y)}, S.probability_of_improvement, reps, seed=seed)
    np.testing.assert_allclose(cis["xy"], np.percentile(values, [2.5, 97.5]), rtol=1e-12)
    _, looped = S.stratified_bootstrap_ci(
        {"xy": (x, y)}, S.probability_of_improvement, reps, seed=seed, vectorized=False
    )
    np.testing.assert_allclose(looped["xy"], cis["xy"], rtol=1e-12)


def test_resampling_is_stratified_over_tasks():
    runs, tasks, reps = 5, 3, 4000
    (idx,) = next(S._resample_indices(np.random.default_rng(0), reps, [(runs, tasks)]))
    assert idx.shape == (reps, runs, tasks) and idx.min() == 0 and idx.max() == runs - 1
    assert not np.all(idx[..., 0] == idx[..., 1])  # each task draws its own runs
    np.testing.assert_allclose(np.bincount(idx.ravel()) / idx.size, 1 / runs, atol=0.01)


def test_single_run_gives_a_point_interval_and_single_task_works():
    _, cis = S.stratified_bootstrap_ci({"one_run": MATRICES["one_run"]}, S.iqm, 50, seed=0)
    np.testing.assert_allclose(cis["one_run"], [S.iqm(MATRICES["one_run"])] * 2)
    points, cis = S.stratified_bootstrap_ci({"one_task": MATRICES["one_task"]}, S.median, 200, seed=0)
    assert cis["one_task"][0] <= points["one_task"] <= cis["one_task"][1]


def test_bootstrap_is_a_function_of_its_seed():
    algos = {"a": MATRICES["normal"], "b": MATRICES["odd"]}
    first = S.stratified_bootstrap_ci(algos, S.iqm, 200, seed=3)
    again = S.stratified_bootstrap_ci(algos, S.iqm, 200, seed=np.random.default_rng(3))
    other = S.stratified_bootstrap_ci(algos, S.iqm, 200, seed=4)
    for name in algos:
        np.testing.assert_array_equal(first[1][name], again[1][name])
        assert not np.array_equal(first[1][name], other[1][name])


# ----------------------------------------------------------------------------------------------- normalisation


def test_normalize_maps_random_to_0_and_reference_to_1():
    random, reference = np.array([10.0, -500.0]), np.array([500.0, -80.0])
    np.testing.assert_allclose(S.normalize([[10.0, -80.0], [500.0, -500.0]], random, reference), [[0, 1], [1, 0]])
    np.testing.assert_allclose(S.normalize(255.0, 10.0, 500.0), 0.5)


def test_reference_scores_cover_the_benchmarked_envs():
    envs = [
        "CartPole-v1",
        "Acrobot-v1",
        "MountainCar-v0",
        "Pendulum-v1",
        "MountainCarContinuous-v0",
        "Asterix-MinAtar",
        "Breakout-MinAtar",
        "Freeway-MinAtar",
        "SpaceInvaders-MinAtar",
    ]
    for env_id in envs:
        ref = S.reference_scores(env_id)
        assert ref.random < ref.reference, env_id
        assert S.normalize(ref.reference, *ref) == 1.0 and S.normalize(ref.random, *ref) == 0.0
    assert S.reference_scores("CartPole-v1").reference == 500.0
    assert S.reference_scores("SpaceInvaders-MinAtar").reference == 131.0


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="no entry for 'Nope-v0'") as e:
        S.reference_scores("Nope-v0")
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="reference equals random"):
        S.normalize([1.0], [2.0], [2.0])
    with pytest.raises(ValueError, match=r"\[\.\.\., runs, tasks\]"):
        S.iqm(np.ones(3))
    with pytest.raises(ValueError, match="finite"):
        S.iqm(np.array([[1.0, np.nan]]))
    with pytest.raises(ValueError, match="tasks"):
        S.probability_of_improvement(np.ones((2, 3)), np.ones((2, 4)))
    with pytest.raises(ValueError, match="confidence"):
        S.stratified_bootstrap_ci({"a": np.ones((2, 2))}, S.iqm, 10, confidence=95)
    with pytest.raises(ValueError, match="reps"):
        S.stratified_bootstrap_ci({"a": np.ones((2, 2))}, S.iqm, 0)
    with pytest.raises(ValueError, match="steps"):
        S.sample_efficiency_curve({"a": np.ones((2, 2))})


def test_sample_efficiency_curve_is_the_metric_bootstrapped_step_by_step():
    curves = RNG.normal(size=(5, 3, 4))
    reps, seed = 200, 9  # one chunk of reps either way, so every step draws the same indices as alone
    points, cis = S.sample_efficiency_curve({"a": curves}, reps=reps, seed=seed)
    for t in range(curves.shape[-1]):
        point, ci = S.stratified_bootstrap_ci({"a": curves[..., t]}, S.iqm, reps, seed=seed)
        np.testing.assert_allclose(points["a"][t], point["a"], rtol=1e-12)
        np.testing.assert_allclose(cis["a"][:, t], ci["a"], rtol=1e-12)
