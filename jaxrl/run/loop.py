"""The chunk loop: `run(algo, config, seeds=S)` trains S seeds under one `jax.vmap`, executing `algo.update` in
compiled chunks of `lax.scan`, with host work (sinks, progress bar, divergence checks, checkpoints) in between.

It gives exactly the numbers of `jax.vmap(algo.make_train(config))(keys)`: the chunks are the same pure
iteration applied to the same state, only split across calls. Each finished chunk's metrics go to the sinks at
once (`metrics.csv` is flushed), so an interrupted run keeps every completed iteration. With `eval_every=K`,
every K-th chunk (and the last) ends with a deterministic evaluation inside the same compiled program
(`jaxrl.run.compile`); its metrics are NaN except at the last iteration of an evaluated chunk.

A run folder has one owner: `run.lock` (PID and host) while a run is live; a lock whose process is gone (same
host) is stale and taken over. A new run never writes into a folder that holds a run (config.json,
metrics.csv, checkpoints/ or summary.json): it refuses with RunDirError. Everything a run is given is
validated (`validate_run`) before anything is written or compiled; a new run that stops before its first
chunk finished (Ctrl-C during compilation, a compile error) removes what it wrote.
"""

from __future__ import annotations

import csv
import datetime
import json
import os
import shutil
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P
from tqdm.auto import tqdm

from jaxrl import parallel
from jaxrl.algos import base
from jaxrl.algos.base import Algorithm, to_dict
from jaxrl.run import checkpoint, hosts, logging
from jaxrl.run.compile import (
    EVAL_METRICS,
    check_memory,
    chunk_plan,
    compile_programs,
    eval_keys,
    make_chunk_program,
    make_init,
)
from jaxrl.run.compile import abstract_state as compile_state_shape
from jaxrl.run.report import RunResult, write_summary


class Divergence(RuntimeError):
    """Training produced non-finite losses or parameters; the last good checkpoint is kept."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run: the state after the last completed chunk was checkpointed and the CSV flushed.
    `compiling`: it came before the first chunk ran (a new run's folder was removed again; a resumed run's
    folder is unchanged)."""

    def __init__(self, iteration: int, run_dir: Path | None, compiling: bool = False):
        super().__init__(f"interrupted {'during compilation' if compiling else f'after iteration {iteration}'}")
        self.iteration, self.run_dir, self.compiling = iteration, run_dir, compiling


class RunDirError(ValueError):
    """A run folder that cannot be used: it holds another run, is in use, or cannot be created or written."""


RUN_FILES = ("config.json", "metrics.csv", "checkpoints", "summary.json")
LOCK = "run.lock"


