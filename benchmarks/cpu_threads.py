"""XLA's CPU thread pool of one thread against its default (one per core), by batch size: where one thread wins.

    python -m benchmarks.cpu_threads                 # the CartPole cases, 2 rounds
    python -m benchmarks.cpu_threads --cases dqn ppo_16 --rounds 3

Each (case, pool) runs in a fresh process: `jaxrl.sweep.devices.use_cpu_threads(1)` before JAX starts, or JAX's
default pool. The pools alternate within a case, forward in even rounds and backward in odd ones (ABBA); each
figure is the best of `--repeats` calls of the compiled program (`benchmarks.common.measure`), and each ratio is
one thread over the default in the same round. Cases: DQN at PureJaxRL's CartPole config (10 envs, one update of
128 per iteration) and PPO on CartPole-v1 with 4 to 2048 envs (128 steps, 4 epochs x 4 minibatches; ppo_4 is
PureJaxRL's config). Named only: PPO on Breakout-MinAtar with the convolutional torso at 16 envs (ppo_minatar_16),
and PPO, DQN and SAC at their own defaults (ppo_defaults, dqn_defaults, sac_defaults). Output: a table, and
`benchmarks/results/cpu_threads[_TAG].{json,md}`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).parent / "results"
PPO_ENVS = (4, 16, 64, 256, 2048)
CASES = ("dqn", *(f"ppo_{n}" for n in PPO_ENVS))
MORE = ("ppo_minatar_16", "ppo_defaults", "dqn_defaults", "sac_defaults")  # not run unless named
POOLS = ("default", "1 thread")


def config_of(case: str):
    from benchmarks.limits import DQN_CONFIG
    from jaxrl.algos import dqn, ppo

    if case == "dqn":
        return dqn.Config(**{**DQN_CONFIG, "total_timesteps": 50_000})
    if case.endswith("_defaults"):  # an algorithm's own defaults, as `jaxrl train ALGO` runs it
        from jaxrl.algos import ALGORITHMS

        algo = case.removesuffix("_defaults")
        return ALGORITHMS[algo].Config(total_timesteps={"ppo": 409_600, "dqn": 50_000, "sac": 20_000}[algo])
    if case == "ppo_minatar_16":  # a convolutional torso
        return ppo.Config(
            env="Breakout-MinAtar", torso="cnn", num_envs=16, num_steps=128, total_timesteps=16 * 128 * 12
        )
    num_envs = int(case.removeprefix("ppo_"))
    iterations = max(4, 65_536 * 8 // (num_envs * 128))  # at least half a million env steps a call
    return ppo.Config(
        env="CartPole-v1",
        num_envs=num_envs,
        num_steps=128,
        update_epochs=4,
        num_minibatches=4,
        total_timesteps=iterations * num_envs * 128,
    )


def worker(case: str, pool: str, repeats: int) -> dict:
    """One (case, pool) in this process: compile seconds, the best call's env steps/s."""
    if pool != "default":
        from jaxrl.sweep.devices import use_cpu_threads

        use_cpu_threads(1)
    import jax

    from benchmarks.common import env_steps, measure
    from jaxrl.algos import base

    config = config_of(case)
    compile_s, run_s, _ = measure(base.make_train(config), jax.random.key(0), repeats=repeats)
    return {"case": case, "pool": pool, "compile_s": compile_s, "steps_per_s": env_steps(config) / run_s}


def run_worker(case: str, pool: str, repeats: int) -> dict:
    command = [sys.executable, "-m", "benchmarks.cpu_threads", "--worker", case, pool, "--repeats", str(repeats)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{case} ({pool}): {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: list[dict]) -> list[dict]:
    rows = []
    for case in dict.fromkeys(r["case"] for r in results):
        of = {(r["pool"], r["round"]): r for r in results if r["case"] == case}
        rounds = sorted({r for _, r in of})
        ratios = [of["1 thread", r]["steps_per_s"] / of["default", r]["steps_per_s"] for r in rounds]
        rows.append(
            {
                "case": case,
                "default_steps_per_s": [of["default", r]["steps_per_s"] for r in rounds],
                "one_thread_steps_per_s": [of["1 thread", r]["steps_per_s"] for r in rounds],
                "ratios": ratios,
                "ratio_median": statistics.median(ratios),
                "compile_ratio_median": statistics.median(
                    of["1 thread", r]["compile_s"] / of["default", r]["compile_s"] for r in rounds
                ),
            }
        )
    return rows


def markdown(record: dict) -> str:
    def span(values):
        return f"{min(values) / 1e3:.0f}k-{max(values) / 1e3:.0f}k"

    lines = [
        "# One CPU thread against XLA's default pool",
        "",
        f"`python -m benchmarks.cpu_threads {' '.join(record['argv'])}`, {record['date']}, "
        f"{record['machine']['processor']}, {record['machine']['cpu_count']} CPUs, load before "
        f"{record['load_before']}, after {record['load_after']}; ABBA rounds, one fresh process per run.",
        "",
        "| case | default env steps/s | 1 thread | ratio per round | median | compile ratio |",
        "|---|---|---|---|---|---|",
    ]
    for r in record["table"]:
        lines.append(
            f"| {r['case']} | {span(r['default_steps_per_s'])} | {span(r['one_thread_steps_per_s'])} | "
            f"{', '.join(f'{x:.2f}' for x in r['ratios'])} | {r['ratio_median']:.2f}x | "
            f"{r['compile_ratio_median']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES + MORE))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--tag", default=None, help="results file suffix (the machine)")
    parser.add_argument("--worker", nargs=2, metavar=("CASE", "POOL"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker, args.repeats)))
        return
    from benchmarks.common import machine, write_json

    load_before = [round(x, 2) for x in os.getloadavg()]
    results = []
    for round_index in range(args.rounds):
        for case in args.cases:
            for pool in POOLS if round_index % 2 == 0 else POOLS[::-1]:
                r = {**run_worker(case, pool, args.repeats), "round": round_index}
                results.append(r)
                print(f"round {round_index} {case:9s} {pool:8s} {r['steps_per_s']:>12,.0f} env steps/s", flush=True)
    record = {
        "argv": sys.argv[1:] if argv is None else argv,
        "date": datetime.datetime.now().isoformat(timespec="minutes"),
        "machine": machine(),
        "load_before": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "results": results,
    }
    record["table"] = table(results)
    out = RESULTS / ("cpu_threads" + (f"_{args.tag}" if args.tag else ""))
    write_json(out.with_suffix(".json"), record)
    out.with_suffix(".md").write_text(markdown(record))
    print(markdown(record))


if __name__ == "__main__":
    main()
