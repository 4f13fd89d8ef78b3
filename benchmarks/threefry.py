"""JAX's Threefry lowering on CPU (a `while` loop over the hash's 5 groups of rounds) against jaxrl's
(`jaxrl._compat.unroll_threefry_on_cpu`: straight-line where a draw hashes 8 words or more), every algorithm at its
defaults, in one process.

    python -m benchmarks.threefry                       # every registered algorithm, 2 rounds
    python -m benchmarks.threefry --algos ppo dqn --rounds 3 --out benchmarks/results/NAME

Each round compiles each algorithm's `train` under both lowerings, JAX's first in even rounds and jaxrl's first in
odd ones (ABBA), with the options jaxrl's runner compiles with, and runs each compiled program `--repeats` times
(the best call counts). The default configs run with `total_timesteps` capped at `--max-steps`. Every figure is a
per-round ratio jaxrl's / JAX's; `while loops` counts the `stablehlo.while` of the lowered program (the rolled
hashes among them). Both lowerings give the same bits: the row says whether the final states were equal.
Output: a table, and `--out` as `.json` and `.md`.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import time

import jax
import numpy as np

from benchmarks.common import machine, machine_words, paired_cells, write_record
from jaxrl import _compat

LOWERINGS = {"jax": math.inf, "jaxrl": _compat.THREEFRY_UNROLLED_FROM}  # the fewest words drawn straight-line


def use(lowering: str) -> None:
    _compat.unroll_threefry_on_cpu(LOWERINGS[lowering])


def measured(algo, config, repeats: int) -> dict:
    """Compile seconds (trace, lower and XLA), the best call's env steps/s, the lowered program's while loops and a
    digest of the final state's leaves."""
    from jaxrl.run.compile import compiler_options

    key = jax.random.key(0)
    start = time.perf_counter()
    lowered = jax.jit(lambda k: algo.train(config, k)).lower(key)
    compiled = lowered.compile(compiler_options())
    compile_s = time.perf_counter() - start
    run_s, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = jax.block_until_ready(compiled(key))
        run_s = min(run_s, time.perf_counter() - start)
    state = out[0] if isinstance(out, tuple) else out
    leaves = [
        jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x
        for x in jax.tree.leaves(state)
    ]
    digest = hashlib.sha256(b"".join(np.asarray(x).tobytes() for x in leaves)).hexdigest()[:16]
    return {
        "compile_s": compile_s,
        "steps_per_s": config.num_iterations * config.env_steps_per_iteration / run_s,
        "while_loops": lowered.as_text().count("stablehlo.while"),
        "digest": digest,
    }


def main(argv=None) -> None:
    from jaxrl.algos import ALGORITHMS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algos", nargs="+", default=sorted(ALGORITHMS), choices=sorted(ALGORITHMS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--max-steps", type=int, default=100_000)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    rows = []
    for name in args.algos:
        algo = ALGORITHMS[name]
        default = algo.Config()
        config = default.replace(total_timesteps=min(default.total_timesteps, args.max_steps))
        runs = {lowering: [] for lowering in LOWERINGS}
        for round_ in range(args.rounds):
            for lowering in list(LOWERINGS)[:: 1 if round_ % 2 == 0 else -1]:
                use(lowering)
                runs[lowering].append(measured(algo, config, args.repeats))
        use("jaxrl")
        jax_runs, ours = runs["jax"], runs["jaxrl"]
        row = {
            "algo": name,
            "env": config.env,
            "total_timesteps": config.total_timesteps,
            "runs": runs,
            "compile_ratio": [b["compile_s"] / a["compile_s"] for a, b in zip(jax_runs, ours, strict=True)],
            "speed_ratio": [b["steps_per_s"] / a["steps_per_s"] for a, b in zip(jax_runs, ours, strict=True)],
            "same_bits": len({r["digest"] for r in jax_runs + ours}) == 1,
        }
        rows.append(row)
        print(line(row), flush=True)
    record = {"machine": machine(), "args": vars(args), "rows": rows}
    write_record(args.out, record, markdown(record))


def line(row: dict) -> str:
    jax_runs, ours = row["runs"]["jax"], row["runs"]["jaxrl"]
    cells = paired_cells(jax_runs, ours, row["compile_ratio"], row["speed_ratio"])
    loops = f"{jax_runs[0]['while_loops']} / {ours[0]['while_loops']}"
    return "| " + " | ".join([row["algo"], row["env"], *cells, loops, "yes" if row["same_bits"] else "NO"]) + " |"


def markdown(record: dict) -> str:
    m = record["machine"]
    head = (
        f"# Threefry on CPU: JAX's lowering against jaxrl's\n\n`python -m benchmarks.threefry` "
        f"(rounds {record['args']['rounds']}, repeats {record['args']['repeats']}, total_timesteps at most "
        f"{record['args']['max_steps']:,}); {machine_words(m)}.\n\n"
        "| algorithm | env | compile s, JAX's | jaxrl's | compile ratio (median) | env steps/s, JAX's | jaxrl's | "
        "speed ratio (median) | while loops, JAX's / jaxrl's | same bits |\n|---|---|---|---|---|---|---|---|---|---|\n"
    )
    return head + "\n".join(line(r) for r in record["rows"]) + "\n"


if __name__ == "__main__":
    main()