def make_run_dir(root: str | Path, algo_name: str, config, create: bool = True) -> Path:
    """A new folder `root/ALGO-ENV-YYYYmmdd-HHMMSS` (with a -2, -3, ... suffix when it exists); with
    `create=False` only its path (`run` creates it once everything is validated)."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path(root) / f"{algo_name}-{config.env}-{stamp}"
    suffix = 1
    while path.exists():
        suffix += 1
        path = Path(root) / f"{algo_name}-{config.env}-{stamp}-{suffix}"
    if create:
        path.mkdir(parents=True)
    return path


def holds_run(run_dir: Path) -> list[str]:
    """The run files (config.json, metrics.csv, checkpoints, summary.json) that `run_dir` holds."""
    return [name for name in RUN_FILES if (run_dir / name).exists()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


class RunLock:
    """`run_dir/run.lock` holding {"pid", "host", "started"} while a run is live. Created atomically (a
    complete temporary file hard-linked into place, which fails when the lock exists). A lock of a process
    that no longer runs on this host is stale and replaced; one of another host is refused (delete it by hand
    when that run is gone)."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK
        self.held = False

    def acquire(self) -> None:
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        tmp = self.path.with_name(f"{LOCK}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps(info))
        except OSError as error:
            raise RunDirError(f"run folder {self.path.parent} is not writable: {error.strerror or error}.") from error
        try:
            for _ in range(2):
                try:
                    os.link(tmp, self.path)
                    self.held = True
                    return
                except FileExistsError:
                    self._take_over_if_stale()
            raise RunDirError(f"run folder {self.path.parent}: could not take its lock {self.path}.")
        finally:
            tmp.unlink(missing_ok=True)

    def _take_over_if_stale(self) -> None:
        try:
            owner = json.loads(self.path.read_text())
            pid, host = int(owner["pid"]), str(owner["host"])
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError):
            pid, host = None, None
        here = socket.gethostname()
        if pid is not None and host == here and not _alive(pid):
            self.path.unlink(missing_ok=True)  # stale: its process is gone
            return
        who = f"process {pid} on {host}" if pid is not None else "an unreadable lock"
        hint = "wait for it to finish, or" if host == here else f"if that run no longer runs, delete {self.path};"
        raise RunDirError(
            f"run folder {self.path.parent} is in use by another training ({who}); {hint} or choose another --run-dir."
        )

    def release(self) -> None:
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False


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
        """At a chunk boundary; over several processes, all stop when any of them saw a Ctrl-C."""
        if hosts.any_process(self.requested):
            raise KeyboardInterrupt


class _SwallowedInterrupts:
    """While installed, a KeyboardInterrupt that Python cannot raise where it happened (Ctrl-C landing in a gc
    callback such as jax's `_xla_gc_callback`, which reports it through `sys.unraisablehook` as "Exception
    ignored" and carries on) is recorded instead of printed, so `raise_if_any` can raise it afterwards. Without
    this, such a Ctrl-C during compilation was lost and the run went on to the end."""

    def __init__(self):
        self.seen = False
        self.previous = None

    def _hook(self, unraisable) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            self.seen = True
        else:
            self.previous(unraisable)

    def __enter__(self):
        self.previous, sys.unraisablehook = sys.unraisablehook, self._hook
        return self

    def __exit__(self, *exc) -> None:
        sys.unraisablehook = self.previous

    def raise_if_any(self) -> None:
        if self.seen:
            raise KeyboardInterrupt


def _count(value, name: str, minimum: int, what: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name}={value!r}: {what}.")


def validate_run(
    algo: Algorithm,
    config,
    *,
    seeds: int = 1,
    seed: int = 0,
    num_chunks: int = 20,
    checkpoint_every: int = 5,
    eval_every: int = 0,
    eval_episodes: int = 16,
    resume: bool = False,
    run_dir=None,
    devices=1,
) -> None:
    """Everything `run` checks before it writes or compiles anything: `algo.validate(config)`, the runner's
    own arguments, the per-device Config on `devices` (`base.data_parallel_config`), and the rough memory
    estimate of the env batch and the rollout (`compile.check_memory`)."""
    algo.validate(config)
    if devices != 1:
        base.data_parallel_config(config, devices)
    processes = jax.process_count()
    if processes > 1 and len(parallel.resolve_devices(devices)) != len(jax.devices()):
        raise ValueError(
            f"devices={devices!r}: a run over {processes} processes trains one policy over every process's devices; "
            "use devices='all'."
        )
    _count(seeds, "seeds", 1, "need at least one seed")
    _count(seed, "seed", 0, "the base random seed is an integer >= 0")
    _count(num_chunks, "num_chunks", 1, "a number of compiled chunks, >= 1")
    _count(
        checkpoint_every, "checkpoint_every", 1, "a number of chunks, >= 1 (a checkpoint is also written at the end)"
    )
    _count(eval_every, "eval_every", 0, "a number of chunks, >= 0 (0: no evaluation)")
    if eval_every:
        _count(eval_episodes, "eval_episodes", 1, "need at least one episode per evaluation")
    if resume and run_dir is None:
        raise ValueError("resume=True needs the run_dir to resume from.")
    check_memory(config, seeds)


