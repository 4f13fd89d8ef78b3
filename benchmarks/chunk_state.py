"""A chunk that consumes its state (donated, as the runner's chunk programs are) against the same chunk copying
it, with DQN's replay buffer at several sizes: seconds per chunk and the memory a chunk needs beyond the state.

    python -m benchmarks.chunk_state [--env Breakout-MinAtar] [--buffers 50000 200000] [--rounds 4]
        [--iterations 50] [--tag xeon]

Per buffer size, one process (DQN at its defaults otherwise, learning from its 128th transition, one seed: each
chunk of 50 iterations is 500 env steps and 50 gradient steps) compiles both programs of one chunk of
`--iterations` iterations, `jaxrl.run.compile.make_chunk_program` (donated) and `jax.jit` of the same vmapped chunk
(copied), inits a state for each, then runs rounds alternating donated, copied, copied, donated (ABBA), each chunk
timed to its result. Memory: Linux's peak resident set (VmHWM), reset through /proc/self/clear_refs before each
chunk, minus the resident set before it (the largest over the rounds). XLA's own figures come with it: the bytes
of the state and how many of them the compiled chunk aliases to its output.
Output: a table, and `benchmarks/results/chunk_state[_TAG].{json,md}` with the load average before and after.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


def _status(field: str) -> int:
    """A field of /proc/self/status in bytes (VmRSS, VmHWM)."""
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as clear:
        clear.write("5")  # VmHWM back to the current resident set


def _state_bytes(tree) -> int:
    import jax

    from jaxrl.run.checkpoint import unwrap_keys

    return sum(x.nbytes for x in jax.tree.leaves(unwrap_keys(tree)))


def measure_case(env: str, buffer_size: int, iterations: int, rounds: int) -> dict:
    """One buffer size, in this process: compile seconds, seconds and extra peak bytes per chunk of each layout."""
    import jax
    import numpy as np

    from jaxrl.algos import dqn
    from jaxrl.run import compile as run_compile

    config = dqn.Config(env=env, buffer_size=buffer_size, learning_starts=128, total_timesteps=10**6)
    keys = jax.random.split(jax.random.key(0), 1)
    init = run_compile.make_init(dqn, config)
    shape = jax.eval_shape(init, keys)
    start = time.perf_counter()
    length = np.int32(iterations)
    donated = run_compile.make_chunk_program(dqn, config, iterations).lower(shape, length).compile()
    compiled_s = {"donated": time.perf_counter() - start}
    start = time.perf_counter()
    chunk = jax.vmap(run_compile.make_chunk(dqn, config, iterations), in_axes=(0, None))
    copied = jax.jit(chunk).lower(shape, length).compile()
    compiled_s["copied"] = time.perf_counter() - start
    programs = {"donated": donated, "copied": copied}
    states = {name: jax.block_until_ready(init(keys)) for name in programs}
    state_bytes = _state_bytes(states["donated"])
    seconds, extra = {name: [] for name in programs}, {name: [] for name in programs}
    for index in range(rounds):
        order = ["donated", "copied"] if index % 2 == 0 else ["copied", "donated"]
        for name in order + order[::-1]:
            resident = _status("VmRSS")
            _reset_peak()
            begin = time.perf_counter()
            states[name], metrics = programs[name](states[name], length)
            jax.block_until_ready((states[name], metrics))
            seconds[name].append(time.perf_counter() - begin)
            extra[name].append(_status("VmHWM") - resident)
    return {
        "env": env,
        "buffer_size": buffer_size,
        "iterations_per_chunk": iterations,
        "state_bytes": state_bytes,
        "aliased_bytes": {n: p.memory_analysis().alias_size_in_bytes for n, p in programs.items()},
        "compile_s": compiled_s,
        "chunk_s": seconds,
        "extra_peak_bytes": extra,
        # the first chunk of each layout touches its output's pages for the first time
        "chunk_s_median_after_first": {n: statistics.median(s[1:]) for n, s in seconds.items()},
        "extra_peak_bytes_max_after_first": {n: max(e[1:]) for n, e in extra.items()},
    }


def _mib(x: float) -> str:
    return f"{x / 2**20:,.0f}"


def markdown(record: dict) -> str:
    lines = [
        "# A chunk that consumes its state against one that copies it",
        "",
        f"`{record['command']}`, jaxrl at {record['commit']}, {record['machine']['processor']}, "
        f"{record['machine']['cpu_count']} CPUs, load before {record['load_before']}, after {record['load_after']}; "
        "rounds alternating donated, copied, copied, donated; the first chunk of each layout left out of the "
        "medians and maxima.",
        "",
        "| env | buffer | state MiB | aliased MiB, donated / copied | s per chunk, donated | copied | "
        "copied - donated | extra peak MiB, donated | copied |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in record["rows"]:
        s, peak = row["chunk_s_median_after_first"], row["extra_peak_bytes_max_after_first"]
        alias = row["aliased_bytes"]
        lines.append(
            f"| {row['env']} | {row['buffer_size']:,} | {_mib(row['state_bytes'])} | {_mib(alias['donated'])} / "
            f"{_mib(alias['copied'])} | {s['donated']:.4f} | {s['copied']:.4f} | {s['copied'] - s['donated']:+.4f} | "
            f"{_mib(peak['donated'])} | {_mib(peak['copied'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Breakout-MinAtar")
    parser.add_argument("--buffers", type=int, nargs="+", default=[50_000, 200_000])
    parser.add_argument("--iterations", type=int, default=50, help="iterations per chunk")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--tag", default="")
    parser.add_argument("--case", type=int, help=argparse.SUPPRESS)  # a child process: one buffer size
    args = parser.parse_args(argv)
    if args.case is not None:
        print(json.dumps(measure_case(args.env, args.case, args.iterations, args.rounds)))
        return
    from benchmarks.common import machine, write_json

    load_before = [round(x, 2) for x in os.getloadavg()]
    rows = []
    for buffer_size in args.buffers:
        child = [sys.executable, "-m", "benchmarks.chunk_state", "--env", args.env, "--case", str(buffer_size),
                 "--iterations", str(args.iterations), "--rounds", str(args.rounds)]  # fmt: skip
        done = subprocess.run(child, capture_output=True, text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    record = {
        "command": "python -m benchmarks.chunk_state " + " ".join(argv if argv is not None else sys.argv[1:]),
        "commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"),
        "machine": machine(),
        "load_before": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "rows": rows,
    }
    name = "chunk_state" + (f"_{args.tag}" if args.tag else "")
    write_json(RESULTS / f"{name}.json", record)
    text = markdown(record)
    (RESULTS / f"{name}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
