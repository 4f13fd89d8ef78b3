"""What every benchmark measures the same way: compile and run seconds, env steps and steps/s, the machine, the
final return, and compact JSON results.

Timing, one definition for every script:
  * compile_s: the wall seconds of `jax.jit(fn).lower(*args).compile()` (tracing, lowering and XLA compilation;
    JAX's persistent compilation cache is off unless the caller turns it on, so these are cold compiles);
  * run_s: the fastest of `repeats` calls of that compiled executable, each waited for with
    `jax.block_until_ready` (one call by default; more where the machine is shared and noisy);
  * steps_per_s: env steps executed by those calls (all seeds of a vmapped program) / run_s.

This module imports only the standard library, numpy and jax at its top, so the peer workers
(`benchmarks/peer_workers`) can use it inside a peer library's own virtual environment, where jaxrl cannot be
imported; jaxrl is imported only inside `mean_final_return` and `binned_curve`.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np


class Timing(NamedTuple):
    """`measure`'s result; unpacks as `compile_s, run_s, out`."""

    compile_s: float
    run_s: float
    out: Any


def measure(fn, *args, repeats: int = 1, on_compiled=None, compiler_options: dict | None = None) -> Timing:
    """Compiles `jax.jit(fn)` for `args` (with XLA's `compiler_options` when given) and calls it `repeats` times:
    (compile_s, run_s, output), as defined in this module's docstring (compile_s: `lower(*args).compile()` seconds;
    run_s: the fastest call). `on_compiled(compiled)`, when given, sees the compiled executable before the first
    call."""
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile(compiler_options)
    compile_s = time.perf_counter() - start
    if on_compiled is not None:
        on_compiled(compiled)
    run_s, out = float("inf"), None
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        out = jax.block_until_ready(compiled(*args))
        run_s = min(run_s, time.perf_counter() - start)
    return Timing(compile_s, run_s, out)


def program_memory(compiled) -> dict | None:
    """The device memory a compiled program needs (`compiled.memory_analysis()`), in bytes: its arguments,
    outputs, temporaries and generated code; None where the backend does not say."""
    try:
        analysis = compiled.memory_analysis()
    except Exception:  # not every backend implements it
        return None
    if analysis is None:
        return None
    names = ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes", "generated_code_size_in_bytes")
    return {name.removesuffix("_size_in_bytes"): int(getattr(analysis, name, 0)) for name in names}


# XLA's own compile timers on the CPU: a process started with these in its environment logs them to stderr
XLA_TIMERS = {"TF_CPP_MIN_LOG_LEVEL": "0", "TF_CPP_VMODULE": "cpu_compiler=2,hlo_pass_pipeline=1"}


def _log_seconds(line: str) -> float:
    """Seconds since midnight of an absl log line (`I1203 19:15:01.599084  3436 file.cc:12] ...`)."""
    hours, minutes, seconds = line.split()[1].split(":")
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)


def xla_phases(log: str) -> dict | None:
    """XLA's CPU compile phases of the longest-compiling program in `log` (the stderr of a process run with
    `XLA_TIMERS`), in seconds from its log lines' timestamps:
      * hlo_passes_s: the HLO optimisation passes (its first "Running HLO pass pipeline" line to "Compiling:");
      * ir_emission_s: scheduling, buffer assignment and emitting each kernel's LLVM IR (to "Compile LLVM module");
      * llvm_s: LLVM optimising and generating machine code for the kernels (to "Compilation finished").
    None where the log holds no complete compilation (timers off, or another backend)."""
    lines = [line for line in log.splitlines() if line[:1] in "IWE" and "] " in line]
    phases, previous_end = {}, 0
    for index, line in enumerate(lines):
        if "Compilation finished" in line:
            previous_end = index
        if "] Compiling: " not in line:
            continue
        module = line.split("] Compiling: ", 1)[1].strip()
        since = lines[previous_end:index]
        first = next((x for x in since if f"HLO pass pipeline on module {module}:" in x), line)
        llvm = next((x for x in lines[index:] if "Compile LLVM module" in x), None)
        done = next((x for x in lines[index:] if "Compilation finished" in x), None)
        if llvm is None or done is None:
            continue
        start, emitted, end = (_log_seconds(x) for x in (line, llvm, done))
        phase = {
            "module": module,
            "hlo_passes_s": start - _log_seconds(first),
            "ir_emission_s": emitted - start,
            "llvm_s": end - emitted,
        }
        phase["total_s"] = phase["hlo_passes_s"] + phase["ir_emission_s"] + phase["llvm_s"]
        if phase["total_s"] > phases.get("total_s", -1.0):
            phases = phase
    return phases or None


