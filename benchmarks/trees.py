"""jaxrl against jaxrl: two source trees (two commits' worktrees, or a change against main) on PureJaxRL's CartPole
cases, alternating in one run, one machine.

    git worktree add /tmp/base main
    python -m benchmarks.trees --base /tmp/base --cases ppo ppo_8_seeds dqn --rounds 2 --out benchmarks/results/NAME

`--change` defaults to this repository. Each tree runs `benchmarks/peer_workers/jaxrl_at_purejaxrl_worker.py` (the
jaxrl side of `benchmarks.purejaxrl`, from this repository) in a fresh process with that tree's `jaxrl` package first
on `PYTHONPATH` and JAX's persistent compilation cache off, base then change in even rounds and the reverse in odd
ones (ABBA). Each tree compiles with its own runner's XLA options (none before `jaxrl.run.compile.compiler_options`).
Every figure is a per-round ratio change / base: env steps/s of the whole jitted train (the best of `--repeats`
calls) and compile seconds. Output: a table, and `--out` as `.json` (every run) and `.md`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import write_json
from benchmarks.peer_workers.purejaxrl_cases import CASES
from benchmarks.peers import ROOT, run_worker
from benchmarks.purejaxrl import commit, run_record, shown

TREES = ("base", "change")


def short_commit(tree: Path) -> str:
    """`tree`'s short commit, and whether its tracked files differ from it."""
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    )
    return commit(tree) + (" with changes" if dirty.stdout.strip() else "")


def run_tree(tree: Path, spec: dict, timeout_s: float) -> dict:
    """The jaxrl worker on `spec`, importing jaxrl from `tree` and everything else (the benchmark's own code
    included) as usual; refuses a result that imported jaxrl from elsewhere."""
    with tempfile.TemporaryDirectory(prefix="jaxrl-tree-") as only_jaxrl:
        (Path(only_jaxrl) / "jaxrl").symlink_to(tree.resolve() / "jaxrl")
        path = os.pathsep.join([only_jaxrl, str(ROOT)])
        result = run_worker(sys.executable, "jaxrl_at_purejaxrl", spec, timeout_s, extra_env={"PYTHONPATH": path})
    if result.get("ok") and Path(result["jaxrl_source"]).resolve() != tree.resolve():
        return {"ok": False, "error": f"imported jaxrl from {result['jaxrl_source']}, not {tree}"}
    return result


def ratio_rows(results: list[dict]) -> list[dict]:
    """Per case: both trees' steps/s and compile s over the rounds, and the per-round ratios change / base."""
    ok = {(r["tree"], r["case"], r["round"]): r for r in results if r["ok"]}
    table = []
    for case in dict.fromkeys(r["case"] for r in results):
        rounds = sorted(
            {k[2] for k in ok if k[1] == case and ("base", case, k[2]) in ok and ("change", case, k[2]) in ok}
        )
        if not rounds:
            continue
        pairs = [(ok["base", case, i], ok["change", case, i]) for i in rounds]
        table.append(
            {
                "case": case,
                "base_steps_per_s": [b["steps_per_s"] for b, _ in pairs],
                "change_steps_per_s": [c["steps_per_s"] for _, c in pairs],
                "throughput_ratio": [c["steps_per_s"] / b["steps_per_s"] for b, c in pairs],
                "base_compile_s": [b["compile_s"] for b, _ in pairs],
                "change_compile_s": [c["compile_s"] for _, c in pairs],
                "compile_ratio": [c["compile_s"] / b["compile_s"] for b, c in pairs],
                "final_return_base": [b["final_return"] for b, _ in pairs],
                "final_return_change": [c["final_return"] for _, c in pairs],
            }
        )
    return table


def markdown(table: list[dict], record: dict) -> str:
    k = lambda v: "-".join(f"{x / 1e3:.1f}k" for x in (min(v), max(v)))  # noqa: E731
    r = lambda v, d=2: "-".join(f"{x:.{d}f}" for x in (min(v), max(v)))  # noqa: E731
    where = record["machine"]
    lines = [
        "# jaxrl against jaxrl on PureJaxRL's CartPole cases",
        "",
        f"`python -m benchmarks.trees {' '.join(record['argv'])}`: base {record['base']}, change {record['change']}; "
        f"{where['processor']}, {where['cpu_count']} CPUs, {record['date']}, load before {record['load_before']}, "
        f"after {record['load_after']}; {record['rounds']} rounds alternating (ABBA), ratios change / base per round.",
        "",
        "| case | base env steps/s | change | ratio | compile s base | change | ratio | final return base / change |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in table:
        returns = f"{r(row['final_return_base'], 1)} / {r(row['final_return_change'], 1)}"
        lines.append(
            f"| {row['case']} | {k(row['base_steps_per_s'])} | {k(row['change_steps_per_s'])} | "
            f"{r(row['throughput_ratio'])} | {r(row['base_compile_s'])} | {r(row['change_compile_s'])} | "
            f"{r(row['compile_ratio'])} | {returns} |"
        )
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", type=Path, required=True, help="the tree to compare against (a worktree)")
    parser.add_argument("--change", type=Path, default=ROOT, help="the tree measured (default: this repository)")
    parser.add_argument("--cases", nargs="+", default=["ppo", "ppo_8_seeds", "dqn"], choices=list(CASES))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="calls of each compiled program; the best counts")
    parser.add_argument("--cpu-threads", type=int, default=1, help="XLA's CPU thread pool (0: XLA's default)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per worker")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "trees")
    args = parser.parse_args(argv)
    for tree in (args.base, args.change):
        if not (tree / "jaxrl" / "__init__.py").is_file():
            parser.error(f"{tree} is not a jaxrl source tree (no jaxrl/__init__.py)")

    trees = {"base": args.base, "change": args.change}
    load_before, results = os.getloadavg(), []
    for i in range(args.rounds):
        for case in args.cases:
            for name in TREES if i % 2 == 0 else TREES[::-1]:
                spec = {
                    "case": case,
                    "repeats": args.repeats,
                    **({"cpu_threads": args.cpu_threads} if args.cpu_threads else {}),
                }
                result = {**run_tree(trees[name], spec, args.timeout), "tree": name, "case": case, "round": i}
                results.append(result)
                print(f"round {i} {case:12s} {name:6s} {shown(result, compile_digits=2)}", flush=True)
    table = ratio_rows(results)
    record = {**run_record(argv, args.rounds, results, load_before), "table": table}
    record.update(base=short_commit(args.base), change=short_commit(args.change))
    write_json(args.out.with_suffix(".json"), record)
    text = markdown(table, record)
    args.out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