def _run_info(algo_name, seeds, seed, config, eval_every, eval_episodes) -> dict:
    info = {"algo": algo_name, "seeds": seeds, "seed": seed, "config": to_dict(config)}
    if eval_every:  # changes the metrics a checkpoint holds, so a resume must use the same setting
        info["eval"] = {"every": eval_every, "episodes": eval_episodes}
    return json.loads(json.dumps(info))  # as config.json holds it (lists for tuples)


def _claim_new(run_dir: Path) -> tuple[RunLock, list[Path]]:
    """Creates (or takes an empty) run folder for a new run and locks it; returns the lock and what was
    created (removed again if the run stops before its first chunk)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"run folder {run_dir} is a file; choose another --run-dir.")
    existing = holds_run(run_dir) if run_dir.is_dir() else []
    if existing:
        raise RunDirError(_holds_message(run_dir, existing))
    created = [p for p in [*reversed(run_dir.parents), run_dir] if not p.exists()]
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunDirError(f"cannot create run folder {run_dir}: {error.strerror or error}.") from error
    lock = RunLock(run_dir)
    try:
        lock.acquire()
        existing = holds_run(run_dir)  # again, under the lock: another run may have started meanwhile
        if existing:
            raise RunDirError(_holds_message(run_dir, existing))
    except BaseException:
        lock.release()
        _remove(created, [])
        raise
    return lock, created


def _holds_message(run_dir: Path, existing: list[str]) -> str:
    return (
        f"run folder {run_dir} already holds a run ({', '.join(existing)}); continue it with --resume {run_dir} "
        "(resume=True) or choose a new --run-dir."
    )


def _claim_resume(run_dir: Path, info: dict) -> RunLock:
    """Locks the run folder of a resume and checks its config.json against `info` (nothing is written)."""
    if not (run_dir / "config.json").is_file():
        raise checkpoint.CheckpointError(f"no checkpoint in {run_dir}: it is not a run folder (no config.json).")
    lock = RunLock(run_dir)
    lock.acquire()
    try:
        try:
            saved = json.loads((run_dir / "config.json").read_text())
        except (OSError, ValueError) as error:
            raise checkpoint.CheckpointError(f"{run_dir / 'config.json'} cannot be read: {error}") from error
        changed = checkpoint.differences(saved, info)
        if changed:
            raise checkpoint.CheckpointError(
                f"run folder {run_dir} was written by a different run: {changed}. A resume keeps the run's "
                "settings; start a new run to change them."
            )
    except BaseException:
        lock.release()
        raise
    return lock


def _previous_wall(run_dir: Path | None, done: int) -> list[float]:
    """The wall_s of iterations 0 .. done-1 as the run's metrics.csv recorded them (NaN where it does not)."""
    wall = [float("nan")] * done
    try:
        with open(run_dir / "metrics.csv", newline="") as file:
            for row in csv.DictReader(file):
                i = int(row["iteration"])
                if row["seed"] == "0" and 0 <= i < done:
                    wall[i] = float(row["wall_s"])
    except (OSError, KeyError, ValueError, TypeError):
        pass
    return wall


def _remove(created: list[Path], files: list[Path]) -> None:
    """Removes the `files` a new run wrote and the folders it `created` (deepest first, only when empty)."""
    for path in files:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    for folder in reversed(created):
        try:
            folder.rmdir()
        except OSError:
            pass


def _open_sinks(run_dir: Path | None, tensorboard: bool, extra: list | None, rewrite: bool = False) -> list:
    sinks = []
    if run_dir is not None:
        sinks.append(logging.CsvSink(run_dir / "metrics.csv", atomic=rewrite))
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


