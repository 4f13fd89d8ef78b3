"""Large minibatches' gradients whole against in chunks (`jaxrl.minibatch.mean_in_chunks`; TRPO's policy step takes
every mean over its batch so): each learner's whole train at a size that chunks, in one process.

    python -m benchmarks.gradient_chunks                          # every case, 2 rounds, XLA's thread pool
    python -m benchmarks.gradient_chunks --cases ppo_gru a2c --cpu-threads 1 --out benchmarks/results/NAME
    python -m benchmarks.gradient_chunks --devices 2       # data-parallel over 2 CPU devices, as `jaxrl train`
    python -m benchmarks.gradient_chunks --seeds 4         # 4 seeds vmapped in one program on one device

Each round compiles each case's `train` twice, with chunks off (`GRADIENT_CHUNKS_FROM` beyond any minibatch) and at
jaxrl's thresholds, the whole first in even rounds and the chunks first in odd ones (ABBA), with the options jaxrl's
runner compiles with, and runs each compiled program `--repeats` times (the best call counts). Every figure is a
per-round ratio chunks / whole. The two differ in float32 rounding only: the row gives the largest difference of
the final parameters, against the largest parameter. Output: a table, and `--out` as `.json` and `.md`.
"""

from __future__ import annotations

import argparse
import math

from benchmarks.common import machine, machine_words, measure, paired_cells, span, write_record

# name: (algorithm, Config overrides); each takes minibatches (TRPO: a batch) of more than 16384 samples
CASES = {
    "ppo_2048_envs": ("ppo", dict(num_envs=2048, num_steps=128, total_timesteps=2048 * 128 * 2)),
    "ppo_gru": (
        "ppo",
        dict(
            core="gru", num_envs=1024, num_steps=128, num_minibatches=2, update_epochs=1, total_timesteps=1024 * 128 * 2
        ),
    ),
    "ppo_gru_512_envs": (
        "ppo",
        dict(
            core="gru", num_envs=512, num_steps=128, num_minibatches=2, update_epochs=1, total_timesteps=512 * 128 * 2
        ),
    ),
    "a2c": ("a2c", dict(num_envs=8192, num_steps=5, total_timesteps=8192 * 5 * 10)),
    "reinforce": ("reinforce", dict(num_envs=1024, num_steps=64, total_timesteps=1024 * 64 * 4)),
    "grpo": ("grpo", dict(num_groups=32, num_minibatches=2, total_timesteps=32 * 8 * 500 * 2)),
    "impala": ("impala", dict(num_envs=1024, num_steps=64, num_minibatches=1, total_timesteps=1024 * 64 * 4)),
    "vmpo": ("vmpo", dict(num_envs=2048, num_steps=128, total_timesteps=2048 * 128 * 2)),
    "trpo": ("trpo", dict(num_envs=2048, num_steps=128, total_timesteps=2048 * 128 * 2)),
    "dpo": ("dpo", dict(num_groups=32, total_timesteps=32 * 8 * 500 * 2)),
}
CHUNKS = ("whole", "chunks")


def use(chunks: str, thresholds: dict) -> None:
    from jaxrl import minibatch

    minibatch.GRADIENT_CHUNKS_FROM = thresholds["GRADIENT_CHUNKS_FROM"] if chunks == "chunks" else math.inf


def measured(algo, config, repeats: int, devices: int = 1, seeds: int = 1) -> dict:
    """Compile seconds (trace, lower and XLA), the best call's env steps/s and the final parameters of one run,
    data-parallel over `devices`, or of `seeds` runs vmapped in one program."""
    import jax

    from jaxrl.algos import base
    from jaxrl.run.compile import compiler_options

    key = jax.random.key(0)
    train = base.make_train(config, devices=devices)
    if seeds > 1:
        train, key = jax.vmap(train), jax.random.split(key, seeds)
    timing = measure(lambda k: train(k), key, repeats=repeats, compiler_options=compiler_options())
    state = timing.out[0]
    return {
        "compile_s": timing.compile_s,
        "steps_per_s": seeds * config.num_iterations * config.env_steps_per_iteration / timing.run_s,
        "params": state.params,
    }


