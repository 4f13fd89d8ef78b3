"""A PBT run in compiled chunks with checkpoints, exact resume, a progress bar and several devices (`run`;
`jaxrl pbt`).

The schedule of `make_pbt` is cut into `num_chunks` chunks of whole ready blocks (`run.compile.chunk_sizes`; the
iterations past the last whole block end the last chunk), all run by one compiled program (`program.make_chunk`,
as long as the longest chunk, a chunk's length its argument). Between chunks the host shows the progress bar (the best
and median fitness of the last ready step, and with evaluation its best evaluation return), and every
`checkpoint_every` chunks, at the end and on Ctrl-C or SIGTERM (`run.signals`: at the next chunk boundary) saves
the population's TrainStates and hyperparameters with every iteration's metrics and the lineage so far
(`run.checkpoint`), then metrics.csv and lineage.csv. The run folder is claimed and locked as `jaxrl train`'s is
(`run.folder`); its config.json holds everything a resume keeps, chunks included, so a resumed run compiles the
same chunk program and equals the uninterrupted one bit for bit. A chunk consumes the population it is given
(donated, as `jaxrl train`'s chunks consume the state: `run.compile`).

The members are sharded over `devices` (a 1-D mesh, as a sweep's rows; the population a multiple of the device
count); exploit copies states across devices inside the program, and the ranks, parents and perturbations are
the same on any device count. `device_independent=True` compiles without XLA's algebraic simplifier
(`run.compile.DEVICE_INDEPENDENT_OPTIONS`), which rewrites the program differently per device count. Measured on
a 4-member PPO CartPole population, 1 against 2 CPU devices: bit-identical (TrainStates, metrics, lineage) with it
at XLA CPU's `--xla_backend_optimization_level=1` on an AVX2 CPU, or on an AVX-512 one with XLA's code held to
AVX2 (`--xla_cpu_max_isa=AVX2`); with AVX-512 code, or at the default level 2, LLVM vectorises a device's share of
the members differently and the losses round 1 ulp apart from the first iteration (final parameters within
1.2e-7), so that over a long run a near tie in fitness can rank members differently.

Over several processes (`sweep.initialize_distributed` in each, every process calling `run` alike) the mesh holds
every process's devices, each process its own members; the ready step stays inside the program, global over the
population (XLA's collectives bring the parents' states), so that the run is the single-process run on as many
devices. What the host needs of the members (metrics, lineage, a checkpoint's state, the best member) is gathered
through the coordination service (`sweep.gather`). Process 0 alone writes the folder (claim and lock,
config.json, checkpoints, CSVs, plot, summary, TensorBoard, progress bar) and reads a resume's checkpoint, which it
hands to the others (`sweep.gather.from_lead`).
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from tqdm.auto import tqdm

from jaxrl.algos import base
from jaxrl.device_rules import check_local_count, check_population_split
from jaxrl.pbt import lineage as lineages
from jaxrl.pbt.board import PopulationBoard
from jaxrl.pbt.evaluate import MODES, best_member, evaluate_best, evaluation_text, play
from jaxrl.pbt.lineage import Lineage
from jaxrl.pbt.population import PBTConfig, validate
from jaxrl.pbt.program import fire_schedule, make_chunk, make_start, step_keys
from jaxrl.run import checkpoint, folder, hosts
from jaxrl.run.compile import (
    cache_events,
    cache_note,
    chunk_sizes,
    compiler_options,
    cut_metrics,
    eval_keys,
    side_by_side,
)
from jaxrl.run.loop import Interrupted
from jaxrl.run.signals import DeferredStop, TermAsInterrupt, signum_of
from jaxrl.sweep import gather
from jaxrl.sweep.devices import AXIS

LINEAGE = "lineage."  # the prefix of the lineage's arrays among a checkpoint's metrics


@dataclasses.dataclass
class PopulationResult:
    """A finished (or resumed and finished) PBT run: the final `states` (leaves [P, ...]) and `configs` (every
    hyperparameter [P]), `metrics` {name: [P, iterations]}, the `lineage`, compile and run seconds, its folder
    how many iterations this call trained and the best member's `evaluation` (`pbt.evaluate.evaluate_best`;
    None without one)."""

    states: Any
    configs: Any
    metrics: dict[str, np.ndarray]
    lineage: Lineage
    compile_s: float
    run_s: float
    out: Path | None
    iterations_run: int
    evaluation: dict | None = None


def chunk_plan(config, pbt: PBTConfig, num_chunks: int) -> list[tuple[int, int, int]]:
    """(first block, blocks, tail iterations) of each chunk: the ready blocks split by `chunk_sizes`, the
    iterations past the last whole block at the end of the last chunk."""
    blocks, remainder = divmod(config.num_iterations, pbt.ready)
    plan, first = [], 0
    for size in chunk_sizes(blocks, num_chunks):
        plan.append((first, size, 0))
        first += size
    plan[-1] = (*plan[-1][:2], remainder)
    return plan


def population_mesh(pbt: PBTConfig, devices=None) -> Mesh:
    """The 1-D mesh the members are sharded over: `devices` (a count of `jax.local_devices()`, or a list; None:
    as many of them as split the population evenly); over several processes every process's devices
    (`process_devices`). ValueError (one line) when the population does not split evenly over the devices
    given."""
    local = jax.local_devices()
    if jax.process_count() > 1:
        chosen = process_devices(devices)
    elif devices is None:
        chosen = local[: max(d for d in range(1, len(local) + 1) if pbt.population % d == 0)]
    elif isinstance(devices, int):
        check_local_count(devices, len(local), "this process")
        chosen = local[:devices]
    else:
        chosen = list(devices)
    check_population_split(pbt.population, len(chosen), jax.process_count())
    return Mesh(np.array(chosen), (AXIS,))


def process_devices(devices=None) -> list:
    """The devices of a population over several processes: every process's (`jax.devices()`), so that each
    process holds members; `devices` None, their count or that list. ValueError (one line) for another count."""
    every = jax.devices()
    if devices is None or devices == len(every) or (not isinstance(devices, int) and list(devices) == every):
        return every
    raise ValueError(
        f"--devices {devices}: a population over {jax.process_count()} processes is sharded over every process's "
        f"devices ({len(every)}); leave --devices out."
    )


def place(tree, sharding: NamedSharding):
    """`tree` (host arrays or arrays on this process's devices, the same in every process) laid out by
    `sharding`; typed PRNG keys travel as their key data (`jax.device_put` refuses them for a sharding that
    spans several processes)."""
    placed = jax.device_put(checkpoint.unwrap_keys(tree), sharding)
    return checkpoint.rewrap_keys(placed, tree)


def addressable(tree):
    """`tree` itself when this process holds every leaf whole (one process); else its leaves as NumPy arrays
    gathered from every process (`sweep.gather.to_host`; every process must call it)."""
    if all(x.is_fully_addressable for x in jax.tree.leaves(tree) if isinstance(x, jax.Array)):
        return tree
    return gather.to_host(tree)


def _hyper(configs) -> dict[str, Any]:
    return {f.name: getattr(configs, f.name) for f in dataclasses.fields(configs) if not base.is_static(f)}


def checkpoint_like(config, pbt: PBTConfig, seed: int) -> dict:
    """The shapes and dtypes of a population's checkpoint, {"states": TrainState leaves [P, ...], "hyper":
    {hyperparameter: [P]}} (`jax.eval_shape`: nothing is computed)."""
    states, configs = jax.eval_shape(make_start(config, pbt), jax.random.key(seed))
    return {"states": states, "hyper": _hyper(configs)}


def _to_checkpoint(states, configs) -> dict:
    """The population as a checkpoint holds it: host arrays, keys as key data (gathered from every process)."""
    return jax.device_get(addressable(checkpoint.unwrap_keys({"states": states, "hyper": _hyper(configs)})))


def _lineage_metrics(parts: list[Lineage]) -> dict[str, np.ndarray]:
    """The lineage of every ready step so far, flattened into a checkpoint's metrics."""
    whole = jax.tree.map(lambda *xs: np.concatenate(xs), *parts)
    flat = {"iteration": whole.iteration, "fitness": whole.fitness, "rank": whole.rank}
    flat |= {"exploited": whole.exploited, "parent": whole.parent}
    flat |= {} if whole.eval_return is None else {"eval_return": whole.eval_return}
    flat |= {f"hyperparameters.{n}": v for n, v in whole.hyperparameters.items()}
    flat |= {f"next_hyperparameters.{n}": v for n, v in whole.next_hyperparameters.items()}
    return {LINEAGE + k: np.asarray(v) for k, v in flat.items()}


