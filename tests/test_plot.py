"""Sensitivity plots of sweep tables: final return per swept hyperparameter with bootstrap intervals."""

import numpy as np
import pytest

from jaxrl import sweep
from jaxrl.plot import _log_scale, bin_iterations, read_sweep, sensitivity

PNG = b"\x89PNG\r\n\x1a\n"


def fake_results(points, seeds=4, iterations=6, seed=0):
    """A sweep.Results with made-up metrics: return grows with log10(learning_rate), NaN in some iterations."""
    rng = np.random.default_rng(seed)
    lr = np.array([p.get("learning_rate", 1e-3) for p in points])
    base = 100 * (np.log10(lr) + 5)[:, None, None]
    returns = base + rng.normal(0, 5, (len(points), seeds, iterations))
    returns[0, 0, -2:] = np.nan  # no episode ended in those iterations of that run
    metrics = {"episode_return": returns, "value_loss": rng.random((len(points), seeds, iterations))}
    return sweep.Results(points, seeds, 0, metrics, 64 * np.arange(1, iterations + 1), 1.0, 1.0, 1)


def test_read_sweep_gives_each_runs_final_return(tmp_path):
    points = [{"learning_rate": lr, "clip_eps": c} for lr in (1e-4, 1e-3, 1e-2) for c in (0.1, 0.3)]
    results = fake_results(points)
    path = results.to_csv(tmp_path / "results.csv")
    names, read_points, final = read_sweep(path, fraction=0.5)
    assert names == ["learning_rate", "clip_eps"] and read_points == points
    np.testing.assert_allclose(final, results.final("episode_return", fraction=0.5), rtol=1e-12)  # the last 3 of 6
    assert np.isfinite(final).all()  # the NaN iterations are skipped, not propagated
    with pytest.raises(ValueError, match="not a sweep table"):
        read_sweep(path, metric="no_such_metric")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["grid", "random"])
def test_sensitivity_writes_a_png(tmp_path, kind):
    if kind == "grid":
        points = [{"learning_rate": lr, "clip_eps": c} for lr in (1e-4, 1e-3, 1e-2) for c in (0.1, 0.3)]
    else:
        rng = np.random.default_rng(1)
        points = [
            {"learning_rate": float(10 ** rng.uniform(-4, -2)), "ent_coef": float(rng.uniform(0, 0.05))}
            for _ in range(12)
        ]
    path = fake_results(points).to_csv(tmp_path / "results.csv")
    out = sensitivity(path, tmp_path / "plots" / "sensitivity.png")
    assert out.read_bytes()[:8] == PNG and out.stat().st_size > 20_000


def test_one_point_sweep_has_nothing_to_plot(tmp_path):
    path = fake_results([{}]).to_csv(tmp_path / "results.csv")
    with pytest.raises(ValueError, match="no hyperparameter"):
        sensitivity(path, tmp_path / "x.png")


def test_log_axis_for_learning_rates_and_decade_grids():
    assert _log_scale("learning_rate", np.array([1e-3, 2e-3]))
    assert _log_scale("ent_coef", np.array([1e-4, 1e-3, 1e-2]))  # a grid over decades
    assert not _log_scale("ent_coef", np.random.default_rng(0).uniform(0, 0.05, 20))  # random linear draws
    assert not _log_scale("clip_eps", np.array([0.1, 0.2, 0.3]))
    assert not _log_scale("gamma", np.array([0.0, 0.9, 0.99]))


def test_bin_iterations_averages_groups_of_iterations_ignoring_nan():
    values = np.array([[1.0, 3.0, np.nan, np.nan, 5.0], [2.0, np.nan, 4.0, 6.0, 8.0]])
    xs, binned = bin_iterations(values, np.arange(1, 6) * 10, bins=2)
    np.testing.assert_array_equal(xs, [20, 50])  # edges 0, 2, 5
    np.testing.assert_array_equal(binned, [[2.0, 5.0], [2.0, 6.0]])
    xs, binned = bin_iterations(values, np.arange(5), bins=100)  # fewer iterations than bins: unchanged
    np.testing.assert_array_equal(xs, np.arange(5))
    np.testing.assert_array_equal(binned, values)
