"""`jaxrl train --seeds N` as a user runs it: the seeds split over the CPU devices (`--devices auto`, whole seeds per
device, one XLA CPU device per core) against every seed on one device (`--devices 1`), each a whole `jaxrl train`
process.

    python -m benchmarks.seed_devices [--cases ppo_purejaxrl_8 ppo_4 dqn_4] [--rounds 2] [--tag epyc_avx2]
        [--device-independent] [--processes]

Cases: PPO at PureJaxRL's CartPole config (4 envs x 128 steps, 4 epochs x 4 minibatches) with 8 seeds, and with 5
(on 2 devices padded to 6 with a copy of seed 0), and `jaxrl train ppo` and `jaxrl train dqn` at their defaults with
4 seeds. With `--device-independent`, both layouts also run with `jaxrl train --device-independent` (compiled
without XLA's algebraic simplifier): four layouts, and the table adds each layout's speed against its default
program and whether the two layouts gave the same final return per seed. With `--processes`, two more layouts over
2 processes of one CPU device each (`--coordinator ... --num-processes 2`; process 0's summary.json; the two
processes share the machine's cores as the 2 devices of one process do): the seeds split (`--seed-devices 2`) and
each seed's envs split (`--devices all`). The layouts alternate, forward in even rounds and backward in odd ones
(ABBA). Each figure comes from the run's summary.json: env steps/s over all seeds (compile excluded), compile seconds
(without the persistent compilation cache), the final return per seed and its mean over seeds, and the process's
wall seconds from start to exit.
Output: a table, and `benchmarks/results/seed_devices[_TAG].{json,md}` with the load average before and after.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import machine, write_json

RESULTS = Path(__file__).parent / "results"
PUREJAXRL_PPO = (
    "--num-envs 4 --num-steps 128 --update-epochs 4 --num-minibatches 4 --learning-rate 2.5e-4 --max-grad-norm 0.5"
)
CASES = {
    "ppo_purejaxrl_8": f"ppo {PUREJAXRL_PPO} --total-timesteps 2e5 --seeds 8",
    "ppo_purejaxrl_5": f"ppo {PUREJAXRL_PPO} --total-timesteps 2e5 --seeds 5",
    "ppo_4": "ppo --seeds 4",
    "dqn_4": "dqn --seeds 4",
}
SPLIT, ONE = "seeds split (auto)", "one device"
PROCESSES, PROCESSES_ENVS = "seeds split over 2 processes", "envs split over 2 processes"
LAYOUTS = {SPLIT: "--devices auto", ONE: "--devices 1"}
INDEPENDENT = " --device-independent"  # a layout's name and flags with the simplifier off


def layouts(device_independent: bool, processes: bool = False) -> dict[str, str]:
    """{layout: its `jaxrl train` flags}: split and one device (and split over 2 processes), each also without the
    simplifier when asked."""
    over_processes = {PROCESSES: "--seed-devices 2", PROCESSES_ENVS: "--devices all"}
    chosen = {**LAYOUTS, **(over_processes if processes else {})}
    if not device_independent:
        return chosen
    return {**chosen, **{name + INDEPENDENT: flags + INDEPENDENT for name, flags in chosen.items()}}


def is_split(layout: str) -> bool:
    return layout.startswith((SPLIT, PROCESSES, PROCESSES_ENVS))


def one_device_of(layout: str) -> str:
    """The one-device layout a split `layout` is compared with (the same simplifier setting)."""
    return ONE + INDEPENDENT if layout.endswith(INDEPENDENT) else ONE


def layout_devices(layout: str, run: dict) -> str:
    """The devices a layout's run trained on, in words."""
    if layout.startswith((PROCESSES, PROCESSES_ENVS)):
        return "1 device each"
    return f"{max(run['seed_devices'], run.get('devices', 1))} device(s)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train(arguments: str, flags: str, folder: Path, processes: int = 1) -> dict:
    """One `jaxrl train ARGUMENTS` with the layout's `flags` (over `processes` processes on this machine, one CPU
    device each): process 0's summary.json and the wall seconds until every process exited."""
    run = folder / f"run-{time.monotonic_ns()}"
    argv = [sys.executable, "-m", "jaxrl.cli", "train", *arguments.split(), *flags.split()]
    start = time.perf_counter()
    argv += ["--no-progress", "--compile-cache", "none", "--run-dir", str(run)]  # every run compiles cold
    if processes == 1:
        done = [subprocess.run(argv, capture_output=True, text=True)]
    else:
        port, env = free_port(), {**os.environ, "JAX_PLATFORMS": "cpu"}
        multi = ["--coordinator", f"127.0.0.1:{port}", "--num-processes", str(processes), "--process-id"]
        procs = [
            subprocess.Popen(
                [*argv, *multi, str(i)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for i in range(processes)
        ]
        outputs = [p.communicate() for p in procs]  # each sets its process's returncode
        done = [subprocess.CompletedProcess(p.args, p.returncode, *out) for p, out in zip(procs, outputs, strict=True)]
    wall = time.perf_counter() - start
    for finished in done:
        if finished.returncode:
            raise RuntimeError(f"{' '.join(finished.args)} failed:\n{finished.stderr[-2000:]}")
    summary = json.loads((run / "summary.json").read_text())
    return {
        "steps_per_second": summary["steps_per_second"],
        "compile_s": summary["compile_s"],
        "final_return_mean": summary["final_return_mean"],
        "final_return_per_seed": summary["final_return_per_seed"],
        "seed_devices": summary.get("seed_devices", 1),
        "devices": summary["devices"],  # each seed's data-parallel devices
        "wall_s": round(wall, 2),
    }


def alternate(cases: dict[str, str], layouts: dict[str, str], rounds: int, run=train, processes=None) -> dict:
    """Every case's `jaxrl train ARGUMENTS` (`cases`: name -> arguments) under each layout (`layouts`: name -> its
    flags) `rounds` times, the layouts forward in even rounds and backward in odd ones (ABBA), each by `run` (default
    `train`) over `processes[layout]` processes (default 1). Returns the result file's record: the date, the
    machine, the load before and after, the cases, the layouts and the runs ({case: {layout: [a result per round]}})."""
    load_before = os.getloadavg()
    runs: dict[str, dict[str, list[dict]]] = {case: {layout: [] for layout in layouts} for case in cases}
    with tempfile.TemporaryDirectory() as tmp:
        for case, arguments in cases.items():
            for round_ in range(rounds):
                for layout in list(layouts)[:: 1 if round_ % 2 == 0 else -1]:
                    count = (processes or {}).get(layout, 1)
                    runs[case][layout].append(run(arguments, layouts[layout], Path(tmp), count))
                    print(case, layout, runs[case][layout][-1], flush=True)
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "rounds": rounds,
        "cases": {case: f"jaxrl train {arguments}" for case, arguments in cases.items()},
        "layouts": layouts,
        "runs": runs,
    }


def header(title: str, record: dict) -> list[str]:
    """A result table's heading lines: `title`, then the machine, the load and the rounds of `alternate`'s
    `record`."""
    return [
        f"# {title}",
        "",
        f"{record['machine']['processor']}, {record['machine']['cpu_count']} CPUs; load before "
        f"{record['load_before']}, after {record['load_after']}; {record['rounds']} round(s), ABBA; each a whole "
        "`jaxrl train` process.",
        "",
    ]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--out", default=None, help="result files' name (default seed_devices[_TAG])")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--tag", default="")
    parser.add_argument("--device-independent", action="store_true", help="also each layout without the simplifier")
    parser.add_argument("--processes", action="store_true", help="also the seeds split over 2 processes")
    args = parser.parse_args(argv)
    chosen = layouts(args.device_independent, args.processes)
    processes = {layout: 2 if layout.startswith((PROCESSES, PROCESSES_ENVS)) else 1 for layout in chosen}
    record = alternate({case: CASES[case] for case in args.cases}, chosen, args.rounds, train, processes)
    runs = record["runs"]
    name = args.out or "seed_devices" + (f"_{args.tag}" if args.tag else "")
    write_json(RESULTS / f"{name}.json", record)
    lines = [
        *header("Seeds split over the CPU devices against one device (`python -m benchmarks.seed_devices`)", record),
        "| case | layout | env steps/s | split / one device, per round | without / with the simplifier, per round "
        "| compile s | wall s | final return |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def ratios(a: list[dict], b: list[dict]) -> str:
        return ", ".join(f"{x['steps_per_second'] / y['steps_per_second']:.2f}" for x, y in zip(a, b, strict=True))

    for case, rows_of in runs.items():
        for layout, rows in rows_of.items():
            speeds = [r["steps_per_second"] for r in rows]
            split = ratios(rows, rows_of[one_device_of(layout)]) if is_split(layout) else ""
            default = layout.removesuffix(INDEPENDENT)
            simplifier = ratios(rows, rows_of[default]) if layout != default else ""
            lines.append(
                f"| `{CASES[case]}` | {layout} ({layout_devices(layout, rows[0])}) | "
                f"{min(speeds) / 1e3:.0f}k-{max(speeds) / 1e3:.0f}k | {split} | {simplifier} | "
                f"{statistics.median(r['compile_s'] for r in rows):.1f} | "
                f"{statistics.median(r['wall_s'] for r in rows):.1f} | "
                f"{statistics.median(r['final_return_mean'] for r in rows):.1f} |"
            )
    lines.append("")
    for case, rows_of in runs.items():  # the final return of every seed, the same on both layouts or not
        for layout in (n for n in rows_of if is_split(n)):
            same = all(
                a["final_return_per_seed"] == b["final_return_per_seed"]
                for a, b in zip(rows_of[layout], rows_of[one_device_of(layout)], strict=True)
            )
            split_name = layout.removesuffix(INDEPENDENT)
            mode = "without the simplifier" if layout.endswith(INDEPENDENT) else "default program"
            lines.append(
                f"- `{CASES[case]}`, {mode}: the same final return per seed, {split_name} and one device: {same}."
            )
    text = "\n".join(lines) + "\n"
    (RESULTS / f"{name}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