def _lineage_from(metrics: dict[str, np.ndarray], names: list[str]) -> Lineage:
    get = lambda k: metrics[LINEAGE + k]  # noqa: E731
    hyper = {n: get(f"hyperparameters.{n}") for n in names}
    after = {n: get(f"next_hyperparameters.{n}") for n in names}
    evaluated = get("eval_return") if LINEAGE + "eval_return" in metrics else None
    return Lineage(
        get("iteration"), get("fitness"), get("rank"), get("exploited"), get("parent"), hyper, after, evaluated
    )


def progress_text(part: Lineage | None, fitness: str = "return") -> str:
    """The progress bar's postfix: the best and median fitness of the last ready step (`fitness` "eval": the
    evaluation return), and with evaluation and the "return" fitness the best evaluation return then."""
    if part is None or not np.asarray(part.fitness).size:
        return "no ready step yet"
    values = np.asarray(part.fitness)[-1]
    finite = values[np.isfinite(values)]
    head = "eval " if fitness == "eval" else ""
    if not finite.size:
        return f"{head or 'fitness: '}no episode ended"
    text = f"{head}best {finite.max():.1f}, median {np.median(finite):.1f}"
    if fitness != "eval" and part.eval_return is not None:
        evaluated = np.asarray(part.eval_return)[-1]
        evaluated = evaluated[np.isfinite(evaluated)]
        text += f"; eval best {evaluated.max():.1f}" if evaluated.size else "; eval: no episode ended"
    return text


