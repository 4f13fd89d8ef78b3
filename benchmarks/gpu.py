"""PPO throughput at many environments and vmapped seeds, for an accelerator (runs on any JAX backend).

    python -m benchmarks.gpu             # num_envs 2048 8192 x seeds 1 8 32; under 5 minutes on one H200
    python -m benchmarks.gpu --quick     # num_envs 64 256 x seeds 1 2, a few iterations: a CPU smoke run

For each (num_envs, seeds): `ppo.make_train(config)` on CartPole-v1 (`--num-steps` per iteration, 4 epochs x 4
minibatches, 2 x 64 tanh), one seed jitted as it is, more seeds as `jax.jit(jax.vmap(train))(keys)`. Compile seconds
and the best of `--repeats` calls, measured with `benchmarks.common.measure`; env steps/s counts all seeds; the
final return is `jaxrl.run.report.final_return` (the last 10% of iterations), averaged over seeds. Runs stop being
started once `--budget-s` seconds have passed (the JSON says which were skipped). Writes
`benchmarks/results/gpu_<device kind>.json` and the table as `.md` beside it (both rewritten after every case),
with the device named. `scripts/accelerator.sh` installs the accelerator's jax and runs this once.
"""

from __future__ import annotations

import argparse
import datetime
import re
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from benchmarks.common import env_steps, machine, mean_final_return, measure, program_memory, write_json
from jaxrl.algos import ppo


def device_info() -> dict:
    device = jax.devices()[0]
    return {
        "platform": device.platform,
        "device_kind": device.device_kind,
        "device_count": jax.device_count(),
        "devices": [str(d) for d in jax.devices()],
    }


def device_slug(kind: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", kind.lower()).strip("_") or "unknown"


def peak_memory_bytes():
    try:
        stats = jax.devices()[0].memory_stats() or {}
    except Exception:  # not every backend reports memory
        return None
    return stats.get("peak_bytes_in_use")


def bench(num_envs: int, seeds: int, num_steps: int, iterations: int, repeats: int, env: str = "CartPole-v1") -> dict:
    """One case: PPO with `num_envs` x `num_steps` for `iterations` iterations, `seeds` vmapped seeds."""
    config = ppo.Config(
        env=env,
        num_envs=num_envs,
        num_steps=num_steps,
        total_timesteps=iterations * num_envs * num_steps,
        update_epochs=4,
        num_minibatches=4,
    )
    train = ppo.make_train(config)
    key = jax.random.key(0)
    memory = {}
    if seeds == 1:
        compile_s, run_s, (_, metrics) = measure(train, key, repeats=repeats, on_compiled=remember(memory))
    else:
        keys = jax.random.split(key, seeds)
        compile_s, run_s, (_, metrics) = measure(jax.vmap(train), keys, repeats=repeats, on_compiled=remember(memory))
    steps = env_steps(config, seeds)
    return {
        "num_envs": num_envs,
        "seeds": seeds,
        "num_steps": num_steps,
        "iterations": config.num_iterations,
        "steps": steps,
        "compile_s": compile_s,
        "run_s": run_s,
        "steps_per_s": steps / run_s,
        "final_return": mean_final_return(metrics["episode_return"]),
        "peak_memory_bytes": peak_memory_bytes(),
        "program_memory_bytes": memory.get("bytes"),
    }


def remember(memory: dict):
    """An `on_compiled` hook that keeps the program's `program_memory` in `memory["bytes"]` and prints it."""

    def hook(compiled):
        memory["bytes"] = program_memory(compiled)
        if memory["bytes"]:
            sizes = ", ".join(f"{name} {size / 2**20:.1f} MiB" for name, size in memory["bytes"].items())
            print(f"  compiled program memory: {sizes}", flush=True)

    return hook


HEADER = "| num_envs | seeds | env steps | compile s | run s | env steps/s | final return |\n" + "|" + "---|" * 7


def table_row(r: dict) -> str:
    return (
        f"| {r['num_envs']} | {r['seeds']} | {r['steps']:,} | {r['compile_s']:.1f} | {r['run_s']:.3f} | "
        f"{r['steps_per_s'] / 1e6:.2f}M | {r['final_return']:.1f} |"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--num-steps", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--budget-s", type=float, default=240.0, help="start no new case after this many seconds")
    parser.add_argument("--out", default=None, help="default: benchmarks/results/gpu_<device kind>.json")
    parser.add_argument("--quick", action="store_true", help="num_envs 64 256, seeds 1 2, 16 steps x 2 iterations")
    args = parser.parse_args(argv)
    if args.quick:
        args.num_envs, args.seeds, args.num_steps, args.iterations = [64, 256], [1, 2], 16, 2

    start = time.perf_counter()
    jax.block_until_ready(jax.jit(lambda x: x + 1)(jnp.ones(())))  # backend start-up is not timed
    device = device_info()
    out = Path(args.out or f"benchmarks/results/gpu_{device_slug(device['device_kind'])}.json")
    info = machine()
    rows, skipped = [], []

    def write():
        record = {
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "device": device,
            "machine": info,
            "args": vars(args),
            "wall_s": time.perf_counter() - start,
            "results": rows,
            "skipped_over_budget": skipped,
        }
        write_json(out, record)
        lines = [
            f"{record['date']}, {device['device_kind']} ({device['platform']}, {device['device_count']} devices), "
            f"jax {info['jax']}, {record['wall_s']:.0f} s",
            "",
            HEADER,
            *map(table_row, rows),
        ]
        if skipped:
            lines += ["", f"skipped over the {args.budget_s:.0f} s budget: {skipped}"]
        out.with_suffix(".md").write_text("\n".join(lines) + "\n")

    print(f"device: {device['device_kind']} ({device['platform']}, {device['device_count']} devices)", flush=True)
    print(HEADER, flush=True)
    for num_envs in args.num_envs:
        for seeds in args.seeds:
            if time.perf_counter() - start > args.budget_s:
                skipped.append({"num_envs": num_envs, "seeds": seeds})
                continue
            r = bench(num_envs, seeds, args.num_steps, args.iterations, args.repeats)
            rows.append(r)
            print(table_row(r), flush=True)
            write()
    write()
    if skipped:
        print(f"skipped over the {args.budget_s:.0f} s budget: {skipped}")
    print(f"total {time.perf_counter() - start:.0f} s; wrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
