"""The chunk loop: `run(algo, config, seeds=S)` trains S seeds under one `jax.vmap`, executing `algo.update` in
compiled chunks (every chunk one program, `jaxrl.run.compile`), with host work (sinks, progress bar, divergence
checks, checkpoints) in between.

It gives exactly the numbers of `jax.vmap(algo.make_train(config))(keys)`: the chunks are the same pure
iteration applied to the same state, only split across calls. With `seed_devices=D` the seeds are split over D
devices, whole seeds each: the same iteration compiled for the D-device mesh, so equal up to rounding, or bit for
bit with `device_independent=True` (both layouts compiled without XLA's algebraic simplifier). Each
finished chunk's metrics go to the sinks at once (`metrics.csv` is flushed), so an interrupted run keeps every
completed iteration. With `eval_every=K`, every K-th chunk (and the last) ends with a deterministic evaluation
inside the same compiled program (`jaxrl.run.compile`); its metrics are NaN except at the last iteration of an
evaluated chunk.

Everything a run is given is validated once (`validate_run`, which `run` calls and returns the `Plan` it
executes) before anything is written or compiled. The run folder (claim, lock, cleanup) is `jaxrl.run.folder`;
compiling, restoring and saving are `jaxrl.run.session`. A new run that stops before its first chunk finished
(Ctrl-C during compilation, a compile error) removes what it wrote.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh
from tqdm.auto import tqdm

from jaxrl import parallel
from jaxrl.algos import base
from jaxrl.algos.base import Algorithm, to_dict
from jaxrl.device_rules import check_seed_devices
from jaxrl.run import folder, hosts, session
from jaxrl.run.compile import (
    EVAL_METRICS,
    cache_events,
    cache_note,
    check_memory,
    is_out_of_memory,
    make_init,
    padded_seeds,
    seeds_mesh,
)
from jaxrl.run.folder import RunDirError, make_run_dir  # noqa: F401  (what run raises and names, importable here)
from jaxrl.run.options import check_counts
from jaxrl.run.report import RunResult, first_divergence, last_finite_return, progress_text, write_summary
from jaxrl.run.signals import DeferredStop, Stop, TermAsInterrupt, signum_of, stopped_by  # noqa: F401  (Stop: importable here)

MAX_ITERATIONS = 2**31  # the iteration counter is an int32 inside the compiled program


class Divergence(RuntimeError):
    """Training produced non-finite losses or parameters; the last good checkpoint is kept."""


class OutOfMemory(ValueError):
    """XLA could not allocate the device memory the run needs (more than the estimate before compiling)."""

    @staticmethod
    def of(plan: Plan, error: BaseException) -> OutOfMemory:
        text = " ".join(str(error).split())
        text = text[:200] + (" ..." if len(text) > 200 else "")
        return OutOfMemory(
            f"{plan.name} on {plan.config.env}: the device ran out of memory ({text}); lower --num-envs, "
            "--num-steps, --hidden-sizes or --seeds (or raise --num-minibatches)."
        )


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, `signum`) during a run: the state after the last completed chunk was checkpointed and
    the CSV flushed. `compiling`: it came before the first chunk ran (a new run's folder was removed again; a
    resumed run's folder is unchanged)."""

    def __init__(self, iteration: int, run_dir: Path | None, compiling: bool = False, signum: int = signal.SIGINT):
        super().__init__(f"interrupted {'during compilation' if compiling else f'after iteration {iteration}'}")
        self.iteration, self.run_dir, self.compiling, self.signum = iteration, run_dir, compiling, signum

    @property
    def exit_status(self) -> int:
        """128 + the signal's number, as a shell reports a process that the signal ended: 130, or 143 (SIGTERM)."""
        return 128 + int(self.signum)

    def explain(self, algo_name: str, resumed: bool, command: str = "train") -> str:
        """What the interruption left and how to continue, as `jaxrl train ALGO` (or `command`) reports it."""
        run_dir = self.run_dir
        if self.compiling and not resumed:
            where = f"nothing was trained and {run_dir} was left as it was before"
        elif self.compiling:
            where = f"nothing was trained; {run_dir} is unchanged"
        else:
            where = f"after iteration {self.iteration}; checkpoint and metrics saved in {run_dir}"
        again = "the same command"
        if resumed or not self.compiling:
            again = f"jaxrl {command} {algo_name} --resume {run_dir}"
        how = stopped_by(self.signum)
        return f"{how} {'during compilation: ' if self.compiling else ''}{where}. Continue with: {again}"


