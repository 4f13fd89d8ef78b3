"""Plots as PNG: learning curves of run folders, and the sensitivity of a sweep's final return to each swept
hyperparameter; both with means and 95% bootstrap intervals over seeds. `plot` picks the one that its paths
name, as `jaxrl plot` does."""

from __future__ import annotations

import csv
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np

from jaxrl.run.report import FINAL_FRACTION, final_return


def save_figure(fig, out: str | Path) -> Path:
    """Writes `fig` to the PNG `out` (making its folder) and closes it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out


def read_metrics(run_dir: str | Path) -> dict[str, np.ndarray]:
    """{column: [seeds, iterations]} from a run folder's metrics.csv; ValueError (one line) for a missing folder, a
    folder without metrics.csv or a metrics.csv without rows."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"{run_dir}: no such run folder.")
    if not (run_dir / "metrics.csv").is_file():
        raise ValueError(f"{run_dir} holds no metrics.csv: not a run folder, or a run stopped before its first chunk.")
    columns: dict[str, dict[tuple[int, int], float]] = defaultdict(dict)
    with open(run_dir / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            index = int(row["seed"]), int(row["iteration"])
            for name, value in row.items():
                columns[name][index] = float(value)
    if not columns:
        raise ValueError(f"{run_dir / 'metrics.csv'} holds no iterations yet.")
    seeds = 1 + max(s for s, _ in columns["seed"])
    iterations = 1 + max(i for _, i in columns["seed"])
    out = {}
    for name, values in columns.items():
        table = np.full((seeds, iterations), np.nan)
        for (s, i), value in values.items():
            table[s, i] = value
        out[name] = table
    return out


def bootstrap_interval(values: np.ndarray, confidence: float = 0.95, resamples: int = 2000, seed: int = 0):
    """Mean over axis 0 (seeds, NaN-aware) and its percentile bootstrap interval, per column."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, values.shape[0], size=(resamples, values.shape[0]))
    with warnings.catch_warnings():  # columns where no seed finished an episode are all-NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        means = np.nanmean(values[picks], axis=1)
        low, high = np.nanpercentile(means, [50 * (1 - confidence), 50 * (1 + confidence)], axis=0)
        return np.nanmean(values, axis=0), low, high


def bin_iterations(values: np.ndarray, xs: np.ndarray, bins: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Curves [seeds, iterations] averaged (NaN-aware) within at most `bins` consecutive groups of iterations.

    Returns (x at each group's last iteration [groups], binned values [seeds, groups]); a group in which a seed
    finished no episode is NaN for that seed.
    """
    edges = np.unique(np.linspace(0, values.shape[1], min(bins, values.shape[1]) + 1).astype(int))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        binned = np.stack(
            [np.nanmean(values[:, a:b], axis=1) for a, b in zip(edges[:-1], edges[1:], strict=True)], axis=1
        )
    return np.asarray(xs)[edges[1:] - 1], binned


def learning_curves(
    run_dirs: list[str | Path], out: str | Path, metric: str = "episode_return", x: str = "env_steps"
) -> Path:
    """One line per run folder (mean over its seeds) with a shaded 95% bootstrap interval; returns `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for run_dir in run_dirs:
        data = read_metrics(run_dir)
        xs = np.nanmean(data[x], axis=0)
        mean, low, high = bootstrap_interval(data[metric])
        has = np.isfinite(mean)  # iterations in which some seed finished an episode
        label = f"{Path(run_dir).name} ({data[metric].shape[0]} seeds)"
        marker = "o" if has.sum() <= 30 else None  # sparse metrics (eval_return) show their points
        line = ax.plot(xs[has], mean[has], label=label, marker=marker, markersize=4)[0]
        ax.fill_between(xs[has], low[has], high[has], color=line.get_color(), alpha=0.25, linewidth=0)
    ax.set_xlabel({"env_steps": "environment steps", "wall_s": "wall seconds (compile included)"}.get(x, x))
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title(f"{metric.replace('_', ' ')}: mean and 95% bootstrap interval over seeds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, out)


def read_sweep(path: str | Path, metric: str = "episode_return", fraction: float = FINAL_FRACTION):
    """(names, points, final) from a sweep's tidy CSV (`jaxrl sweep` results.csv, `Results.to_csv`): the swept
    fields (the columns between `config` and `seed`), one {field: value} per config, and final [C, S]: each
    run's final `metric` (`jaxrl.run.report.final_return`: the NaN-mean over the last `fraction` of its
    iterations, NaN where no value in them was finite)."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        columns = reader.fieldnames or []
        if "config" not in columns or "seed" not in columns or metric not in columns:
            raise ValueError(f"{path}: not a sweep table with config, seed and {metric} columns.")
        names = columns[columns.index("config") + 1 : columns.index("seed")]
        rows = list(reader)
    configs = 1 + max(int(r["config"]) for r in rows)
    seeds = 1 + max(int(r["seed"]) for r in rows)
    iterations = 1 + max(int(r["iteration"]) for r in rows)
    values = np.full((configs, seeds, iterations), np.nan)
    points: list[dict[str, float]] = [{} for _ in range(configs)]
    for r in rows:
        c = int(r["config"])
        values[c, int(r["seed"]), int(r["iteration"])] = float(r[metric])
        points[c] = {n: float(r[n]) for n in names}
    return names, points, final_return(values, fraction)