def _restore(algo: Algorithm, config, keys, checkpoints: Path, abstract_state, info: dict, mesh):
    """(iteration, state, metrics) of the run's latest checkpoint, the state laid out for `mesh` (None: one
    device). Over several processes process 0 reads it and the others get it from process 0 (`hosts`)."""
    devices = 1 if mesh is None else mesh.size

    def read():
        like_for = lambda d: compile_state_shape(algo, config, keys, d)  # noqa: E731
        return checkpoint.restore(checkpoints, abstract_state, info, devices=devices, like_for=like_for)

    done, state, metrics = hosts.on_lead(read, f"restore the checkpoint in {checkpoints}") or (0, None, None)
    raw = jax.eval_shape(checkpoint.unwrap_keys, abstract_state)
    if jax.process_count() > 1:
        done = int(hosts.from_lead(np.int64(done), np.zeros((), np.int64)))
        state = hosts.from_lead(None if state is None else checkpoint.unwrap_keys(state), raw)
        like = _metrics_like(algo, config, abstract_state, mesh, done, evaluated="eval" in info)
        metrics = hosts.from_lead(metrics, like)
    if mesh is not None:
        placed = jax.device_put(checkpoint.unwrap_keys(state), NamedSharding(mesh, P(parallel.AXIS)))
        state = checkpoint.rewrap_keys(placed, abstract_state)
    return done, state, metrics


