"""The chunked runner: one compiled program per chunk of iterations, host work (progress, CSV) in between.

`run(algo, config, seeds=S)` trains S seeds with `jax.vmap`, executes `algo.update` in chunks of
`lax.scan`, and gives exactly the numbers of `jax.vmap(algo.make_train(config))(keys)`: the chunks are the
same pure iteration applied to the same state, only split across calls. Each finished chunk's metrics are
appended to `metrics.csv` at once, so an interrupted run keeps every completed iteration.

With `eval_every=K`, every K-th chunk (and the last) ends with a deterministic evaluation of the trained
policy (`algo.evaluation_policy`) on `eval_episodes` fresh episodes, inside the same compiled program. Its keys
come from their own stream, `eval_keys(seed, seeds)` folded with the iteration count, never from the training
keys, so evaluating changes no training number. The results are the metrics `eval_return` and `eval_length`
(means over the episodes that ended within the env's time limit) and `eval_finished` (the fraction that did):
NaN except at the last iteration of an evaluated chunk.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from jaxrl import checkpoint, logging
from jaxrl.configs import to_dict
from jaxrl.evaluate import evaluate

EVAL_STREAM = 0x6576616C  # "eval": folded into the base key for the evaluation key stream
EVAL_METRICS = ("eval_return", "eval_length", "eval_finished")


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


def eval_keys(seed: int, seeds: int) -> jax.Array:
    """[seeds] keys of the evaluation stream: `split(fold_in(key(seed), EVAL_STREAM), seeds)`, disjoint from
    the training keys `split(key(seed), seeds)`. Evaluation after iteration i uses `fold_in(key, i)`."""
    return jax.random.split(jax.random.fold_in(jax.random.key(seed), EVAL_STREAM), seeds)


def make_chunk(algo: ModuleType, config, length: int, eval_episodes: int = 0):
    """The per-seed chunk program: `length` iterations of `algo.update` in a `lax.scan`.

    Without evaluation: `chunk(state) -> (state, metrics)`. With `eval_episodes > 0`:
    `chunk(state, eval_key, iteration) -> (state, metrics, {eval_return, eval_length, eval_finished})`, the chunk
    followed by a deterministic evaluation of the new state on `eval_episodes` episodes keyed by
    `fold_in(eval_key, iteration)`; `eval_return` is NaN when no episode ended within the env's time limit.
    """

    def chunk(state):
        return jax.lax.scan(lambda s, _: algo.update(config, s), state, None, length=length)

    if not eval_episodes:
        return chunk

    def chunk_and_evaluate(state, eval_key, iteration):
        state, metrics = chunk(state)
        act, normalize = algo.evaluation_policy(config, state, deterministic=True)
        out = evaluate(config.env, act, jax.random.fold_in(eval_key, iteration), eval_episodes, normalize=normalize)
        finished = out["finished"] > 0
        scores = {
            "eval_return": jnp.where(finished, out["mean_return"], jnp.nan),
            "eval_length": out["mean_length"],
            "eval_finished": out["finished"] / eval_episodes,
        }
        return state, metrics, scores

    return chunk_and_evaluate


def make_run_dir(root: str | Path, algo_name: str, config) -> Path:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = Path(root) / f"{algo_name}-{config.env}-{stamp}"
    suffix = 1
    while path.exists():
        suffix += 1
        path = Path(root) / f"{algo_name}-{config.env}-{stamp}-{suffix}"
    path.mkdir(parents=True)
    return path


class Divergence(RuntimeError):
    """Training produced non-finite losses or parameters; the last good checkpoint is kept."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run: the state after the last completed chunk was checkpointed and the CSV flushed."""

    def __init__(self, iteration: int, run_dir: Path | None):
        super().__init__(f"interrupted after iteration {iteration}")
        self.iteration, self.run_dir = iteration, run_dir


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


