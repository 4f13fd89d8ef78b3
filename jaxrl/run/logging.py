"""Metric sinks, written between compiled chunks (never from inside the compiled loop).

Each sink takes `write(metrics, first_iteration, steps_per_iteration)` with metrics {name: [seeds, size]}
and `close()`. `CsvSink` writes one row per (seed, iteration); `TensorBoardSink` writes event files
(tensorboardX) with the mean over seeds under `NAME` and each seed under `seed_S/NAME`; `WandbSink` logs the
same to a Weights & Biases run (optional: wandb is imported only when the sink is made).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np


class CsvSink:
    """`metrics.csv`: seed, iteration, env_steps and every metric; flushed after every chunk.

    Each chunk's rows are appended as they come (chunk by chunk); `close()` rewrites the file in (seed,
    iteration) order (`reorder_by_seed`), so a finished or interrupted run's metrics.csv is the same whether or
    not it was resumed.

    `atomic=True` (a resume rewriting the file from a checkpoint's metrics): the rows go to `path.tmp` until
    `commit()` renames it over `path`, so an interrupted rewrite leaves the old file whole."""

    def __init__(self, path: Path, atomic: bool = False):
        self.path = Path(path)
        self.pending = self.path.with_name(self.path.name + ".tmp") if atomic else None
        self.file = open(self.pending or self.path, "w", newline="")  # noqa: SIM115 - closed by close()
        self.writer = None
        self.seeds = 0
        self.last: tuple[int, int] | None = None  # the (seed, iteration) of the last row written
        self.ordered = True  # whether the rows so far are in (seed, iteration) order

    def commit(self) -> None:
        """Makes the rows written so far `path` (atomic sinks only; then appends go on to `path`)."""
        if self.pending is not None:
            self.file.flush()
            os.fsync(self.file.fileno())
            os.replace(self.pending, self.path)
            self.pending = None

    def write(self, metrics: dict[str, np.ndarray], first_iteration: int, steps_per_iteration: int, wall_s=None):
        """`wall_s`: [size] seconds since the run started (compile included) at the end of each iteration."""
        names = sorted(metrics)
        if self.writer is None:
            self.writer = csv.writer(self.file)
            self.writer.writerow(["seed", "iteration", "env_steps", "wall_s", *names])
        seeds, size = metrics[names[0]].shape
        wall_s = np.full(size, np.nan) if wall_s is None else np.asarray(wall_s)
        for s in range(seeds):
            for i in range(size):
                iteration = first_iteration + i
                env_steps = (iteration + 1) * steps_per_iteration
                values = (f"{metrics[n][s, i]:.6g}" for n in names)
                self.writer.writerow([s, iteration, env_steps, f"{wall_s[i]:.4f}", *values])
                self.ordered = self.ordered and (self.last is None or (s, iteration) > self.last)
                self.last = (s, iteration)
        self.seeds = max(self.seeds, seeds)
        self.file.flush()

    def close(self):
        self.file.close()
        if self.pending is not None:  # never committed: the old file stays
            self.pending.unlink(missing_ok=True)
            return
        if not self.ordered:
            reorder_by_seed(self.path, self.seeds)


def reorder_by_seed(path: Path, seeds: int) -> None:
    """Rewrites the CSV `path` (rows appended chunk by chunk: each seed's rows in iteration order) in (seed,
    iteration) order, streaming one pass per seed (never the whole table in memory), written aside and renamed
    over it so that a reader never sees half."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", newline="") as out:
        writer = csv.writer(out)
        for seed in range(seeds):
            with open(path, newline="") as file:
                rows = csv.reader(file)
                header = next(rows)
                if seed == 0:
                    writer.writerow(header)
                writer.writerows(row for row in rows if row[0] == str(seed))
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)


