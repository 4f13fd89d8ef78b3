"""How fast the command line answers: wall seconds of `jaxrl --help`, `jaxrl train ppo --help`, a mistyped
algorithm (`jaxrl train PPO`, a one-line error), a bad flag value (both answered by the parser), a value its
field's own rule refuses (`jaxrl.field_rules`), an unknown env id (`jaxrl.catalog.check_env_id`), a `jaxrl pbt`
prior that excludes its field's starting value (`jaxrl.pbt_settings`), fields the algorithm's rules refuse together
or with the env (a minibatch count that does not divide the batch, an image torso on CartPole's vector
observations: `jaxrl.config_rules`) and a run folder the command cannot use (a missing --resume folder, a --run-dir
that holds a run), all answered before JAX starts, and the same minibatch count under `--preset` (whose values are
read once JAX and the algorithm are imported); the seconds until `jaxrl train ppo` prints its first status line on
a terminal (a pseudo-terminal here) and until its progress bar first moves; and the compile seconds of a run with a
cold persistent compilation cache, of a rerun, and of a resume.

    python -m benchmarks.cli_latency [--repeats 5]

Each command runs `--repeats` times in a fresh process, round robin (so load changes hit every command alike);
the table gives the median and the range. Results: `benchmarks/results/cli_latency.{json,md}` with the load
average before and after.
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import os
import pty
import re
import select
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

from benchmarks.common import machine, write_json

RESULTS = Path(__file__).resolve().parent / "results" / "cli_latency"
JAXRL = [sys.executable, "-m", "jaxrl.cli"]
COMMANDS = {
    "jaxrl --help": ["--help"],
    "jaxrl train ppo --help": ["train", "ppo", "--help"],
    "jaxrl train PPO (mistyped algorithm)": ["train", "PPO"],
    "jaxrl train ppo --num-envs x (bad value)": ["train", "ppo", "--num-envs", "x"],
    "jaxrl train ppo --learning-rate -1 (refused by its field's rule)": ["train", "ppo", "--learning-rate", "-1"],
    "jaxrl train ppo --num-minibatches 7 (fields refused together)": ["train", "ppo", "--num-minibatches", "7"],
    "jaxrl train ppo --torso cnn (refused with the env)": ["train", "ppo", "--torso", "cnn"],
    "jaxrl train ppo --preset --num-minibatches 7 (after JAX)": ["train", "ppo", "--preset", "--num-minibatches", "7"],
    "jaxrl train ppo --env CartPole-v0 (unknown env id)": ["train", "ppo", "--env", "CartPole-v0"],
}


def folder_commands(tmp: Path) -> dict[str, list[str]]:
    """The folder refusals, on folders made under `tmp`: a missing one and one that holds a finished run; and the
    pbt refusal, whose --out is under `tmp`."""
    run = tmp / "finished"
    run.mkdir()
    (run / "config.json").write_text('{"algo": "ppo", "config": {}, "seeds": 1, "seed": 0}')
    (run / "summary.json").write_text("{}")
    pbt = ["pbt", "ppo", "--explore", "learning_rate=loguniform:1e-5:1e-4", "--out", str(tmp / "population")]
    return {
        "jaxrl train ppo --resume MISSING (no such run folder)": ["train", "ppo", "--resume", str(tmp / "missing")],
        "jaxrl train ppo --run-dir RUN (holds a run)": ["train", "ppo", "--run-dir", str(run)],
        "jaxrl pbt ppo --explore learning_rate=loguniform:1e-5:1e-4 (excludes the start)": pbt,
    }


def answer_s(args: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run([*JAXRL, *args], capture_output=True, timeout=600)
    return time.perf_counter() - start


def first_lines_s(folder: str, timeout_s: float = 600.0) -> tuple[float, float]:
    """(seconds to the first line on the terminal, seconds to the progress bar's first step) of a short
    `jaxrl train ppo` whose stderr is a pseudo-terminal; the run is stopped once the bar has moved."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # a terminal 120 columns wide
    argv = [*JAXRL, "train", "ppo", "--total-timesteps", "2e5", "--run-dir", folder, "--compile-cache", "none"]
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=follower)
    os.close(follower)
    text, first, moved = "", None, None
    try:
        while moved is None and time.perf_counter() - start < timeout_s:
            if select.select([leader], [], [], 1.0)[0]:
                try:
                    chunk = os.read(leader, 4096).decode(errors="replace")
                except OSError:
                    break
                text += chunk
                first = first or (time.perf_counter() - start if text.strip() else None)
                if re.search(r"\b[1-9]\d?%\|", text):  # the bar past 0%
                    moved = time.perf_counter() - start
            elif proc.poll() is not None:
                break
    finally:
        proc.kill()
        proc.wait()
        os.close(leader)
    return first or float("nan"), moved or float("nan")