def _log_scale(name: str, xs: np.ndarray) -> bool:
    """A log x axis for learning rates, and for a few grid values spanning more than 1.5 decades (not for
    random draws of a linear range, whose smallest draw would stretch the axis)."""
    if not np.all(xs > 0):
        return False
    few = len(np.unique(xs)) <= 8
    return "learning_rate" in name or name.endswith("lr") or (few and xs.max() / xs.min() > 10**1.5)


def sensitivity(
    path: str | Path,
    out: str | Path,
    metric: str = "episode_return",
    fraction: float = FINAL_FRACTION,
    max_lines: int = 6,
) -> Path:
    """Final `metric` against each swept hyperparameter, one panel per field: mean over seeds with its 95%
    bootstrap interval. On a grid, one line per combination of the other fields (up to `max_lines`); otherwise
    (random search) one point per config. Learning rates get a log x axis. Returns `out` (a PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names, points, final = read_sweep(path, metric, fraction)
    if not names:
        raise ValueError(f"{path}: a sweep of one config has no hyperparameter to plot against.")
    mean, low, high = bootstrap_interval(final.T)
    seeds = final.shape[1]
    fig, axes = plt.subplots(1, len(names), figsize=(4.8 * len(names), 4.2), dpi=120, squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        xs = np.array([p[name] for p in points])
        others = [n for n in names if n != name]
        groups: dict[tuple, list[int]] = defaultdict(list)
        for c, p in enumerate(points):
            groups[tuple(p[n] for n in others)].append(c)
        grid_like = len(groups) <= max_lines and all(len({xs[c] for c in g}) > 1 for g in groups.values())
        log = _log_scale(name, xs)
        if grid_like:
            # lines side by side: each group shifted by a little of the x span so that intervals do not overlap
            span = np.ptp(np.log10(xs) if log else xs) or 1.0
            for k, (combo, members) in enumerate(sorted(groups.items())):
                members = sorted(members, key=lambda c: xs[c])
                label = ", ".join(f"{n}={v:g}" for n, v in zip(others, combo, strict=True)) or None
                has = [c for c in members if np.isfinite(mean[c])]
                shift = (k - (len(groups) - 1) / 2) * 0.012 * span
                x = xs[has] * 10**shift if log else xs[has] + shift
                errors = [mean[has] - low[has], high[has] - mean[has]]
                ax.errorbar(x, mean[has], yerr=errors, marker="o", capsize=4, label=label, alpha=0.85)
            if others:
                ax.legend(fontsize=8)
        else:
            has = np.isfinite(mean)
            errors = [mean[has] - low[has], high[has] - mean[has]]
            ax.errorbar(xs[has], mean[has], yerr=errors, fmt="o", capsize=3, alpha=0.8)
        if log:
            ax.set_xscale("log")
        ax.set_xlabel(name)
        ax.set_ylabel(f"final {metric.replace('_', ' ')}")
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"final {metric.replace('_', ' ')} (mean of the last {fraction:.0%} of iterations): mean and 95% bootstrap "
        f"interval over {seeds} seeds",
        fontsize=10,
    )
    return save_figure(fig, out)


def sweep_table(path: str | Path) -> Path | None:
    """The results.csv that `path` names (the file, or a sweep folder holding one and no metrics.csv)."""
    path = Path(path)
    if path.is_file() and path.suffix == ".csv":
        return path
    if path.is_dir() and (path / "results.csv").exists() and not (path / "metrics.csv").exists():
        return path / "results.csv"
    return None


def plot(
    paths: list[str],
    sensitivity_table: str | None = None,
    out: str | Path | None = None,
    metric: str = "episode_return",
    x: str = "env_steps",
    fraction: float = FINAL_FRACTION,
) -> Path:
    """What `jaxrl plot` draws: the sensitivity plot of one sweep table (`sensitivity_table`, or a sweep's
    results.csv or folder among `paths`), else the learning curves of the run folders `paths`. Returns the PNG
    (default learning_curves.png or sensitivity.png); ValueError for nothing to plot or a mix."""
    tables = [t for t in map(sweep_table, paths) if t is not None]
    if sensitivity_table is not None:
        tables.insert(0, Path(sensitivity_table))
    if tables:
        if len(tables) != 1 or len(paths) > (0 if sensitivity_table else 1):
            raise ValueError("plot one sweep table at a time, and not together with run folders.")
        return sensitivity(tables[0], out or "sensitivity.png", metric, fraction)
    if paths:
        return learning_curves(paths, out or "learning_curves.png", metric, x)
    raise ValueError("give run folders (learning curves) or --sensitivity RESULTS_CSV.")
