"""A training session: what a run holds between its compiled chunks. `start` compiles the chunk program (and,
for a resume, restores the latest checkpoint, on process 0 and handed to the others); `Session.chunk` runs one
compiled chunk, `Session.save` checkpoints the state with every iteration's metrics, `open_sinks` opens the
logs (a resume rewrites them from the checkpoint's metrics).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxrl import parallel
from jaxrl.algos.base import Algorithm
from jaxrl.run import checkpoint, hosts, logging
from jaxrl.run.compile import (
    EVAL_METRICS,
    chunk_plan,
    compile_programs,
    compiler_options,
    cut_metrics,
    eval_keys,
    make_chunk_program,
    make_init,
    pad_seeds,
    padded_seeds,
    rest_of_plan,
    seed_sharding,
)
from jaxrl.run.compile import abstract_state as compile_state_shape


@dataclasses.dataclass
class Session:
    """A run between chunks: `state` after `done` iterations, `history` the metrics of every chunk since the
    start ({name: [seeds, size]}; a resume's first entry is its checkpoint's), the one compiled program of every
    chunk of the run (`compile.make_chunk_program`, as long as the whole plan's longest chunk, so that a resume
    compiles the same program), the `chunks` still to run ([(size, evaluated)], the first being chunk
    `first_chunk` of the run's whole plan), and `saved`, the iteration of the last checkpoint (None: none yet)."""

    state: Any
    done: int
    history: list
    compiled: Any
    chunks: list
    first_chunk: int
    keys_eval: Any
    compile_s: float
    checkpoints: Path | None
    info: dict
    num_devices: int
    saved: int | None
    seeds_split: bool = False  # the state's seeds are split over several devices (`compile.seeds_mesh`)
    seeds: int | None = None  # the run's own seeds, when the state holds more (copies padding a seed split)
    evaluates: bool = False  # the compiled chunk holds the evaluation (some chunk of the run's plan plays it)

    def own_seeds(self, tree):
        """`tree` (seeds on axis 0) without the copies that pad a seed split."""
        return tree if self.seeds is None else jax.tree.map(lambda x: x[: self.seeds], tree)

    def chunk(self, size: int, evaluated: bool):
        """Runs one compiled chunk of `size` iterations from `state`: (new state, metrics, evaluation scores or
        None); the metrics stay on the devices until fetched. The chunk consumes `state` (donated): until
        `advance` takes the new one, there is no state to save."""
        length = np.int32(size)
        if self.evaluates:
            iteration, evaluate = np.int32(self.done + size), np.bool_(evaluated)
            state, metrics, scores = self.compiled(self.state, self.keys_eval, iteration, evaluate, length)
            return state, metrics, scores if evaluated else None
        state, metrics = self.compiled(self.state, length)
        return state, metrics, None

    def on_host(self, metrics, size: int) -> dict:
        """A chunk's metrics from `chunk` on the host: this run's own seeds and the `size` iterations it ran
        (blocks until the chunk is finished)."""
        return cut_metrics(self.own_seeds(hosts.to_host(metrics)), size)

    def advance(self, state, metrics: dict, size: int) -> None:
        """Takes a finished chunk: its state, its metrics {name: [seeds, size]} on the host."""
        self.history.append(metrics)
        self.state, self.done = state, self.done + size

    def metrics(self) -> dict[str, np.ndarray]:
        """Every iteration's metrics {name: [seeds, done]}."""
        return {k: np.concatenate([h[k] for h in self.history], axis=1) for k in self.history[0]}

    def _save_failed(self, error: Exception) -> str:
        """The one line of a failed save: why, what is kept, how to continue."""
        kept = "no checkpoint was written before it" if self.saved is None else f"checkpoint {self.saved} is kept"
        return (
            f"writing checkpoint {self.done} to {self.checkpoints} failed: {checkpoint.reason(error)}; {kept}. Once "
            f"that is fixed, continue with: jaxrl train {self.info['algo']} --resume {self.checkpoints.parent}"
        )

    def save(self) -> None:
        """Checkpoints the state and every iteration's metrics (process 0 writes), unless the run has no folder,
        nothing new since the last save or no iteration at all."""
        if self.checkpoints is not None and self.history and self.saved != self.done:
            merged, devices = self.metrics(), self.num_devices
            spread = devices > 1 or self.seeds_split  # saved as host arrays: the checkpoint holds no device layout
            on_host = hosts.to_host(checkpoint.unwrap_keys(self.state)) if spread else self.state  # every process
            on_host = self.own_seeds(on_host)

            def write():
                try:
                    return checkpoint.save(self.checkpoints, self.done, on_host, merged, self.info, devices=devices)
                except Exception as error:  # a full disk, a folder turned read-only, ... (orbax wraps some)
                    raise checkpoint.CheckpointError(self._save_failed(error)) from error

            hosts.on_lead(write, f"write a checkpoint to {self.checkpoints}")
            self.saved = self.done


def start(plan, keys, info: dict, checkpoints: Path | None) -> Session:
    """Compiles the chunk programs of `plan` (a validated `loop.Plan`) side by side and, for a resume, restores
    the latest checkpoint in `checkpoints`; a Ctrl-C that a gc callback swallowed while compiling is raised
    here."""
    start_time = time.perf_counter()
    algo, config, options, mesh, split = plan.algo, plan.config, plan.options, plan.mesh, plan.seeds_mesh
    init = make_init(algo, config, mesh, split) if plan.init is None else plan.init
    trained = padded_seeds(options.seeds, options.seed_devices)
    keys, keys_eval = pad_seeds((keys, eval_keys(options.seed, options.seeds)), trained)
    abstract_state = jax.eval_shape(init, keys)
    done, state, history = 0, None, []
    if options.resume:
        done, state, restored = _restore(algo, config, keys, checkpoints, abstract_state, info, mesh, split)
        history = [restored]
    whole = chunk_plan(config.num_iterations, options.num_chunks, options.eval_every)  # the run's, not the resume's
    first_chunk, chunks = rest_of_plan(whole, done)
    evaluates = any(evaluated for _, evaluated in whole)
    if split is not None:  # where the compiled programs take them
        keys, keys_eval = _put_seeds((keys, keys_eval), split)
    initial, compiled = compile_programs(
        algo,
        config,
        None if options.resume else init,
        keys,
        abstract_state,
        max(size for size, _ in whole) if chunks else 0,
        options.eval_episodes if evaluates else 0,
        keys_eval,
        mesh,
        split,
        compiler_options(options.device_independent),
    )
    num_devices = 1 if mesh is None else mesh.size
    return Session(
        state=state if options.resume else initial,
        done=done,
        history=history,
        compiled=compiled,
        chunks=chunks,
        first_chunk=first_chunk,
        keys_eval=keys_eval,
        compile_s=time.perf_counter() - start_time,
        checkpoints=checkpoints,
        info=info,
        num_devices=num_devices,
        saved=done if options.resume else None,
        seeds_split=split is not None,
        seeds=options.seeds if trained > options.seeds else None,
        evaluates=evaluates,
    )


def open_sinks(
    run_dir: Path | None, tensorboard: bool, extra: list | None, rewrite: bool = False, first_step: int = 0
) -> list:
    """The run's metric sinks: metrics.csv (`rewrite`: a resume rewrites it from the checkpoint), TensorBoard
    event files, then `extra`. A resume into a folder with event files (`first_step`: the env steps of the
    first new iteration) writes only the new steps, purging any later ones an interrupted run left."""
    sinks = []
    if run_dir is not None:
        sinks.append(logging.CsvSink(run_dir / "metrics.csv", atomic=rewrite))
        if tensorboard:
            sinks.append(logging.TensorBoardSink(run_dir / "tensorboard", resume_step=first_step if rewrite else None))
    return sinks + list(extra or [])


def _restore(algo: Algorithm, config, keys, checkpoints: Path, abstract_state, info: dict, mesh, seeds_mesh=None):
    """(iteration, state, metrics) of the run's latest checkpoint, the state laid out for `mesh` (None: one
    device) or with its seeds split over `seeds_mesh`. Over several processes process 0 reads it and the others
    get it from process 0 (`hosts`)."""
    devices = 1 if mesh is None else mesh.size
    trained = jax.tree.leaves(abstract_state)[0].shape[0]  # the seeds of the state: a seed split may pad them
    if seeds_mesh is not None and trained > info["seeds"]:  # the checkpoint holds the run's own seeds
        keys, seeds = keys[: info["seeds"]], info["seeds"]
        abstract_state = jax.tree.map(lambda x: jax.ShapeDtypeStruct((seeds, *x.shape[1:]), x.dtype), abstract_state)

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
    elif seeds_mesh is not None:
        state = _put_seeds(pad_seeds(state, trained), seeds_mesh, like=abstract_state)
    return done, state, metrics


def _put_seeds(tree, mesh, like=None):
    """`tree` (seeds on axis 0) split along its seeds over the seeds `mesh`, from its host values: over several
    processes each gives the same values, and each device takes its own seeds. Its PRNG keys (or, where `tree`
    holds their raw data, those of `like`) stay keys."""
    on_host = hosts.to_host(checkpoint.unwrap_keys(tree))
    return checkpoint.rewrap_keys(jax.device_put(on_host, seed_sharding(mesh)), tree if like is None else like)


def _metrics_like(algo: Algorithm, config, abstract_state, mesh, done: int, evaluated: bool) -> dict:
    """The shapes and dtypes of `done` iterations of metrics {name: [seeds, done]}, as process 0's checkpoint
    holds them (with the evaluation columns of `_with_eval_columns` when the run evaluates)."""
    _, one = jax.eval_shape(make_chunk_program(algo, config, 1, mesh=mesh), abstract_state, np.int32(1))
    like = {k: jax.ShapeDtypeStruct((*v.shape[:-1], done), v.dtype) for k, v in one.items()}
    seeds = next(iter(one.values())).shape[0]
    if evaluated:
        like |= {name: jax.ShapeDtypeStruct((seeds, done), np.float32) for name in EVAL_METRICS}
    return like