def _with_eval_columns(metrics: dict[str, np.ndarray], scores, seeds: int, size: int) -> dict[str, np.ndarray]:
    """The same eval columns in every chunk: NaN where no evaluation ran, the scores at the chunk's end."""
    for name in EVAL_METRICS:
        column = np.full((seeds, size), np.nan, np.float32)
        if scores is not None:
            column[:, -1] = np.asarray(scores[name])
        metrics[name] = column
    return metrics


def _nanmean_text(values: np.ndarray) -> str:
    return "no episode ended" if np.isnan(values).all() else f"{np.nanmean(values):.1f}"


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How `run` trains (every field a keyword of `run`): `seeds` seeds from the base `seed`, in `num_chunks`
    compiled chunks; with a `run_dir`, a checkpoint every `checkpoint_every` chunks (`resume`: continue the run
    there), metrics.csv (and with `tensorboard` TensorBoard event files); `eval_every` / `eval_episodes`: the
    evaluation inside the chunks; `sinks`: more metric sinks; `target_return`: reported in summary.json;
    `name`: the algorithm's name (default its registered one); `devices`: the devices of each seed's one
    data-parallel policy (a count, "all", a Mesh or a list of devices); `seed_devices`: the devices the seeds
    are split over, whole seeds each (at most `seeds`; copies of seed 0, dropped from every result, pad the seeds
    to a multiple of it; 1: every seed on one device; with `devices=1`; over several processes, a multiple of
    their count, the same number of devices from each); `device_independent`: compile without XLA's algebraic
    simplifier (`compile.DEVICE_INDEPENDENT_OPTIONS`), so that a seed's numbers are the same bits on one device and
    split over several, at some speed (config.json records it, and a resume keeps it). `progress`: the progress
    bar; `status`: when stderr is a terminal, status lines before it (compiling, then the compile seconds and whether
    the persistent compilation cache had the programs)."""

    seeds: int = 1
    seed: int = 0
    num_chunks: int = 20
    run_dir: str | Path | None = None
    progress: bool = True
    status: bool = True
    checkpoint_every: int = 5
    resume: bool = False
    tensorboard: bool = False
    eval_every: int = 0
    eval_episodes: int = 16
    sinks: list | None = None
    target_return: float | None = None
    name: str | None = None
    devices: Any = 1
    seed_devices: int = 1
    device_independent: bool = False


@dataclasses.dataclass(frozen=True)
class Plan:
    """A validated run (`validate_run`): the algorithm, its Config, the options, the algorithm's name, the
    data-parallel mesh (None: one device per seed), the mesh the seeds are split over (None: not split) and,
    without a data-parallel mesh, the jitted init that the memory check traced (`compile.make_init`), so that the
    compile reuses its trace."""

    algo: Algorithm
    config: Any
    options: RunOptions
    name: str
    mesh: Mesh | None
    init: Any = None
    seeds_mesh: Mesh | None = None

    def with_options(self, **changes) -> Plan:
        """The same plan with options that no validation depends on changed: a new run's `run_dir` (named once
        everything is validated) or its `sinks`."""
        return dataclasses.replace(self, options=dataclasses.replace(self.options, **changes))


def validate_run(algo: Algorithm, config, options: RunOptions | None = None, **fields) -> Plan:
    """Everything `run` checks before it writes or compiles anything, once: `algo.validate(config)`, the runner's
    own options (`options`, or RunOptions(**fields)), the per-device Config on `devices`
    (`base.data_parallel_config`), and the rough memory estimate of the env batch and the rollout
    (`compile.check_memory`). Returns the `Plan` that `execute` runs."""
    o = dataclasses.replace(options or RunOptions(), **fields)
    algo.validate(config)
    mesh, local = (None, config) if o.devices == 1 else base.data_parallel_config(config, o.devices)
    processes = jax.process_count()
    if processes > 1 and o.seed_devices == 1 and len(parallel.resolve_devices(o.devices)) != len(jax.devices()):
        raise ValueError(
            f"devices={o.devices!r}: a run over {processes} processes trains one policy over every process's "
            "devices; use devices='all'."
        )
    if config.num_iterations > MAX_ITERATIONS:
        raise ValueError(
            f"total_timesteps={config.total_timesteps:g} (--total-timesteps) is {config.num_iterations:.3g} "
            f"iterations of {config.env_steps_per_iteration} env steps; a run has at most 2**31 iterations: "
            "lower --total-timesteps."
        )
    check_counts(o.seeds, o.seed, o.num_chunks, o.checkpoint_every, o.eval_every, o.eval_episodes, o.seed_devices)
    if o.resume and o.run_dir is None:
        raise ValueError("resume=True needs the run_dir to resume from.")
    mesh = None if mesh is not None and mesh.size == 1 else mesh
    split = _seeds_mesh(o, mesh)
    init = make_init(algo, config, seeds_mesh=split) if mesh is None else None
    trained = padded_seeds(o.seeds, o.seed_devices)
    if split is None or jax.default_backend() == "cpu":  # CPU devices share the host's memory: every seed counts
        check_memory(local, trained, init=init)  # what one device holds
    else:  # an accelerator holds its own seeds
        check_memory(local, trained // o.seed_devices)
    return Plan(algo, config, o, base.name_of(algo) if o.name is None else o.name, mesh, init, split)


def auto_seed_devices(seeds: int) -> int:
    """The devices `jaxrl train --devices auto` splits `seeds` over, whole seeds each (the seeds never talk to each
    other, so each device works alone): as many as give the fewest seeds a device, and of those the fewest devices,
    so that the fewest copies pad the seeds to a multiple of them (5 seeds on 4 devices: 3 devices of 2 seeds, one
    copy). Over several processes, the devices of every process count, and each gives the same number (a multiple
    of the process count, at most `seeds`). 1 with one seed, or where the seeds are fewer than the processes."""
    if not isinstance(seeds, int) or seeds < 2:  # a bad count is refused by `run`
        return 1
    processes = jax.process_count()
    per_device = -(-seeds // (jax.local_device_count() * processes))
    count = -(-seeds // per_device)
    count = min(-(-count // processes) * processes, seeds // processes * processes)
    return count if count > 1 else 1


def _seeds_mesh(o: RunOptions, mesh: Mesh | None) -> Mesh | None:
    """The mesh `o.seed_devices` (checked alone by `options.check_counts`) splits the seeds over (None for 1), or a
    ValueError naming what does not fit the devices."""
    if o.seed_devices == 1:
        return None
    check_seed_devices(o.seed_devices, o.devices, mesh is not None, jax.process_count(), jax.local_device_count())
    return seeds_mesh(o.seed_devices)


def run(algo: Algorithm, config, options: RunOptions | None = None, **fields) -> RunResult:
    """Trains `seeds` seeds of `algo` (an `Algorithm`: Config/validate/init/update/evaluation_policy) under one
    `jax.vmap`; seed j uses the key `split(key(seed), seeds)[j]`. The options are a `RunOptions` or its fields
    as keywords (`run(ppo, config, seeds=4, run_dir="runs/a")`).

    With a `run_dir`, the training state is checkpointed every `checkpoint_every` chunks, at the end and on
    Ctrl-C (raised again as `Interrupted` once saved); `resume=True` continues from the run folder's latest
    checkpoint and gives the same results as an uninterrupted run. Non-finite losses or parameters stop the
    run at the chunk boundary with `Divergence`, before the bad state is saved. Metrics go to
    `run_dir/metrics.csv` and, with `tensorboard`, to TensorBoard event files in `run_dir/tensorboard`;
    `sinks`: more sinks (e.g. `logging.WandbSink`), closed at the end. At the end `run_dir/summary.json` holds
    `report.summary(result, target_return)`; resuming a finished run trains nothing and leaves it as it is.

    `eval_every=K > 0` evaluates the policy deterministically on `eval_episodes` fresh episodes per seed after
    every K-th chunk and after the last one, inside the compiled chunk. `name`: the algorithm's name in
    config.json and the progress bar (default: its registered name, `base.name_of(algo)`).

    `devices` (a count, "all", a Mesh or a list of devices; default 1): with more than one, each seed's ONE
    policy trains data-parallel over them (`jaxrl.parallel`); the state is device-stacked (leaves [D, S, ...]),
    checkpoints restore on any device count, and the metrics are the global ones.

    Over several processes (after `sweep.initialize_distributed` in each, `devices="all"` or `seed_devices=N`),
    every process calls `run` alike and trains the same policies (each seed's over every device, or whole seeds
    on each process's devices); process 0 alone writes the run folder, metrics, checkpoints, summary and progress
    bar, and runs the `sinks` (`jaxrl.run.hosts`).
    """
    return execute(validate_run(algo, config, options, **fields))


def execute(plan: Plan) -> RunResult:
    """Runs a validated `plan` (`validate_run`): claims its run folder, compiles (or restores), trains the
    chunks, writes summary.json; the folder's lock is released however it ends."""
    o = plan.options
    keys = jax.random.split(jax.random.key(o.seed), o.seeds)  # the session pads them for a seed split
    info = folder.run_info(plan.name, o.seeds, o.seed, plan.config, o.eval_every, o.eval_episodes, o.device_independent)
    run_dir = None if o.run_dir is None else Path(o.run_dir)
    with TermAsInterrupt():
        claim = folder.Claim()  # nothing held yet: a stop while claiming finds the claim undone (`folder.claim`)
        try:
            try:
                claim = folder.claim(run_dir, o.resume, info)
                if claim.restarted:  # nothing to resume: from iteration 0, with the same settings
                    if hosts.lead():
                        print(
                            f"jaxrl: {run_dir} held a run stopped before its first checkpoint: starting it over",
                            file=sys.stderr,
                        )
                    plan = plan.with_options(resume=False)
                    o = plan.options
                if claim.written:
                    (run_dir / "config.json").write_text(json.dumps(info, indent=2))
                status = o.status and hosts.lead() and sys.stderr.isatty()  # a terminal: say what is happening
                if status:
                    what = "restoring and compiling" if o.resume else "compiling"
                    print(f"{plan.name} {plan.config.env}: {what} the training program", file=sys.stderr, flush=True)
                cached = cache_events()
                held = session.start(plan, keys, info, None if run_dir is None else run_dir / "checkpoints")
                TermAsInterrupt.raise_if_swallowed()  # a stop that landed in a gc callback while compiling
                if status:
                    note = cache_note(cached, cache_events())  # loaded from the persistent cache, or compiled
                    print(f"{plan.name} {plan.config.env}: compiled in {held.compile_s:.1f} s{note}", file=sys.stderr)
            except KeyboardInterrupt as error:
                claim.discard()
                raise Interrupted(0, run_dir, compiling=True, signum=signum_of(error)) from error
            except BaseException as error:
                claim.discard()
                if is_out_of_memory(error):
                    raise OutOfMemory.of(plan, error) from error
                raise
            result = _train(plan, held, claim, run_dir)
            trained_nothing = result.iterations_run == 0 and (run_dir / "summary.json").is_file()
            if hosts.lead() and not trained_nothing:  # a finished run's summary keeps the seconds it trained in
                write_summary(result, o.target_return)
            return result
        finally:
            claim.release()


def _train(plan: Plan, held: session.Session, claim: folder.Claim, run_dir: Path | None) -> RunResult:
    """The chunk loop: each chunk run, checked for divergence, logged, shown, checkpointed every
    `checkpoint_every` chunks and at the end; a Ctrl-C stops it at the next chunk boundary."""
    config, o = plan.config, plan.options
    steps = config.env_steps_per_iteration
    done_before = held.done
    lead = hosts.lead()  # over several processes, process 0 alone writes (jaxrl.run.hosts)
    own_dir = run_dir if lead else None  # the folder this process writes to
    wall = folder.previous_wall(own_dir, held.done) if o.resume else []  # NaN where metrics.csv lacks them
    first_step = (held.done + 1) * steps  # the env steps of the first iteration this call trains
    sinks = session.open_sinks(own_dir, o.tensorboard, o.sinks if lead else [], bool(held.history), first_step)
    for sink in sinks if held.history else []:  # a resume rewrites the logs from the checkpoint's metrics
        sink.write(held.history[0], 0, steps, np.asarray(wall))
        getattr(sink, "commit", lambda: None)()  # metrics.csv: written aside, then renamed over the old one
    bar = tqdm(
        total=config.num_iterations * steps * o.seeds,
        initial=held.done * steps * o.seeds,
        unit="step",
        unit_scale=True,
        disable=not o.progress or not lead,
        desc=f"{plan.name} {config.env} x{o.seeds}",
    )
    before = last_finite_return(held.history[0]["episode_return"]) if held.history else None
    last = None if before is None else (before, -1)  # (the last finite return, its chunk): the progress bar's
    run_start = time.perf_counter()
    stop = DeferredStop()
    try:
        stop.install()
        for index, (size, evaluated) in enumerate(held.chunks):
            chunk_start = time.perf_counter()
            with stop.taking_chunk():  # the chunk consumes held.state: a stop waits until its result is held
                new_state, metrics, scores = held.chunk(size, evaluated)
                metrics = held.on_host(metrics, size)
                if o.eval_every:
                    metrics = _with_eval_columns(metrics, held.own_seeds(hosts.to_host(scores)), o.seeds, size)
                _check_finite(plan, held, metrics, hosts.to_host(getattr(new_state, "params", None)), size)
                held.advance(new_state, metrics, size)
            now = time.perf_counter()
            chunk_wall = held.compile_s + chunk_start - run_start + (now - chunk_start) * (np.arange(size) + 1) / size
            wall.extend(chunk_wall)
            for sink in sinks:
                sink.write(metrics, held.done - size, steps, chunk_wall)
            bar.update(size * steps * o.seeds)
            value = last_finite_return(metrics["episode_return"])
            last = last if value is None else (value, index)
            postfix = progress_text(last, index)
            if scores is not None:
                postfix += f", eval {_nanmean_text(metrics['eval_return'][:, -1])}"
            bar.set_postfix_str(postfix)
            if (held.first_chunk + index + 1) % o.checkpoint_every == 0 or index == len(held.chunks) - 1:
                held.save()
            stop.raise_if_requested()
    except Divergence:
        if held.done == done_before and not o.resume:
            claim.discard()  # nothing of a new run survived its first chunk; the message tells what happened
        raise
    except Exception as error:
        if not is_out_of_memory(error):
            raise
        if held.done == done_before and not o.resume:
            claim.discard()
        raise OutOfMemory.of(plan, error) from error
    except KeyboardInterrupt as error:
        held.save()
        if held.done == done_before and not o.resume:
            claim.discard()  # a new run stopped before its first chunk finished: nothing to keep
            raise Interrupted(held.done, run_dir, compiling=True, signum=signum_of(error)) from error
        raise Interrupted(held.done, run_dir, signum=signum_of(error)) from error
    finally:
        stop.uninstall()
        bar.close()
        _close(sinks, quiet=sys.exc_info()[1] is not None)
    run_s = time.perf_counter() - run_start
    env_steps = (np.arange(config.num_iterations) + 1) * steps
    return RunResult(
        config, held.own_seeds(held.state), held.metrics(), env_steps, np.asarray(wall), held.compile_s, run_s, run_dir,
        held.done - done_before, held.num_devices, o.seed_devices,
    )  # fmt: skip


def _close(sinks: list, quiet: bool) -> None:
    """Closes every sink. `quiet` (the run is already ending with an error): a sink that fails to close (its
    folder turned read-only) is passed over, so that the one error shown is the one that ended the run;
    otherwise the first failure is raised once all are closed."""
    failure = None
    for sink in sinks:
        try:
            sink.close()
        except Exception as error:
            failure = failure or error
    if failure is not None and not quiet:
        raise failure


def _check_finite(plan: Plan, held: session.Session, metrics: dict, params, size: int) -> None:
    """Raises `Divergence` when a chunk's losses went non-finite (`report.diverged`) or its parameters did."""
    problem = first_divergence(metrics)
    if problem is None and not all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves(params)):
        problem = "the parameters hold non-finite values"
    if problem is not None:
        raise Divergence(
            f"{plan.name} on {plan.config.env} diverged in iterations {held.done}-{held.done + size - 1}: {problem}. "
            f"Config: {to_dict(plan.config)}. "
            + (
                f"The last checkpoint (iteration {held.saved}) in {held.checkpoints} is kept."
                if held.saved is not None
                else "No checkpoint was written before it."
            )
        )
