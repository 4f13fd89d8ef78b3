"""Learning curves from run folders: mean and 95% bootstrap interval over seeds, as PNG."""

from __future__ import annotations

import csv
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np


def read_metrics(run_dir: str | Path) -> dict[str, np.ndarray]:
    """{column: [seeds, iterations]} from a run folder's metrics.csv."""
    columns: dict[str, dict[tuple[int, int], float]] = defaultdict(dict)
    with open(Path(run_dir) / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            index = int(row["seed"]), int(row["iteration"])
            for name, value in row.items():
                columns[name][index] = float(value)
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
        line = ax.plot(xs[has], mean[has], label=label)[0]
        ax.fill_between(xs[has], low[has], high[has], color=line.get_color(), alpha=0.25, linewidth=0)
    ax.set_xlabel({"env_steps": "environment steps", "wall_s": "wall seconds (compile included)"}.get(x, x))
    ax.set_ylabel(metric.replace("_", " "))
    ax.set_title(f"{metric.replace('_', ' ')}: mean and 95% bootstrap interval over seeds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return out
