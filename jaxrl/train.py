"""The chunked runner: one compiled program per chunk of iterations, host work (progress, CSV) in between.

`run(algo, config, seeds=S)` trains S seeds with `jax.vmap`, executes `algo.update` in chunks of
`lax.scan`, and gives exactly the numbers of `jax.vmap(algo.make_train(config))(keys)`: the chunks are the
same pure iteration applied to the same state, only split across calls. Each finished chunk's metrics are
appended to `metrics.csv` at once, so an interrupted run keeps every completed iteration.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from jaxrl.configs import to_dict


@dataclasses.dataclass
class RunResult:
    config: Any
    state: Any  # final training state, stacked over seeds
    metrics: dict[str, np.ndarray]  # name -> [seeds, iterations]
    env_steps: np.ndarray  # [iterations] env steps (per seed) at the end of each iteration
    wall_s: np.ndarray  # [iterations] seconds since the start of the run (compile included) per iteration
    compile_s: float
    run_s: float
    run_dir: Path | None

    @property
    def steps_per_second(self) -> float:
        """Aggregate env steps per second over all seeds, compile time excluded."""
        seeds = next(iter(self.metrics.values())).shape[0]
        return float(self.env_steps[-1] * seeds / self.run_s)

    def final_returns(self, last: int = 5) -> np.ndarray:
        """[seeds] mean return of episodes completed in the last `last` iterations of each seed."""
        returns = self.metrics["episode_return"][:, -last:]
        return np.array([np.nanmean(r) if np.isfinite(r).any() else np.nan for r in returns])

    def time_to_return(self, target: float) -> np.ndarray:
        """[seeds] wall seconds (compile included) until an iteration's mean return first reached `target`."""
        reached = np.nan_to_num(self.metrics["episode_return"], nan=-np.inf) >= target
        first = np.where(reached.any(1), reached.argmax(1), -1)
        return np.where(first >= 0, self.wall_s[first], np.nan)


