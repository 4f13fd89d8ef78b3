"""Craftax-1M: PPO on `craftax:Craftax-Symbolic-v1` for 1e6 env steps, with an MLP and with a memory core.

Each row trains `ppo.make_train` on `--seeds` seeds vmapped in one program, at Craftax's own PPO baseline settings
(Craftax_Baselines' `ppo.py` and `ppo_rnn.py`: 1024 envs x 64 steps, 4 epochs x 8 minibatches, lr 2e-4 annealed,
gamma 0.99, GAE lambda 0.8, clip 0.2, entropy 0.01, value 0.5, gradient norm 1.0, tanh, 512 units). The MLP is
3 x 512 for the actor and the critic, as the baseline's; a core (`--cores gru`) sits after one 512-unit layer, as
the baseline's RNN does, with 512 units. 1e6 steps at 65,536 per iteration are 15 iterations (983,040 steps);
`--num-envs 256` makes 61 iterations of 16,384.

The score is the return of the episodes that ended in the last 10% of iterations (`jaxrl.run.report.final_return`)
as a percentage of Craftax-Symbolic's largest return, 226 (the sum of its achievement rewards), the measure of
Craftax's published scoreboard (PPO-RNN at 1e6 steps: 2.3%). The interval is the 95% percentile bootstrap over the
seeds that finished an episode in that window (`jaxrl.scores.stratified_bootstrap_ci`). compile_s and run_s as
`benchmarks.common.measure` defines them (one call); the program's memory as `compiled.memory_analysis()`.

Usage: `python -m benchmarks.craftax_1m [--cores none gru] [--seeds 4] [--steps 1000000] [--num-envs N]
[--out PATH]` -> benchmarks/results/craftax_1m.{json,md,png}, rows merged by core, envs, steps and seeds.
`--quick` is a smoke run (8 envs x 8 steps, 2 iterations, 2 seeds) that any CPU finishes; its figures are not
results. The full run wants an accelerator: on two CPU cores Craftax-Symbolic steps about 400 env steps/s under
PPO, so one row takes hours.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path

import jax
import numpy as np

from benchmarks.common import binned_curve, env_steps, machine, measure, merge_rows, program_memory, write_json
from jaxrl import scores
from jaxrl.algos import ppo
from jaxrl.run.report import final_return

RESULTS = Path(__file__).parent / "results"
ENV = "craftax:Craftax-Symbolic-v1"
MAX_RETURN = 226.0  # the sum of Craftax's achievement rewards (craftax.craftax.constants.ACHIEVEMENT_REWARD_MAP)
SCOREBOARD = {"PPO-RNN": 2.3}  # Craftax-1M, % of the largest return

# Craftax_Baselines' PPO defaults (ppo.py, ppo_rnn.py)
BASELINE = dict(
    num_envs=1024,
    num_steps=64,
    update_epochs=4,
    num_minibatches=8,
    learning_rate=2e-4,
    anneal_lr=True,
    gamma=0.99,
    gae_lambda=0.8,
    clip_eps=0.2,
    ent_coef=0.01,
    vf_coef=0.5,
    max_grad_norm=1.0,
    activation="tanh",
)
QUICK = dict(num_envs=8, num_steps=8, num_minibatches=2)


def config_for(core: str, steps: int, quick: bool, num_envs: int | None = None) -> ppo.Config:
    """The baseline's settings with an MLP of 3 x 512 (core "none") or one 512-unit layer before a 512-unit core;
    `num_envs`, when given, replaces the baseline's 1024 (fewer envs: more, smaller updates in the same steps)."""
    width = 32 if quick else 512
    network = {"hidden_sizes": (width,) * 3} if core == "none" else {"hidden_sizes": (width,), "core_size": width}
    settings = {**BASELINE, **(QUICK if quick else {}), **({"num_envs": num_envs} if num_envs else {})}
    return ppo.Config(env=ENV, core=core, total_timesteps=steps, **settings, **network)


def score(episode_return):
    """Craftax-1M's score of runs `episode_return` [seeds, iterations]: (final return [seeds], % of the largest
    return [seeds], the finite ones among those, their mean, its 95% percentile bootstrap interval [2]). A seed
    with no episode ended in the last 10% of iterations has NaN and is left out of the mean and the interval."""
    final = np.asarray(final_return(episode_return), np.float64)
    percent = 100.0 * final / MAX_RETURN
    finished = percent[np.isfinite(percent)]
    if not finished.size:
        return final, percent, finished, float("nan"), np.full(2, np.nan)
    point, interval = scores.stratified_bootstrap_ci({"runs": finished[:, None]}, scores.mean, reps=10_000)
    return final, percent, finished, float(point["runs"]), np.asarray(interval["runs"], np.float64).reshape(2)


