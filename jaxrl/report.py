"""`jaxrl report`: Markdown tables and PNG plots of the aggregate metrics over run folders and sweep folders.

Every run folder (config.json, metrics.csv) or sweep folder (sweep.json, results.csv; each swept point one entry)
is an entry: a label (the algorithm, and for a sweep point its values), a task (the env id) and one final return
per seed (`jaxrl.run.report.final_return`: the mean over the last 10% of iterations). Entries with the same
label form one algorithm's score matrix [runs, tasks] of normalised scores (`jaxrl.scores.normalize` with the
returns of `jaxrl/reference_scores.toml`); on it the report gives

    IQM, median, mean, optimality gap      with 95% stratified bootstrap intervals (`jaxrl.scores`)
    performance profiles                    the fraction of runs with a score above tau, with 95% bands
    P(X > Y)                                for every pair of labels on the tasks they share, with intervals

and the learning curves of the run folders (`jaxrl.plot.learning_curves`). Envs without reference scores show
their returns but stay out of the aggregates. Reading never writes to a run or sweep folder.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from jaxrl import scores
from jaxrl.plot import bootstrap_interval, learning_curves, read_metrics, read_sweep, save_figure
from jaxrl.run.report import final_return

METRICS = {"IQM": scores.iqm, "median": scores.median, "mean": scores.mean, "optimality gap": scores.optimality_gap}
TAUS = np.linspace(0.0, 1.2, 61)


@dataclasses.dataclass(frozen=True)
class Entry:
    """One algorithm (or sweep point) on one env: a final return per seed, from `source`."""

    label: str
    env_id: str
    final: np.ndarray  # [seeds]
    source: Path
    is_run: bool  # a run folder (it has learning curves), not a sweep point


def _env_id(config: dict) -> str:
    return str(config.get("env", config.get("env_id", "?")))


def read_entries(path: str | Path) -> list[Entry]:
    """The entries of one run folder (one entry) or sweep folder / results.csv (one per point); ValueError (one
    line) for anything else."""
    path = Path(path)
    folder = path.parent if path.name == "results.csv" else path
    if (folder / "sweep.json").is_file():
        info = json.loads((folder / "sweep.json").read_text())
        names, points, final = read_sweep(folder / "results.csv")
        env_id = _env_id(info.get("config", {}))
        return [
            Entry(f"{info['algo']} " + ",".join(f"{n}={p[n]:g}" for n in names), env_id, final[c], folder, False)
            for c, p in enumerate(points)
        ]
    if (folder / "config.json").is_file() and (folder / "metrics.csv").is_file():
        info = json.loads((folder / "config.json").read_text())
        data = read_metrics(folder)
        if "episode_return" not in data:
            raise ValueError(f"{folder}/metrics.csv has no episode_return column.")
        label = str(info.get("label", info["algo"]))  # a population (`jaxrl pbt`) is "<algo> pbt"
        env_id = _env_id(info.get("config", {}))
        return [Entry(label, env_id, final_return(data["episode_return"]), folder, True)]
    raise ValueError(f"{path}: neither a run folder (config.json, metrics.csv) nor a sweep folder (sweep.json).")


def score_matrices(entries: Sequence[Entry]) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """Per label, the normalised scores [runs, tasks] over its envs that have reference scores, and those envs.
    Entries of one label and env pool their seeds; a label's tasks keep the smallest run count among them, and
    runs without a finished episode (NaN) are dropped first."""
    pooled: dict[str, dict[str, list[np.ndarray]]] = {}
    for entry in entries:
        pooled.setdefault(entry.label, {}).setdefault(entry.env_id, []).append(entry.final)
    matrices, tasks = {}, {}
    for label, by_env in pooled.items():
        columns, envs = [], []
        for env_id, finals in sorted(by_env.items()):
            try:
                reference = scores.reference_scores(env_id)
            except ValueError:
                continue
            runs = np.concatenate(finals)
            runs = runs[np.isfinite(runs)]
            if runs.size:
                columns.append(scores.normalize(runs, *reference))
                envs.append(env_id)
        if columns:
            n = min(len(c) for c in columns)
            matrices[label] = np.stack([c[:n] for c in columns], axis=1)
            tasks[label] = envs
    return matrices, tasks


def _interval(point: float, ci: np.ndarray, digits: int = 3) -> str:
    return f"{point:.{digits}f} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


def aggregates(matrices: dict[str, np.ndarray], reps: int, seed: int) -> dict[str, tuple[dict, dict]]:
    """{metric name: (points, intervals)} of every metric in METRICS, per label."""
    return {name: scores.stratified_bootstrap_ci(matrices, fn, reps=reps, seed=seed) for name, fn in METRICS.items()}


def aggregate_table(matrices: dict[str, np.ndarray], tasks: dict[str, list[str]], results: dict) -> list[str]:
    """Markdown lines: per label, its tasks, its runs and every metric of METRICS with its interval (`results`:
    what `aggregates` returns)."""
    lines = ["| label | tasks | runs | " + " | ".join(METRICS) + " |", "|---" * (3 + len(METRICS)) + "|"]
    for label, matrix in matrices.items():
        cells = [_interval(float(results[m][0][label]), results[m][1][label]) for m in METRICS]
        lines.append(f"| {label} | {', '.join(tasks[label])} | {matrix.shape[0]} | " + " | ".join(cells) + " |")
    return lines


def plot_aggregates(
    matrices: dict[str, np.ndarray], results: dict, reps: int, seed: int, aggregates_png: Path, profiles_png: Path
) -> list[Path]:
    """Two PNGs: every metric's points and intervals per label (`results`: what `aggregates` returns), and the
    performance profiles with their 95% bands."""
    return [
        _plot_intervals(results, Path(aggregates_png), "normalised scores: point and 95% interval"),
        _plot_profiles(matrices, reps, seed, Path(profiles_png)),
    ]


def improvements(matrices: dict[str, np.ndarray], tasks: dict[str, list[str]], reps: int, seed: int):
    """(points, intervals) of P(X > Y) for every pair of labels (in their order; P(Y > X) = 1 - P(X > Y)), on the
    tasks they share."""
    pairs = {}
    for x, y in itertools.combinations(matrices, 2):
        shared = [t for t in tasks[x] if t in tasks[y]]
        if shared:
            pairs[f"{x} > {y}"] = tuple(matrices[a][:, [tasks[a].index(t) for t in shared]] for a in (x, y))
    if not pairs:
        return {}, {}
    return scores.stratified_bootstrap_ci(pairs, scores.probability_of_improvement, reps=reps, seed=seed)


def _plot_intervals(results: dict[str, tuple[dict, dict]], out: Path, title: str) -> Path:
    """One panel per metric: a point and its interval per label."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = list(next(iter(results.values()))[0])
    margin = 0.08 * max(len(label) for label in labels)  # inches of tick labels on the left
    size = (margin + 3.0 * len(results), 0.45 * len(labels) + 1.4)
    fig, axes = plt.subplots(1, len(results), figsize=size, dpi=120)
    for ax, (name, (points, cis)) in zip(np.atleast_1d(axes), results.items(), strict=True):
        for i, label in enumerate(labels):
            ax.plot(cis[label], [i, i], linewidth=6, alpha=0.5, solid_capstyle="butt", color=f"C{i % 10}")
            ax.plot([points[label]], [i], "|", markersize=14, color="black")
        ax.set_yticks(range(len(labels)), labels if ax is np.atleast_1d(axes)[0] else [""] * len(labels))
        ax.set_title(name)
        ax.invert_yaxis()  # the first label on top
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(title, fontsize=9)
    return save_figure(fig, out)


