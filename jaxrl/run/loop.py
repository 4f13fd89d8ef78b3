"""The chunk loop: `run(algo, config, seeds=S)` trains S seeds under one `jax.vmap`, executing `algo.update` in
compiled chunks of `lax.scan`, with host work (sinks, progress bar, divergence checks, checkpoints) in between.

It gives exactly the numbers of `jax.vmap(algo.make_train(config))(keys)`: the chunks are the same pure
iteration applied to the same state, only split across calls. Each finished chunk's metrics go to the sinks at
once (`metrics.csv` is flushed), so an interrupted run keeps every completed iteration. With `eval_every=K`,
every K-th chunk (and the last) ends with a deterministic evaluation inside the same compiled program
(`jaxrl.run.compile`); its metrics are NaN except at the last iteration of an evaluated chunk.
"""

from __future__ import annotations

import datetime
import json
import signal
import threading
import time
from pathlib import Path

import jax
import numpy as np
from tqdm.auto import tqdm

from jaxrl.algos import base
from jaxrl.algos.base import Algorithm, to_dict
from jaxrl.run import checkpoint, logging
from jaxrl.run.compile import EVAL_METRICS, chunk_plan, compile_programs, eval_keys, make_init
from jaxrl.run.report import RunResult, write_summary


class Divergence(RuntimeError):
    """Training produced non-finite losses or parameters; the last good checkpoint is kept."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run: the state after the last completed chunk was checkpointed and the CSV flushed."""

    def __init__(self, iteration: int, run_dir: Path | None):
        super().__init__(f"interrupted after iteration {iteration}")
        self.iteration, self.run_dir = iteration, run_dir


def make_run_dir(root: str | Path, algo_name: str, config) -> Path:
    """A new folder `root/ALGO-ENV-YYYYmmdd-HHMMSS` (with a -2, -3, ... suffix when it exists)."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path(root) / f"{algo_name}-{config.env}-{stamp}"
    suffix = 1
    while path.exists():
        suffix += 1
        path = Path(root) / f"{algo_name}-{config.env}-{stamp}-{suffix}"
    path.mkdir(parents=True)
    return path


def _first_non_finite(metrics: dict[str, np.ndarray], params) -> str | None:
    """Names the first non-finite loss (and its chunk-local iteration), or non-finite parameters."""
    for name in sorted(metrics):
        if "loss" in name:
            bad = ~np.isfinite(metrics[name])
            if bad.any():
                seed, i = np.argwhere(bad)[0]
                return f"{name} is {metrics[name][seed, i]} (seed index {seed}, chunk iteration {i})"
    if not all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(params)):
        return "the parameters hold non-finite values"
    return None


class _DeferredInterrupt:
    """Turns Ctrl-C during the training loop into a KeyboardInterrupt at the next chunk boundary, so the state,
    the checkpoint and the logs always hold the same iterations. A second Ctrl-C interrupts at once."""

    def __init__(self):
        self.requested = False
        self.previous = None

    def _handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def install(self) -> None:
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._handle)

    def uninstall(self) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
            self.previous = None

    def raise_if_requested(self) -> None:
        if self.requested:
            raise KeyboardInterrupt


def _check_arguments(seeds, eval_every, eval_episodes, resume, run_dir) -> None:
    if seeds < 1:
        raise ValueError(f"seeds={seeds}: need at least one seed.")
    if not isinstance(eval_every, int) or eval_every < 0:
        raise ValueError(f"eval_every={eval_every!r}: a number of chunks, >= 0 (0: no evaluation).")
    if eval_every and (not isinstance(eval_episodes, int) or eval_episodes < 1):
        raise ValueError(f"eval_episodes={eval_episodes!r}: need at least one episode per evaluation.")
    if resume and run_dir is None:
        raise ValueError("resume=True needs the run_dir to resume from.")


def _open_sinks(run_dir: Path | None, tensorboard: bool, extra: list | None) -> list:
    sinks = []
    if run_dir is not None:
        sinks.append(logging.CsvSink(run_dir / "metrics.csv"))
        if tensorboard:
            sinks.append(logging.TensorBoardSink(run_dir / "tensorboard"))
    return sinks + list(extra or [])


def _with_eval_columns(metrics: dict[str, np.ndarray], scores, seeds: int, size: int) -> dict[str, np.ndarray]:
    """The same eval columns in every chunk: NaN where no evaluation ran, the scores at the chunk's end."""
    for name in EVAL_METRICS:
        column = np.full((seeds, size), np.nan, np.float32)
        if scores is not None:
            column[:, -1] = np.asarray(scores[name])
        metrics[name] = column
    return metrics


def _nanmean_text(values: np.ndarray) -> str:
    return "nan" if np.isnan(values).all() else f"{np.nanmean(values):.1f}"


