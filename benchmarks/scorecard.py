"""The scorecard: every registered algorithm on the gymnax environments where it applies, >= 8 seeds each
in one `jit(vmap)` program, against the reference returns of gymnax's PPO baselines.

For each (algorithm, environment): the algorithm's default Config with `env` and `total_timesteps` set (plus the
package's presets, `jaxrl.presets`: configs found to work), compiled once, run once over `--seeds` seeds (compile
and run seconds as `benchmarks.common.measure` defines them). Reported: final return (`jaxrl.run.report.final_return` of
each seed: the mean over its last 10% of iterations of the training episodes, under the stochastic behaviour
policy; mean over seeds and its 95% bootstrap interval), the evaluation return (the library's own deterministic
evaluation, `jaxrl.run.evaluate`, of each seed's final policy on `--eval-episodes` fresh episodes, default 32; mean
over seeds and its 95% interval), env steps, compile and run seconds, env steps/s, the reference return and which
of the two returns reached it. The references are gymnax's PPO checkpoints evaluated, so the evaluation column is
the like-for-like one.
An algorithm that does not apply to an environment's action space (its `validate` raises) is listed as n/a.

Outputs: a table on stdout and in benchmarks/results/scorecard[_quick].md, the returns of every seed binned into at
most 200 groups of iterations in benchmarks/results/scorecard[_quick].json (compact), and one learning-curve PNG per
environment in benchmarks/results/scorecard[_quick]_<env>.png. The aggregate metrics of the evaluation returns
(IQM, median, mean, optimality gap with 95% stratified bootstrap intervals, and performance profiles) come from
`jaxrl.report`, as `jaxrl report` computes them: a table in the .md (and on the docs' scorecard page, from the same
function), the plots in scorecard[_quick]_aggregates.png and scorecard[_quick]_profiles.png. `--from-json` rewrites
the .md and the PNGs from the .json alone, running nothing.

The results files are rewritten after every row, and `--resume` keeps the rows already in them (same entry,
env, budget at least as large), so an interrupted scorecard loses at most the row it was running.

Entries are the registered algorithms plus `VARIANTS` (e.g. `grpo-replay`: GRPO with one replayed batch per
fresh one). `--budget-fraction F` runs every entry at F times its budget; the table's "budget" column gives the
fraction, so a row run short of the reference budget says so.

Usage:
  python -m benchmarks.scorecard --quick     # CartPole-v1 and Pendulum-v1 at a fifth of the budgets: minutes on CPU
  python -m benchmarks.scorecard             # every cell at full budgets (MinAtar at 1e7 steps: a GPU job)
  python -m benchmarks.scorecard --algos ppo dqn --envs CartPole-v1 Acrobot-v1 --seeds 16
  python -m benchmarks.scorecard --envs Breakout-MinAtar --algos ppo pqn --budget-fraction 0.1 --resume
  python -m benchmarks.scorecard --from-json # the .md and PNGs again, from benchmarks/results/scorecard.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
from pathlib import Path

import jax
import numpy as np

from benchmarks.common import binned_curve, env_steps, measure, write_json
from jaxrl import presets, report
from jaxrl.algos import ALGORITHMS, base
from jaxrl.algos.base import to_dict
from jaxrl.plot import bin_iterations, bootstrap_interval
from jaxrl.run.compile import eval_keys
from jaxrl.run.evaluate import evaluate
from jaxrl.run.report import final_return

RESULTS = Path(__file__).parent / "results"
# env: (env-step budget, reference return of gymnax's PPO baselines at that budget)
ENVIRONMENTS = {
    "CartPole-v1": (500_000, 500.0),
    "Acrobot-v1": (500_000, -80.0),
    "MountainCar-v0": (1_000_000, -118.0),
    "Pendulum-v1": (1_000_000, -130.0),
    "MountainCarContinuous-v0": (1_000_000, 90.0),
    # gymnax README's MinAtar PPO checkpoints (github.com/RobertTLange/gymnax, "Implemented Accelerated Environments")
    "Asterix-MinAtar": (10_000_000, 15.0),
    "Breakout-MinAtar": (10_000_000, 28.0),
    "Freeway-MinAtar": (10_000_000, 58.0),
    "SpaceInvaders-MinAtar": (10_000_000, 131.0),
}
QUICK_ENVIRONMENTS = ("CartPole-v1", "Pendulum-v1")
# name: (registered algorithm, config overrides that make the variant)
VARIANTS = {"grpo-replay": ("grpo", dict(replay_ratio=1))}
# Replay-based learners make many gradient steps per env step; their budgets are smaller, as in their papers.
BUDGET_SCALE = {"dqn": 0.2, "ddpg": 0.05, "td3": 0.05, "sac": 0.05}
# Per-(algorithm, env) configs are the package's presets (`jaxrl.presets`); a variant uses its algorithm's.


ENTRIES = [*ALGORITHMS, *VARIANTS]


def make_config(entry: str, env: str, budget: int):
    """The entry's algorithm and its Config on `env`: defaults, then the variant's and the (entry, env) overrides."""
    algo_name, variant = VARIANTS.get(entry, (entry, {}))
    algo = ALGORITHMS[algo_name]
    config = presets.get(algo_name, env, total_timesteps=budget, **variant)
    algo.validate(config)  # raises ValueError where the algorithm does not apply
    return algo, config


def budget_for(entry: str, env: str, fraction: float = 1.0) -> int:
    algo_name = VARIANTS.get(entry, (entry,))[0]
    return int(ENVIRONMENTS[env][0] * BUDGET_SCALE.get(algo_name, 1.0) * fraction)


EVAL_EPISODES = 32


def evaluate_final(algo, config, states, seed: int, episodes: int = EVAL_EPISODES) -> np.ndarray:
    """[seeds] the mean return of `episodes` fresh episodes of each seed's final policy, deterministic (its mode),
    on the runner's evaluation key stream (`jaxrl.run.compile.eval_keys`)."""
    seeds = jax.tree.leaves(states)[0].shape[0]

    def one(state, key):
        act, normalize = base.evaluation_policy(config, state, deterministic=True, algo=algo)
        return evaluate(config.env, act, key, episodes, normalize=normalize)["mean_return"]

    return np.asarray(jax.jit(jax.vmap(one))(states, eval_keys(seed, seeds)), float)


