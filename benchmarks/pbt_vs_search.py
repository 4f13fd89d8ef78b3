"""Does population-based training pay? PBT against random search over the same priors and against the default
config, at equal total env steps (P members x the same per-member budget), on PPO Acrobot-v1, PPO Pendulum-v1 and
DQN CartPole-v1.

Each procedure trains P members and keeps the best one, the member with the highest final training return
(`jaxrl.run.report.final_return`: the mean episode return of its last 10% of iterations):

* pbt: `jaxrl.pbt.make_pbt`, every member drawn from the priors (`keep_base=False`), exploit/explore every
  `ready` iterations;
* random search: the same P draws from the same priors (the same key, so rep r starts from PBT rep r's
  population), trained independently (`jax.vmap(base.train)`);
* default: P seeds of the algorithm's default Config.

Every procedure runs `--reps` independent repetitions (keys `split(key(seed), reps)`), all of them in ONE compiled
program (`jax.vmap` over repetitions). The best member of each repetition is then evaluated with its deterministic
policy on `--eval-episodes` fresh episodes. Reported per task and procedure: the best member's final training
return and its evaluation return (means over repetitions with 95% bootstrap intervals, `jaxrl.scores`), the
population's spread (the standard deviation of the members' final returns, mean over repetitions), steps/s
(every member's env steps over the run seconds) and compile seconds; P(pbt > random search) of the evaluation
returns; and, for PBT, the schedule its best member's lineage followed (traced back through its parents), plotted
per task.

Usage: `python -m benchmarks.pbt_vs_search [--reps 4] [--tasks ppo-Acrobot-v1 ...] [--scale 1.0]`; writes
benchmarks/results/pbt_vs_search.{json,md,png} (`--out` another stem). `--scale` multiplies every per-member
budget (0.05 for a smoke run).
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import time
from pathlib import Path
from typing import Any, NamedTuple

import jax
import numpy as np

from benchmarks.common import machine, write_json
from jaxrl import pbt, scores
from jaxrl.algos import base, dqn, ppo
from jaxrl.episodes import evaluate
from jaxrl.run.report import final_return

RESULTS = Path(__file__).resolve().parent / "results"
PROCEDURES = ("pbt", "random search", "default")


class Task(NamedTuple):
    """A benchmark task: the algorithm, its Config (the per-member budget in total_timesteps) and the PBT
    settings (population, ready, explore priors)."""

    algo: Any
    config: Any
    pbt: pbt.PBTConfig


TASKS = {
    "ppo-Acrobot-v1": Task(
        ppo,
        ppo.Config(env="Acrobot-v1", num_envs=16, num_steps=64, total_timesteps=100_000),
        pbt.PBTConfig(
            population=8,
            ready=8,
            explore={"learning_rate": "loguniform:1e-4:1e-2", "ent_coef": "uniform:0:0.05"},
            keep_base=False,
        ),
    ),
    "ppo-Pendulum-v1": Task(
        ppo,
        ppo.Config(env="Pendulum-v1", num_envs=16, num_steps=128, normalize_observations=True, total_timesteps=300_000),
        pbt.PBTConfig(
            population=8,
            ready=8,
            explore={"learning_rate": "loguniform:1e-4:1e-2", "gamma": "uniform:0.9:0.999"},
            keep_base=False,
        ),
    ),
    "dqn-CartPole-v1": Task(
        dqn,
        dqn.Config(env="CartPole-v1", total_timesteps=60_000),
        pbt.PBTConfig(
            population=8,
            ready=300,
            explore={"learning_rate": "loguniform:3e-5:3e-3", "gamma": "uniform:0.9:0.999"},
            keep_base=False,
        ),
    ),
}


def scaled(task: Task, scale: float) -> Task:
    """The task with every per-member budget times `scale` (ready shrunk to keep about as many ready steps)."""
    if scale == 1.0:
        return task
    steps = max(int(task.config.total_timesteps * scale), 2 * task.config.env_steps_per_iteration)
    config = task.config.replace(total_timesteps=steps)
    if hasattr(config, "learning_starts"):
        config = config.replace(learning_starts=min(config.learning_starts, steps // 4))
    ready = max(1, min(config.num_iterations, int(task.pbt.ready * scale)))
    return task._replace(config=config, pbt=dataclasses.replace(task.pbt, ready=ready))


def programs(task: Task):
    """{procedure: rep_keys [R] -> (states [R, P, ...], metrics {name: [R, P, iterations]}, lineage or None)}.
    Rep r of every procedure splits its key as `make_pbt` does, so random search trains PBT's first population
    and every procedure the same member keys."""
    config, settings = task.config, task.pbt
    size = settings.population
    run_pbt = pbt.make_pbt(config, settings)

    def random_search(key):
        k_population, k_members, _ = jax.random.split(key, 3)
        configs = pbt.initial_population(config, settings, k_population)
        states, metrics = jax.vmap(base.train)(configs, jax.random.split(k_members, size))
        return states, metrics, None

    def default(key):
        _, k_members, _ = jax.random.split(key, 3)
        states, metrics = jax.vmap(lambda k: base.train(config, k))(jax.random.split(k_members, size))
        return states, metrics, None

    return {"pbt": jax.vmap(run_pbt), "random search": jax.vmap(random_search), "default": jax.vmap(default)}


def best_members(episode_return: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(final returns [R, P], best member [R]): the best member is the one of highest final return."""
    final = final_return(np.asarray(episode_return))
    return final, np.argmax(np.nan_to_num(final, nan=-np.inf), axis=1)


