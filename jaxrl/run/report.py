"""Reporting a run: the one definition of a run's "final return", used by the runner, sweeps, the scorecard and
the other benchmarks; the one divergence rule of runs and sweeps (`diverged`); the runner's `RunResult`; and
`summary`, the content of a run folder's summary.json."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

FINAL_FRACTION = 0.1  # the final return averages the last 10% of iterations


def final_window(num_iterations: int, fraction: float = FINAL_FRACTION) -> int:
    """How many trailing iterations the final return averages: ceil(fraction * iterations), at least 1."""
    return max(1, int(np.ceil(fraction * num_iterations)))


def final_return(episode_return: np.ndarray, fraction: float = FINAL_FRACTION) -> np.ndarray:
    """The final return of each run: the NaN-mean over the last `final_window` iterations of the per-iteration
    mean episode return, `episode_return` [..., iterations] -> [...] (NaN where no episode ended in the window).

    Iterations in which no episode ended carry NaN and do not count."""
    values = np.asarray(episode_return, np.float64)
    values = values[..., -final_window(values.shape[-1], fraction) :]
    finite = np.isfinite(values)
    total = np.where(finite, values, 0.0).sum(-1)
    count = finite.sum(-1)
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def window_returns(episode_return: np.ndarray, fraction: float = FINAL_FRACTION) -> np.ndarray:
    """The NaN-mean of every run of `final_window` consecutive iterations: [..., iterations] -> [..., windows]
    (window k averages iterations k .. k + w - 1; NaN where no episode ended in it)."""
    values = np.asarray(episode_return, np.float64)
    width = final_window(values.shape[-1], fraction)
    finite = np.isfinite(values)
    zero = np.zeros(values.shape[:-1] + (1,))
    total = np.concatenate([zero, np.cumsum(np.where(finite, values, 0.0), -1)], -1)
    count = np.concatenate([zero, np.cumsum(finite, -1)], -1)
    window_total, window_count = total[..., width:] - total[..., :-width], count[..., width:] - count[..., :-width]
    return np.where(window_count > 0, window_total / np.maximum(window_count, 1), np.nan)


def stability(episode_return: np.ndarray, fraction: float = FINAL_FRACTION) -> dict[str, float]:
    """Whether runs hold what they learned: the final return (the last `final_window` iterations) against the best
    window of that width anywhere in the run, on the seed-mean curve of `episode_return` [seeds, iterations], and
    seed by seed.

    drop = (best - final) / (best - first): the fraction of what the run learned (from `first`, the return of its
    first iteration with a finished episode, the untrained policy's, to its best window) lost by the end; 0 when it
    ends at its best, 1 when it ends where it began.
    (A fraction of |best| instead would call Pendulum's -137 -> -150, both solved, a 10% collapse, and CartPole's
    500 -> 9 a 98% one: the learned range measures both on one scale.) `worst_seed_drop` is the largest drop of
    any one seed. The runs "hold" when drop <= 0.05 and worst_seed_drop <= 0.10."""
    curve = np.asarray(episode_return, np.float64).reshape(-1, np.shape(episode_return)[-1])
    finite = np.isfinite(curve)
    mean = np.where(finite.any(0), np.where(finite, curve, 0.0).sum(0) / np.maximum(finite.sum(0), 1), np.nan)
    rows = np.concatenate([mean[None], curve])
    windows = window_returns(rows, fraction)
    best, final = np.nanmax(windows, -1), windows[:, -1]
    first = np.array([row[np.isfinite(row)][0] if np.isfinite(row).any() else np.nan for row in rows])
    drops = (best - final) / np.maximum(best - first, 1e-8)
    return {
        "best": float(best[0]),
        "final": float(final[0]),
        "first": float(first[0]),
        "drop": float(drops[0]),
        "worst_seed_drop": float(np.nanmax(drops[1:])),
    }


def _is_loss(name: str) -> bool:
    return "loss" in name


def diverged(metrics: dict) -> np.ndarray:
    """The divergence rule: [...] True where any loss metric ({name: [..., iterations]}, a name holding "loss")
    was non-finite at some iteration. The runner stops a run it holds for at a chunk boundary; a sweep counts
    such runs as diverged (no final return)."""
    losses = [np.asarray(v) for k, v in metrics.items() if _is_loss(k)]
    if not losses:
        return np.zeros(np.shape(next(iter(metrics.values())))[:-1], bool)
    return np.any([~np.isfinite(v).all(-1) for v in losses], axis=0)


def first_divergence(metrics: dict) -> str | None:
    """Names the first non-finite loss of metrics {name: [seeds, iterations]} under `diverged` (the name, its
    value, seed index and iteration), or None when none diverged."""
    for name in sorted(metrics):
        if _is_loss(name):
            bad = ~np.isfinite(metrics[name])
            if bad.any():
                seed, i = np.argwhere(bad)[0]
                return f"{name} is {metrics[name][seed, i]} (seed index {seed}, chunk iteration {i})"
    return None


def last_finite_return(episode_return: np.ndarray) -> float | None:
    """The seed-mean return of the last iteration of `episode_return` [seeds, iterations] in which an episode
    ended (NaN seeds left out), None when none did."""
    values = np.asarray(episode_return, np.float64)
    finite = np.isfinite(values)
    ended = np.flatnonzero(finite.any(0))
    if not ended.size:
        return None
    column = values[:, ended[-1]]
    return float(column[np.isfinite(column)].mean())


def progress_text(last: tuple[float, int] | None, chunk: int) -> str:
    """The progress bar's return: `last` = (the last finite return, the chunk it came from) shown with its age
    at `chunk`, e.g. "ret 183.2 (2 chunks ago)"; "no episode finished yet" when no episode ended so far. Never
    "ret=nan"."""
    if last is None:
        return "no episode finished yet"
    value, at = last
    age = chunk - at
    return f"ret {value:.1f}" + ("" if age <= 0 else f" ({age} chunk{'s' if age > 1 else ''} ago)")


@dataclasses.dataclass
class RunResult:
    """What `jaxrl.run.run` returns: the final state and every iteration's metrics of S seeds."""

    config: Any
    state: Any  # final training state, stacked over seeds
    metrics: dict[str, np.ndarray]  # name -> [seeds, iterations]
    env_steps: np.ndarray  # [iterations] env steps (per seed) at the end of each iteration
    wall_s: np.ndarray  # [iterations] seconds since the start of the run (compile included) per iteration
    compile_s: float
    run_s: float
    run_dir: Path | None
    iterations_run: int | None = None  # iterations this call trained (a resume: those after the checkpoint)
    devices: int = 1  # the devices each seed's policy trained data-parallel over
    seed_devices: int = 1  # the devices the seeds were split over, whole seeds each

    @property
    def steps_per_second(self) -> float:
        """Aggregate env steps per second over all seeds of the iterations this call ran, compile time
        excluded; NaN when it ran none (a resumed run that had finished)."""
        seeds = next(iter(self.metrics.values())).shape[0]
        iterations = len(self.env_steps) if self.iterations_run is None else self.iterations_run
        if iterations == 0 or self.run_s <= 0:
            return float("nan")
        return float(self.env_steps[0] * iterations * seeds / self.run_s)

    def final_returns(self, fraction: float = FINAL_FRACTION) -> np.ndarray:
        """[seeds] the final return of each seed (`final_return`: the last 10% of iterations)."""
        return final_return(self.metrics["episode_return"], fraction)

    def first_reached(self, target: float) -> np.ndarray:
        """[seeds] the first iteration whose mean return reached `target` (-1: none did)."""
        reached = np.nan_to_num(self.metrics["episode_return"], nan=-np.inf) >= target
        return np.where(reached.any(1), reached.argmax(1), -1)

    def time_to_return(self, target: float) -> np.ndarray:
        """[seeds] wall seconds (compile included) until an iteration's mean return first reached `target`."""
        first = self.first_reached(target)
        return np.where(first >= 0, self.wall_s[first], np.nan)

    def steps_to_return(self, target: float) -> np.ndarray:
        """[seeds] env steps (per seed) until an iteration's mean return first reached `target` (-1: never)."""
        first = self.first_reached(target)
        return np.where(first >= 0, self.env_steps[first], -1)


def _mean_std(values: np.ndarray) -> tuple[float | None, float | None]:
    if not np.isfinite(values).any():
        return None, None
    return float(np.nanmean(values)), float(np.nanstd(values))


def _rounded(values) -> list[float | None]:
    return [None if np.isnan(x) else round(float(x), 2) for x in values]


def summary(result: RunResult, target_return: float | None = None) -> dict[str, Any]:
    """The content of summary.json: final return per seed (`final_return`) with mean and std, the last
    evaluation, timings, and with `target_return` the seconds until each seed first reached it."""
    final = result.final_returns()
    mean, std = _mean_std(final)
    out = {
        "env": result.config.env,
        "seeds": int(final.shape[0]),
        "env_steps_per_seed": int(result.env_steps[-1]),
        "final_window": final_window(len(result.env_steps)),
        "final_return_per_seed": _rounded(final),  # null: no episode ended in that seed's final window
        "final_return_seeds": int(np.isfinite(final).sum()),
        "final_return_mean": mean,
        "final_return_std": std,
        "compile_s": round(result.compile_s, 3),
        "run_s": round(result.run_s, 3),
        "steps_per_second": None if np.isnan(result.steps_per_second) else round(result.steps_per_second),
        "devices": int(result.devices),
    }
    if result.seed_devices > 1:
        out["seed_devices"] = int(result.seed_devices)
    if result.iterations_run is not None:
        out["iterations_run"] = int(result.iterations_run)
    if "eval_return" in result.metrics:
        ran = np.flatnonzero(np.isfinite(result.metrics["eval_finished"]).any(0))
        if ran.size:
            last = result.metrics["eval_return"][:, ran[-1]]
            out["eval_iteration"] = int(ran[-1]) + 1
            out["eval_return_per_seed"] = _rounded(last)
            out["eval_return_mean"], out["eval_return_std"] = _mean_std(last)
    if target_return is not None:
        out["target_return"] = target_return
        out["seconds_to_target_per_seed"] = _rounded(result.time_to_return(target_return))
        out["steps_to_target_per_seed"] = [None if x < 0 else int(x) for x in result.steps_to_return(target_return)]
    return out


def write_summary(result: RunResult, target_return: float | None = None) -> dict[str, Any]:
    """`summary(result, target_return)`, written to `result.run_dir/summary.json` when the run has a folder."""
    info = summary(result, target_return)
    if result.run_dir is not None:
        (Path(result.run_dir) / "summary.json").write_text(json.dumps(info, indent=2, allow_nan=False))
    return info


def _per_seed(values: list[float | None]) -> str:
    return ", ".join("none ended" if r is None else f"{r:.1f}" for r in values)


def _of(info: dict[str, Any]) -> str:
    """ ", over 2 of 3 seeds" when some seed ended no episode in its final window (the mean leaves it out)."""
    finished, seeds = info.get("final_return_seeds", info["seeds"]), info["seeds"]
    return "" if finished == seeds else f", over the {finished} of {seeds} seeds that ended an episode"


def format_summary(info: dict[str, Any]) -> str:
    """The printed form of a `summary`."""
    window = f"  (last {info['final_window']} iteration(s))" if "final_window" in info else ""
    lines = [
        f"env                 {info['env']}  ({info['seeds']} seed(s) x {info['env_steps_per_seed']:,} steps)",
        f"final return        {info['final_return_mean']:.1f} ± {info['final_return_std']:.1f}{window}{_of(info)}"
        if info["final_return_mean"] is not None
        else "final return        no episode completed",
        f"  per seed          {_per_seed(info['final_return_per_seed'])}",
    ]
    if "eval_iteration" in info:
        mean, std = info["eval_return_mean"], info["eval_return_std"]
        lines += [
            f"eval return         {mean:.1f} ± {std:.1f}"
            if mean is not None
            else "eval return         no episode ended",
            f"  per seed          {', '.join('nan' if r is None else f'{r:.1f}' for r in info['eval_return_per_seed'])}"
            f"  (deterministic, after iteration {info['eval_iteration']})",
        ]
    lines += [
        f"compile             {info['compile_s']:.2f} s",
        f"run                 {info['run_s']:.2f} s  ({info['steps_per_second']:,} env steps/s, all seeds"
        f"{_on_devices(info)})"
        if info.get("steps_per_second") is not None
        else "run                 no iterations left to train (the run had finished)",
    ]
    if "target_return" in info:
        lines += _target_lines(info)
    return "\n".join(lines)


def _on_devices(info: dict[str, Any]) -> str:
    devices, split = info.get("devices", 1), info.get("seed_devices", 1)
    if split > 1:
        seeds = info["seeds"]
        each = f"{seeds // split}" if seeds % split == 0 else f"up to {-(-seeds // split)}"
        return f", on {split} devices, {each} seed(s) each"
    return f", on {devices} devices" if devices > 1 else ""


def _target_lines(info: dict[str, Any]) -> list[str]:
    """`time to return T`: per seed the wall seconds since the start with the compile time and the training time
    apart, and the env steps, when it was reached; "not reached in N steps" when not."""
    secs, compile_s = info["seconds_to_target_per_seed"], info["compile_s"]
    steps = info.get("steps_to_target_per_seed") or [None] * len(secs)
    head = f"time to return {info['target_return']:g}"

    def one(s, n) -> str:
        if s is None:
            return f"not reached in {info['env_steps_per_seed']:,} steps"
        at = f" at {n:,} steps" if n is not None else ""
        if s >= compile_s:
            return f"{s:.2f} s{at} ({compile_s:.2f} s compile + {s - compile_s:.2f} s run)"
        return f"{s:.2f} s{at} (wall time since the start, compile included)"

    if len(secs) == 1:
        return [f"{head + ':':19s} {one(secs[0], steps[0])}"]
    reached = sum(s is not None for s in secs)
    return [f"{head + ':':19s} reached by {reached} of {len(secs)} seeds"] + [
        f"  seed {i:<12d} {one(s, n)}" for i, (s, n) in enumerate(zip(secs, steps, strict=True))
    ]
