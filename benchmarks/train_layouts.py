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
import statistics

from benchmarks.common import write_json
from benchmarks.seed_devices import RESULTS, alternate, header, train

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
    record = alternate({case: CASES[case] for case in args.cases}, LAYOUTS, args.rounds, train)
    runs = record["runs"]
    write_json(RESULTS / f"{args.out}.json", record)
    lines = [
        *header("`jaxrl train --devices auto` against `--devices 1` (`python -m benchmarks.train_layouts`)", record),
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
