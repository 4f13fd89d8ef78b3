"""PPO vs GRPO (outcome, process, branching) vs off-policy GRPO (replay ratios 1, 4) at equal env-step budgets.

For each environment and variant: `jit(vmap(make_train(config)))` over `--seeds` seeds, compile and run seconds as
`benchmarks.common.measure` defines them (`lower().compile()`, then one call). Final return per seed:
`jaxrl.run.report.final_return` (the last 10% of iterations). Env steps are those executed (GRPO's masked steps
after a member's episode ended count as spent; `valid` is the fraction that fed the loss). Throughput is set against
the env-only limit of the same env batch in the same process: random actions through `jit(lax.scan)` of the VecEnv,
vmapped over the seeds.

Outputs: a table on stdout, benchmarks/results/grpo_curves.json (compact; the returns of every seed, binned into at
most 200 groups of iterations) and benchmarks/results/grpo_curves.png (mean and 95% bootstrap interval over
seeds).
Usage: `python -m benchmarks.grpo_curves [--quick] [--envs CartPole-v1 ...] [--variants ppo grpo ...]`.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import platform
from pathlib import Path

import jax
import numpy as np

from benchmarks.common import binned_curve, env_steps, measure, write_json
from benchmarks.throughput import env_loop, random_act
from jaxrl import envs, presets
from jaxrl import rollout as rollout_lib
from jaxrl.algos import grpo, ppo
from jaxrl.plot import bootstrap_interval
from jaxrl.run.report import final_return

RESULTS = Path(__file__).parent / "results"
BUDGETS = {"CartPole-v1": 500_000, "Acrobot-v1": 500_000, "Pendulum-v1": 1_000_000}
PPO_PENDULUM = presets.overrides("ppo", "Pendulum-v1")  # the README's Pendulum config
VARIANTS = {
    "ppo": {},
    "grpo": {},
    "grpo-process": dict(supervision="process"),
    "grpo-branch": dict(group_mode="branch", horizon=100),
    "grpo-replay1": dict(replay_ratio=1),
    "grpo-replay4": dict(replay_ratio=4),
}


def make_config(variant: str, env: str, budget: int):
    if variant == "ppo":
        extra = PPO_PENDULUM if env == "Pendulum-v1" else {}
        return ppo, ppo.Config(env=env, total_timesteps=budget, **extra)
    return grpo, grpo.Config(env=env, total_timesteps=budget, **VARIANTS[variant])


def env_only_steps_per_s(config, seeds: int, key) -> float:
    """Random-action env steps/s of `config.num_envs` envs x `seeds`, the layout the variant runs."""
    env = envs.make(config.env, config.num_envs)
    length = max(1, 200_000 // config.num_envs)
    run = jax.vmap(env_loop(env, lambda _: random_act(env.spec), length), in_axes=(None, 0, 0))
    keys = jax.random.split(key, seeds)
    carries = jax.vmap(lambda k: rollout_lib.reset(env, k))(keys)
    _, best, _ = measure(run, None, carries, keys, repeats=2)
    return length * config.num_envs * seeds / best


def run_variant(variant: str, env: str, budget: int, seeds: int, key, make=make_config) -> dict:
    """One variant's row; `make(variant, env, budget) -> (algorithm module, config)` (default `make_config`)."""
    algo, config = make(variant, env, budget)
    keys = jax.random.split(key, seeds)
    compile_s, run_s, (_, metrics) = measure(jax.vmap(algo.make_train(config)), keys)
    steps = env_steps(config, seeds)
    returns = np.asarray(metrics["episode_return"])  # [seeds, iterations]
    final = final_return(returns)
    mean, low, high = bootstrap_interval(final[:, None])
    curve_steps, curve = binned_curve(returns, config.env_steps_per_iteration)
    env_only = env_only_steps_per_s(config, seeds, key)
    valid = np.asarray(metrics["valid_fraction"]).mean() if "valid_fraction" in metrics else 1.0
    return {
        "env": env,
        "variant": variant,
        "config": {f.name: getattr(config, f.name) for f in dataclasses.fields(config)},
        "seeds": seeds,
        "env_steps": curve_steps,  # at the last iteration of each group
        "returns": curve,  # [seeds, <= 200 groups of iterations], NaN where a seed completed no episode
        "final_per_seed": final.tolist(),
        "final_mean": float(mean[0]),
        "final_ci": [float(low[0]), float(high[0])],
        "compile_s": compile_s,
        "run_s": run_s,
        "steps_per_s": steps / run_s,
        "env_only_steps_per_s": env_only,
        "ratio_to_env_only": steps / run_s / env_only,
        "valid_fraction": float(valid),
    }


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    env_ids = list(dict.fromkeys(r["env"] for r in rows))
    fig, axes = plt.subplots(1, len(env_ids), figsize=(5.5 * len(env_ids), 4.2), dpi=110, squeeze=False)
    for ax, env in zip(axes[0], env_ids, strict=True):
        for r in (r for r in rows if r["env"] == env):
            xs = np.asarray(r["env_steps"])
            mean, low, high = bootstrap_interval(np.asarray(r["returns"], float))
            has = np.isfinite(mean)  # branch mode logs trunk episodes: some iterations complete none
            line = ax.plot(xs[has], mean[has], label=r["variant"], linewidth=1.2)[0]
            ax.fill_between(xs[has], low[has], high[has], color=line.get_color(), alpha=0.2, linewidth=0)
        ax.set_title(f"{env} ({rows[0]['seeds']} seeds, mean and 95% CI)")
        ax.set_xlabel("environment steps executed")
        ax.set_ylabel("episode return")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=list(BUDGETS))
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="a tenth of the budgets, 2 seeds")
    parser.add_argument("--out", default=str(RESULTS / "grpo_curves"))
    parser.add_argument("--replot", action="store_true", help="redraw the PNG from the JSON of an earlier run")
    args = parser.parse_args()
    if args.replot:
        rows = json.loads(Path(args.out).with_suffix(".json").read_text())["rows"]
        return plot(rows, Path(args.out).with_suffix(".png"))
    seeds = 2 if args.quick else args.seeds
    rows = []
    print(
        f"{'env':<13}{'variant':<14}{'final return (95% CI)':>26}{'steps/s':>10}{'/env-only':>10}"
        f"{'compile s':>10}{'valid':>7}"
    )
    for env in args.envs:
        budget = BUDGETS.get(env, 500_000) // (10 if args.quick else 1)
        for variant in args.variants:
            r = run_variant(variant, env, budget, seeds, jax.random.key(0))
            rows.append(r)
            ci = f"{r['final_mean']:.1f} [{r['final_ci'][0]:.1f}, {r['final_ci'][1]:.1f}]"
            print(
                f"{env:<13}{variant:<14}{ci:>26}{r['steps_per_s']:>10.0f}{r['ratio_to_env_only']:>10.3f}"
                f"{r['compile_s']:>10.1f}{r['valid_fraction']:>7.2f}",
                flush=True,
            )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {jax.device_count()} x {jax.devices()[0].device_kind}",
        "jax": jax.__version__,
        "budgets": {env: BUDGETS.get(env, 500_000) // (10 if args.quick else 1) for env in args.envs},
    }
    write_json(out.with_suffix(".json"), {"meta": meta, "rows": rows})
    plot(rows, out.with_suffix(".png"))
    print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