def _plot_profiles(matrices: dict[str, np.ndarray], reps: int, seed: int, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    profile = lambda s: scores.performance_profile(s, TAUS)  # noqa: E731
    points, bands = scores.stratified_bootstrap_ci(matrices, profile, reps=reps, seed=seed)
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for i, label in enumerate(matrices):
        style = ("-", "--", ":", "-.")[i // 10 % 4]  # ten colours, then the next line style
        ax.plot(TAUS, points[label], label=label, color=f"C{i % 10}", linestyle=style)
        ax.fill_between(TAUS, bands[label][0], bands[label][1], alpha=0.2, color=f"C{i % 10}", linewidth=0)
    ax.set_xlabel("normalised score tau")
    ax.set_ylabel("fraction of runs with score > tau")
    ax.set_title("performance profiles, 95% stratified bootstrap bands", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=1 + len(matrices) // 8)
    return save_figure(fig, out)


def write_report(paths: Sequence[str | Path], out: str | Path, reps: int = 2_000, seed: int = 0) -> Path:
    """Reads the run and sweep folders `paths` and writes `out`/report.md with its PNGs; returns report.md."""
    if reps < 1:
        raise ValueError(f"--reps {reps}: need at least 1 bootstrap resample.")
    entries = [entry for path in paths for entry in read_entries(path)]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# jaxrl report", "", "## Runs", ""]
    lines += [
        "Final return: the mean episode return over the last 10% of iterations, per seed; mean over seeds with its",
        "95% bootstrap interval. Score: (return - random) / (reference - random), `jaxrl/reference_scores.toml`.",
        "",
        "| label | env | seeds | final return | mean score | source |",
        "|---|---|---|---|---|---|",
    ]
    for entry in entries:
        mean, low, high = (float(v[0]) for v in bootstrap_interval(entry.final[:, None]))
        try:
            score = f"{float(np.nanmean(scores.normalize(entry.final, *scores.reference_scores(entry.env_id)))):.3f}"
        except ValueError:
            score = "no reference"
        seeds = int(np.isfinite(entry.final).sum())
        final = _interval(mean, (low, high), 1)
        lines.append(f"| {entry.label} | {entry.env_id} | {seeds} | {final} | {score} | {entry.source} |")
    matrices, tasks = score_matrices(entries)
    if matrices:
        results = aggregates(matrices, reps, seed)
        lines += ["", "## Aggregate metrics of normalised scores", ""]
        lines += [f"95% stratified bootstrap intervals, {reps} resamples, seed {seed}.", ""]
        lines += aggregate_table(matrices, tasks, results)
        plot_aggregates(matrices, results, reps, seed, out / "aggregates.png", out / "profiles.png")
        lines += ["", "![aggregate metrics](aggregates.png)", "", "![performance profiles](profiles.png)"]
        points, cis = improvements(matrices, tasks, reps, seed)
        if points:
            lines += ["", "## Probability of improvement", "", "| X > Y | P(X > Y) |", "|---|---|"]
            lines += [f"| {pair} | {_interval(float(points[pair]), cis[pair])} |" for pair in points]
            _plot_intervals({"P(X > Y)": (points, cis)}, out / "improvement.png", "probability of improvement")
            lines += ["", "![probability of improvement](improvement.png)"]
    runs = [e.source for e in entries if e.is_run]
    if runs:
        learning_curves(runs, out / "learning_curves.png")
        lines += ["", "## Learning curves", "", "![learning curves](learning_curves.png)"]
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n")
    return report
