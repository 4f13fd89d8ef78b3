"""jaxrl side by side with PureJaxRL's own `ppo.py` and `dqn.py` on CartPole-v1, in one run, one machine.

    python -m benchmarks.purejaxrl --source PUREJAXRL/purejaxrl          # every case, 2 rounds
    python -m benchmarks.purejaxrl --source DIR --cases ppo dqn --rounds 3

`--source` is a checkout of PureJaxRL's `purejaxrl/` folder (github.com/luchris429/purejaxrl; only read, to be
run). PureJaxRL runs on gymnax 0.0.9 (it unpacks the old 5-value step), so it gets its own venv,
`benchmarks/.venv-purejaxrl` (this process's jax, jaxlib, flax, optax, distrax, chex and flashbax versions, and
gymnax 0.0.9), created on the first run and reused after. The cases (`benchmarks/peer_workers/purejaxrl_cases.py`)
are PureJaxRL's PPO config at 4 and at 2048 envs, the same vmapped over 8 seeds in one program, and its DQN config;
`--prng IMPL` runs both libraries on another of JAX's PRNG implementations (`jax_default_prng_impl`);
`--devices N` adds the jaxrl PPO cases on N XLA devices (`make_train(config, devices=N)`; on a CPU the process then
gets N host devices).

Each library runs each case in a fresh subprocess (JAX's persistent compilation cache off), alternating jaxrl,
PureJaxRL, PureJaxRL, jaxrl, ... between rounds (ABBA), and every figure is a per-round ratio jaxrl / PureJaxRL:
throughput (env steps/s of the whole jitted train, the best of `--repeats` calls) and compile seconds
(`benchmarks.common.measure`). `--xla-phases` also splits each XLA compile into its phases, from XLA's own
timers (`benchmarks.common.xla_phases`: HLO passes, LLVM IR emission, LLVM). Output: a table, and
`benchmarks/results/purejaxrl.{json,md}`.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import os
import statistics
import subprocess
import sys
from pathlib import Path

import jax

from benchmarks.common import machine, write_json
from benchmarks.peer_workers.purejaxrl_cases import CASES
from benchmarks.peers import ROOT, STALL_S, Venv, run_worker

RESULTS = ROOT / "benchmarks" / "results"
PINNED = ("jax", "jaxlib", "flax", "optax", "distrax", "chex", "flashbax", "numpy")


def purejaxrl_venv() -> Venv:
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in PINNED]
    check = f"import jax, gymnax, flashbax, distrax; assert jax.__version__ == {jax.__version__!r}"
    return Venv("purejaxrl", [*pins, "gymnax==0.0.9"], check)


def order(round_index: int) -> tuple[str, str]:
    """ABBA: jaxrl first in even rounds, PureJaxRL first in odd ones."""
    return ("jaxrl", "purejaxrl") if round_index % 2 == 0 else ("purejaxrl", "jaxrl")


def runs_of(args, first: str) -> list[tuple[str, str, dict]]:
    """(row label, library, spec) of each run in one round: per case, the `first` library's runs first."""
    rows = []
    for name in args.cases:
        jaxrl = [(name, "jaxrl", {"case": name, "repeats": args.repeats})]
        if args.devices > 1 and CASES[name][0] == "ppo":
            jaxrl.append((f"{name} on {args.devices} devices", "jaxrl", {**jaxrl[0][2], "devices": args.devices}))
        if args.cpu_threads:
            label = f"{name}, {args.cpu_threads} CPU thread{'s' if args.cpu_threads > 1 else ''}"
            jaxrl.append((label, "jaxrl", {**jaxrl[0][2], "cpu_threads": args.cpu_threads}))
        peer = [(name, "purejaxrl", {"case": name, "repeats": args.repeats, "source": str(args.source)})]
        if args.prng:  # both libraries draw from the same PRNG implementation
            jaxrl, peer = (
                [(label, library, {**spec, "prng": args.prng}) for label, library, spec in runs]
                for runs in (jaxrl, peer)
            )
        rows += jaxrl + peer if first == "jaxrl" else peer + jaxrl
    return rows