def evaluate_best(task: Task, states, best: np.ndarray, episodes: int, seed: int) -> np.ndarray:
    """[R] mean return of each repetition's best member's deterministic policy on `episodes` fresh episodes."""
    chosen = jax.tree.map(lambda x: x[np.arange(len(best)), best], states)

    def one(state):
        act, normalize = base.evaluation_policy(task.config, state, deterministic=True, algo=task.algo)
        return evaluate(task.config.env, act, jax.random.key(seed), episodes, normalize=normalize)["mean_return"]

    return np.asarray(jax.jit(jax.vmap(one))(chosen))


def ancestry(lineage, member: int) -> dict[str, np.ndarray]:
    """{name: [K + 1]} the hyperparameters member `member` (at the end) and its ancestors trained with in each of
    the K + 1 blocks between ready steps: traced back through `parent` (lineage arrays [K, P], one rep's)."""
    parent = np.asarray(lineage.parent)
    steps = parent.shape[0]
    out = {n: np.empty(steps + 1) for n in lineage.names}
    for name in lineage.names:
        out[name][steps] = np.asarray(lineage.next_hyperparameters[name])[steps - 1, member]
    current = member
    for k in range(steps - 1, -1, -1):
        current = int(parent[k, current])
        for name in lineage.names:
            out[name][k] = np.asarray(lineage.hyperparameters[name])[k, current]
    return out


def interval(values, seed: int = 0, reps: int = 20_000) -> tuple[float, list[float]]:
    """Mean over the repetitions with a finite value and its 95% bootstrap interval
    (`scores.stratified_bootstrap_ci`, one task); NaN where none is finite."""
    values = np.asarray(values, np.float64)
    values = values[np.isfinite(values)]
    if not values.size:
        return float("nan"), [float("nan")] * 2
    points, intervals = scores.stratified_bootstrap_ci({"x": values[:, None]}, scores.mean, reps, seed=seed)
    return float(points["x"]), [float(v) for v in intervals["x"]]