def resume_settings(out: str | Path) -> tuple[str, Any, PBTConfig, int, int]:
    """(algorithm name, Config, PBTConfig, seed, chunks) of the population folder `out`, from its config.json."""
    saved = folder.read_run_folder(Path(out))
    if "pbt" not in saved:
        raise ValueError(f"--resume {out}: it is a {saved['algo']} run, not a population; use jaxrl train --resume.")
    _, config, _, seed = folder.load_run_config(Path(out), saved)
    settings = dict(saved["pbt"])
    settings["perturb_factors"] = tuple(settings["perturb_factors"])
    return saved["algo"], config, PBTConfig(**settings), seed, int(saved.get("chunks", 1))


def run(
    config,
    pbt: PBTConfig,
    out: str | Path | None = None,
    *,
    seed: int = 0,
    num_chunks: int = 10,
    checkpoint_every: int = 1,
    resume: bool = False,
    progress: bool = True,
    devices=None,
    device_independent: bool = False,
    name: str | None = None,
    log=None,
    tensorboard: bool = False,
    eval_episodes: int = 16,
) -> PopulationResult:
    """Trains the population of `make_pbt(config, pbt)(jax.random.key(seed))` in `num_chunks` compiled chunks;
    with an `out` folder, checkpoints every `checkpoint_every` chunks, at the end and on Ctrl-C / SIGTERM (raised
    again as `run.loop.Interrupted` once saved), and writes config.json, metrics.csv, lineage.csv, lineage.png
    and summary.json there. `resume=True` continues the run in `out` from its latest checkpoint (its settings
    must be the run's: `resume_settings` reads them). `devices`: what the members are sharded over
    (`population_mesh`); `log(text)` hears what is happening. `tensorboard`: TensorBoard event files in
    `out/tensorboard` (`pbt.board`). After the last iteration the best member plays `eval_episodes` fresh episodes
    with its deterministic and its stochastic policy (`pbt.evaluate.evaluate_best`; 0: no evaluation), in
    summary.json and the result; a resumed run that had nothing left to train keeps its summary.json.

    Over several processes (after `sweep.initialize_distributed` in each), every process calls `run` with the
    same arguments: the members are sharded over every process's devices, process 0 alone writes `out` and
    hears `log`, and every process gets the result (states as global arrays, the rest on the host)."""
    validate(config, pbt)
    name = name or base.name_of(base.algorithm_of(config))
    for value, what, least in (
        (num_chunks, "num_chunks", 1),
        (checkpoint_every, "checkpoint_every", 1),
        (seed, "seed", 0),
        (eval_episodes, "eval_episodes", 0),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"{what}={value!r}: need an integer >= {least}.")
    if resume and out is None:
        raise ValueError("resume=True needs the folder to resume from.")
    mesh = population_mesh(pbt, devices)
    plan = chunk_plan(config, pbt, num_chunks)
    info = lineages.folder_info(name, config, pbt, seed, num_chunks, device_independent)
    out = None if out is None else Path(out)
    log = log if log is not None and hosts.lead() else (lambda text: None)
    with TermAsInterrupt():
        claim = folder.Claim()  # nothing held yet: a stop while claiming finds the claim undone (`folder.claim`)
        try:
            try:
                claim = folder.claim(out, resume, info)
                resume = resume and not claim.restarted
                if claim.written:
                    (out / "config.json").write_text(json.dumps(info, indent=2))
                    claim.written += [out / n for n in ("lineage.csv", "lineage.png", "summary.json")]
                session = _Session(config, pbt, mesh, plan, seed, out, info, device_independent)
                log(f"{'restoring and compiling' if resume else 'compiling'}: {pbt.population} members over "
                    f"{mesh.size} device(s), {len(plan)} chunk(s)")  # fmt: skip
                cached = cache_events()
                session.start(resume)
                TermAsInterrupt.raise_if_swallowed()
                log(f"compiled in {session.compile_s:.1f} s{cache_note(cached, cache_events())}")
            except KeyboardInterrupt as error:
                claim.discard()
                raise Interrupted(0, out, compiling=True, signum=signum_of(error)) from error
            except BaseException:
                claim.discard()
                raise
            board = None
            if out is not None and tensorboard and hosts.lead():
                first_step = (session.done + 1) * config.env_steps_per_iteration if resume else None
                board = PopulationBoard(out / "tensorboard", pbt.population, config.env_steps_per_iteration, first_step)
            try:
                return session.train(claim, resume, progress, checkpoint_every, name, board, eval_episodes)
            finally:
                if board is not None:
                    board.close()
        finally:
            claim.release()