def _metrics_like(algo: Algorithm, config, abstract_state, mesh, done: int, evaluated: bool) -> dict:
    """The shapes and dtypes of `done` iterations of metrics {name: [seeds, done]}, as process 0's checkpoint
    holds them (with the evaluation columns of `_with_eval_columns` when the run evaluates)."""
    _, one = jax.eval_shape(make_chunk_program(algo, config, 1, mesh=mesh), abstract_state)
    like = {k: jax.ShapeDtypeStruct((*v.shape[:-1], done), v.dtype) for k, v in one.items()}
    seeds = next(iter(one.values())).shape[0]
    if evaluated:
        like |= {name: jax.ShapeDtypeStruct((seeds, done), np.float32) for name in EVAL_METRICS}
    return like


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
    devices=1,
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

    `devices` (a count, "all", a Mesh or a list of devices; default 1): with more than one, each seed's ONE
    policy trains data-parallel over them (`jaxrl.parallel`); the state is device-stacked (leaves [D, S, ...]),
    checkpoints restore on any device count, and the metrics are the global ones.

    Over several processes (after `sweep.initialize_distributed` in each, `devices="all"`), every process calls
    `run` alike and trains the same policy; process 0 alone writes the run folder, metrics, checkpoints,
    summary and progress bar, and runs the `sinks` (`jaxrl.run.hosts`).
    """
    validate_run(
        algo,
        config,
        seeds=seeds,
        seed=seed,
        num_chunks=num_chunks,
        checkpoint_every=checkpoint_every,
        eval_every=eval_every,
        eval_episodes=eval_episodes,
        resume=resume,
        run_dir=run_dir,
        devices=devices,
    )
    mesh = None if devices == 1 else base.data_parallel_config(config, devices)[0]
    mesh = None if mesh is not None and mesh.size == 1 else mesh
    num_devices = 1 if mesh is None else mesh.size
    algo_name = base.name_of(algo) if name is None else name
    keys = jax.random.split(jax.random.key(seed), seeds)
    info = _run_info(algo_name, seeds, seed, config, eval_every, eval_episodes)
    lead = hosts.lead()  # over several processes, process 0 alone writes (jaxrl.run.hosts)
    checkpoints, lock, created, written = None, None, [], []
    if run_dir is not None:
        run_dir = Path(run_dir)
        checkpoints = run_dir / "checkpoints"
        if resume:
            lock = hosts.on_lead(lambda: _claim_resume(run_dir, info), f"resume {run_dir}")
        else:
            lock, created = hosts.on_lead(lambda: _claim_new(run_dir), f"create {run_dir}") or (None, [])
            written = [run_dir / name for name in ("config.json", "metrics.csv", "tensorboard")] if lead else []
    own_dir = run_dir if lead else None  # the folder this process writes to

    def discard() -> None:
        """A new run that stops before its first chunk finished removes what it wrote (nothing to keep)."""
        if lock is not None and written:
            lock.release()
            _remove(created, written)

    try:
        steps_per_iteration = config.env_steps_per_iteration
        start = time.perf_counter()
        try:
            if written:
                (run_dir / "config.json").write_text(json.dumps(info, indent=2))
            init = make_init(algo, config, mesh)
            abstract_state = jax.eval_shape(init, keys)
            done, history = 0, []
            if resume:
                done, state, restored = _restore(algo, config, keys, checkpoints, abstract_state, info, mesh)
                history = [restored]
            plan = chunk_plan(config.num_iterations - done, num_chunks, eval_every)
            keys_eval = eval_keys(seed, seeds)
            with _SwallowedInterrupts() as swallowed:
                initial, compiled = compile_programs(
                    algo, config, None if resume else init, keys, abstract_state, plan, eval_episodes, keys_eval, mesh
                )
            swallowed.raise_if_any()
        except KeyboardInterrupt as error:
            discard()
            raise Interrupted(0, run_dir, compiling=True) from error
        except BaseException:
            discard()
            raise
        if not resume:
            state = initial
        compile_s = time.perf_counter() - start
        done_before = done

        wall = _previous_wall(own_dir, done) if resume else []  # NaN where metrics.csv lacks them
        sinks = _open_sinks(own_dir, tensorboard, sinks if lead else [], rewrite=bool(history))
        for sink in sinks if history else []:  # a resume rewrites the logs from the checkpoint's metrics
            sink.write(history[0], 0, steps_per_iteration, np.asarray(wall))
            getattr(sink, "commit", lambda: None)()  # metrics.csv: written aside, then renamed over the old one
        bar = tqdm(
            total=config.num_iterations * steps_per_iteration * seeds,
            initial=done * steps_per_iteration * seeds,
            unit="step",
            unit_scale=True,
            disable=not progress or not lead,
            desc=f"{algo_name} {config.env} x{seeds}",
        )

        saved = [done if resume else None]

        def save():
            if checkpoints is not None and history and saved[0] != done:
                merged = {k: np.concatenate([h[k] for h in history], axis=1) for k in history[0]}
                on_host = hosts.to_host(checkpoint.unwrap_keys(state)) if num_devices > 1 else state  # every process
                write = lambda: checkpoint.save(checkpoints, done, on_host, merged, info, devices=num_devices)  # noqa: E731
                hosts.on_lead(write, f"write a checkpoint to {checkpoints}")
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
                metrics = hosts.to_host(metrics)  # blocks until the chunk is finished
                if eval_every:
                    metrics = _with_eval_columns(metrics, hosts.to_host(scores), seeds, size)
                problem = _first_non_finite(metrics, hosts.to_host(getattr(new_state, "params", None)))
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
        except Divergence:
            if done == done_before and not resume:
                discard()  # nothing of a new run survived its first chunk; the message tells what happened
            raise
        except KeyboardInterrupt as error:
            save()
            if done == done_before and not resume:
                discard()  # a new run stopped before its first chunk finished: nothing to keep
                raise Interrupted(done, run_dir, compiling=True) from error
            raise Interrupted(done, run_dir) from error
        finally:
            stop.uninstall()
            bar.close()
            for sink in sinks:
                sink.close()
        run_s = time.perf_counter() - run_start
        metrics = {k: np.concatenate([h[k] for h in history], axis=1) for k in history[0]}
        env_steps = (np.arange(config.num_iterations) + 1) * steps_per_iteration
        result = RunResult(
            config, state, metrics, env_steps, np.asarray(wall), compile_s, run_s, run_dir, done - done_before
        )
        if lead:
            write_summary(result, target_return)
        return result
    finally:
        if lock is not None:
            lock.release()
