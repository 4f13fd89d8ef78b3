"""V-MPO on CartPole-v1 and Pendulum-v1: final return per seed, its 95% interval, steps/s and compile seconds.

For each environment: `jit(vmap(make_train(config)))` over `--seeds` seeds, compile and run seconds as
`benchmarks.common.measure` defines them (`lower().compile()`, then one call); steps/s = env steps of all seeds /
run seconds. Final return per seed: `jaxrl.run.report.final_return` (the last 10% of iterations, stochastic
policy); the interval is `jaxrl.plot.bootstrap_interval` (95%, percentile bootstrap over seeds). CartPole runs the
defaults; Pendulum the config in `CONFIGS` (normalised observations, gamma 0.95, 128-step rollouts, 10 x 32
minibatches at learning rate 1e-3, as the README's PPO Pendulum config).

Outputs: a table on stdout and in benchmarks/results/vmpo_results.md, compact JSON (every seed's final return and
its learning curve binned into at most 200 groups of iterations) in benchmarks/results/vmpo_results.json.
Usage: `python -m benchmarks.vmpo_results [--seeds 8] [--envs CartPole-v1 Pendulum-v1]`.
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import jax
import numpy as np

from benchmarks.common import binned_curve, env_steps, machine, measure, write_json
from jaxrl.algos import base, vmpo
from jaxrl.plot import bootstrap_interval
from jaxrl.run.report import final_return

RESULTS = Path(__file__).parent / "results"
CONFIGS = {
    "CartPole-v1": dict(total_timesteps=500_000),
    "Pendulum-v1": dict(
        total_timesteps=500_000,
        learning_rate=1e-3,
        normalize_observations=True,
        gamma=0.95,
        gae_lambda=0.9,
        num_steps=128,
        update_epochs=10,
        num_minibatches=32,
    ),
}
TARGETS = {"CartPole-v1": 475.0}


def run_env(env: str, seeds: int, key) -> dict:
    config = vmpo.Config(env=env, **CONFIGS[env])
    compile_s, run_s, (_, metrics) = measure(jax.vmap(vmpo.make_train(config)), jax.random.split(key, seeds))
    returns = np.asarray(metrics["episode_return"])
    final = final_return(returns)
    mean, low, high = bootstrap_interval(final[:, None])
    steps, curve = binned_curve(returns, config.env_steps_per_iteration)
    row = {
        "env": env,
        "config": {k: v for k, v in base.to_dict(config).items() if k in CONFIGS[env] or k == "env"},
        "seeds": seeds,
        "final_return": [round(float(x), 2) for x in final],
        "mean": round(float(mean[0]), 2),
        "ci95": [round(float(low[0]), 2), round(float(high[0]), 2)],
        "steps_per_s": round(env_steps(config, seeds) / run_s),
        "compile_s": round(compile_s, 1),
        "run_s": round(run_s, 1),
        "final_kl": round(float(np.mean(np.asarray(metrics["step_kl"])[:, -10:])), 5),
        "final_temperature": round(float(np.mean(np.asarray(metrics["temperature"])[:, -10:])), 4),
        "curve_steps": steps,
        "curve": curve,
    }
    if env in TARGETS:
        row["seeds_reaching"] = int((final >= TARGETS[env]).sum())
        row["target"] = TARGETS[env]
    return row


def markdown(rows: list[dict]) -> str:
    lines = [
        "| env | budget | final return per seed | mean [95% CI] | steps/s | compile s |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        per_seed = ", ".join(f"{x:g}" for x in r["final_return"])
        budget = f"{CONFIGS[r['env']]['total_timesteps']:.0e}".replace("e+0", "e")
        lines.append(
            f"| {r['env']} | {budget} | {per_seed} | {r['mean']:g} [{r['ci95'][0]:g}, {r['ci95'][1]:g}] | "
            f"{r['steps_per_s'] / 1000:.0f}k | {r['compile_s']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--envs", nargs="+", default=list(CONFIGS))
    args = parser.parse_args()
    rows = []
    for i, env in enumerate(args.envs):
        rows.append(run_env(env, args.seeds, jax.random.key(i)))
        print({k: v for k, v in rows[-1].items() if not k.startswith("curve")}, flush=True)
    table = markdown(rows)
    print(table)
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    write_json(RESULTS / "vmpo_results.json", {"date": stamp, "machine": machine(), "rows": rows})
    header = f"# V-MPO results\n\n{args.seeds} seeds, `python -m benchmarks.vmpo_results` ({stamp}).\n\n"
    (RESULTS / "vmpo_results.md").write_text(header + table)


if __name__ == "__main__":
    main()
