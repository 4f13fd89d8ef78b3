"""PBT overhead: seconds of one ready block (`ready` vmapped iterations of a population) with the exploit/explore
step (`jaxrl.pbt.ready_step`: rank, select, copy the TrainStates, perturb) against the same block without it.

Both programs are compiled first (compile seconds reported apart), then called alternately A B B A for
`--repeats` rounds on the same inputs; the ratio is the median of A over the median of B.
Usage: `python -m benchmarks.pbt_overhead [--population 8] [--ready 5] [--num-envs 16] [--repeats 5]` ->
benchmarks/results/pbt_overhead.{json,md}.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import numpy as np

from benchmarks.common import machine, write_json
from jaxrl import pbt
from jaxrl.algos import base, ppo


def programs(config, pbt_config):
    """(with, without): jitted `(states, configs, key) -> (states, configs)` of one ready block."""
    priors = pbt.validate(config, pbt_config)
    algo = base.algorithm_of(config)
    setup = base.make_setup(config, algo)

    def iterations(states, configs):
        def body(states, _):
            return jax.vmap(lambda c, s: base.iteration(algo, setup, c, s))(configs, states)

        return jax.lax.scan(body, states, None, length=pbt_config.ready)

    def with_step(states, configs, key):
        states, metrics = iterations(states, configs)
        fitness = pbt.fitness_of(metrics[pbt.FITNESS_METRIC], pbt_config.window)
        return pbt.ready_step(states, configs, fitness, key, pbt_config, priors)[:2]

    def without_step(states, configs, key):
        return iterations(states, configs)[0], configs

    return jax.jit(with_step), jax.jit(without_step), setup, algo


def timed(fn, *args) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--population", type=int, default=8)
    parser.add_argument("--ready", type=int, default=5)
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--num-steps", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "pbt_overhead"))
    args = parser.parse_args(argv)
    before = machine()
    config = ppo.Config(
        num_envs=args.num_envs, num_steps=args.num_steps, total_timesteps=args.num_envs * args.num_steps * args.ready
    )
    pbt_config = pbt.PBTConfig(
        population=args.population,
        ready=args.ready,
        explore={"learning_rate": "loguniform:1e-4:1e-2", "ent_coef": "uniform:0:0.05"},
    )
    with_step, without_step, setup, algo = programs(config, pbt_config)
    k_pop, k_members, k_step = jax.random.split(jax.random.key(0), 3)
    configs = pbt.initial_population(config, pbt_config, k_pop)
    states = jax.vmap(lambda c, k: base.initial_state(c, k, setup, algo))(
        configs, jax.random.split(k_members, args.population)
    )
    inputs = (states, configs, k_step)
    compiled, compile_s = {}, {}
    for name, fn in (("with", with_step), ("without", without_step)):
        start = time.perf_counter()
        compiled[name] = fn.lower(*inputs).compile()
        compile_s[name] = time.perf_counter() - start
        print(f"compile {name:7s} exploit/explore: {compile_s[name]:.2f} s")
    for fn in compiled.values():  # one warm-up call each
        timed(fn, *inputs)
    seconds = {"with": [], "without": []}
    for _ in range(args.repeats):
        for name in ("with", "without", "without", "with"):
            seconds[name].append(timed(compiled[name], *inputs))
    a, b = np.median(seconds["with"]), np.median(seconds["without"])
    print(f"population {args.population}, ready {args.ready}, PPO {args.num_envs} envs x {args.num_steps} steps")
    print(f"one ready block: with {a * 1e3:.2f} ms, without {b * 1e3:.2f} ms (medians of {2 * args.repeats})")
    print(f"ratio with / without: {a / b:.4f}")
    record = {
        "machine": before,
        "load_after": machine()["load_average_1_5_15min"],
        "settings": vars(args) | {"out": None},
        "compile_s": {k: round(v, 2) for k, v in compile_s.items()},
        "seconds": seconds,
        "median_ms": {"with": a * 1e3, "without": b * 1e3},
        "ratio": a / b,
    }
    write_json(args.out + ".json", record)
    m = before
    Path(args.out + ".md").write_text(
        "# PBT overhead: one ready block with and without the exploit/explore step\n\n"
        f"`python -m benchmarks.pbt_overhead`: {m['processor']}, {m['cpu_count']} CPUs, jax {jax.__version__}; "
        f"load average before {', '.join(f'{x:.2f}' for x in m['load_average_1_5_15min'])}, after "
        f"{', '.join(f'{x:.2f}' for x in record['load_after'])} (1, 5, 15 min). A population of "
        f"{args.population} PPO members ({args.num_envs} envs x {args.num_steps} steps), a ready block of "
        f"{args.ready} vmapped iteration(s); both programs called alternately (A B B A) for {args.repeats} rounds.\n\n"
        "| program | compile s | median ms per block |\n|---|---|---|\n"
        f"| with the ready step | {compile_s['with']:.2f} | {a * 1e3:.2f} |\n"
        f"| without | {compile_s['without']:.2f} | {b * 1e3:.2f} |\n\n"
        f"Ratio with / without: **{a / b:.4f}**.\n"
    )


if __name__ == "__main__":
    main()