class _Session:
    """The population between chunks: its state, every chunk's metrics and lineage, the compiled chunks."""

    def __init__(self, config, pbt, mesh, plan, seed, out, info, device_independent):
        self.config, self.pbt, self.mesh, self.plan, self.out, self.info = config, pbt, mesh, plan, out, info
        self.members = NamedSharding(mesh, P(AXIS))
        self.replicated = NamedSharding(mesh, P())
        self.seed, self.key = seed, jax.random.key(seed)
        self.keys, self.fire = step_keys(config, pbt, self.key), fire_schedule(config, pbt)
        self.eval_keys = eval_keys(seed, pbt.population) if pbt.eval_every else None  # = program.eval_stream's
        self.options = compiler_options(device_independent)
        self.metrics, self.parts, self.done, self.saved, self.compiled = [], [], 0, None, None

    def _place(self, tree, sharding):
        return place(tree, sharding)

    def start(self, resume: bool) -> None:
        """The population to train (drawn, or a resume's checkpoint) and the compiled chunk: the programs that draw
        the population and run the chunks compile side by side (XLA compiles outside the GIL)."""
        begin = time.perf_counter()
        start = jax.jit(make_start(self.config, self.pbt), out_shardings=self.members)
        if resume:
            like = checkpoint_like(self.config, self.pbt, self.seed)
            self.done, state, metrics = restore_on_lead(self.out / "checkpoints", like, self.info)
            names = list(self.pbt.explore)
            self.metrics = [{k: v for k, v in metrics.items() if not k.startswith(LINEAGE)}]
            self.parts = [_lineage_from(metrics, names)] if LINEAGE + "iteration" in metrics else []
            self.states = self._place(state["states"], self.members)
            self.configs = self._place(self.config.replace(**state["hyper"]), self.members)
            self.saved = self.done
            population = (self.states, self.configs)
        else:
            drawn = jax.eval_shape(start, self.key)
            population = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=self.members), drawn)
        ends = np.cumsum([n * self.pbt.ready + tail for _, n, tail in self.plan])
        if self.done and self.done not in ends:
            raise checkpoint.CheckpointError(f"{self.out}: its checkpoint after iteration {self.done} ends no chunk.")
        self.todo = [chunk for chunk, end in zip(self.plan, ends, strict=True) if end > self.done]
        self.first_chunk = len(self.plan) - len(self.todo)
        # one program for every chunk of the plan (the whole plan's longest, so that a resume compiles the same):
        # a chunk's length is an argument
        self.capacity = max(n * self.pbt.ready + tail for _, n, tail in self.plan)
        compile_start = None if resume else lambda: start.lower(self.key).compile(self.options)
        compile_chunk = (lambda: self._compile_chunk(population)) if self.todo else None
        compiled_start, self.compiled = side_by_side(compile_start, compile_chunk)
        if compiled_start is not None:
            self.states, self.configs = compiled_start(self.key)
        self.compile_s = time.perf_counter() - begin

    def _compile_chunk(self, population):
        """The one compiled chunk, for the population `(states, configs)` (arrays or their shapes and shardings)."""
        program = jax.jit(
            make_chunk(self.config, self.pbt, self.capacity),
            out_shardings=(self.members, self.members, self.members, self.replicated),
            donate_argnums=(0, 1),  # the chunk consumes the population: its buffers become the new one's
        )
        return program.lower(*self._args(*self.todo[0], population=population)).compile(self.options)

    def _args(self, first: int, n: int, tail: int, population=None):
        """The compiled chunk's arguments for `n` blocks and `tail` iterations from block `first` (of the session's
        population, or of `population`): the blocks' exploit/explore keys and fire flags, padded to the program's
        blocks (the padding never fires)."""
        states, configs = (self.states, self.configs) if population is None else population
        blocks = self.capacity // self.pbt.ready
        keys = self.keys[first : first + n]
        pad = blocks - keys.shape[0]
        keys = jax.numpy.concatenate([keys, *[self.keys[:1]] * pad]) if pad else keys
        fire = np.concatenate([np.asarray(self.fire[first : first + n]), np.zeros(pad, bool)])
        keys, fire = self._place(keys, self.replicated), self._place(fire, self.replicated)
        first, length = (self._place(np.int32(x), self.replicated) for x in (first, n * self.pbt.ready + tail))
        if self.eval_keys is None:
            return states, configs, keys, fire, first, length
        return states, configs, keys, fire, first, length, self._place(self.eval_keys, self.members)

    def lineage(self) -> Lineage:
        return jax.tree.map(lambda *xs: np.concatenate(xs), *self.parts)

    def all_metrics(self) -> dict[str, np.ndarray]:
        return {k: np.concatenate([m[k] for m in self.metrics], axis=1) for k in self.metrics[0]}

    def save(self) -> None:
        """Checkpoints the population with every iteration's metrics and lineage, then writes metrics.csv and
        lineage.csv (process 0 writes; every process gathers its members for it)."""
        if self.out is None or self.saved == self.done or not self.metrics:
            return
        metrics = self.all_metrics()
        payload = metrics | (_lineage_metrics(self.parts) if self.parts else {})
        population = _to_checkpoint(self.states, self.configs)
        directory = self.out / "checkpoints"
        hosts.on_lead(lambda: checkpoint.save(directory, self.done, population, payload, self.info),
                      f"write a checkpoint to {directory}")  # fmt: skip
        self.saved = self.done

        def write_csv():
            lineages.write_metrics_csv(metrics, self.out / "metrics.csv")
            if self.parts:
                lineages.write_lineage_csv(self.lineage(), self.out / "lineage.csv")

        hosts.on_lead(write_csv, f"write {self.out / 'metrics.csv'}")

    def evaluate(self, lineage: Lineage, episodes: int, board) -> dict | None:
        """The best member after the last iteration on `episodes` fresh episodes (None with 0)."""
        if not episodes:
            return None
        states, configs = addressable((self.states, self.configs))
        evaluation = evaluate_best(self.config, states, configs, lineage, self.seed, self.done, episodes)
        if board is not None:
            board.write_evaluation(evaluation, self.done * self.config.env_steps_per_iteration)
        return evaluation

    def log_to(self, board, metrics, first: int, part) -> None:
        if board is not None:
            board.write_metrics(metrics, first)
            if part is not None:
                board.write_lineage(part, self.pbt.ready)

    def train(self, claim, resume, progress, checkpoint_every, name, board, eval_episodes) -> PopulationResult:
        config, size = self.config, self.pbt.population
        if resume and self.metrics:  # the restored iterations: only those an earlier run did not write
            self.log_to(board, self.metrics[0], 0, self.lineage() if self.parts else None)
        steps = config.env_steps_per_iteration
        done_before = self.done
        bar = tqdm(
            total=config.num_iterations * steps * size,
            initial=self.done * steps * size,
            unit="step",
            unit_scale=True,
            desc=f"{name} pbt {config.env} x{size}",
            disable=not progress or not hosts.lead(),
        )
        bar.set_postfix_str(progress_text(self.parts[-1] if self.parts else None, self.pbt.fitness))
        stop, begin = DeferredStop(), time.perf_counter()
        try:
            stop.install()
            for index, (first, n, tail) in enumerate(self.todo):
                with stop.taking_chunk():  # the chunk consumes the population: a stop waits until its result is held
                    states, configs, metrics, part = self.compiled(*self._args(first, n, tail))
                    metrics, part = jax.device_get(addressable((metrics, part)))
                    metrics, part = _cut(metrics, part, n, n * self.pbt.ready + tail)
                    self.metrics.append(metrics)
                    self.parts.append(part)
                    self.states, self.configs = states, configs
                self.log_to(board, self.metrics[-1], self.done, self.parts[-1])
                self.done += n * self.pbt.ready + tail
                bar.update((n * self.pbt.ready + tail) * steps * size)
                bar.set_postfix_str(progress_text(self.parts[-1], self.pbt.fitness))
                if (self.first_chunk + index + 1) % checkpoint_every == 0 or index == len(self.todo) - 1:
                    self.save()
                stop.raise_if_requested()
        except KeyboardInterrupt as error:
            self.save()
            if self.done == done_before and not resume:
                claim.discard()
                raise Interrupted(self.done, self.out, compiling=True, signum=signum_of(error)) from error
            raise Interrupted(self.done, self.out, signum=signum_of(error)) from error
        finally:
            stop.uninstall()
            bar.close()
        run_s = time.perf_counter() - begin
        lineage = self.lineage()
        summary = None if self.out is None else self.out / "summary.json"
        finished = summary is not None and self.done == done_before
        kept = hosts.any_process(hosts.lead() and finished and summary.is_file())
        if kept:  # finished before: its summary is kept (process 0's evaluation; the others have none)
            evaluation = json.loads(summary.read_text()).get("best_member_eval") if hosts.lead() else None
        else:
            evaluation = self.evaluate(lineage, eval_episodes, board)
            if summary is not None and hosts.lead():
                timing = {"compile_s": round(self.compile_s, 3), "run_s": round(run_s, 3)}
                timing |= {"best_member_eval": evaluation} if evaluation else {}
                summary.write_text(json.dumps(timing, indent=2))
                lineages.plot_lineage(lineage, self.out / "lineage.png", self.pbt.fitness)
        return PopulationResult(
            self.states, self.configs, self.all_metrics(), lineage, self.compile_s, run_s, self.out,
            self.done - done_before, evaluation,
        )  # fmt: skip