def run_one(entry: str, env: str, budget: int, seeds: int, seed: int = 0, eval_episodes: int = EVAL_EPISODES) -> dict:
    algo, config = make_config(entry, env, budget)
    keys = jax.random.split(jax.random.key(seed), seeds)
    compile_s, run_s, (states, metrics) = measure(jax.vmap(algo.make_train(config)), keys)
    returns = np.asarray(metrics["episode_return"], float)  # [seeds, iterations], NaN where none ended
    final = final_return(returns)
    mean, low, high = bootstrap_interval(final[:, None])
    evaluated = evaluate_final(algo, config, states, seed, eval_episodes)
    eval_mean, eval_low, eval_high = bootstrap_interval(evaluated[:, None])
    steps = env_steps(config)
    curve_steps, curve = binned_curve(returns, config.env_steps_per_iteration)
    return {
        "algo": entry,
        "env": env,
        "seeds": seeds,
        "budget": budget,
        "env_steps": steps,
        "final_per_seed": final.tolist(),
        "final_mean": float(mean[0]),
        "final_ci": [float(low[0]), float(high[0])],
        "eval_episodes": eval_episodes,
        "eval_per_seed": evaluated.tolist(),
        "eval_mean": float(eval_mean[0]),
        "eval_ci": [float(eval_low[0]), float(eval_high[0])],
        "compile_s": compile_s,
        "run_s": run_s,
        "steps_per_s": steps * seeds / run_s,
        "curve_steps": curve_steps,
        "returns": curve,  # [seeds, <= 200]: binned iterations, NaN where none ended
        "config": to_dict(config),
    }


def table(rows: list[dict], references: dict[str, float]) -> str:
    """Markdown table; "budget" is the row's env-step budget as a fraction of the entry's full budget."""
    lines = [
        "| algorithm | env | env steps | budget | training return (95% CI) | reached | eval return (95% CI) |"
        " reached | reference | seeds | compile s | run s | steps/s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['algo']} | {r['env']} | n/a: {r['skipped']} |" + "  |" * 10)
            continue
        ref = references[r["env"]]
        fraction = r["budget"] / budget_for(r["algo"], r["env"])
        lines.append(
            f"| {r['algo']} | {r['env']} | {r['env_steps']:.2g} | {fraction:.2g} | {r['final_mean']:.1f} "
            f"[{r['final_ci'][0]:.1f}, {r['final_ci'][1]:.1f}] | {_reached(r['final_mean'], ref)} | "
            + (
                f"{r['eval_mean']:.1f} [{r['eval_ci'][0]:.1f}, {r['eval_ci'][1]:.1f}] | {_reached(r['eval_mean'], ref)}"
                if "eval_mean" in r
                else "not run | "
            )
            + f" | {ref:g} | {r['seeds']} | {r['compile_s']:.1f} | {r['run_s']:.1f} | {r['steps_per_s']:.3g} |"
        )
    return "\n".join(lines)


def _reached(value: float, reference: float) -> str:
    return "yes" if value >= reference else f"no ({value - reference:+.1f})"


