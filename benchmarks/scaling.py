"""Scaling of ONE training run over devices (data parallelism, `jaxrl.parallel`): env steps/s, ratio to one
device and compile seconds of `make_train(config, devices=d)` for each d of `--devices`.

PPO on CartPole-v1 with num_envs environments in total (split over the d devices), num_steps 128, 4 epochs x 4
minibatches (PureJaxRL's CartPole settings at many envs). Every program is compiled first (`compile_s`), then
called round robin in the order 1, 2, ..., 2, 1 (`--repeats` rounds), so that a change of the machine's load hits
every device count alike; run seconds: the fastest call, and its cores used = process CPU seconds / wall
seconds (below the device count when other work shares the machine). Beside them, in the same round robin, the
env-only limit on d devices ("env only": the same env steps with random actions, `benchmarks.throughput.env_loop`,
num_envs / d environments per device, no network): each PPO row's `vs_env_only` is its env steps/s over that
limit on its device count. With `--one-core` the 1-device program is also timed with every thread of the process
pinned to one core ("envs split, one core", in the same round robin; the affinity is restored for the other
programs): one XLA CPU device runs its program on the process's intra-op thread pool, which spans every core,
so "ratio to 1 device on one core" is the ratio to one device that is one core. On a CPU the devices are XLA CPU
devices, one per core (`--cpu-cores`, default: the largest of --devices; set before JAX starts). Writes
benchmarks/results/scaling[_TAG].json and .md. Usage: `python -m benchmarks.scaling [--devices 1,2]
[--num-envs 2048] [--iterations 4] [--repeats 2] [--seeds S] [--one-core]`.

With `--seeds S` (S > 1) every program trains S seeds, and each device count d > 1 is measured in both layouts
of seeds x envs: "envs split" is `vmap` over seeds of `make_train(config, devices=d)` (every device steps its
slice of every seed's envs; gradients averaged per seed), "seeds split" is `vmap(make_train(config))` with the
seeds sharded over the d devices (every device trains whole seeds, as a sweep does; S a multiple of d).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

import numpy as np


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", default="1,2", help="device counts, comma-separated (default 1,2)")
    parser.add_argument("--cpu-cores", type=int, default=None, help="XLA CPU devices (default: max of --devices)")
    parser.add_argument("--num-envs", type=int, default=2048, help="environments in total (default 2048)")
    parser.add_argument("--num-steps", type=int, default=128)
    parser.add_argument("--iterations", type=int, default=4, help="PPO iterations per timed call")
    parser.add_argument("--repeats", type=int, default=2, help="rounds of calls (1, 2, ..., 2, 1 each)")
    parser.add_argument("--seeds", type=int, default=1, help="seeds per program (> 1: both seed layouts)")
    parser.add_argument("--tag", default="", help="suffix of the result files (e.g. the machine)")
    parser.add_argument(
        "--one-core",
        action="store_true",
        help="also time the 1-device program with every thread of the process pinned to one core (Linux)",
    )
    args = parser.parse_args(argv)
    args.devices = [int(d) for d in args.devices.split(",")]
    return args


def cpu_seconds() -> float:
    """User + system CPU seconds of this process so far (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def program(config, d: int, layout: str, keys):
    """(jitted train of `config` on d devices in `layout`, its input): one seed when `keys` is one key."""
    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from jaxrl.algos import base

    if layout == "envs split":
        train = base.make_train(config, devices=d)
        return jax.jit(train if keys.ndim == 0 else jax.vmap(train)), keys
    sharding = NamedSharding(Mesh(np.array(jax.devices()[:d]), ("seeds",)), P("seeds"))
    program = jax.jit(jax.vmap(base.make_train(config)), in_shardings=sharding, out_shardings=sharding)
    return program, jax.device_put(keys, sharding)


def _cell(row: dict, field: str) -> str:
    return f"{row[field]:.2f}" if field in row else ""


def pin_threads(cores: set[int]) -> None:
    """Sets the CPU affinity of every thread of this process (XLA's intra-op pool included) to `cores`."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except (ProcessLookupError, PermissionError):
            pass


def env_only_program(config, d: int):
    """(jitted env-only loop on d devices, its input): each device steps num_envs / d envs with random actions for
    iterations x num_steps steps, the same env steps as one PPO call."""
    import dataclasses

    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from benchmarks.throughput import env_loop, random_act
    from jaxrl.algos import ppo
    from jaxrl.rollout import reset

    env = ppo.setup(dataclasses.replace(config, num_envs=config.num_envs // d)).env
    loop = env_loop(env, lambda params: random_act(env.spec), config.num_iterations * config.num_steps)

    def one(key):
        reset_key, loop_key = jax.random.split(key)
        return loop(None, reset(env, reset_key), loop_key)

    sharding = NamedSharding(Mesh(np.array(jax.devices()[:d]), ("envs",)), P("envs"))
    program = jax.jit(jax.vmap(one), in_shardings=sharding, out_shardings=sharding)
    return program, jax.device_put(jax.random.split(jax.random.key(1), d), sharding)


def main(argv=None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    import jax

    from jaxrl.sweep import use_cpu_cores

    if jax.default_backend() == "cpu" or os.environ.get("JAX_PLATFORMS", "") == "cpu":
        use_cpu_cores(args.cpu_cores or max(args.devices), reset=True)
    from benchmarks import common
    from jaxrl.algos import base, ppo

    config = ppo.Config(
        num_envs=args.num_envs,
        num_steps=args.num_steps,
        total_timesteps=args.num_envs * args.num_steps * args.iterations,
    )
    available = len(jax.devices())
    counts = [d for d in args.devices if d <= available]
    layouts = [(d, "envs split") for d in counts]
    if args.seeds > 1:
        layouts += [(d, "seeds split") for d in counts if d > 1 and args.seeds % d == 0]
    layouts += [(d, "env only") for d in counts if args.seeds == 1]
    if args.one_core and 1 in counts:
        layouts.insert(1, (1, "envs split, one core"))
    key = jax.random.key(0)
    keys = jax.random.split(key, args.seeds)
    programs, rows = {}, {}
    load_before = os.getloadavg()
    for d, layout in layouts:
        start = time.perf_counter()
        if layout == "env only":
            jitted, inputs = env_only_program(config, d)
        else:
            jitted, inputs = program(config, d, layout.split(",")[0], key if args.seeds == 1 else keys)
        programs[d, layout] = jitted.lower(inputs).compile(), inputs
        row = {"devices": d, "layout": layout, "seeds": args.seeds, "compile_s": time.perf_counter() - start}
        rows[d, layout] = {**row, "run_s": float("inf")}
    order = layouts + layouts[::-1]
    all_cores = os.sched_getaffinity(0) if args.one_core else None
    for _ in range(args.repeats):
        for entry in order:
            compiled, inputs = programs[entry]
            if args.one_core:
                pin_threads({min(all_cores)} if entry[1].endswith("one core") else all_cores)
            start, cpu_start = time.perf_counter(), cpu_seconds()
            outputs = jax.block_until_ready(compiled(inputs))
            run_s = time.perf_counter() - start
            if run_s < rows[entry]["run_s"]:
                rows[entry]["run_s"], rows[entry]["cores_used"] = run_s, (cpu_seconds() - cpu_start) / run_s
            if entry[1] != "env only":
                rows[entry]["episode_return_last"] = float(np.mean(outputs[1]["episode_return"][..., -1]))
    steps = common.env_steps(config) * args.seeds
    for row in rows.values():
        row["steps_per_s"] = steps / row["run_s"]
    for (_, layout), row in rows.items():  # env-only rows against the env-only limit on the first device count
        first = rows[layouts[0][0], "env only" if layout == "env only" else layouts[0][1]]
        row["ratio"] = row["steps_per_s"] / first["steps_per_s"]
    for (d, layout), row in rows.items():
        if layout != "env only" and (d, "env only") in rows:
            row["vs_env_only"] = row["steps_per_s"] / rows[d, "env only"]["steps_per_s"]
        if layout != "env only" and (1, "envs split, one core") in rows:
            row["ratio_to_one_core"] = row["steps_per_s"] / rows[1, "envs split, one core"]["steps_per_s"]
    record = {
        "benchmark": "scaling",
        "config": base.to_dict(config),
        "env_steps_per_call": steps,
        "repeats": args.repeats,
        "order": [f"{d} {layout}" for d, layout in order],
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "rows": list(rows.values()),
        "machine": common.machine(),
        "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg()),
    }
    suffix = f"_{args.tag}" if args.tag else ""
    out = common.write_json(f"benchmarks/results/scaling{suffix}.json", record)
    lines = [
        f"PPO {config.env}, {config.num_envs} envs in total x {config.num_steps} steps, {args.seeds} seed(s), "
        f"{args.iterations} iterations per call, fastest of {args.repeats} rounds "
        f"({', '.join(f'{d} {layout}' for d, layout in order)}); {jax.devices()[0].platform}, "
        f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f}",
        "",
        f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}",
        "",
        "| devices | seeds x envs | env steps/s | ratio to 1 device | ratio to 1 device on one core | of the env-only "
        "limit | compile s | cores used |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {r['devices']} | {r['layout']} | {r['steps_per_s']:,.0f} | {r['ratio']:.2f} | "
            f"{_cell(r, 'ratio_to_one_core')} | {_cell(r, 'vs_env_only')} | {r['compile_s']:.1f} | "
            f"{r['cores_used']:.2f} |"
            for r in rows.values()
        ),
    ]
    text = "\n".join(lines) + "\n"
    out.with_suffix(".md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