def run(
    algo: ModuleType,
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
) -> RunResult:
    """Trains `seeds` seeds of `algo` (a module with Config/validate/init/update) under one `jax.vmap`.

    With a `run_dir`, the training state is checkpointed every `checkpoint_every` chunks, at the end and on
    Ctrl-C (raised again as `Interrupted` once saved); `resume=True` continues from the run folder's latest
    checkpoint and gives the same results as an uninterrupted run. Non-finite losses or parameters stop the
    run at the chunk boundary with `Divergence`, before the bad state is saved. Metrics go to
    `run_dir/metrics.csv` and, with `tensorboard`, to TensorBoard event files in `run_dir/tensorboard`;
    `sinks`: more sinks (e.g. `logging.WandbSink`), closed at the end.

    `eval_every=K > 0` evaluates the policy deterministically on `eval_episodes` fresh episodes per seed after
    every K-th chunk and after the last one, inside the compiled chunk (see the module docstring).
    """
    algo.validate(config)
    if seeds < 1:
        raise ValueError(f"seeds={seeds}: need at least one seed.")
    if not isinstance(eval_every, int) or eval_every < 0:
        raise ValueError(f"eval_every={eval_every!r}: a number of chunks, >= 0 (0: no evaluation).")
    if eval_every and (not isinstance(eval_episodes, int) or eval_episodes < 1):
        raise ValueError(f"eval_episodes={eval_episodes!r}: need at least one episode per evaluation.")
    if eval_every and not hasattr(algo, "evaluation_policy"):
        raise ValueError(f"eval_every: {getattr(algo, '__name__', algo)} has no evaluation_policy to evaluate.")
    if resume and run_dir is None:
        raise ValueError("resume=True needs the run_dir to resume from.")
    keys = jax.random.split(jax.random.key(seed), seeds)
    steps_per_iteration = config.num_envs * config.num_steps
    algo_name = getattr(algo, "__name__", "algo").rsplit(".", 1)[-1]
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
    init = jax.jit(jax.vmap(lambda k: algo.init(config, k)))
    abstract_state = jax.eval_shape(init, keys)
    done, history = 0, []
    if resume:
        done, state, restored = checkpoint.restore(checkpoints, abstract_state, json.loads(json.dumps(info)))
        history = [restored]
    sizes = chunk_sizes(config.num_iterations - done, num_chunks) if done < config.num_iterations else []
    # which chunks end with an evaluation: every eval_every-th and the last
    evaluated = [bool(eval_every) and ((i + 1) % eval_every == 0 or i == len(sizes) - 1) for i in range(len(sizes))]
    keys_eval = eval_keys(seed, seeds)
    iteration_arg = jax.ShapeDtypeStruct((), np.int32)

    def program(n, with_eval):
        if with_eval:
            return jax.jit(jax.vmap(make_chunk(algo, config, n, eval_episodes), in_axes=(0, 0, None)))
        return jax.jit(jax.vmap(make_chunk(algo, config, n)))

    def lower(n, with_eval):
        args = (abstract_state, keys_eval, iteration_arg) if with_eval else (abstract_state,)
        return program(n, with_eval).lower(*args).compile()

    # XLA compiles outside the GIL: the init and chunk programs compile side by side on separate cores
    programs = set(zip(sizes, evaluated, strict=True))
    with ThreadPoolExecutor(max_workers=1 + len(programs)) as pool:
        init_future = None if resume else pool.submit(lambda: init.lower(keys).compile())
        chunk_futures = {p: pool.submit(lower, *p) for p in programs}
        compiled = {p: future.result() for p, future in chunk_futures.items()}
        if init_future is not None:
            state = init_future.result()(keys)
    compile_s = time.perf_counter() - start

    wall = [float("nan")] * done  # wall time of iterations run before a resume is unknown
    extra_sinks, sinks = list(sinks or []), []
    if run_dir is not None:
        sinks.append(logging.CsvSink(run_dir / "metrics.csv"))
        if tensorboard:
            sinks.append(logging.TensorBoardSink(run_dir / "tensorboard"))
    sinks.extend(extra_sinks)
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
        for index, size in enumerate(sizes):
            chunk_start = time.perf_counter()
            if evaluated[index]:
                new_state, metrics, scores = compiled[size, True](state, keys_eval, np.int32(done + size))
            else:
                (new_state, metrics), scores = compiled[size, False](state), None
            metrics = jax.tree.map(np.asarray, metrics)  # blocks until the chunk is finished
            if eval_every:  # the same columns in every chunk: NaN where no evaluation ran
                for name in EVAL_METRICS:
                    column = np.full((seeds, size), np.nan, np.float32)
                    if scores is not None:
                        column[:, -1] = np.asarray(scores[name])
                    metrics[name] = column
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
            recent = metrics["episode_return"][:, -1]
            postfix = {"ret": "nan" if np.isnan(recent).all() else f"{np.nanmean(recent):.1f}"}
            if scores is not None:
                latest = metrics["eval_return"][:, -1]
                postfix["eval"] = "nan" if np.isnan(latest).all() else f"{np.nanmean(latest):.1f}"
            bar.set_postfix(postfix)
            if (index + 1) % checkpoint_every == 0 or index == len(sizes) - 1:
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
    if run_dir is not None:
        (run_dir / "summary.json").write_text(json.dumps(summary(result), indent=2))
    return result


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
    if "eval_return" in result.metrics:
        evals = result.metrics["eval_return"]
        ran = np.flatnonzero(np.isfinite(result.metrics["eval_finished"]).any(0))
        if ran.size:
            last = evals[:, ran[-1]]
            out["eval_iteration"] = int(ran[-1]) + 1
            out["eval_return_per_seed"] = [None if np.isnan(x) else round(float(x), 2) for x in last]
            out["eval_return_mean"] = float(np.nanmean(last)) if np.isfinite(last).any() else None
            out["eval_return_std"] = float(np.nanstd(last)) if np.isfinite(last).any() else None
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
