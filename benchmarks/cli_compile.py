"""`jaxrl` against `jaxrl` from the command line: two source trees (two commits' worktrees, or a change against
main) running the same `jaxrl train` or `jaxrl pbt` command, alternating in one run, one machine.

    git worktree add /tmp/base main
    python -m benchmarks.cli_compile --base /tmp/base --rounds 2 --out benchmarks/results/NAME

`--change` defaults to this repository. Each run is a fresh `python -m jaxrl.cli ...` process, started in an empty
folder with that tree's `jaxrl` package first on `PYTHONPATH` (checked before the run) and JAX's persistent
compilation cache off (`--compile-cache none`), base then change in even rounds and the reverse in odd ones (ABBA).
Each reports the seconds it took to compile its programs and to train (summary.json's `compile_s` and `run_s`) and
its metrics.csv, compared with the other tree's run of the same case value for value (every column but the wall
clock's `wall_s`). Output: a table of the per-round ratios change / base, and `--out` as `.json` and `.md`.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import machine, write_json
from benchmarks.trees import TREES, short_commit

EXPLORE = "learning_rate=loguniform:1e-4:1e-2"
# case: (command line, the flag naming its run folder)
CASES = {
    "train ppo": (["train", "ppo"], "--run-dir"),  # chunks of one size
    "train ppo --eval-every 5": (["train", "ppo", "--eval-every", "5"], "--run-dir"),
    "train trpo": (["train", "trpo"], "--run-dir"),  # 73 iterations: 18 chunks of 4 and one of 1
    "train impala": (["train", "impala"], "--run-dir"),  # 488 iterations: 19 chunks of 25 and one of 13
    "pbt ppo": (["pbt", "ppo", "--explore", EXPLORE], "--out"),
    "pbt ppo --eval-every 10 --fitness eval": (
        ["pbt", "ppo", "--explore", EXPLORE, "--eval-every", "10", "--fitness", "eval"],
        "--out",
    ),
}


def metrics_table(path: Path) -> list[list[str]] | None:
    """metrics.csv's rows without the wall clock's column (None when there is no file)."""
    if not path.is_file():
        return None
    rows = list(csv.reader(path.open()))
    keep = [i for i, name in enumerate(rows[0]) if name != "wall_s"]
    return [[row[i] for i in keep] for row in rows]


def run_tree(tree: Path, case: str, out: Path, timeout_s: float) -> dict:
    """The command of `case` with `tree`'s jaxrl package; its summary's seconds, or the error."""
    with tempfile.TemporaryDirectory(prefix="jaxrl-tree-") as only_jaxrl:
        (Path(only_jaxrl) / "jaxrl").symlink_to(tree.resolve() / "jaxrl")
        env = {**os.environ, "PYTHONPATH": only_jaxrl}
        where = [sys.executable, "-c", "import jaxrl; print(jaxrl.__file__)"]
        source = subprocess.run(where, capture_output=True, text=True, env=env, cwd=only_jaxrl).stdout.strip()
        if Path(source).resolve() != (tree / "jaxrl" / "__init__.py").resolve():
            return {"ok": False, "error": f"imported jaxrl from {source}, not {tree}"}
        argv, folder = CASES[case]
        command = [sys.executable, "-m", "jaxrl.cli", *argv, folder, str(out)]
        command += ["--compile-cache", "none", "--no-progress", "--quiet"]
        begin = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout_s, cwd=only_jaxrl)
        wall = time.perf_counter() - begin
    if done.returncode != 0:
        return {"ok": False, "error": done.stderr[-2000:]}
    summary = json.loads((out / "summary.json").read_text())
    return {"ok": True, "compile_s": summary["compile_s"], "run_s": summary["run_s"], "wall_s": round(wall, 3)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the base tree (a worktree of the base commit)")
    parser.add_argument("--change", type=Path, default=Path(__file__).resolve().parents[1], help="the changed tree")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one run may take")
    parser.add_argument("--out", type=Path, default=None, help="results path without extension (.json and .md)")
    args = parser.parse_args(argv)
    trees = {"base": args.base, "change": args.change}
    load_before = os.getloadavg()
    results = []
    with tempfile.TemporaryDirectory(prefix="jaxrl-cli-compile-") as scratch:
        for round_ in range(args.rounds):
            for case in args.cases:
                for name in TREES if round_ % 2 == 0 else TREES[::-1]:
                    out = Path(scratch) / f"{round_}-{case}-{name}".replace(" ", "_").replace(",", "")
                    result = {"tree": name, "case": case, "round": round_}
                    result |= run_tree(trees[name], case, out, args.timeout)
                    result["metrics_csv"] = str(out / "metrics.csv")
                    results.append(result)
                    shown = result.get("compile_s", result.get("error", "")[-200:])
                    print(f"round {round_} {case} {name}: compile {shown} s", flush=True)
            for case in args.cases:  # the two trees' numbers, value for value
                base, change = (Path(r["metrics_csv"]) for r in results if r["case"] == case and r["round"] == round_)
                same = metrics_table(base) is not None and metrics_table(base) == metrics_table(change)
                for r in results:
                    if r["case"] == case and r["round"] == round_:
                        r["same_metrics_csv"] = same
    for r in results:
        r.pop("metrics_csv")
    rows = []
    for case in args.cases:
        ok = {(r["tree"], r["round"]): r for r in results if r["case"] == case and r["ok"]}
        rounds = [k for k in range(args.rounds) if ("base", k) in ok and ("change", k) in ok]
        if not rounds:
            continue

        def span(tree, key, rounds=rounds, ok=ok):
            values = [ok[tree, k][key] for k in rounds]
            return f"{min(values):.1f}-{max(values):.1f}"

        compile_ratio = [ok["change", k]["compile_s"] / ok["base", k]["compile_s"] for k in rounds]
        run_ratio = [ok["change", k]["run_s"] / ok["base", k]["run_s"] for k in rounds]
        same = all(ok["change", k]["same_metrics_csv"] for k in rounds)
        rows.append(
            f"| {case} | {span('base', 'compile_s')} | {span('change', 'compile_s')} | "
            f"{min(compile_ratio):.2f}-{max(compile_ratio):.2f} ({np.median(compile_ratio):.2f}x) | "
            f"{span('base', 'run_s')} | {span('change', 'run_s')} | {np.median(run_ratio):.2f}x | "
            f"{'yes' if same else 'no'} |"
        )
    commits = {name: short_commit(tree) for name, tree in trees.items()}
    where = machine()
    used = shlex.join(sys.argv[1:] if argv is None else argv)
    loads = [round(x, 2) for x in load_before], [round(x, 2) for x in os.getloadavg()]
    header = [
        "# `jaxrl train` and `jaxrl pbt`: compile and run seconds, two source trees",
        "",
        f"`python -m benchmarks.cli_compile {used}`, base {commits['base']}, change {commits['change']},"
        f" {where['processor']}, {where['cpu_count']} CPUs, load before {loads[0]}, after {loads[1]}; {args.rounds}"
        " rounds alternating (ABBA), ratios change / base per round; the persistent compilation cache off.",
        "",
        "| case | compile s, base | change | compile ratio (median) | run s, base | change | run ratio (median)"
        " | the same metrics |",
        "|---|---|---|---|---|---|---|---|",
    ]
    table = "\n".join(header + rows)
    print(table)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_json(args.out.with_suffix(".json"), {"commits": commits, "machine": where, "results": results})
        args.out.with_suffix(".md").write_text(table + "\n")


if __name__ == "__main__":
    main()
