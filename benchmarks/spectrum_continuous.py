"""Continuous-control off-policy algorithms (DDPG, TD3, SAC) on Pendulum-v1 at their defaults: final returns per
seed, train throughput and compile time, written to benchmarks/results/spectrum_continuous.json.

For each algorithm: `jax.jit(jax.vmap(algo.make_train(config)))` over `--seeds` seeds (one program), compiled with
`.lower(keys).compile()` (tracing included in compile_s), then one timed call (`benchmarks.common.measure`).
steps_per_s counts env steps of all seeds per second of that call (each env step comes with
updates_per_iteration / (num_envs * num_steps) gradient steps, here 1). final_return: per seed,
`jaxrl.run.report.final_return`, the mean return of the episodes completed in the last 10% of iterations
(stochastic exploration policy); eval_return: per seed, the deterministic policy (`algo.evaluation_policy`) on
`--eval-episodes` fresh episodes. `--mountaincar` adds MountainCarContinuous-v0 (SAC only; off by default: a
sparse-reward exploration problem that needs a longer budget).

Usage: `python -m benchmarks.spectrum_continuous [--seeds 3] [--algos ddpg td3 sac] [--total-timesteps N]`.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import time

import jax
import numpy as np

from benchmarks.common import env_steps, machine, measure, write_json
from jaxrl.algos import ddpg, sac, td3
from jaxrl.run.evaluate import evaluate
from jaxrl.run.report import final_return

ALGOS = {"ddpg": ddpg, "td3": td3, "sac": sac}


def run_algo(name: str, config, seeds: int, eval_episodes: int) -> dict:
    module = ALGOS[name]
    keys = jax.random.split(jax.random.key(0), seeds)
    compile_s, run_s, (state, metrics) = measure(jax.vmap(module.make_train(config)), keys)

    def evaluate_one(state, key):
        act, normalize = module.evaluation_policy(module.setup(config), config, state, deterministic=True)
        return evaluate(config.env, act, key, eval_episodes, normalize=normalize)["mean_return"]

    eval_keys = jax.random.split(jax.random.key(1), seeds)
    eval_return = np.asarray(jax.jit(jax.vmap(evaluate_one))(state, eval_keys))
    final = final_return(metrics["episode_return"])
    steps = env_steps(config, seeds)
    row = {
        "algo": name,
        "env": config.env,
        "seeds": seeds,
        "env_steps_per_seed": env_steps(config),
        "gradient_steps_per_seed": config.num_iterations * config.updates_per_iteration,
        "final_return_per_seed": [round(float(x), 1) for x in final],
        "final_return_mean": round(float(np.nanmean(final)), 1),
        "eval_return_per_seed": [round(float(x), 1) for x in eval_return],
        "eval_return_mean": round(float(eval_return.mean()), 1),
        "compile_s": round(compile_s, 2),
        "run_s": round(run_s, 2),
        "steps_per_s": round(steps / run_s),
        "config": {f.name: getattr(config, f.name) for f in dataclasses.fields(config)},
    }
    print(
        f"{name:5s} {config.env:26s} final {row['final_return_mean']:8.1f} {row['final_return_per_seed']}  "
        f"eval {row['eval_return_mean']:8.1f}  compile {compile_s:6.1f} s  run {run_s:6.1f} s  "
        f"{row['steps_per_s']:,} steps/s",
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algos", nargs="+", default=list(ALGOS), choices=list(ALGOS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--total-timesteps", type=int, default=None, help="override the defaults' 20k env steps")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--mountaincar", action="store_true", help="also SAC on MountainCarContinuous-v0")
    parser.add_argument("--out", default="benchmarks/results/spectrum_continuous.json")
    args = parser.parse_args()

    start = time.perf_counter()
    results = []
    for name in args.algos:
        config = ALGOS[name].Config()
        if args.total_timesteps:
            config = dataclasses.replace(config, total_timesteps=args.total_timesteps)
        results.append(run_algo(name, config, args.seeds, args.eval_episodes))
    if args.mountaincar:
        config = sac.Config(env="MountainCarContinuous-v0", total_timesteps=args.total_timesteps or 50_000)
        results.append(run_algo("sac", config, args.seeds, args.eval_episodes))
    out = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": machine(),
        "args": vars(args),
        "wall_s": round(time.perf_counter() - start, 1),
        "results": results,
    }
    write_json(args.out, out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
