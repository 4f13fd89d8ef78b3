"""The results suite: every registered algorithm on the gymnax environments where it applies, >= 8 seeds each
in one `jit(vmap)` program, against the reference returns of gymnax's PPO baselines.

For each (algorithm, environment): the algorithm's default Config with `env` and `total_timesteps` set (plus the
overrides in `OVERRIDES`, configs found to work), compiled once, run once over `--seeds` seeds. Reported: final
return (mean over the last 10% of iterations of each seed; mean over seeds and its 95% bootstrap interval), env
steps, compile and run seconds, env steps/s, the reference return and whether the mean reached it.
An algorithm that does not apply to an environment's action space (its `validate` raises) is listed as n/a.

Outputs: a table on stdout and in benchmarks/results/suite[_quick].md, per-iteration returns of every seed in
benchmarks/results/suite[_quick].json, and one learning-curve PNG per environment in
benchmarks/results/suite[_quick]_<env>.png.

Usage:
  python -m benchmarks.suite --quick     # CartPole-v1 and Pendulum-v1 at a fifth of the budgets: minutes on CPU
  python -m benchmarks.suite             # the whole suite at full budgets (MinAtar at 1e7 steps: a GPU job)
  python -m benchmarks.suite --algos ppo dqn --envs CartPole-v1 Acrobot-v1 --seeds 16
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import time
from pathlib import Path

import jax
import numpy as np

from jaxrl.algos import ALGORITHMS
from jaxrl.configs import to_dict
from jaxrl.plot import bootstrap_interval

RESULTS = Path(__file__).parent / "results"
# env: (env-step budget, reference return of gymnax's PPO baselines at that budget)
ENVIRONMENTS = {
    "CartPole-v1": (500_000, 500.0),
    "Acrobot-v1": (500_000, -80.0),
    "MountainCar-v0": (1_000_000, -118.0),
    "Pendulum-v1": (1_000_000, -130.0),
    "MountainCarContinuous-v0": (1_000_000, 90.0),
    "Breakout-MinAtar": (10_000_000, 28.0),
    "SpaceInvaders-MinAtar": (10_000_000, 300.0),
}
QUICK_ENVIRONMENTS = ("CartPole-v1", "Pendulum-v1")
# Replay-based learners make many gradient steps per env step; their budgets are smaller, as in their papers.
BUDGET_SCALE = {"dqn": 0.2, "ddpg": 0.05, "td3": 0.05, "sac": 0.05}
OVERRIDES = {
    ("ppo", "Pendulum-v1"): dict(  # the README's Pendulum config
        normalize_observations=True,
        num_envs=16,
        num_steps=128,
        update_epochs=10,
        num_minibatches=32,
        learning_rate=1e-3,
        gamma=0.95,
        gae_lambda=0.9,
        ent_coef=0.0,
    ),
    ("trpo", "Pendulum-v1"): dict(  # benchmarks/spectrum_onpolicy.py's Pendulum config
        num_envs=8, num_steps=256, gamma=0.9, max_kl=0.02, vf_epochs=10, normalize_observations=True
    ),
}


def make_config(algo_name: str, env: str, budget: int):
    algo = ALGORITHMS[algo_name]
    config = algo.Config(env=env, total_timesteps=budget, **OVERRIDES.get((algo_name, env), {}))
    algo.validate(config)  # raises ValueError where the algorithm does not apply
    return algo, config


def run_one(algo_name: str, env: str, budget: int, seeds: int, seed: int = 0) -> dict:
    algo, config = make_config(algo_name, env, budget)
    keys = jax.random.split(jax.random.key(seed), seeds)
    start = time.perf_counter()
    compiled = jax.jit(jax.vmap(algo.make_train(config))).lower(keys).compile()
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    _, metrics = jax.block_until_ready(compiled(keys))
    run_s = time.perf_counter() - start
    returns = np.asarray(metrics["episode_return"], float)  # [seeds, iterations], NaN where none ended
    last = max(1, returns.shape[1] // 10)
    with np.errstate(all="ignore"):
        final = np.array([np.nanmean(r[-last:]) if np.isfinite(r[-last:]).any() else np.nan for r in returns])
    mean, low, high = bootstrap_interval(final[:, None])
    steps_per_iteration = config.num_envs * config.num_steps
    steps = config.num_iterations * steps_per_iteration
    return {
        "algo": algo_name,
        "env": env,
        "seeds": seeds,
        "env_steps": steps,
        "final_per_seed": final.tolist(),
        "final_mean": float(mean[0]),
        "final_ci": [float(low[0]), float(high[0])],
        "compile_s": compile_s,
        "run_s": run_s,
        "steps_per_s": steps * seeds / run_s,
        "curve_steps": [steps_per_iteration * (i + 1) for i in range(returns.shape[1])],
        "returns": returns.tolist(),
        "config": to_dict(config),
    }


def table(rows: list[dict], references: dict[str, float]) -> str:
    lines = [
        "| algorithm | env | env steps | final return (95% CI) | reference | reached | seeds | compile s | run s |"
        " steps/s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['algo']} | {r['env']} | n/a: {r['skipped']} |  |  |  |  |  |  |  |")
            continue
        ref = references[r["env"]]
        reached = "yes" if r["final_mean"] >= ref else f"no ({r['final_mean'] - ref:+.1f})"
        lines.append(
            f"| {r['algo']} | {r['env']} | {r['env_steps']:.2g} | {r['final_mean']:.1f} "
            f"[{r['final_ci'][0]:.1f}, {r['final_ci'][1]:.1f}] | {ref:g} | {reached} | {r['seeds']} | "
            f"{r['compile_s']:.1f} | {r['run_s']:.1f} | {r['steps_per_s']:.3g} |"
        )
    return "\n".join(lines)


def plot_env(rows: list[dict], env: str, reference: float, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for r in rows:
        mean, low, high = bootstrap_interval(np.asarray(r["returns"], float))
        xs = np.asarray(r["curve_steps"])
        has = np.isfinite(mean)
        line = ax.plot(xs[has], mean[has], label=r["algo"], linewidth=1.3)[0]
        ax.fill_between(xs[has], low[has], high[has], color=line.get_color(), alpha=0.2, linewidth=0)
    ax.axhline(reference, color="black", linestyle="--", linewidth=0.8, label=f"reference {reference:g}")
    ax.set_xscale("log")
    ax.set_xlabel("environment steps (log)")
    ax.set_ylabel("episode return")
    ax.set_title(f"{env}: mean and 95% bootstrap interval over {rows[0]['seeds']} seeds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", default=list(ALGORITHMS), choices=list(ALGORITHMS))
    parser.add_argument("--envs", nargs="+", default=None, choices=list(ENVIRONMENTS))
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="CartPole-v1 and Pendulum-v1 at a fifth of the budgets")
    parser.add_argument("--out", default=None, help="output prefix (default benchmarks/results/suite[_quick])")
    args = parser.parse_args(argv)
    env_ids = args.envs or (list(QUICK_ENVIRONMENTS) if args.quick else list(ENVIRONMENTS))
    out = Path(args.out or RESULTS / ("suite_quick" if args.quick else "suite"))
    out.parent.mkdir(parents=True, exist_ok=True)
    references = {env: ENVIRONMENTS[env][1] for env in env_ids}
    rows = []
    for env in env_ids:
        for algo_name in args.algos:
            budget = int(ENVIRONMENTS[env][0] * BUDGET_SCALE.get(algo_name, 1.0) / (5 if args.quick else 1))
            try:
                row = run_one(algo_name, env, budget, args.seeds)
            except ValueError as error:  # the algorithm does not apply here (or the budget is too small)
                row = {"algo": algo_name, "env": env, "skipped": str(error).split(";")[0]}
            rows.append(row)
            print(table([row], references).splitlines()[-1], flush=True)
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {jax.device_count()} x {jax.devices()[0].device_kind}",
        "jax": jax.__version__,
        "quick": args.quick,
    }
    text = table(rows, references)
    out.with_suffix(".md").write_text(f"{meta['date']}, {meta['machine']}, jax {meta['jax']}\n\n{text}\n")
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    for env in env_ids:
        ran = [r for r in rows if r["env"] == env and "skipped" not in r]
        if ran:
            plot_env(ran, env, references[env], out.parent / f"{out.name}_{env}.png")
    print(text)
    print(f"wrote {out.with_suffix('.md')}, {out.with_suffix('.json')} and {out.name}_<env>.png")


if __name__ == "__main__":
    main()