def _cut(metrics: dict[str, np.ndarray], part: Lineage, blocks: int, length: int):
    """A chunk's own metrics (its first `length` iterations) and lineage (its first `blocks` ready steps) of the
    compiled chunk's outputs, which hold as many as its longest chunk."""
    return cut_metrics(metrics, length), jax.tree.map(lambda x: x[:blocks], part)


def restore_on_lead(directory: Path, like, info: dict) -> tuple[int, Any, dict[str, np.ndarray]]:
    """(iteration, {"states", "hyper"} on the host, metrics) of the latest checkpoint in `directory`
    (`checkpoint.restore` into `like`): process 0 reads it and hands it to the others (`sweep.gather.from_lead`)."""
    read = lambda: checkpoint.restore(directory, like, info)  # noqa: E731
    done, state, metrics = hosts.on_lead(read, f"restore the checkpoint in {directory}") or (0, None, None)
    if jax.process_count() == 1:
        return done, state, metrics
    raw = jax.tree.structure(jax.eval_shape(checkpoint.unwrap_keys, like))
    sent = None
    if hosts.lead():
        leaves = jax.tree.leaves(checkpoint.unwrap_keys(state))
        sent = {"done": np.asarray(done)} | {f"state.{i}": np.asarray(x) for i, x in enumerate(leaves)}
        sent |= {f"metrics.{k}": v for k, v in metrics.items()}
    got = gather.from_lead(sent)
    leaves = [got[f"state.{i}"] for i in range(raw.num_leaves)]
    state = checkpoint.rewrap_keys(jax.tree.unflatten(raw, leaves), like)
    metrics = {k.removeprefix("metrics."): v for k, v in got.items() if k.startswith("metrics.")}
    return int(got["done"]), state, metrics


