"""Steps/s and compile seconds of PPO with the MLP, the CNN (MinAtar network) and the GRU core on one MinAtar
game, side by side in one process so the ratios are comparable on a shared machine.

Each row trains `ppo.make_train` at the MinAtar preset's batch shape (`jaxrl.presets`: 64 envs x 128 steps,
4 epochs x 8 minibatches) for `--steps` env steps, one seed: mlp = `torso="mlp"`; cnn = `torso="cnn"`; gru =
`torso="mlp", core="gru"` (MLP -> GRU(`--core-size`) -> heads, sequence minibatches of 8 whole envs); cnn_gru =
both. compile_s and steps_per_s as `benchmarks.common.measure` defines them (cold compile; best of `--repeats`
runs). The load average is recorded with the machine: other work slows every row.

Usage: `python -m benchmarks.torsos [--env Breakout-MinAtar] [--steps 65536]` -> benchmarks/results/torsos.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime
import os
from pathlib import Path

import jax

from benchmarks.common import env_steps, machine, measure, write_json
from jaxrl import presets
from jaxrl.algos import ppo

RESULTS = Path(__file__).parent / "results"
ROWS = {
    "mlp": dict(torso="mlp"),
    "cnn": dict(torso="cnn"),
    "gru": dict(torso="mlp", core="gru"),
    "cnn_gru": dict(torso="cnn", core="gru"),
}


def row(env: str, name: str, steps: int, core_size: int, repeats: int) -> dict:
    config = presets.get("ppo", env, total_timesteps=steps, core_size=core_size, **ROWS[name])
    compile_s, run_s, (_, metrics) = measure(ppo.make_train(config), jax.random.key(0), repeats=repeats)
    n = env_steps(config)
    return {
        "network": name,
        "env_steps": n,
        "compile_s": round(compile_s, 2),
        "run_s": round(run_s, 2),
        "steps_per_s": round(n / run_s),
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }


def markdown(record: dict) -> str:
    lines = [
        f"# PPO torsos on {record['env']} ({record['date']})",
        "",
        f"{record['env_steps']} env steps per row, one seed, 64 envs x 128 steps, 4 x 8 minibatches; "
        f"GRU of {record['core_size']} units; load average before "
        f"{[round(x, 2) for x in record['machine']['load_average_1_5_15min']]} "
        f"on {record['machine']['cpu_count']} CPUs ({record['machine']['processor']}).",
        "",
        "| network | compile s | run s | steps/s | vs mlp | load after (1, 5, 15 min) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    base = record["rows"][0]["steps_per_s"]
    for r in record["rows"]:
        lines.append(
            f"| {r['network']} | {r['compile_s']:.1f} | {r['run_s']:.1f} | {r['steps_per_s']:,} | "
            f"{r['steps_per_s'] / base:.3g} | {r['load_after']} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="Breakout-MinAtar")
    parser.add_argument("--steps", type=int, default=64 * 128 * 8, help="env steps per row (8 iterations)")
    parser.add_argument("--core-size", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of {', '.join(ROWS)}")
    parser.add_argument("--out", default=str(RESULTS / "torsos"))
    args = parser.parse_args(argv)
    record = {
        "env": args.env,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "core_size": args.core_size,
        "machine": machine(),
        "rows": [],
    }
    for name in args.rows.split(","):
        record["rows"].append(row(args.env, name, args.steps, args.core_size, args.repeats))
        print(record["rows"][-1], flush=True)
    record["env_steps"] = record["rows"][0]["env_steps"]
    write_json(args.out + ".json", record)
    Path(args.out + ".md").write_text(markdown(record))
    print(markdown(record))


if __name__ == "__main__":
    main()