def matrix(rows: list[dict], references: dict[str, float]) -> str:
    """One line per entry, one column per environment: the training and the evaluation return (means over seeds),
    the budget fraction when short of the full budget, and for each whether it reached the reference (yes) or by
    how much it fell short."""
    envs = list(dict.fromkeys(r["env"] for r in rows))
    cells = {(r["algo"], r["env"]): r for r in rows}
    lines = [
        "| algorithm | " + " | ".join(f"{env} ({references[env]:g})" for env in envs) + " |",
        "|---|" + "---|" * len(envs),
    ]
    for entry in dict.fromkeys(r["algo"] for r in rows):
        line = []
        for env in envs:
            r = cells.get((entry, env))
            if r is None:
                line.append("not run")
            elif "skipped" in r:
                line.append("n/a")
            else:
                fraction = r["budget"] / budget_for(entry, env)
                short = "" if fraction == 1 else f" at {fraction:.2g} budget"
                cell = f"train {_gap(r['final_mean'], references[env])}"
                if "eval_mean" in r:
                    cell += f" / eval {_gap(r['eval_mean'], references[env])}"
                line.append(cell + short)
        lines.append(f"| {entry} | " + " | ".join(line) + " |")
    return "\n".join(lines)


def _gap(value: float, reference: float) -> str:
    gap = value - reference
    return f"{value:.1f} ({'yes' if gap >= 0 else f'{gap:+.1f}'})"


def plot_env(rows: list[dict], env: str, reference: float, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=110)
    for r in rows:
        xs, returns = bin_iterations(np.asarray(r["returns"], float), np.asarray(r["curve_steps"]), bins=40)
        mean, low, high = bootstrap_interval(returns)
        has = np.isfinite(mean)
        line = ax.plot(xs[has], mean[has], label=r["algo"], linewidth=1.3)[0]
        ax.fill_between(xs[has], low[has], high[has], color=line.get_color(), alpha=0.2, linewidth=0)
    ax.axhline(reference, color="black", linestyle="--", linewidth=0.8, label=f"reference {reference:g}")
    ax.set_xscale("log")
    ax.set_xlabel("environment steps (log)")
    ax.set_ylabel("episode return")
    ax.set_title(f"{env}: mean and 95% bootstrap interval, {rows[0]['seeds']} seeds", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)


AGGREGATE_REPS = 2_000  # bootstrap resamples of every interval of the aggregate metrics
AGGREGATE_SEED = 0


def score_matrices(rows: list[dict]) -> tuple[dict[str, np.ndarray], dict[str, list[str]]]:
    """Per entry, the normalised scores of its evaluation returns [seeds, tasks] over the envs it ran on, and
    those envs (`jaxrl.report.score_matrices`: the random and reference returns of `jaxrl/reference_scores.toml`)."""
    entries = [
        report.Entry(r["algo"], r["env"], np.asarray(r["eval_per_seed"], float), Path(), False)
        for r in sorted(rows, key=lambda r: ENTRIES.index(r["algo"]) if r["algo"] in ENTRIES else len(ENTRIES))
        if r.get("eval_per_seed")
    ]
    return report.score_matrices(entries)


def aggregates(rows: list[dict]):
    """(matrices, tasks, results): the score matrices and every metric of `jaxrl.report.METRICS` with its interval."""
    matrices, tasks = score_matrices(rows)
    results = report.aggregates(matrices, AGGREGATE_REPS, AGGREGATE_SEED) if matrices else {}
    return matrices, tasks, results


def aggregate_section(rows: list[dict], images: str) -> str:
    """The Markdown of the aggregate metrics (`jaxrl.report.aggregate_table`) with the links to their plots
    `<images>_aggregates.png` and `<images>_profiles.png`; empty without evaluation returns."""
    matrices, tasks, results = aggregates(rows)
    if not matrices:
        return ""
    lines = [
        "## Aggregate metrics",
        "",
        "Normalised evaluation scores, (return - random) / (reference - random) with the returns of "
        "`jaxrl/reference_scores.toml`, computed by `jaxrl.report` as `jaxrl report` does: each algorithm over the "
        f"tasks where it applies, one run per seed; 95% stratified bootstrap intervals, {AGGREGATE_REPS} resamples, "
        f"seed {AGGREGATE_SEED}.",
        "",
        *report.aggregate_table(matrices, tasks, results),
        "",
        f"![aggregate metrics]({images}_aggregates.png)",
        "",
        f"![performance profiles]({images}_profiles.png)",
    ]
    return "\n".join(lines) + "\n"


def load_rows(path: Path) -> list[dict]:
    return json.loads(path.read_text())["rows"] if path.exists() else []


