"""Final returns of the value-based family (DQN, PQN, SARSA, optionally Expected SARSA) on CartPole-v1 and
Acrobot-v1: 3 seeds per (algorithm, env) as one `jit(vmap(make_train(config)))` program, default configs except
the env and the budget.

Per row: the final return of each seed (`jaxrl.run.report.final_return`: the mean return of the episodes completed
in the last 10% of iterations; training episodes, so under the final epsilon), their mean, env steps/s of the
vmapped run (all seeds' steps over the run's wall seconds, compile excluded) and the compile seconds
(`lower().compile()`, tracing included; both timed by `benchmarks.common.measure`).
Usage: `python -m benchmarks.value_family [--algos dqn pqn sarsa] [--envs CartPole-v1] [--quick]`.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import time
from pathlib import Path

import jax
import numpy as np

from benchmarks.common import env_steps, machine, measure, write_json
from jaxrl.algos import dqn, pqn, sarsa
from jaxrl.algos.base import to_dict
from jaxrl.run.report import final_return

ALGOS = {
    "dqn": (dqn, {}),
    "pqn": (pqn, {}),
    "sarsa": (sarsa, {}),
    "expected_sarsa": (sarsa, {"expected": True}),
}
# env steps per seed: replay-based DQN makes many more gradient steps per env step, so it gets fewer env steps
BUDGETS = {
    "CartPole-v1": {"dqn": 50_000, "pqn": 200_000, "sarsa": 200_000, "expected_sarsa": 200_000},
    "Acrobot-v1": {"dqn": 100_000, "pqn": 500_000, "sarsa": 500_000, "expected_sarsa": 500_000},
}


def run(algo: str, env: str, steps: int, seeds: int, seed: int) -> dict:
    module, overrides = ALGOS[algo]
    config = dataclasses.replace(module.Config(), env=env, total_timesteps=steps, **overrides)
    keys = jax.random.split(jax.random.key(seed), seeds)
    compile_s, run_s, (_, metrics) = measure(jax.vmap(module.make_train(config)), keys)
    per_seed = env_steps(config)
    final = final_return(metrics["episode_return"])  # [seeds]
    return {
        "algo": algo,
        "env": env,
        "env_steps_per_seed": per_seed,
        "seeds": seeds,
        "final_return_per_seed": final.tolist(),
        "final_return_mean": float(np.nanmean(final)),
        "final_return_std": float(np.nanstd(final)),
        "steps_per_s": seeds * per_seed / run_s,
        "run_s": run_s,
        "compile_s": compile_s,
        "num_envs": config.num_envs,
        "num_steps": config.num_steps,
        "iterations": config.num_iterations,
        "config": to_dict(config),
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| env | algo | env steps / seed | final return (mean ± std) | per seed | env steps/s (3 seeds) | run s | "
        "compile s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        per_seed = ", ".join(f"{x:.0f}" for x in r["final_return_per_seed"])
        lines.append(
            f"| {r['env']} | {r['algo']} | {r['env_steps_per_seed']:,} | {r['final_return_mean']:.1f} ± "
            f"{r['final_return_std']:.1f} | {per_seed} | {r['steps_per_s']:,.0f} | {r['run_s']:.1f} | "
            f"{r['compile_s']:.1f} |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", choices=list(ALGOS), default=["dqn", "pqn", "sarsa"])
    parser.add_argument("--envs", nargs="+", choices=list(BUDGETS), default=list(BUDGETS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies every budget")
    parser.add_argument("--quick", action="store_true", help="budgets x 0.1, for a smoke run")
    parser.add_argument("--out", default="benchmarks/results/value_family.json")
    args = parser.parse_args(argv)
    scale = 0.1 if args.quick else args.scale

    out = Path(args.out)
    info = machine()
    info["load_average_1_5_15min_at_start"] = info.pop("load_average_1_5_15min")
    rows, start = [], time.perf_counter()
    for env in args.envs:
        for algo in args.algos:
            r = run(algo, env, int(BUDGETS[env][algo] * scale), args.seeds, args.seed)
            print(table([r]).split("\n", 2)[2], flush=True)
            rows.append(r)
            write_json(  # rewritten after each row, so a stall loses one
                out,
                {
                    "date": datetime.datetime.now().isoformat(timespec="seconds"),
                    "machine": {**info, "load_average_1_5_15min_now": list(os.getloadavg())},
                    "args": vars(args),
                    "wall_s": time.perf_counter() - start,
                    "results": rows,
                },
            )
    print(f"\n## jaxrl value-based family ({datetime.date.today()}; {info['cpu_count']} CPUs; jax {info['jax']})\n")
    print(table(rows))
    print(f"\nwrote {out} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
