"""A sweep's summary: per config, the final return over seeds with its 95% bootstrap interval and the runs that
diverged (`jaxrl.run.report.diverged`), as rows, a printed table, and the files a sweep folder holds
(results.csv, summary.csv, sweep.json)."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np

from jaxrl.run.report import FINAL_FRACTION, diverged, final_window


def sweep_summary(results, fraction: float = FINAL_FRACTION) -> list[dict]:
    """Per config: its point, the final return (`jaxrl.run.report.final_return`: the mean over the last
    `fraction` of iterations) averaged over seeds, and its 95% bootstrap interval over seeds. A run whose
    losses went non-finite (`diverged`) has no final return (NaN) and is counted under `diverged`."""
    from jaxrl.plot import bootstrap_interval

    bad = diverged(results.metrics)  # [C, S]
    final = np.where(bad, np.nan, results.final("episode_return", fraction))  # [C, S]
    with np.errstate(all="ignore"):
        mean, low, high = bootstrap_interval(final.T)
    rows = []
    for c, point in enumerate(results.points):
        finite = np.isfinite(final[c])
        rows.append(
            {
                "config": c,
                **point,
                "seeds": int(finite.sum()),
                "diverged": int(bad[c].sum()),
                "final_return_mean": float(mean[c]),
                "ci95_low": float(low[c]),
                "ci95_high": float(high[c]),
            }
        )
    return rows


def format_sweep_summary(rows: list[dict], names: list[str]) -> str:
    """The printed table of `sweep_summary` rows, one column per swept field in `names`."""
    header = ["config", *names, "seeds", "final return", "95% interval"]
    table = [header]
    for row in rows:
        interval = f"[{row['ci95_low']:.1f}, {row['ci95_high']:.1f}]"
        final = f"{row['final_return_mean']:.1f}"
        if row.get("diverged"):
            final = f"{final} ({row['diverged']} diverged)"
        table.append([str(row["config"]), *(f"{row[n]:.4g}" for n in names), str(row["seeds"]), final, interval])
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True)) for r in table)


def _replace(path: Path, write) -> None:
    """Writes `path` whole or not at all: `write(temporary path)`, then renamed over it."""
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def _write_rows(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def write_sweep(
    out: Path, results, points, algo: str, config: dict, fraction: float = FINAL_FRACTION, total: int | None = None
) -> str:
    """Writes results.csv, summary.csv and sweep.json (the algorithm's name, the base `config` as a dict, the
    points, seeds, timings and device counts) to the folder `out`, each file whole (a temporary file renamed);
    returns the printed summary: the table and how to read and plot it. `total`: the sweep's number of points
    when `results` holds only those finished so far (sweep.json's "points_total")."""
    out = Path(out)
    _replace(out / "results.csv", results.to_csv)
    rows = sweep_summary(results, fraction)
    _replace(out / "summary.csv", lambda path: _write_rows(path, rows))
    info = {
        "algo": algo,
        "config": config,
        "points": points.points,
        "seeds": results.seeds,
        "seed": results.seed,
        "devices": results.num_devices,
        "processes": results.num_processes,
        "compile_s": round(results.compile_s, 3),
        "run_s": round(results.run_s, 3),
        "steps_per_second": round(results.steps_per_second),
    }
    if total is not None:
        info["points_total"] = total
    _replace(out / "sweep.json", lambda path: path.write_text(json.dumps(info, indent=2)))
    return (
        f"{format_sweep_summary(rows, points.names)}\n"
        f"final return: mean of the last {final_window(len(results.env_steps), fraction)} iteration(s) "
        f"({fraction:.0%}) per seed; interval: 95% bootstrap over seeds\n"
        f"compile {results.compile_s:.2f} s, run {results.run_s:.2f} s ({results.steps_per_second:,.0f} env steps/s, "
        f"all runs; {results.num_devices} device(s), {results.num_processes} process(es))\n"
        f"results           {out / 'results.csv'}\n"
        f"plot              jaxrl plot --sensitivity {out / 'results.csv'}"
    )
