"""`jaxrl train` with one seed as a user runs it: `--devices auto` (data-parallel over one XLA CPU device per core
where `device_rules.cpu_data_parallel_pays`, else one device) against `--devices 1`, each a whole `jaxrl train`
process with the CPU thread pool it picks and no persistent compilation cache (`benchmarks.seed_devices.train`).

    python -m benchmarks.train_layouts [--cases grpo dpo ppo_64x128] [--rounds 2] [--out NAME]

The cases span the rule's two counts: environments per device (`MIN_ENVS_PER_CPU_DEVICE`) and samples of an
iteration's rollout per device (`MIN_SAMPLES_PER_CPU_DEVICE`, learners without a replay buffer). The layouts
alternate, forward in even rounds and backward in odd ones (ABBA). Each figure comes from the run's summary.json:
env steps/s (compile excluded), compile seconds, the devices it trained on and the final return.
Output: a table, and `benchmarks/results/NAME.{json,md}` (default `train_layouts`) with the load before and after.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import tempfile
from pathlib import Path

from benchmarks.common import machine, write_json
from benchmarks.seed_devices import RESULTS, train

# name: `jaxrl train` arguments; samples an iteration = num_envs x num_steps (GRPO, DPO: 32 members x 500 steps)
CASES = {
    "ppo_default": "ppo --total-timesteps 3e5",  # 16 x 64 = 1,024 samples: one device
    "ppo_32x64": "ppo --num-envs 32 --total-timesteps 3e5",  # 2,048: one device
    "ppo_64x128": "ppo --num-envs 64 --num-steps 128 --total-timesteps 1e6",  # 8,192: data-parallel
    "ppo_32x512": "ppo --num-envs 32 --num-steps 512 --total-timesteps 1e6",  # 16,384: data-parallel
    "grpo": "grpo --total-timesteps 6.4e5",  # 16,000: data-parallel
    "dpo": "dpo --total-timesteps 6.4e5",  # 16,000: data-parallel
}
LAYOUTS = {"auto": "--devices auto", "one device": "--devices 1"}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="train_layouts")
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    runs: dict[str, dict[str, list[dict]]] = {case: {layout: [] for layout in LAYOUTS} for case in args.cases}
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases:
            for round_ in range(args.rounds):
                for layout in list(LAYOUTS)[:: 1 if round_ % 2 == 0 else -1]:
                    runs[case][layout].append(train(CASES[case], LAYOUTS[layout], Path(tmp)))
                    print(case, layout, runs[case][layout][-1], flush=True)
    record = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "cases": {case: f"jaxrl train {CASES[case]}" for case in args.cases},
        "layouts": LAYOUTS,
        "runs": runs,
    }
    write_json(RESULTS / f"{args.out}.json", record)
    lines = [
        "# `jaxrl train --devices auto` against `--devices 1` (`python -m benchmarks.train_layouts`)",
        "",
        f"{record['machine']['processor']}, {record['machine']['cpu_count']} CPUs; load before "
        f"{record['load_before']}, after {record['load_after']}; {args.rounds} round(s), ABBA; each a whole "
        "`jaxrl train` process.",
        "",
        "| case | devices auto took | env steps/s, auto | one device | auto / one device, per round "
        "| compile s, auto | one device | final return, auto | one device |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for case, rows_of in runs.items():
        auto, one = rows_of["auto"], rows_of["one device"]
        pairs = zip(auto, one, strict=True)
        ratios = ", ".join(f"{a['steps_per_second'] / b['steps_per_second']:.2f}" for a, b in pairs)
        speeds = {name: [r["steps_per_second"] for r in rows] for name, rows in rows_of.items()}
        lines.append(
            f"| `jaxrl train {CASES[case]}` | {auto[0]['devices']} | "
            + " | ".join(f"{min(s) / 1e3:.0f}k-{max(s) / 1e3:.0f}k" for s in speeds.values())
            + f" | {ratios} | "
            + " | ".join(f"{statistics.median(r['compile_s'] for r in rows):.1f}" for rows in rows_of.values())
            + " | "
            + " | ".join(f"{statistics.median(r['final_return_mean'] for r in rows):.1f}" for rows in rows_of.values())
            + " |"
        )
    text = "\n".join(lines) + "\n"
    (RESULTS / f"{args.out}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
