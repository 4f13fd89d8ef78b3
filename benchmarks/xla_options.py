"""XLA CPU compile options against XLA's defaults, on PureJaxRL's PPO and DQN CartPole configs: what each option
does to compile seconds and to env steps/s, measured in one run.

    python -m benchmarks.xla_options                         # every option set, PPO and DQN, 2 rounds
    python -m benchmarks.xla_options --cases ppo --rounds 3
    python -m benchmarks.xla_options --options "fast-compile preset" --cpu-threads 1

Each option set runs each case in a fresh process (`peer_workers/jaxrl_at_purejaxrl_worker.py`, JAX's persistent
compilation cache off) with the options in `XLA_FLAGS`; the sets alternate forward in even rounds and backward in
odd ones (ABBA), and every figure is a per-round ratio to the default set of the same case and round: compile seconds
(`lower(...).compile()` of the whole jitted train) and throughput (env steps/s, the best of `--repeats` calls).
Output: a table, and `benchmarks/results/xla_options.{json,md}`.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
from pathlib import Path

from benchmarks.common import write_json
from benchmarks.peers import ROOT, run_worker
from benchmarks.purejaxrl import run_record, shown

RESULTS = ROOT / "benchmarks" / "results"
CASES = ("ppo", "ppo_8_seeds", "dqn")  # of benchmarks/peer_workers/purejaxrl_cases.py

# name -> XLA_FLAGS
OPTION_SETS = {
    "default": "",
    "llvm -O1": "--xla_backend_optimization_level=1",
    "llvm -O1, no expensive passes": "--xla_backend_optimization_level=1 --xla_llvm_disable_expensive_passes=true",
    "XNNPACK dots": "--xla_cpu_experimental_xnn_fusion_type=dot",
    "oneDNN dots": "--xla_cpu_experimental_ynn_fusion_type= --xla_cpu_use_onednn=true "
    "--xla_cpu_experimental_onednn_fusion_type=dot",
    "fast-compile preset": "--xla_cpu_opt_preset=FAST_COMPILE",
    "512-bit vectors": "--xla_cpu_prefer_vector_width=512",
    "256-bit vectors": "--xla_cpu_prefer_vector_width=256",  # XLA's width where the runner widens them
    "codegen in 1 part": "--xla_cpu_parallel_codegen_split_count=1",  # XLA's default: up to 32 parts
    "codegen in 2 parts": "--xla_cpu_parallel_codegen_split_count=2",
    "codegen in 8 parts": "--xla_cpu_parallel_codegen_split_count=8",
    "region copy insertion": "--xla_cpu_copy_insertion_use_region_analysis=true",
    "memory-optimized scheduler": "--xla_cpu_scheduler_type=CPU_SCHEDULER_TYPE_MEMORY_OPTIMIZED",
    "concurrency-optimized scheduler": "--xla_cpu_scheduler_type=CPU_SCHEDULER_TYPE_CONCURRENCY_OPTIMIZED",
    "tiling propagation": "--xla_cpu_experimental_enable_tiling_propagation=true",
    "XNNPACK graph fusion": "--xla_cpu_experimental_xnn_graph_fusion_mode=XNN_GRAPH_FUSION_MODE_GREEDY",
}


def order(round_index: int, names: list[str]) -> list[str]:
    """ABBA: the option sets forward in even rounds, backward in odd ones."""
    return names if round_index % 2 == 0 else names[::-1]


def ratio_rows(results: list[dict]) -> list[dict]:
    """Per (case, option set): compile s and steps/s over the rounds, and the median per-round ratio to the default
    set's run of the same case and round."""
    ok = [r for r in results if r.get("ok")]
    default = {(r["case"], r["round"]): r for r in ok if r["options"] == "default"}
    table = []
    for case in dict.fromkeys(r["case"] for r in ok):
        for name in dict.fromkeys(r["options"] for r in ok):
            runs = [r for r in ok if r["case"] == case and r["options"] == name and (case, r["round"]) in default]
            if not runs:
                continue
            compile_ratio = [r["compile_s"] / default[case, r["round"]]["compile_s"] for r in runs]
            speed_ratio = [r["steps_per_s"] / default[case, r["round"]]["steps_per_s"] for r in runs]
            table.append(
                {
                    "case": case,
                    "options": name,
                    "xla_flags": OPTION_SETS[name],
                    "compile_s": [r["compile_s"] for r in runs],
                    "steps_per_s": [r["steps_per_s"] for r in runs],
                    "final_return": [r["final_return"] for r in runs],
                    "compile_ratio": statistics.median(compile_ratio),
                    "throughput_ratio": statistics.median(speed_ratio),
                }
            )
    return table


def _span(values, fmt) -> str:
    return f"{fmt(min(values))}-{fmt(max(values))}"


def markdown(table: list[dict], record: dict) -> str:
    lines = [
        "# XLA CPU compile options against the defaults (PureJaxRL's CartPole configs)",
        "",
        f"`python -m benchmarks.xla_options {shlex.join(record['argv'])}`, jaxrl at {record['commit']}, "
        f"{record['machine']['processor']}, {record['machine']['cpu_count']} CPUs, "
        f"load before {record['load_before']}, after {record['load_after']}; {record['rounds']} rounds alternating "
        "(ABBA), ratios to the default options per round (median).",
        "",
        "| case | XLA_FLAGS | compile s | compile ratio | env steps/s | throughput ratio | final return |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in table:
        lines.append(
            f"| {row['case']} | `{row['xla_flags'] or '(none)'}` | {_span(row['compile_s'], lambda x: f'{x:.2f}')} | "
            f"{row['compile_ratio']:.2f}x | {_span(row['steps_per_s'], lambda x: f'{x / 1e3:.0f}k')} | "
            f"{row['throughput_ratio']:.2f}x | {_span(row['final_return'], lambda x: f'{x:.1f}')} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", default=["ppo", "dqn"], choices=list(CASES))
    parser.add_argument("--options", nargs="+", default=list(OPTION_SETS), choices=list(OPTION_SETS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="calls of each compiled program; the best counts")
    parser.add_argument("--cpu-threads", type=int, default=0, help="XLA's CPU thread pool (0: XLA's default)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per worker")
    parser.add_argument("--out", type=Path, default=RESULTS / "xla_options")
    args = parser.parse_args(argv)
    names = ["default", *(n for n in args.options if n != "default")]
    load_before = os.getloadavg()
    results = []
    for round_index in range(args.rounds):
        for case in args.cases:
            for name in order(round_index, names):
                spec = {"case": case, "repeats": args.repeats, "cpu_threads": args.cpu_threads}
                flags = {"XLA_FLAGS": OPTION_SETS[name]}
                result = run_worker(sys.executable, "jaxrl_at_purejaxrl", spec, args.timeout, flags)
                result.update(case=case, options=name, round=round_index)
                results.append(result)
                print(f"round {round_index} {case:12s} {name:32s} {shown(result, 2)}", flush=True)
    record = run_record(argv, args.rounds, results, load_before)
    record["table"] = ratio_rows(results)
    write_json(args.out.with_suffix(".json"), record)
    text = markdown(record["table"], record)
    args.out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