def difference(a, b) -> tuple[float, float]:
    """(largest |a - b| over the leaves, largest |a|)."""
    import jax
    import numpy as np

    diffs = jax.tree.map(lambda x, y: float(np.max(np.abs(np.asarray(x) - np.asarray(y)))), a, b)
    sizes = jax.tree.map(lambda x: float(np.max(np.abs(np.asarray(x)))), a)
    return max(jax.tree.leaves(diffs)), max(jax.tree.leaves(sizes))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cpu-threads", type=int, default=None, help="XLA's CPU thread pool (default: XLA's own)")
    parser.add_argument("--devices", type=int, default=1, help="one run data-parallel over N XLA CPU devices")
    parser.add_argument("--seeds", type=int, default=1, help="N seeds vmapped in one program (one device)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    if args.devices > 1 and args.seeds > 1:
        parser.error("--devices and --seeds: one run over devices, or vmapped seeds on one device")
    if args.devices > 1:
        from jaxrl.sweep.devices import use_cpu_cores

        use_cpu_cores(args.devices)
    if args.cpu_threads:
        from jaxrl.sweep.devices import use_cpu_threads

        use_cpu_threads(args.cpu_threads)
    from jaxrl import minibatch
    from jaxrl.algos import ALGORITHMS

    thresholds = {"GRADIENT_CHUNKS_FROM": minibatch.GRADIENT_CHUNKS_FROM}
    rows = []
    try:
        for name in args.cases:
            algo_name, overrides = CASES[name]
            algo = ALGORITHMS[algo_name]
            config = algo.Config().replace(**overrides)
            runs = {chunks: [] for chunks in CHUNKS}
            for round_ in range(args.rounds):
                for chunks in CHUNKS[:: 1 if round_ % 2 == 0 else -1]:
                    use(chunks, thresholds)
                    runs[chunks].append(measured(algo, config, args.repeats, args.devices, args.seeds))
            largest_difference, largest_parameter = difference(runs["whole"][0]["params"], runs["chunks"][0]["params"])
            for run in runs["whole"] + runs["chunks"]:
                del run["params"]
            whole, chunked = runs["whole"], runs["chunks"]
            row = {
                "case": name,
                "algo": algo_name,
                "overrides": overrides,
                "minibatch_samples": config.num_envs * config.num_steps // getattr(config, "num_minibatches", 1),
                "runs": runs,
                "compile_ratio": [b["compile_s"] / a["compile_s"] for a, b in zip(whole, chunked, strict=True)],
                "speed_ratio": [b["steps_per_s"] / a["steps_per_s"] for a, b in zip(whole, chunked, strict=True)],
                "largest_parameter_difference": largest_difference,
                "largest_parameter": largest_parameter,
            }
            rows.append(row)
            print(line(row), flush=True)
    finally:
        use("chunks", thresholds)
    record = {"machine": machine(), "args": vars(args), "rows": rows}
    write_record(args.out, record, markdown(record))


def line(row: dict) -> str:
    cells = paired_cells(row["runs"]["whole"], row["runs"]["chunks"], row["compile_ratio"], row["speed_ratio"])
    cells[-1] += f" ({span(row['speed_ratio'])})"
    difference = f"{row['largest_parameter_difference']:.1e} of {row['largest_parameter']:.1f}"
    return "| " + " | ".join([row["case"], f"{row['minibatch_samples']:,}", *cells, difference]) + " |"


def markdown(record: dict) -> str:
    m, a = record["machine"], record["args"]
    threads = f"{a['cpu_threads']} CPU thread(s)" if a["cpu_threads"] else "XLA's CPU thread pool"
    if a.get("devices", 1) > 1:
        threads += f", one run data-parallel over {a['devices']} XLA CPU devices"
    if a.get("seeds", 1) > 1:
        threads += f", {a['seeds']} seeds vmapped in one program"
    head = (
        f"# Large minibatches' gradients: whole against in chunks\n\n`python -m benchmarks.gradient_chunks` "
        f"(rounds {a['rounds']}, repeats {a['repeats']}, {threads}); {machine_words(m)}.\n\n"
        "| case | minibatch samples | compile s, whole | chunks | compile ratio (median) | env steps/s, whole | "
        "chunks | speed ratio (median, range) | largest final parameter difference |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )
    return head + "\n".join(line(r) for r in record["rows"]) + "\n"


if __name__ == "__main__":
    main()
