"""The lineage of a population (parent, hyperparameters, fitness, rank per member and ready step) and a
population's folder on the host: lineage.csv, lineage.png (the hyperparameter schedules and fitness per member),
metrics.csv in a run folder's columns (one `seed` per member) and the printed ranking."""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import struct

from jaxrl.algos import base
from jaxrl.pbt.population import FITNESS_METRIC, PBTConfig
from jaxrl.plot import save_figure


@struct.dataclass
class Lineage:
    """The population's history, one row per ready step k (arrays [R, P], R = num_iterations // ready):
    `iteration` [R] the iterations done at step k; `fitness` and `rank` (0 best) of each member then;
    `exploited` whether it was replaced; `parent` the member whose state and hyperparameters it took (itself
    when not replaced); `hyperparameters[name]` what it trained with in the block ending at step k and
    `next_hyperparameters[name]` what it continues with (after explore); `eval_return` each member's evaluation
    return at step k (`PBTConfig.eval_every`; None without evaluation)."""

    iteration: jax.Array
    fitness: jax.Array
    rank: jax.Array
    exploited: jax.Array
    parent: jax.Array
    hyperparameters: dict[str, jax.Array]
    next_hyperparameters: dict[str, jax.Array]
    eval_return: jax.Array | None = None

    @property
    def names(self) -> list[str]:
        return list(self.hyperparameters)


# ---------------------------------------------------------------------------------------------------------
# Lineage on the host: CSV and plot
# ---------------------------------------------------------------------------------------------------------


def _number(x: np.generic):
    """A NumPy scalar as a Python number, a float32 by its shortest round-tripping digits (0.01, not
    0.009999999776482582)."""
    if isinstance(x, np.floating):
        return float(str(x))
    return x.item()


def lineage_rows(lineage: Lineage) -> list[dict[str, Any]]:
    """One dict per ready step x member (step-major)."""
    host = jax.tree.map(np.asarray, lineage)
    steps, size = host.fitness.shape
    rows = []
    for k in range(steps):
        for m in range(size):
            row = {
                "ready_step": k,
                "iteration": int(host.iteration[k]),
                "member": m,
                "fitness": _number(host.fitness[k, m]),
                "rank": int(host.rank[k, m]),
                "exploited": bool(host.exploited[k, m]),
                "parent": int(host.parent[k, m]),
            }
            if host.eval_return is not None:
                row["eval_return"] = _number(host.eval_return[k, m])
            row.update({n: _number(host.hyperparameters[n][k, m]) for n in lineage.names})
            row.update({f"next_{n}": _number(host.next_hyperparameters[n][k, m]) for n in lineage.names})
            rows.append(row)
    return rows


def write_lineage_csv(lineage: Lineage, path: str | Path) -> Path:
    """The lineage as a tidy CSV, one row per member x ready step: ready_step, iteration, member, fitness,
    rank, exploited, parent, eval_return (with evaluation), each explored field (trained with) and next_<field>
    (continued with)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = lineage_rows(lineage)
    columns = [
        "ready_step",
        "iteration",
        "member",
        "fitness",
        "rank",
        "exploited",
        "parent",
        *(["eval_return"] if lineage.eval_return is not None else []),
        *lineage.names,
        *(f"next_{n}" for n in lineage.names),
    ]
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path


def plot_lineage(lineage: Lineage, path: str | Path, fitness: str = "return") -> Path:
    """A PNG: one panel per explored hyperparameter (each member's schedule over iterations, a dot where it was
    replaced by a perturbed copy of its parent; log scale for learning rates and loguniform-looking spans) and
    one of each member's fitness at every ready step (`fitness`: what it is, `PBTConfig.fitness`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    host = jax.tree.map(np.asarray, lineage)
    steps, size = host.fitness.shape
    names = lineage.names
    fig, axes = plt.subplots(
        len(names) + 1, 1, figsize=(7, 2.6 * (len(names) + 1)), dpi=120, sharex=True, squeeze=False
    )
    xs = np.concatenate([[0], host.iteration])
    colors = plt.get_cmap("viridis")(np.linspace(0, 1, size))
    for ax, name in zip(axes[:, 0], names, strict=False):
        during, after = host.hyperparameters[name], host.next_hyperparameters[name]
        for m in range(size):
            ys = np.concatenate([during[:, m], after[-1:, m]])
            ax.step(xs, ys, where="post", color=colors[m], alpha=0.8, linewidth=1)
            hit = host.exploited[:, m]
            ax.plot(host.iteration[hit], after[hit, m], "o", color=colors[m], markersize=3)
        values = np.concatenate([during.ravel(), after.ravel()])
        if np.all(values > 0) and ("learning_rate" in name or values.max() / values.min() > 10**1.5):
            ax.set_yscale("log")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
    ax = axes[-1, 0]
    for m in range(size):
        ax.plot(
            host.iteration,
            host.fitness[:, m],
            marker="o",
            markersize=3,
            color=colors[m],
            alpha=0.8,
            label=f"member {m}",
        )
    if size <= 12:
        ax.legend(fontsize=7, ncol=min(size, 6))
    ax.set_ylabel(f"fitness ({fitness_name(fitness)})")
    ax.set_xlabel("iteration")
    ax.grid(alpha=0.3)
    axes[0, 0].set_title(f"population-based training: {size} members, {steps} ready steps (dots: exploited)")
    return save_figure(fig, path)