def run_to_folder(out: str | Path, algo: str, config, pbt: PBTConfig, seed: int = 0, log=print, **options) -> str:
    """`jaxrl pbt`: `run` into the folder `out` (keywords of `run` in `options`); returns the printed summary:
    the members ranked by their final fitness, the seconds and the files."""
    evaluated = f", {pbt.eval_episodes} evaluation episodes every {pbt.eval_every}" if pbt.eval_every else ""
    ranked = f"; fitness: {lineages.fitness_name(pbt.fitness)}"
    log(f"pbt {algo} on {config.env}: {pbt.population} members, exploit/explore every {pbt.ready} iterations"
        f"{evaluated}{ranked}")  # fmt: skip
    result = run(config, pbt, out, seed=seed, name=algo, log=log, **options)
    timing = {"compile_s": result.compile_s, "run_s": result.run_s}
    evaluated = [evaluation_text(result.evaluation)] if result.evaluation else []
    ranked = lineages.ranking(result.lineage, pbt.fitness)
    return "\n".join([*ranked, *evaluated, *lineages.files_text(Path(out), timing)])


def evaluate_folder(out: str | Path, episodes: int, seed: int) -> Iterator[str]:
    """`jaxrl eval` on a population's folder: restores its latest checkpoint (reading only, without the members'
    replay buffers and optimiser states) and plays `episodes` fresh episodes per member (keys from `seed`) with
    each member's deterministic and stochastic policy; yields a heading, then per mode the best member's mean
    return, the mean over members and each member's."""
    if episodes < 1:
        raise ValueError(f"--episodes {episodes}: need at least one episode.")
    out = Path(out)
    algo, config, settings, run_seed, _ = resume_settings(out)
    like = checkpoint_like(config, settings, run_seed)
    saved = folder.read_run_folder(out)
    iteration, state, metrics = checkpoint.restore(out / "checkpoints", like, saved, leave_out=checkpoint.LEARNING_ONLY)
    configs = config.replace(**state["hyper"])
    ranked = LINEAGE + "rank" in metrics and np.asarray(metrics[LINEAGE + "rank"]).size
    member = best_member(metrics[LINEAGE + "rank"]) if ranked else None
    best = "no ready step yet" if member is None else f"best member {member} (rank 0 at the last ready step)"
    yield (
        f"{out}: {algo} population of {settings.population} on {config.env}, checkpoint after iteration "
        f"{iteration}, {episodes} episodes per member; {best}"
    )
    scores = play(config, state["states"], configs, jax.random.key(seed), episodes)
    for mode in MODES:
        returns = scores[mode][0]
        head = "" if member is None else f"best {returns[member]:9.2f}   "
        mean = np.nanmean(returns) if np.isfinite(returns).any() else np.nan
        yield f"{mode:14s} {head}mean {mean:9.2f}   per member " + ", ".join(f"{r:.1f}" for r in returns)