def run_task(name: str, task: Task, reps: int, seed: int, episodes: int) -> dict:
    keys = jax.random.split(jax.random.key(seed), reps)
    steps_per_member = task.config.num_iterations * task.config.env_steps_per_iteration
    record = {
        "algo": base.name_of(task.algo),
        "env": task.config.env,
        "config": base.to_dict(task.config),
        "pbt": {**dataclasses.asdict(task.pbt), "explore": dict(task.pbt.explore)},
        "env_steps_per_member": steps_per_member,
        "env_steps_per_iteration": task.config.env_steps_per_iteration,
        "iterations": task.config.num_iterations,
        "env_steps_per_procedure_and_rep": steps_per_member * task.pbt.population,
        "procedures": {},
    }
    evals = {}
    for procedure, program in programs(task).items():
        start = time.perf_counter()
        compiled = jax.jit(program).lower(keys).compile()
        compile_s = time.perf_counter() - start
        start = time.perf_counter()
        states, metrics, lineage = jax.block_until_ready(compiled(keys))
        run_s = time.perf_counter() - start
        final, best = best_members(metrics["episode_return"])
        evals[procedure] = evaluate_best(task, states, best, episodes, seed + 1)
        entry = {
            "best_final": final[np.arange(reps), best].tolist(),
            "best_eval": evals[procedure].tolist(),
            "spread": [float(np.std(row[np.isfinite(row)])) if np.isfinite(row).any() else None for row in final],
            "members_final": final.tolist(),
            "compile_s": round(compile_s, 2),
            "run_s": round(run_s, 2),
            "steps_per_s": reps * task.pbt.population * steps_per_member / run_s,
        }
        entry["best_final_mean"], entry["best_final_ci"] = interval(entry["best_final"])
        entry["best_eval_mean"], entry["best_eval_ci"] = interval(entry["best_eval"])
        if lineage is not None:
            host = jax.tree.map(np.asarray, lineage)
            entry["ready_iterations"] = host.iteration[0].tolist()
            entry["schedules"] = [
                {n: v.tolist() for n, v in ancestry(jax.tree.map(lambda x, r=r: x[r], host), int(best[r])).items()}
                for r in range(reps)
            ]
            entry["exploited_per_step"] = int(host.exploited[0].sum(-1)[0])
        record["procedures"][procedure] = entry
        print(
            f"{name:16s} {procedure:13s} best final {entry['best_final_mean']:8.1f} eval {entry['best_eval_mean']:8.1f}"
            f"  spread {_mean(entry['spread']):6.1f}  compile {compile_s:5.1f} s  run {run_s:6.1f} s",
            flush=True,
        )
    for other in ("random search", "default"):
        points, intervals = scores.stratified_bootstrap_ci(
            {"p": (evals["pbt"][:, None], evals[other][:, None])}, scores.probability_of_improvement, 20_000, seed=seed
        )
        record[f"p_pbt_beats_{other.replace(' ', '_')}"] = [float(points["p"]), intervals["p"].tolist()]
    return record