# ---------------------------------------------------------------------------------------------------------
# A population's folder (`jaxrl pbt`)
# ---------------------------------------------------------------------------------------------------------


EVAL_SETTINGS = ("eval_every", "eval_episodes", "fitness")


def pbt_settings(pbt: PBTConfig) -> dict:
    """The PBTConfig as config.json holds it: the evaluation's settings only with `eval_every` (without it they
    change nothing)."""
    settings = {**dataclasses.asdict(pbt), "explore": dict(pbt.explore)}
    return settings if pbt.eval_every else {k: v for k, v in settings.items() if k not in EVAL_SETTINGS}


def folder_info(
    algo: str, config, pbt: PBTConfig, seed: int = 0, num_chunks: int = 1, device_independent: bool = False
) -> dict:
    """The config.json of a population's folder: the algorithm, the base Config, the PBT settings, the seed, the
    chunks and, when on, `device_independent` (everything a resume must keep, as `jaxrl.run.folder.claim` compares
    it), as JSON holds it."""
    info = {
        "algo": algo,
        "label": f"{algo} pbt",
        "seeds": pbt.population,
        "seed": seed,
        "config": base.to_dict(config),
        "pbt": pbt_settings(pbt),
        "chunks": num_chunks,
    }
    if device_independent:  # another program, other last bits: a resume keeps it
        info["device_independent"] = True
    return json.loads(json.dumps(info))


def write_metrics_csv(metrics, path: str | Path) -> Path:
    """metrics {name: [P, iterations]} as a run folder's metrics.csv (one `seed` per member), so that `jaxrl plot`
    and `jaxrl report` read it."""
    path = Path(path)
    host = {name: np.asarray(value) for name, value in metrics.items() if np.ndim(value) == 2}
    names = sorted(host)
    size, iterations = host[names[0]].shape
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["seed", "iteration", *names])
        for m in range(size):
            for i in range(iterations):
                writer.writerow([m, i, *(f"{host[n][m, i]:.6g}" for n in names)])
    return path


def fitness_name(fitness: str) -> str:
    """What a fitness (`PBTConfig.fitness`) measures, in words."""
    return "evaluation return" if fitness == "eval" else FITNESS_METRIC.replace("_", " ")


def ranking(lineage: Lineage, fitness: str = "return") -> list[str]:
    """The members ranked by the fitness of the last ready step (`fitness`: what it is, `PBTConfig.fitness`),
    with the hyperparameters they continued with."""
    scores = np.asarray(lineage.fitness)
    size = scores.shape[1]
    final = scores[-1] if scores.size else np.full(size, np.nan)
    last = {n: np.asarray(v)[-1] for n, v in lineage.next_hyperparameters.items()}
    lines = [f"{'member':>6}  {'fitness':>9}  " + "  ".join(f"{n:>14}" for n in lineage.names)]
    for m in np.argsort(-np.nan_to_num(final, nan=-np.inf), kind="stable"):
        values = "  ".join(f"{_number(last[n][m]):>14.6g}" for n in lineage.names)
        lines.append(f"{m:>6}  {final[m]:>9.2f}  {values}")
    return lines + [
        f"ranked by the fitness ({fitness_name(fitness)}) of the last ready step; hyperparameters as each member "
        "continued from it"
    ]


def write_folder(
    out: str | Path, algo: str, config, pbt: PBTConfig, metrics, lineage: Lineage, timing: dict, seed: int = 0,
    num_chunks: int = 1,
) -> str:  # fmt: skip
    """Writes what a finished `jaxrl pbt` leaves in `out`: config.json (`folder_info`), summary.json (`timing`),
    metrics.csv (`write_metrics_csv`), lineage.csv and lineage.png. Returns the printed summary: the members
    ranked by their final fitness with the hyperparameters they ended with (`ranking`), and the files."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(folder_info(algo, config, pbt, seed, num_chunks), indent=2))
    (out / "summary.json").write_text(json.dumps(timing, indent=2))
    write_metrics_csv(metrics, out / "metrics.csv")
    write_lineage_csv(lineage, out / "lineage.csv")
    plot_lineage(lineage, out / "lineage.png", pbt.fitness)
    return "\n".join([*ranking(lineage, pbt.fitness), *files_text(out, timing)])


def files_text(out: Path, timing: dict) -> list[str]:
    """The summary's last lines: compile and run seconds, and the files of the folder."""
    return [
        f"compile {timing.get('compile_s', float('nan')):.2f} s, run {timing.get('run_s', float('nan')):.2f} s",
        f"lineage           {out / 'lineage.csv'}  (plot: {out / 'lineage.png'})",
        f"metrics           {out / 'metrics.csv'}  (jaxrl plot {out}; jaxrl report {out})",
    ]
