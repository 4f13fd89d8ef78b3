"""Do the defaults hold up? Every algorithm's default Config on its default environment, run `--scale` times
its default budget over `--seeds` seeds (one vmapped program per algorithm), and `jaxrl.run.report.stability`:
the final return (the last 10% of iterations) against the best 10% window of the seed-mean curve.

    python -m benchmarks.stability                       # every algorithm at 10x, 4 seeds
    python -m benchmarks.stability --algos dqn pqn --scale 10 --seeds 4

Writes benchmarks/results/stability.json (and .md): per algorithm the budget, best and final return, the drop and
the per-seed final returns, with compile and run seconds."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import jax
import numpy as np

from benchmarks.common import binned_curve, measure, write_json
from jaxrl.algos import ALGORITHMS
from jaxrl.run.report import final_return, stability

RESULTS = Path(__file__).parent / "results"


def run_one(name: str, scale: float, seeds: int, seed: int = 0) -> dict:
    algo = ALGORITHMS[name]
    default = algo.Config()
    config = dataclasses.replace(default, total_timesteps=int(default.total_timesteps * scale))
    train = jax.vmap(algo.make_train(config))
    compile_s, run_s, (_, metrics) = measure(train, jax.random.split(jax.random.key(seed), seeds))
    returns = np.asarray(metrics["episode_return"])
    return {
        "algo": name,
        "env": config.env,
        "total_timesteps": config.total_timesteps,
        "default_timesteps": default.total_timesteps,
        "seeds": seeds,
        **{k: round(v, 3) for k, v in stability(returns).items()},
        "final_per_seed": [round(float(x), 1) for x in final_return(returns)],
        "compile_s": round(compile_s, 1),
        "run_s": round(run_s, 1),
        "curve": binned_curve(returns, config.env_steps_per_iteration),  # (env steps, returns [seeds, <= 200])
    }


def markdown(rows: list[dict]) -> str:
    lines = [
        "| algorithm | env | steps (x default) | best 10% | final 10% | drop | worst seed's drop | holds |"
        " final per seed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        scale = r["total_timesteps"] / r["default_timesteps"]
        lines.append(
            f"| {r['algo']} | {r['env']} | {r['total_timesteps']:,} ({scale:g}x)"
            f" | {r['best']:.1f} | {r['final']:.1f} | {100 * r['drop']:.1f}% | {100 * r['worst_seed_drop']:.1f}%"
            f" | {'yes' if r['drop'] <= 0.05 and r['worst_seed_drop'] <= 0.10 else 'NO'}"
            f" | {', '.join(f'{x:.0f}' for x in r['final_per_seed'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", default=list(ALGORITHMS), choices=list(ALGORITHMS))
    parser.add_argument("--scale", type=float, default=10.0, help="budget as a multiple of the default")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--out", default="stability")
    args = parser.parse_args(argv)
    rows = []
    for name in args.algos:
        row = run_one(name, args.scale, args.seeds)
        print(markdown([row]).splitlines()[-1], f"compile {row['compile_s']} s, run {row['run_s']} s", flush=True)
        rows.append(row)
    write_json(RESULTS / f"{args.out}.json", {"scale": args.scale, "seeds": args.seeds, "rows": rows})
    (RESULTS / f"{args.out}.md").write_text(markdown(rows))


if __name__ == "__main__":
    main()