def compile_seconds(folder: Path) -> float:
    import json

    return json.loads((folder / "summary.json").read_text())["compile_s"]


def resume_cache(tmp: Path, timeout_s: float = 900.0) -> dict[str, float]:
    """Compile seconds (summary.json) of a run with a cold persistent compilation cache, of the same run again
    (the cache warm), and of a resume of that run after a Ctrl-C at its second checkpoint."""
    import signal

    from jaxrl.run import checkpoint

    cache = tmp / "cache"
    flags = ["--total-timesteps", "1e5", "--num-envs", "8", "--num-steps", "16", "--no-progress"]
    flags += ["--compile-cache", str(cache), "--checkpoint-every", "1"]
    out = {}
    for name in ("original (cold cache)", "rerun (warm cache)"):
        folder = tmp / name.split()[0]
        command = [*JAXRL, "train", "ppo", *flags, "--run-dir", str(folder)]
        subprocess.run(command, capture_output=True, timeout=timeout_s)
        out[name] = compile_seconds(folder)
    folder = tmp / "resumed"
    proc = subprocess.Popen([*JAXRL, "train", "ppo", *flags, "--run-dir", str(folder)], stderr=subprocess.DEVNULL)
    deadline = time.perf_counter() + timeout_s
    while (checkpoint.latest_iteration(folder / "checkpoints") or 0) < 2 and proc.poll() is None:
        if time.perf_counter() > deadline:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=timeout_s)
    resume = [*JAXRL, "train", "ppo", "--resume", str(folder), "--compile-cache", str(cache), "--no-progress"]
    subprocess.run(resume, capture_output=True, timeout=timeout_s)
    out["resume after Ctrl-C (warm cache)"] = compile_seconds(folder)
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        commands = {**COMMANDS, **folder_commands(Path(tmp))}
        times: dict[str, list[float]] = {name: [] for name in [*commands, "first status line", "progress bar moves"]}
        for repeat in range(args.repeats):
            for name, command in commands.items():
                times[name].append(answer_s(command))
            first, moved = first_lines_s(os.path.join(tmp, f"run{repeat}"))
            times["first status line"].append(first)
            times["progress bar moves"].append(moved)
        compiles = resume_cache(Path(tmp))
    record = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine(),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "seconds": times,
        "compile_s": compiles,
    }
    write_json(args.out.with_suffix(".json"), record)
    lines = [
        "# Command-line latency (`python -m benchmarks.cli_latency`)",
        "",
        f"{record['machine']['processor']}, {record['machine']['cpu_count']} CPUs; load before "
        f"{record['load_before']}, after {record['load_after']}; {args.repeats} runs each, round robin.",
        "",
        "| command | median s | range s |",
        "|---|---|---|",
    ]
    for name, values in times.items():
        lines.append(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f}-{max(values):.2f} |")
    lines += ["", "Compile seconds of one run (summary.json), the persistent compilation cache as it was:", ""]
    lines += ["| run | compile s |", "|---|---|", *(f"| {k} | {v:.2f} |" for k, v in compiles.items())]
    text = "\n".join(lines) + "\n"
    args.out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