def _mean(values) -> float:
    finite = [v for v in values if v is not None and np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


def _ci(mean: float, ci: list[float]) -> str:
    return f"{mean:.1f} [{ci[0]:.1f}, {ci[1]:.1f}]"


def verdict(record: dict) -> str:
    """One plain sentence: whether PBT's best evaluation return beats random search's and the default's, by their
    intervals (overlapping intervals: no measured gain)."""
    procedures = record["procedures"]
    low, high = procedures["pbt"]["best_eval_ci"]
    parts = []
    for other in ("random search", "default"):
        o_low, o_high = procedures[other]["best_eval_ci"]
        p, (p_low, p_high) = record[f"p_pbt_beats_{other.replace(' ', '_')}"]
        if low > o_high:
            word = "PBT is better than"
        elif high < o_low:
            word = "PBT is worse than"
        else:
            word = "no measured difference from"
        parts.append(f"{word} {other} (P(pbt > {other}) = {p:.2f} [{p_low:.2f}, {p_high:.2f}])")
    return "; ".join(parts)


def schedule_text(record: dict) -> str:
    """Where the best PBT member's schedules went: per explored hyperparameter the median over repetitions of
    its first and last value, and in how many repetitions it ended at a bound of its prior."""
    schedules = record["procedures"]["pbt"]["schedules"]
    parts = []
    for name, spec in record["pbt"]["explore"].items():
        low, high = (float(v) for v in spec.split(":")[1:])
        first = np.median([s[name][0] for s in schedules])
        last = np.array([s[name][-1] for s in schedules])
        at_bound = int(np.sum(np.isclose(last, low, rtol=1e-5) | np.isclose(last, high, rtol=1e-5)))
        parts.append(
            f"{name} from {first:.3g} to {np.median(last):.3g} (medians), at a bound of its prior at the end in "
            f"{at_bound} of {len(schedules)}"
        )
    return "; ".join(parts)


def write_markdown(path: Path, result: dict) -> Path:
    lines = [
        "# PBT against random search and the default config",
        "",
        f"{result['date']}, commit {result['commit']}, {result['machine']['processor']}, "
        f"{result['machine']['cpu_count']} CPU(s), jax {result['machine']['jax']}.",
        "",
        f"Load (`uptime`) before: {result['uptime_before']}; after: {result['uptime_after']}. Whole benchmark "
        f"{result['wall_s'] / 60:.1f} min.",
        "",
        f"{result['reps']} independent repetitions per procedure (all in one compiled program); each procedure "
        "trains P members at the same per-member budget (equal total env steps) and keeps the member of best final "
        "training return (its last 10% of iterations), evaluated with its deterministic policy on "
        f"{result['eval_episodes']} fresh episodes. Means over repetitions with 95% bootstrap intervals; spread: the "
        "standard deviation of the P members' final returns (mean over repetitions); steps/s: every member's env "
        "steps over the run seconds. Random search trains PBT's initial population (the same draws) without "
        "exploit/explore; default: P seeds of the default Config.",
        "",
    ]
    for name, record in result["tasks"].items():
        settings = record["pbt"]
        priors = ", ".join(f"{k} {v}" for k, v in settings["explore"].items())
        lines += [
            f"## {name}",
            "",
            f"P = {settings['population']} members x {record['env_steps_per_member']:,} env steps "
            f"({record['env_steps_per_procedure_and_rep']:,} per procedure and repetition); ready every "
            f"{settings['ready']} iterations, truncation {settings['truncation']}, priors: {priors}.",
            "",
            "| procedure | best final return | best eval return | spread | steps/s | compile s |",
            "|---|---|---|---|---|---|",
        ]
        for procedure, entry in record["procedures"].items():
            lines.append(
                f"| {procedure} | {_ci(entry['best_final_mean'], entry['best_final_ci'])} | "
                f"{_ci(entry['best_eval_mean'], entry['best_eval_ci'])} | {_mean(entry['spread']):.1f} | "
                f"{entry['steps_per_s']:.3g} | {entry['compile_s']:.1f} |"
            )
        lines += ["", f"Evaluation return: {verdict(record)}.", "", f"PBT's schedules: {schedule_text(record)}.", ""]
    lines += [f"Schedules of each repetition's best PBT member: `{result['plot']}`.", ""]
    path.write_text("\n".join(lines))
    return path


def plot_schedules(path: Path, result: dict) -> Path:
    """One row per task, one panel per explored hyperparameter: the schedule each repetition's best PBT member
    followed (its lineage traced back through its parents)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    from jaxrl.plot import save_figure

    tasks = result["tasks"]
    columns = max(len(r["pbt"]["explore"]) for r in tasks.values())
    fig, axes = plt.subplots(len(tasks), columns, figsize=(4.5 * columns, 2.8 * len(tasks)), dpi=110, squeeze=False)
    for row, (name, record) in enumerate(tasks.items()):
        entry = record["procedures"]["pbt"]
        per_iteration, iterations = record["env_steps_per_iteration"], record["iterations"]
        xs = np.array([0, *entry["ready_iterations"], iterations]) * per_iteration
        for col, hyper in enumerate(record["pbt"]["explore"]):
            ax = axes[row, col]
            for r, schedule in enumerate(entry["schedules"]):
                ys = np.concatenate([schedule[hyper], schedule[hyper][-1:]])
                ax.step(xs, ys, where="post", alpha=0.8, label=f"rep {r}")
            ax.set_title(f"{name}: {hyper}", fontsize=9)
            if "learning_rate" in hyper:
                ax.set_yscale("log")
            ax.set_xlabel("env steps per member")
            ax.xaxis.set_major_formatter(EngFormatter())
            ax.grid(alpha=0.3)
        for col in range(len(record["pbt"]["explore"]), columns):
            axes[row, col].axis("off")
    axes[0, 0].legend(fontsize=7)
    fig.suptitle("hyperparameter schedules of the best PBT member of each repetition", fontsize=10)
    return save_figure(fig, path)


def _shell(*command: str) -> str:
    return subprocess.run(command, capture_output=True, text=True, cwd=RESULTS.parent.parent).stdout.strip()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=4)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--eval-episodes", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(RESULTS / "pbt_vs_search"))
    args = parser.parse_args(argv)
    start = time.perf_counter()
    result = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "commit": _shell("git", "rev-parse", "--short", "HEAD"),
        "uptime_before": _shell("uptime"),
        "machine": machine(),
        "args": vars(args),
        "reps": args.reps,
        "eval_episodes": args.eval_episodes,
        "tasks": {},
    }
    for name in args.tasks:
        task = scaled(TASKS[name], args.scale)
        result["tasks"][name] = run_task(name, task, args.reps, args.seed, args.eval_episodes)
    result["wall_s"] = round(time.perf_counter() - start, 1)
    result["uptime_after"] = _shell("uptime")
    out = Path(args.out)
    result["plot"] = out.with_suffix(".png").name
    write_json(out.with_suffix(".json"), result)
    plot_schedules(out.with_suffix(".png"), result)
    print(write_markdown(out.with_suffix(".md"), result).read_text())


if __name__ == "__main__":
    main()