def row(core: str, steps: int, seeds: int, quick: bool, num_envs: int | None = None) -> dict:
    config = config_for(core, steps, quick, num_envs)
    ppo.validate(config)
    train = jax.vmap(ppo.make_train(config))
    keys = jax.random.split(jax.random.key(0), seeds)
    memory = {}
    print(f"{core}: compiling {config.num_iterations} iterations x {seeds} seeds ...", flush=True)
    compile_s, run_s, (_, metrics) = measure(
        train, keys, on_compiled=lambda compiled: memory.update(bytes=program_memory(compiled))
    )
    episode_return = np.asarray(metrics["episode_return"], np.float64)  # [seeds, iterations]
    final, percent, finished, mean, interval = score(episode_return)
    curve_steps, curve = binned_curve(episode_return, config.env_steps_per_iteration)
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "device": device_name(),
        "core": core,
        "env": config.env,
        "seeds": seeds,
        "num_envs": config.num_envs,
        "num_steps": config.num_steps,
        "iterations": config.num_iterations,
        "env_steps_per_seed": env_steps(config),
        "hidden_sizes": list(config.hidden_sizes),
        "core_size": config.core_size if core != "none" else None,
        "final_return_per_seed": final.round(3).tolist(),
        "percent_of_max_per_seed": percent.round(3).tolist(),
        "seeds_with_finished_episodes": int(finished.size),
        "percent_of_max_mean": mean,
        "percent_of_max_interval_95": interval.tolist(),
        "compile_s": round(compile_s, 1),
        "run_s": round(run_s, 2),
        "env_steps_per_s": round(env_steps(config, seeds) / run_s),
        "program_memory_bytes": memory.get("bytes"),
        "curve_env_steps": curve_steps,
        "curve_return_per_seed": curve,
    }


def device_name() -> str:
    device = jax.devices()[0]
    return f"{device.device_kind} ({device.platform})"


def key(r: dict) -> tuple:
    return r["core"], r["num_envs"], r["num_steps"], r["env_steps_per_seed"], r["seeds"]


def merge(path: Path, rows: list[dict]) -> list[dict]:
    """The rows at `path` (if any) with `rows` replacing those of the same `key`, in first-seen order."""
    return merge_rows(path, rows, key)


def plot(record: dict, path: Path) -> None:
    """Each row's learning curve, % of the largest return against env steps: the mean over seeds, and the band
    from the lowest to the highest seed; the scoreboard's PPO-RNN as a dashed line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for r in record["rows"]:
        steps = np.asarray(r["curve_env_steps"])
        percent = 100.0 * np.asarray(r["curve_return_per_seed"], np.float64) / MAX_RETURN  # [seeds, points]
        label = f"{'MLP' if r['core'] == 'none' else r['core']}, {r['num_envs']} envs"
        (line,) = ax.plot(steps, np.nanmean(percent, axis=0), label=label)
        ax.fill_between(
            steps, np.nanmin(percent, axis=0), np.nanmax(percent, axis=0), alpha=0.2, color=line.get_color()
        )
    for name, value in SCOREBOARD.items():
        ax.axhline(value, color="grey", linestyle="--", linewidth=1, label=f"scoreboard {name}")
    ax.set_xlabel("env steps per seed")
    ax.set_ylabel("% of the largest return")
    ax.set_title("PPO on Craftax-Symbolic, 1e6 steps")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def markdown(record: dict) -> str:
    m = record["machine"]
    lines = [
        "# Craftax-1M: PPO on Craftax-Symbolic for 1e6 env steps",
        "",
        "Generated by `python -m benchmarks.craftax_1m` (the setup is its docstring). Score: the return of the",
        "episodes that ended in the last 10% of iterations as a percentage of the largest return (226), mean over",
        f"seeds with its 95% bootstrap interval; Craftax's scoreboard has PPO-RNN at {SCOREBOARD['PPO-RNN']}% at 1e6",
        "steps.",
        f"Device: {record['device']}; jax {m['jax']}; the date of each row is in the JSON.",
        "",
        "| core | envs x steps | iterations | seeds | env steps per seed | % of max (95% interval) | % per seed "
        "| return per seed | compile s | run s | env steps/s (all seeds) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in record["rows"]:
        low, high = r["percent_of_max_interval_95"]
        lines.append(
            f"| {r['core']} | {r['num_envs']} x {r['num_steps']} | {r['iterations']} | {r['seeds']} | "
            f"{r['env_steps_per_seed']:,} | {r['percent_of_max_mean']:.2f} [{low:.2f}, {high:.2f}] | "
            f"{', '.join(f'{p:.2f}' for p in r['percent_of_max_per_seed'])} | "
            f"{', '.join(f'{x:.2f}' for x in r['final_return_per_seed'])} | {r['compile_s']} | {r['run_s']} | "
            f"{r['env_steps_per_s']:,} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", nargs="+", default=["none", "gru"], help="memory cores; none is the MLP")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=1_000_000, help="env steps per seed")
    parser.add_argument("--num-envs", type=int, default=None, help="envs per seed (default: the baseline's 1024)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 8 envs x 8 steps, 2 iterations, 2 seeds")
    parser.add_argument("--out", default=str(RESULTS / "craftax_1m"), help="writes OUT.json and OUT.md")
    args = parser.parse_args(argv)
    if args.quick:
        args.steps, args.seeds = 2 * QUICK["num_envs"] * QUICK["num_steps"], 2
    start = time.perf_counter()
    out = Path(args.out + ".json")
    rows = []
    for core in args.cores:
        rows.append(row(core, args.steps, args.seeds, args.quick, args.num_envs))
        record = {
            "device": device_name(),
            "machine": machine(),
            "args": vars(args),
            "wall_s": round(time.perf_counter() - start, 1),
            "scoreboard_percent_of_max": SCOREBOARD,
            "rows": merge(out, rows),
        }
        write_json(out, record)
        out.with_suffix(".md").write_text(markdown(record))
        plot(record, out.with_suffix(".png"))
        summary = {k: v for k, v in rows[-1].items() if not k.startswith("curve")}
        print(json.dumps(summary), flush=True)
    print(markdown(record))


if __name__ == "__main__":
    main()