def env_steps(config, seeds: int = 1) -> int:
    """Env steps a whole training run of `config` executes: seeds x num_iterations x env_steps_per_iteration."""
    return seeds * config.num_iterations * config.env_steps_per_iteration


def mean_final_return(episode_return) -> float:
    """`jaxrl.run.report.final_return` (the last 10% of iterations, NaN-aware) of each run in `episode_return`
    [..., iterations], averaged over the runs (seeds); NaN where no run completed an episode in its window."""
    from jaxrl.run.report import final_return

    final = np.asarray(final_return(episode_return), np.float64)
    finite = final[np.isfinite(final)]
    return float(finite.mean()) if finite.size else float("nan")


CURVE_POINTS = 200  # learning curves are stored as at most this many groups of iterations


def binned_curve(episode_return, env_steps_per_iteration: int, points: int = CURVE_POINTS):
    """A learning curve for the results JSON: `episode_return` [seeds, iterations] averaged (NaN-aware) within at
    most `points` consecutive groups of iterations (`jaxrl.plot.bin_iterations`), rounded to 0.01.

    Returns (env steps at each group's last iteration [groups], returns [seeds, groups]) as lists; NaN where a
    seed completed no episode in a group."""
    from jaxrl.plot import bin_iterations

    returns = np.asarray(episode_return, np.float64)
    iteration_steps = env_steps_per_iteration * np.arange(1, returns.shape[-1] + 1)
    steps, binned = bin_iterations(returns, iteration_steps, bins=points)
    return [int(s) for s in steps], binned.round(2).tolist()


def machine() -> dict:
    """The machine a benchmark ran on: processor, CPU count, platform, python, jax, devices and load average."""
    processor = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
        processor = model or processor
    except (OSError, StopIteration):
        pass
    return {
        "processor": processor,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "devices": [str(d) for d in jax.devices()],
        # other work on the machine slows every row; the ratios within one run suffer less
        "load_average_1_5_15min": list(os.getloadavg()),
    }


def machine_words(m: dict) -> str:
    """`machine()` as a results file's header says it: processor, CPUs, jax and the load average at the end."""
    load = ", ".join(f"{x:.1f}" for x in m["load_average_1_5_15min"])
    return f"{m['processor']}, {m['cpu_count']} CPUs, jax {m['jax']}, load average at the end {load}"


def merge_rows(path: str | Path, rows: list[dict], key) -> list[dict]:
    """The rows of the results JSON at `path` (if any) with `rows` replacing those of the same `key(row)`, in
    first-seen order; rows of new keys last."""
    path = Path(path)
    old = json.loads(path.read_text())["rows"] if path.exists() else []
    new = {key(r): r for r in rows}
    return [new.pop(key(r), r) for r in old] + list(new.values())


def _jsonable(value):
    if isinstance(value, (np.ndarray, np.generic)) or hasattr(value, "__array__"):
        return np.asarray(value).tolist()
    return str(value)


def write_json(path: str | Path, record) -> Path:
    """Writes `record` as compact JSON (no indentation; numpy/jax arrays as lists, anything else unknown as its
    str) and returns the path. Results meant for reading are the Markdown tables and PNG plots."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, separators=(",", ":"), default=_jsonable) + "\n")
    return path


def write_record(out: str | Path | None, record: dict, markdown: str) -> None:
    """`out`.json (`write_json`) and `out`.md (`markdown`), where `out` is given."""
    if out:
        write_json(f"{out}.json", record)
        Path(f"{out}.md").write_text(markdown)


def span(values, digits: int = 2) -> str:
    """min-max of `values` with `digits` decimals."""
    return f"{min(values):.{digits}f}-{max(values):.{digits}f}"


def paired_cells(a: list[dict], b: list[dict], compile_ratio: list[float], speed_ratio: list[float]) -> list[str]:
    """A table's cells for two programs run alternately (`a` and `b`: runs with compile_s and steps_per_s): the
    compile seconds of each, the median compile ratio, the env steps/s of each and the median speed ratio."""
    return [
        span([r["compile_s"] for r in a]),
        span([r["compile_s"] for r in b]),
        f"{statistics.median(compile_ratio):.2f}x",
        f"{span([r['steps_per_s'] / 1e3 for r in a], 1)}k",
        f"{span([r['steps_per_s'] / 1e3 for r in b], 1)}k",
        f"{statistics.median(speed_ratio):.2f}x",
    ]