def chunk_sizes(num_iterations: int, num_chunks: int) -> list[int]:
    """Splits the iterations into about `num_chunks` equal chunks (one compile); when no divisor of
    `num_iterations` gives between half and twice `num_chunks` chunks, into chunks of two sizes (two compiles).
    """
    num_chunks = max(1, min(num_chunks, num_iterations))
    divisors = [
        d
        for d in range(1, num_iterations + 1)
        if num_iterations % d == 0 and num_chunks / 2 <= num_iterations // d <= 2 * num_chunks
    ]
    if divisors:
        size = min(divisors, key=lambda d: abs(num_iterations // d - num_chunks))
        return [size] * (num_iterations // size)
    size = -(-num_iterations // num_chunks)
    full, last = divmod(num_iterations, size)
    return [size] * full + ([last] if last else [])


def make_run_dir(root: str | Path, algo_name: str, config) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path(root) / f"{algo_name}-{config.env}-{stamp}"
    suffix = 1
    while path.exists():
        suffix += 1
        path = Path(root) / f"{algo_name}-{config.env}-{stamp}-{suffix}"
    path.mkdir(parents=True)
    return path


def run(
    algo: ModuleType,
    config,
    *,
    seeds: int = 1,
    seed: int = 0,
    num_chunks: int = 20,
    run_dir: str | Path | None = None,
    progress: bool = True,
) -> RunResult:
    """Trains `seeds` seeds of `algo` (a module with Config/validate/init/update) under one `jax.vmap`."""
    algo.validate(config)
    if seeds < 1:
        raise ValueError(f"seeds={seeds}: need at least one seed.")
    keys = jax.random.split(jax.random.key(seed), seeds)
    sizes = chunk_sizes(config.num_iterations, num_chunks)
    steps_per_iteration = config.num_envs * config.num_steps
    algo_name = algo.__name__.rsplit(".", 1)[-1]
    if run_dir is not None:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.json").write_text(
            json.dumps({"algo": algo_name, "seeds": seeds, "seed": seed, "config": to_dict(config)}, indent=2)
        )

    def chunk(state, length):
        return jax.lax.scan(lambda s, _: algo.update(config, s), state, None, length=length)

    start = time.perf_counter()
    init = jax.jit(jax.vmap(lambda k: algo.init(config, k)))
    chunks = {n: jax.jit(jax.vmap(lambda s, n=n: chunk(s, n))) for n in set(sizes)}
    abstract_state = jax.eval_shape(init, keys)
    # XLA compiles outside the GIL: the init and chunk programs compile side by side on separate cores
    with ThreadPoolExecutor(max_workers=1 + len(chunks)) as pool:
        init_future = pool.submit(lambda: init.lower(keys).compile())
        chunk_futures = {n: pool.submit(lambda f=f: f.lower(abstract_state).compile()) for n, f in chunks.items()}
        init = init_future.result()
        compiled = {n: future.result() for n, future in chunk_futures.items()}
    state = init(keys)
    compile_s = time.perf_counter() - start

    history: list[dict[str, np.ndarray]] = []
    wall = []
    writer = _CsvMetrics(run_dir / "metrics.csv") if run_dir is not None else None
    bar = tqdm(
        total=config.num_iterations * steps_per_iteration * seeds,
        unit="step",
        unit_scale=True,
        disable=not progress,
        desc=f"{algo_name} {config.env} x{seeds}",
    )
    run_start = time.perf_counter()
    try:
        done = 0
        for size in sizes:
            chunk_start = time.perf_counter()
            state, metrics = compiled[size](state)
            metrics = jax.tree.map(np.asarray, metrics)  # blocks until the chunk is finished
            now = time.perf_counter()
            wall.extend(compile_s + chunk_start - run_start + (now - chunk_start) * (np.arange(size) + 1) / size)
            history.append(metrics)
            if writer is not None:
                writer.append(metrics, done, steps_per_iteration, seed)
            done += size
            bar.update(size * steps_per_iteration * seeds)
            recent = metrics["episode_return"][:, -1]
            bar.set_postfix(ret="nan" if np.isnan(recent).all() else f"{np.nanmean(recent):.1f}")
    finally:
        bar.close()
        if writer is not None:
            writer.close()
    run_s = time.perf_counter() - run_start
    metrics = {k: np.concatenate([h[k] for h in history], axis=1) for k in history[0]}
    env_steps = (np.arange(config.num_iterations) + 1) * steps_per_iteration
    result = RunResult(config, state, metrics, env_steps, np.asarray(wall), compile_s, run_s, run_dir)
    if run_dir is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary(result), indent=2))
    return result


class _CsvMetrics:
    """One row per (seed, iteration), written as each chunk finishes."""

    def __init__(self, path: Path):
        self.file = open(path, "w", newline="")
        self.writer = None

    def append(self, metrics: dict[str, np.ndarray], first_iteration: int, steps_per_iteration: int, base_seed: int):
        names = sorted(metrics)
        if self.writer is None:
            self.writer = csv.writer(self.file)
            self.writer.writerow(["seed", "iteration", "env_steps", *names])
        seeds, size = metrics[names[0]].shape
        for s in range(seeds):
            for i in range(size):
                iteration = first_iteration + i
                self.writer.writerow(
                    [s, iteration, (iteration + 1) * steps_per_iteration, *(f"{metrics[n][s, i]:.6g}" for n in names)]
                )
        self.file.flush()

    def close(self):
        self.file.close()


def summary(result: RunResult, target_return: float | None = None) -> dict[str, Any]:
    final = result.final_returns()
    out = {
        "env": result.config.env,
        "seeds": int(final.shape[0]),
        "env_steps_per_seed": int(result.env_steps[-1]),
        "final_return_per_seed": [round(float(x), 2) for x in final],
        "final_return_mean": float(np.nanmean(final)) if np.isfinite(final).any() else None,
        "final_return_std": float(np.nanstd(final)) if np.isfinite(final).any() else None,
        "compile_s": round(result.compile_s, 3),
        "run_s": round(result.run_s, 3),
        "steps_per_second": round(result.steps_per_second),
    }
    if target_return is not None:
        times = result.time_to_return(target_return)
        out["target_return"] = target_return
        out["seconds_to_target_per_seed"] = [None if np.isnan(t) else round(float(t), 2) for t in times]
    return out


def format_summary(info: dict[str, Any]) -> str:
    lines = [
        f"env                 {info['env']}  ({info['seeds']} seed(s) x {info['env_steps_per_seed']:,} steps)",
        f"final return        {info['final_return_mean']:.1f} ± {info['final_return_std']:.1f}"
        if info["final_return_mean"] is not None
        else "final return        no episode completed",
        f"  per seed          {', '.join(f'{r:.1f}' for r in info['final_return_per_seed'])}",
        f"compile             {info['compile_s']:.2f} s",
        f"run                 {info['run_s']:.2f} s  ({info['steps_per_second']:,} env steps/s, all seeds)",
    ]
    if "target_return" in info:
        secs = info["seconds_to_target_per_seed"]
        lines.append(
            f"time to return {info['target_return']:g}  "
            + ", ".join("never" if s is None else f"{s:.2f} s" for s in secs)
            + "  (compile + run)"
        )
    return "\n".join(lines)