def render_results(out: Path, rows: list[dict], meta: dict) -> None:
    """The table and the aggregate metrics (markdown), one learning-curve PNG per environment and the aggregate
    plots, from the rows alone."""
    references = {env: ENVIRONMENTS[env][1] for env in ENVIRONMENTS}
    rows = sorted(rows, key=lambda r: (list(ENVIRONMENTS).index(r["env"]), ENTRIES.index(r["algo"])))
    text = table(rows, references)
    summary = matrix(rows, references)
    section = aggregate_section(rows, out.name)
    head = f"{meta['date']}, {meta['machine']}, jax {meta['jax']}"
    out.with_suffix(".md").write_text(f"{head}\n\n{summary}\n\n{text}\n" + (f"\n{section}" if section else ""))
    for env in dict.fromkeys(r["env"] for r in rows):
        ran = [r for r in rows if r["env"] == env and "skipped" not in r]
        if ran:
            plot_env(ran, env, references[env], out.parent / f"{out.name}_{env}.png")
    matrices, _, results = aggregates(rows)
    if matrices:
        pngs = [out.parent / f"{out.name}_{kind}.png" for kind in ("aggregates", "profiles")]
        report.plot_aggregates(matrices, results, AGGREGATE_REPS, AGGREGATE_SEED, *pngs)


def write_results(out: Path, rows: list[dict], meta: dict) -> None:
    """Every row with its curves (JSON), then `render_results`; rewritten after each row."""
    rows = sorted(rows, key=lambda r: (list(ENVIRONMENTS).index(r["env"]), ENTRIES.index(r["algo"])))
    write_json(out.with_suffix(".json"), {"meta": meta, "rows": rows})
    render_results(out, rows, meta)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algos", nargs="+", default=ENTRIES, choices=ENTRIES)
    parser.add_argument("--envs", nargs="+", default=None, choices=list(ENVIRONMENTS))
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--eval-episodes", type=int, default=EVAL_EPISODES, help="evaluation episodes per seed")
    parser.add_argument("--quick", action="store_true", help="CartPole-v1 and Pendulum-v1 at a fifth of the budgets")
    parser.add_argument("--budget-fraction", type=float, default=None, help="run at this fraction of the budgets")
    parser.add_argument("--resume", action="store_true", help="keep the rows already in the output files")
    parser.add_argument("--out", default=None, help="output prefix (default benchmarks/results/scorecard[_quick])")
    parser.add_argument("--from-json", action="store_true", help="rewrite the .md and PNGs from the .json; run nothing")
    args = parser.parse_args(argv)
    if args.seeds < 1 or (args.budget_fraction is not None and not 0 < args.budget_fraction <= 1):
        parser.error("--seeds must be >= 1 and --budget-fraction in (0, 1]")
    fraction = args.budget_fraction or (0.2 if args.quick else 1.0)
    env_ids = args.envs or (list(QUICK_ENVIRONMENTS) if args.quick else list(ENVIRONMENTS))
    out = Path(args.out or RESULTS / ("scorecard_quick" if args.quick else "scorecard"))
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.from_json:
        if not out.with_suffix(".json").is_file():
            parser.error(f"--from-json: {out.with_suffix('.json')} does not exist")
        saved = json.loads(out.with_suffix(".json").read_text())
        render_results(out, saved["rows"], saved["meta"])
        print(f"wrote {out.with_suffix('.md')}, {out.name}_<env>.png and {out.name}_aggregates.png, _profiles.png")
        return
    rows = load_rows(out.with_suffix(".json")) if args.resume else []
    references = {env: ENVIRONMENTS[env][1] for env in ENVIRONMENTS}
    meta = {
        "machine": f"{platform.machine()}, {jax.device_count()} x {jax.devices()[0].device_kind}",
        "jax": jax.__version__,
    }
    for env in env_ids:
        for entry in args.algos:
            budget = budget_for(entry, env, fraction)
            done = [r for r in rows if (r["algo"], r["env"]) == (entry, env)]
            if any("skipped" in r or r["budget"] >= budget for r in done):  # a longer run is kept
                continue
            try:
                make_config(entry, env, budget)
            except ValueError as error:  # the algorithm does not apply here (or the budget is too small)
                row = {"algo": entry, "env": env, "skipped": str(error).split(";")[0]}
            else:  # an error while training is a bug to see, not an n/a row
                row = run_one(entry, env, budget, args.seeds, eval_episodes=args.eval_episodes)
            rows = [r for r in rows if (r["algo"], r["env"]) != (entry, env)] + [row]
            meta["date"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
            write_results(out, rows, meta)
            print(table([row], references).splitlines()[-1], flush=True)
    print(table(rows, references))
    print(f"wrote {out.with_suffix('.md')}, {out.with_suffix('.json')} and {out.name}_<env>.png")


if __name__ == "__main__":
    main()