def ratio_rows(results: list[dict]) -> list[dict]:
    """Per jaxrl row: both libraries' steps/s and compile s over the rounds, the per-round ratios jaxrl /
    PureJaxRL (the PureJaxRL run of the same case and round) and their medians."""
    ok = [r for r in results if r["ok"]]
    peer = {(r["case"], r["round"]): r for r in ok if r["library"] == "purejaxrl"}
    table = []
    for label in dict.fromkeys(r["label"] for r in ok if r["library"] == "jaxrl"):
        ours = [r for r in ok if r["library"] == "jaxrl" and r["label"] == label and (r["case"], r["round"]) in peer]
        pairs = [(r, peer[r["case"], r["round"]]) for r in ours]
        if not pairs:
            continue
        throughput = [o["steps_per_s"] / p["steps_per_s"] for o, p in pairs]
        table.append(
            {
                "case": label,
                "purejaxrl_steps_per_s": [p["steps_per_s"] for _, p in pairs],
                "jaxrl_steps_per_s": [o["steps_per_s"] for o, _ in pairs],
                "throughput_ratio": throughput,
                "throughput_ratio_median": statistics.median(throughput),
                "purejaxrl_compile_s": [p["compile_s"] for _, p in pairs],
                "jaxrl_compile_s": [o["compile_s"] for o, _ in pairs],
                "compile_ratio_median": statistics.median(o["compile_s"] / p["compile_s"] for o, p in pairs),
                "final_return_purejaxrl": [p["final_return"] for _, p in pairs],
                "final_return_jaxrl": [o["final_return"] for o, _ in pairs],
                "jaxrl_xla_phases": median_phases([o for o, _ in pairs]),
                "purejaxrl_xla_phases": median_phases([p for _, p in pairs]),
            }
        )
    return table


LIBRARIES = ("jaxrl", "purejaxrl")
PHASES = ("hlo_passes_s", "ir_emission_s", "llvm_s")


def median_phases(runs) -> dict | None:
    """The median over `runs` of each XLA compile phase (`common.xla_phases`); None where no run has them."""
    timed = [r["xla_phases"] for r in runs if r.get("xla_phases")]
    return {name: statistics.median(t[name] for t in timed) for name in PHASES} if timed else None