def run(
    algo: Algorithm,
    config,
    *,
    seeds: int = 1,
    seed: int = 0,
    num_chunks: int = 20,
    run_dir: str | Path | None = None,
    progress: bool = True,
    checkpoint_every: int = 5,
    resume: bool = False,
    tensorboard: bool = False,
    eval_every: int = 0,
    eval_episodes: int = 16,
    sinks: list | None = None,
    target_return: float | None = None,
    name: str | None = None,
) -> RunResult:
    """Trains `seeds` seeds of `algo` (an `Algorithm`: Config/validate/init/update/evaluation_policy) under one
    `jax.vmap`; seed j uses the key `split(key(seed), seeds)[j]`.

    With a `run_dir`, the training state is checkpointed every `checkpoint_every` chunks, at the end and on
    Ctrl-C (raised again as `Interrupted` once saved); `resume=True` continues from the run folder's latest
    checkpoint and gives the same results as an uninterrupted run. Non-finite losses or parameters stop the
    run at the chunk boundary with `Divergence`, before the bad state is saved. Metrics go to
    `run_dir/metrics.csv` and, with `tensorboard`, to TensorBoard event files in `run_dir/tensorboard`;
    `sinks`: more sinks (e.g. `logging.WandbSink`), closed at the end. At the end `run_dir/summary.json` holds
    `report.summary(result, target_return)`.

    `eval_every=K > 0` evaluates the policy deterministically on `eval_episodes` fresh episodes per seed after
    every K-th chunk and after the last one, inside the compiled chunk. `name`: the algorithm's name in
    config.json and the progress bar (default: its registered name, `base.name_of(algo)`).
    """
    algo.validate(config)
    _check_arguments(seeds, eval_every, eval_episodes, resume, run_dir)
    algo_name = base.name_of(algo) if name is None else name
    keys = jax.random.split(jax.random.key(seed), seeds)
    steps_per_iteration = config.env_steps_per_iteration
    info = {"algo": algo_name, "seeds": seeds, "seed": seed, "config": to_dict(config)}
    if eval_every:  # changes the metrics a checkpoint holds, so a resume must use the same setting
        info["eval"] = {"every": eval_every, "episodes": eval_episodes}
    checkpoints = None
    if run_dir is not None:
        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        checkpoints = run_dir / "checkpoints"
        (run_dir / "config.json").write_text(json.dumps(info, indent=2))

    start = time.perf_counter()
    init = make_init(algo, config)
    abstract_state = jax.eval_shape(init, keys)
    done, history = 0, []
    if resume:
        done, state, restored = checkpoint.restore(checkpoints, abstract_state, json.loads(json.dumps(info)))
        history = [restored]
    plan = chunk_plan(config.num_iterations - done, num_chunks, eval_every)
    keys_eval = eval_keys(seed, seeds)
    initial, compiled = compile_programs(
        algo, config, None if resume else init, keys, abstract_state, plan, eval_episodes, keys_eval
    )
    if not resume:
        state = initial
    compile_s = time.perf_counter() - start

    wall = [float("nan")] * done  # wall time of iterations run before a resume is unknown
    sinks = _open_sinks(run_dir, tensorboard, sinks)
    for sink in sinks if history else []:  # a resume rewrites the logs from the checkpoint's metrics
        sink.write(history[0], 0, steps_per_iteration)
    bar = tqdm(
        total=config.num_iterations * steps_per_iteration * seeds,
        initial=done * steps_per_iteration * seeds,
        unit="step",
        unit_scale=True,
        disable=not progress,
        desc=f"{algo_name} {config.env} x{seeds}",
    )

    saved = [done if resume else None]

    def save():
        if checkpoints is not None and history and saved[0] != done:
            merged = {k: np.concatenate([h[k] for h in history], axis=1) for k in history[0]}
            checkpoint.save(checkpoints, done, state, merged, info)
            saved[0] = done

    run_start = time.perf_counter()
    stop = _DeferredInterrupt()
    try:
        stop.install()
        for index, (size, evaluated) in enumerate(plan):
            chunk_start = time.perf_counter()
            if evaluated:
                new_state, metrics, scores = compiled[size, True](state, keys_eval, np.int32(done + size))
            else:
                (new_state, metrics), scores = compiled[size, False](state), None
            metrics = jax.tree.map(np.asarray, metrics)  # blocks until the chunk is finished
            if eval_every:
                metrics = _with_eval_columns(metrics, scores, seeds, size)
            problem = _first_non_finite(metrics, getattr(new_state, "params", None))
            if problem is not None:
                raise Divergence(
                    f"{algo_name} on {config.env} diverged in iterations {done}-{done + size - 1}: {problem}. "
                    f"Config: {to_dict(config)}. "
                    + (
                        f"The last checkpoint (iteration {saved[0]}) in {checkpoints} is kept."
                        if saved[0] is not None
                        else "No checkpoint was written before it."
                    )
                )
            history.append(metrics)
            state, done = new_state, done + size
            now = time.perf_counter()
            chunk_wall = compile_s + chunk_start - run_start + (now - chunk_start) * (np.arange(size) + 1) / size
            wall.extend(chunk_wall)
            for sink in sinks:
                sink.write(metrics, done - size, steps_per_iteration, chunk_wall)
            bar.update(size * steps_per_iteration * seeds)
            postfix = {"ret": _nanmean_text(metrics["episode_return"][:, -1])}
            if scores is not None:
                postfix["eval"] = _nanmean_text(metrics["eval_return"][:, -1])
            bar.set_postfix(postfix)
            if (index + 1) % checkpoint_every == 0 or index == len(plan) - 1:
                save()
            stop.raise_if_requested()
    except KeyboardInterrupt as error:
        save()
        raise Interrupted(done, run_dir) from error
    finally:
        stop.uninstall()
        bar.close()
        for sink in sinks:
            sink.close()
    run_s = time.perf_counter() - run_start
    metrics = {k: np.concatenate([h[k] for h in history], axis=1) for k in history[0]}
    env_steps = (np.arange(config.num_iterations) + 1) * steps_per_iteration
    result = RunResult(config, state, metrics, env_steps, np.asarray(wall), compile_s, run_s, run_dir)
    write_summary(result, target_return)
    return result
