"""REINFORCE, A2C and TRPO: final returns over seeds at stated budgets, training steps/s and compile seconds.

Each case trains `--seeds` seeds (keys `jax.random.split(jax.random.key(0), seeds)`, as the learning tests do) in
one `jax.jit(jax.vmap(make_train(config)))` program. Compile seconds: `lower(keys).compile()` (tracing included);
run seconds: one call of the compiled program; steps/s: env steps of all seeds / run seconds (all as
`benchmarks.common.measure` defines them). The final return of a seed is `jaxrl.run.report.final_return`: the mean
episode return over the last 10% of its iterations (the JSON files written before it used the last 5%, at least 5).
The persistent compilation cache is not used, so the compile seconds are cold ones. On a shared machine the load
average (recorded) inflates both timings.

Usage: `python -m benchmarks.spectrum_onpolicy [--seeds 3] [--out benchmarks/results/spectrum_onpolicy.json]`.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import time

import jax
import numpy as np

from benchmarks.common import env_steps, machine, measure, write_json
from jaxrl.algos import a2c, reinforce, trpo
from jaxrl.run.report import final_return, final_window

CASES = [
    ("reinforce", reinforce, "CartPole-v1", {}),
    ("a2c", a2c, "CartPole-v1", {}),
    ("trpo", trpo, "CartPole-v1", {}),
    (
        "trpo",
        trpo,
        "Pendulum-v1",
        dict(
            num_envs=8,
            num_steps=256,
            total_timesteps=150_000,
            gamma=0.9,
            max_kl=0.02,
            vf_epochs=10,
            normalize_observations=True,
        ),
    ),
]


def run_case(algo, config, seeds: int) -> dict:
    keys = jax.random.split(jax.random.key(0), seeds)
    compile_s, run_s, (_, metrics) = measure(jax.vmap(algo.make_train(config)), keys)
    returns = np.asarray(metrics["episode_return"])  # [seeds, iterations]
    final = final_return(returns)
    last = final_window(returns.shape[1])
    steps = env_steps(config, seeds)
    return {
        "final_return_per_seed": [round(float(x), 1) for x in final],
        "final_return_mean": round(float(final.mean()), 1),
        "best_return_per_seed": [round(float(x), 1) for x in np.nanmax(returns, axis=1)],
        "final_over_last_iterations": last,
        "env_steps_per_seed": steps // seeds,
        "iterations": config.num_iterations,
        "compile_s": round(compile_s, 1),
        "run_s": round(run_s, 2),
        "steps_per_s": round(steps / run_s),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", default="benchmarks/results/spectrum_onpolicy.json")
    args = parser.parse_args()
    started = time.perf_counter()
    results = []
    for name, algo, env, overrides in CASES:
        config = dataclasses.replace(algo.Config(env=env), **overrides)
        load = os.getloadavg()[0]
        row = {"algo": name, "env": env, "overrides": overrides, "load_average_before": round(load, 2)}
        row |= run_case(algo, config, args.seeds)
        row["config"] = {f.name: _jsonable(getattr(config, f.name)) for f in dataclasses.fields(config)}
        print(
            f"{name:9s} {env:12s} {row['env_steps_per_seed']:>7d} steps/seed  final {row['final_return_per_seed']}  "
            f"{row['steps_per_s']:>8d} steps/s  compile {row['compile_s']:.0f} s  (load {load:.1f})",
            flush=True,
        )
        results.append(row)
    out = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": machine(),
        "seeds": args.seeds,
        "wall_s": round(time.perf_counter() - started, 1),
        "results": results,
    }
    write_json(args.out, out)
    print(f"wrote {args.out} ({out['wall_s']} s)")


def _jsonable(value):
    return list(value) if isinstance(value, tuple) else value


if __name__ == "__main__":
    main()