class TensorBoardSink:
    """TensorBoard event files in `directory`, one scalar per metric and iteration, x = env steps.

    `resume_step` (a resume, the env steps of its first new iteration): when `directory` already holds event
    files, the new file starts with TensorBoard's purge of the steps from `resume_step` on (those an interrupted
    run wrote after its checkpoint) and steps before it, already written, are not written again.

    tensorboardX names an event file by the second it was made and the host; the name here ends in the
    nanosecond as well, so a resume made within the second of the interrupted run's start writes a file of its
    own, after it in name order (the order TensorBoard reads them in), instead of overwriting it."""

    def __init__(self, directory: Path, resume_step: int | None = None):
        import time

        from tensorboardX import SummaryWriter

        written = resume_step is not None and any(Path(directory).glob("events.out.tfevents.*"))
        self.skip_before = resume_step if written else 0
        purge = {"purge_step": resume_step} if written else {}
        suffix = f".{time.time_ns():020d}"
        self.writer = SummaryWriter(str(directory), flush_secs=5, filename_suffix=suffix, **purge)

    def write(self, metrics: dict[str, np.ndarray], first_iteration: int, steps_per_iteration: int, wall_s=None):
        names = sorted(metrics)
        seeds, size = metrics[names[0]].shape
        for i in range(size):
            env_steps = (first_iteration + i + 1) * steps_per_iteration
            if env_steps < self.skip_before:
                continue
            for name in names:
                values = metrics[name][:, i].astype(np.float64)
                if np.isfinite(values).any():
                    self.writer.add_scalar(name, float(np.nanmean(values)), env_steps)
                if seeds > 1:
                    for s in range(seeds):
                        if np.isfinite(values[s]):
                            self.writer.add_scalar(f"seed_{s}/{name}", float(values[s]), env_steps)
        self.writer.flush()

    def close(self):
        self.writer.close()


WANDB_MISSING = "the wandb sink needs the wandb package: pip install 'jaxrl[wandb]'"


def check_wandb_installed() -> None:
    """Refuses (ImportError, `WANDB_MISSING`) where wandb is not installed, without importing it."""
    import importlib.util

    if importlib.util.find_spec("wandb") is None:
        raise ImportError(WANDB_MISSING)


class WandbSink:
    """A Weights & Biases run: per iteration the mean over seeds of every metric (`NAME`, NaN-free seeds
    only) and, with several seeds, each seed (`seed_S/NAME`), at step = env steps.

    wandb is imported here, not with jaxrl (`pip install 'jaxrl[wandb]'`). `WANDB_MODE=offline` writes the run
    under `directory` (default `./wandb`) without network; `wandb sync` uploads it later.
    """

    def __init__(self, project: str, name: str | None = None, config: dict | None = None, directory=None, **init):
        try:
            import wandb
        except ImportError as error:
            raise ImportError(WANDB_MISSING) from error
        directory = None if directory is None else str(directory)
        try:
            self.run = wandb.init(project=project, name=name, config=config, dir=directory, **init)
        except wandb.errors.Error as error:  # not logged in, a project it refuses
            raise ValueError(
                f"wandb project {project!r}: {str(error).rstrip('.')}; without a login (`wandb login`, or "
                "WANDB_API_KEY), WANDB_MODE=offline writes the run locally, to `wandb sync` later."
            ) from error

    def write(self, metrics: dict[str, np.ndarray], first_iteration: int, steps_per_iteration: int, wall_s=None):
        names = sorted(metrics)
        seeds, size = metrics[names[0]].shape
        for i in range(size):
            env_steps = (first_iteration + i + 1) * steps_per_iteration
            data = {"iteration": first_iteration + i}
            if wall_s is not None and np.isfinite(wall_s[i]):
                data["wall_s"] = float(wall_s[i])
            for name in names:
                values = metrics[name][:, i].astype(np.float64)
                if np.isfinite(values).any():
                    data[name] = float(np.nanmean(values))
                if seeds > 1:
                    data.update({f"seed_{s}/{name}": float(values[s]) for s in range(seeds) if np.isfinite(values[s])})
            self.run.log(data, step=env_steps, commit=True)

    def close(self):
        self.run.finish()