def markdown(table: list[dict], record: dict) -> str:
    k = lambda values: "-".join(f"{v / 1e3:.0f}k" for v in (min(values), max(values)))  # noqa: E731
    s = lambda values: "-".join(f"{v:.1f}" for v in (min(values), max(values)))  # noqa: E731
    where = record["machine"]
    lines = [
        "# jaxrl side by side with PureJaxRL (CartPole-v1)",
        "",
        f"`python -m benchmarks.purejaxrl {' '.join(record['argv'])}`, jaxrl at {record['commit']}, "
        f"{where['processor']}, {where['cpu_count']} CPUs, load before {record['load_before']}, "
        f"after {record['load_after']}; {record['rounds']} rounds alternating (ABBA), "
        "ratios jaxrl / PureJaxRL per round.",
        "",
        "| case | PureJaxRL env steps/s | jaxrl | ratio (median) | compile s PureJaxRL | jaxrl | compile ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in table:
        ratios = row["throughput_ratio"]
        lines.append(
            f"| {row['case']} | {k(row['purejaxrl_steps_per_s'])} | {k(row['jaxrl_steps_per_s'])} | "
            f"{min(ratios):.2f}-{max(ratios):.2f} ({row['throughput_ratio_median']:.2f}x) | "
            f"{s(row['purejaxrl_compile_s'])} | {s(row['jaxrl_compile_s'])} | {row['compile_ratio_median']:.2f}x |"
        )
    phased = [(row, library) for row in table for library in LIBRARIES if row.get(f"{library}_xla_phases")]
    if phased:
        lines += [
            "",
            "XLA's compile phases of each train program, seconds (median over the rounds; XLA's own timers):",
            "",
            "| case | library | HLO passes | LLVM IR emission | LLVM | sum |",
            "|---|---|---|---|---|---|",
        ]
        for row, library in phased:
            phases = [row[f"{library}_xla_phases"][name] for name in PHASES]
            cells = " | ".join(f"{x:.2f}" for x in [*phases, sum(phases)])
            lines.append(f"| {row['case']} | {library} | {cells} |")
    return "\n".join(lines) + "\n"


def commit(tree: Path = ROOT) -> str:
    """The short commit of the git checkout `tree` (this repository by default)."""
    done = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def shown(result: dict, compile_digits: int = 1) -> str:
    """A worker's result as one progress line: env steps/s and compile seconds, or the end of its error."""
    if not result["ok"]:
        return result.get("error", "")[-300:]
    return f"{result['steps_per_s'] / 1e3:.0f}k steps/s, compile {result['compile_s']:.{compile_digits}f} s"


def run_record(argv, rounds: int, results: list[dict], load_before) -> dict:
    """What a side-by-side run records beside its table: when, the command (paths as DIR), the commit, the
    machine, the load before and after, and every worker's result."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "argv": [a if not a.startswith("/") else "DIR" for a in (argv if argv is not None else sys.argv[1:])],
        "commit": commit(),
        "machine": machine(),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "rounds": rounds,
        "runs": results,
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", type=Path, required=True, help="PureJaxRL's purejaxrl/ folder (ppo.py, dqn.py)")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2, help="calls of each compiled program; the best counts")
    parser.add_argument("--devices", type=int, default=1, help="also run jaxrl's PPO cases on this many devices")
    parser.add_argument(
        "--cpu-threads", type=int, default=None, help="also run jaxrl's cases with a CPU thread pool of N threads"
    )
    parser.add_argument(
        "--prng",
        choices=("threefry2x32", "rbg", "unsafe_rbg"),
        default=None,
        help="JAX's default PRNG implementation in every worker of both libraries (default: JAX's, threefry2x32)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=900.0,
        help=f"seconds per worker; one without CPU time for {STALL_S:.0f} s (stuck) is stopped sooner",
    )
    parser.add_argument("--xla-phases", action="store_true", help="split each XLA compile into its phases (CPU)")
    parser.add_argument("--out", type=Path, default=RESULTS / "purejaxrl")
    args = parser.parse_args(argv)
    if not (args.source / "ppo.py").exists():
        raise SystemExit(f"--source {args.source}: no ppo.py there (give PureJaxRL's purejaxrl/ folder)")
    python, message = purejaxrl_venv().ensure(False, 1800)
    print(message, flush=True)
    if python is None:
        raise SystemExit("PureJaxRL's venv could not be built")
    pythons = {"purejaxrl": python, "jaxrl": Path(sys.executable)}
    workers = {"purejaxrl": "purejaxrl", "jaxrl": "jaxrl_at_purejaxrl"}
    load_before = os.getloadavg()
    results = []
    for round_index in range(args.rounds):
        first, _ = order(round_index)
        for label, library, spec in runs_of(args, first):
            extra = {}
            if spec.get("devices", 1) > 1:
                extra = {"XLA_FLAGS": f"--xla_force_host_platform_device_count={spec['devices']}"}
            result = run_worker(pythons[library], workers[library], spec, args.timeout, extra, args.xla_phases)
            result.update(label=label, case=spec["case"], library=library, round=round_index)
            results.append(result)
            print(f"round {round_index} {label:40s} {library:10s} {shown(result)}", flush=True)
    record = run_record(argv, args.rounds, results, load_before)
    table = ratio_rows(results)
    record["table"] = table
    write_json(args.out.with_suffix(".json"), record)
    text = markdown(table, record)
    args.out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
