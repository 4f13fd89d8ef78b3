"""jaxrl side by side with rejax (and a plain PyTorch + gymnasium PPO) on CartPole-v1, in one run, one machine.

    python -m benchmarks.peers            # 3 rounds, PPO at PureJaxRL's config, DQN at rejax's CartPole config
    python -m benchmarks.peers --quick    # 2 rounds at short budgets (a few minutes on a quiet 2-core machine)

What it does. rejax (PyPI `rejax==0.1.3`; it needs gymnax 0.0.9, jaxrl needs gymnax 1.x) gets its own venv,
`benchmarks/.venv-rejax`, created with `python -m venv` + `pip install` on the first run and reused after
(`--rebuild-venvs` recreates it); it is pinned to this process's jax / jaxlib version so both sides run the same
XLA. Each side runs as a subprocess of the same shape (`benchmarks/peer_workers/*_worker.py`, JSON on stdout),
the jaxrl one with this python; JAX's persistent compilation cache is off in both. Because the machine is shared
and noisy the libraries alternate, jaxrl, rejax, rejax, jaxrl, ... (ABBA), for `--repeats` rounds, and every
figure is reported as a per-round ratio jaxrl / peer and the median over rounds.

Measured, per library and algorithm:
  * throughput: env steps/s of one seed's whole jitted train (`jax.jit(train).lower(key).compile()`, then
    `--calls` calls, the best); rejax with its evaluation reduced to one at the end (`eval_freq` =
    total_timesteps, `skip_initial_evaluation=True`), jaxrl's `make_train(config)`;
  * compile seconds of that program;
  * in the first round only (learning does not depend on the machine), the learning curve of `--seeds` seeds in
    one `jax.jit(jax.vmap(train))` program, evaluated the same way in both: every `eval_every` env steps, the
    mean return of 128 fresh episodes of the current policy, actions sampled (PPO: from the policy; DQN:
    epsilon-greedy at 0.005). rejax: the evaluation its `train` returns at `eval_freq` (`rejax.evaluate`);
    jaxrl: `init` + a `lax.scan` of (eval_every env steps of `update`, then `jaxrl.run.evaluate.evaluate`);
    jaxrl's own training-episode returns are reported alongside;
  * final return: the last evaluation, mean (and min) over the seeds;
  * time to threshold (`--threshold`, 475 by default): the env steps at which a seed's evaluation first reached
    it, divided by that round's single-seed throughput (training time, evaluation and compile excluded; the
    compile seconds are printed next to it); the median over the seeds that reached it.

Configs (printed as a mapping at the start). PPO: PureJaxRL's CartPole config as in `benchmarks.throughput`
(4 envs x 128 steps, 4 epochs x 4 minibatches, lr 2.5e-4, 2 x 64 tanh actor and critic, 499,712 steps =
976 iterations) with a constant learning rate, rejax having no schedule. DQN: rejax's own CartPole config
(`configs/gymnax/cartpole.yaml`: 10 envs, 5 gradient steps of 100 per iteration, buffer 50k, 5k warm-up, Polyak
0.98 every iteration, double + dueling, 2 x 64 swish, lr 1e-3, 1e5 steps) with jaxrl at 1 step per iteration,
1-step targets, l2 loss, no LayerNorm. What cannot match: rejax clips gradients element-wise (`optax.clip`),
jaxrl by global norm; rejax's PPO steps two Adam optimisers (actor, critic), jaxrl one; rejax's GAE treats a
time-limit truncation as a termination, jaxrl bootstraps it; network initialisations differ (rejax: flax
defaults; jaxrl: orthogonal).

PyTorch baseline: `benchmarks/.venv-torch` with `torch`, `gymnasium` and `numpy` from the package index. A plain
`pip install torch` from PyPI brings the CUDA build and its nvidia-* wheels (about 5.5 GB installed, a few minutes
from this project's local mirror; the torch wheel alone is 0.55 GB); to keep it small, create the
venv beforehand with a CPU wheel (`pip install torch --index-url https://download.pytorch.org/whl/cpu`) and the
script reuses any `.venv-torch` where `import torch, gymnasium` works. If the install fails or is skipped
(`--no-torch`), the run says so and carries on without it. Its worker is CleanRL's PPO loop at the same PPO
config over `gymnasium.vector.SyncVectorEnv`, one torch thread, `--torch-steps` env steps (its throughput does
not depend on the run length), PPO only, no compile, no evaluation curve; its ratio is jaxrl / torch throughput.

Output: a table of ratios, and `benchmarks/results/peers.json` (compact; rewritten after every worker);
`--report benchmarks/results/peers.json` prints its tables again.

Measured (`python -m benchmarks.peers --seeds 4 --repeats 5 --torch-steps 32768`, 2-core AMD EPYC, load 1.4-5,
747 s; medians of 5 per-round ratios jaxrl / peer): PPO vs rejax throughput 1.05x (0.95-1.14), compile 0.99x,
time to 475 1.09x (jaxrl's seeds need a median 159,744 env steps, rejax's 139,264; both 500.0 final on all 4
seeds); DQN vs rejax throughput 4.28x (3.89-4.55; 12.6k vs 3.0k env steps/s), compile 0.98x, time to 475 0.15x
(48,750 vs 75,000 steps; final 490.5, min 480.1 vs 394.6, min 202.5); PPO vs PyTorch + gymnasium throughput 26x
(~150k vs ~5.7k env steps/s). The same run under load ~12 (3 rounds): PPO 0.89x, DQN 4.19x, torch 29x.
`--quick` took 229 s at load 5.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import jax

from benchmarks.common import XLA_TIMERS, machine, write_json, xla_phases
from benchmarks.peer_workers.jaxrl_worker import jaxrl_config
from benchmarks.peer_workers.rejax_worker import rejax_config

ROOT = Path(__file__).resolve().parent.parent
WORKERS = Path(__file__).resolve().parent / "peer_workers"
REJAX_VERSION = "0.1.3"

PPO = dict(  # PureJaxRL's CartPole PPO (benchmarks.throughput.PUREJAXRL), constant learning rate
    env="CartPole-v1",
    num_envs=4,
    num_steps=128,
    epochs=4,
    minibatches=4,
    learning_rate=2.5e-4,
    total_timesteps=976 * 512,
    hidden=[64, 64],
    activation="tanh",
    gamma=0.99,
    gae_lambda=0.95,
    clip_eps=0.2,
    ent_coef=0.01,
    vf_coef=0.5,
    max_grad_norm=0.5,
)
DQN = dict(  # rejax's configs/gymnax/cartpole.yaml
    env="CartPole-v1",
    num_envs=10,
    total_timesteps=100_000,
    buffer_size=50_000,
    learning_starts=5_000,
    batch_size=100,
    updates_per_iteration=5,
    learning_rate=1e-3,
    tau=0.02,
    epsilon_start=1.0,
    epsilon_end=0.05,
    exploration_fraction=0.5,
    gamma=0.99,
    double=True,
    dueling=True,
    hidden=[64, 64],
    activation="swish",
    max_grad_norm=10.0,
)
EVAL_EVERY = {"ppo": 16 * 512, "dqn": 2_500}


@dataclasses.dataclass
class Venv:
    name: str
    packages: list[str]
    check: str  # python code that succeeds when the venv is usable as it is

    @property
    def path(self) -> Path:
        return Path(__file__).resolve().parent / f".venv-{self.name}"

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def usable(self) -> bool:
        try:
            return (
                self.python.exists()
                and subprocess.run([str(self.python), "-c", self.check], timeout=300).returncode == 0
            )
        except subprocess.SubprocessError:
            return False

    def ensure(self, rebuild: bool, timeout_s: float) -> tuple[Path | None, str]:
        """(python, message): the venv's python, created and installed if missing; None and why on failure."""
        if not rebuild and self.usable():
            return self.python, f"reusing {self.path}"
        print(f"creating {self.path} and installing {' '.join(self.packages)} ...", flush=True)
        start = time.perf_counter()
        try:
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(self.path)], check=True, timeout=120)
            done = subprocess.run(
                [str(self.python), "-m", "pip", "install", "-q", *self.packages],
                capture_output=True,
                text=True,
                timeout=timeout_s,
            )
        except (subprocess.SubprocessError, OSError) as error:
            return None, f"could not build {self.path}: {error}"
        if done.returncode or not self.usable():
            return None, f"pip install {' '.join(self.packages)} failed:\n{done.stderr[-2000:]}"
        return self.python, f"built {self.path} in {time.perf_counter() - start:.0f} s"


STALL_S = 120.0  # a worker without CPU time this long is stuck: its compile and its run both keep a core busy


def cpu_seconds(pid: int) -> float | None:
    """The CPU time (user + system) process `pid` has used, from Linux's /proc; None where there is none."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()  # after "pid (name)": state is field 3, utime 14, stime 15
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_watched(command: list[str], env: dict, timeout_s: float, stall_s: float = STALL_S, poll_s: float = 1.0):
    """Runs `command` and returns (returncode, stdout, stderr), or (None, "", why) once it has run `timeout_s`
    seconds or taken no CPU time for `stall_s` seconds (stopped; a deadlocked worker otherwise waits out the whole
    timeout). Its output is read as it comes, so a chatty process cannot fill its pipes."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    start = last_busy = time.monotonic()
    last_cpu = cpu_seconds(process.pid)
    while True:
        try:
            stdout, stderr = process.communicate(timeout=poll_s)
            return process.returncode, stdout, stderr
        except subprocess.TimeoutExpired:
            pass
        now, cpu = time.monotonic(), cpu_seconds(process.pid)
        if cpu is None or last_cpu is None or cpu > last_cpu:
            last_cpu, last_busy = cpu, now
        why = None
        if now - start > timeout_s:
            why = f"timed out after {timeout_s:.0f} s"
        elif now - last_busy > stall_s:
            why = f"stalled: no CPU time for {stall_s:.0f} s (stopped after {now - start:.0f} s)"
        if why:
            process.kill()
            process.communicate()
            return None, "", why


def run_worker(
    python,
    name: str,
    spec: dict,
    timeout_s: float,
    extra_env: dict | None = None,
    xla_timers: bool = False,
    stall_s: float = STALL_S,
) -> dict:
    """`python <name>_worker.py '<spec>'` in a fresh process (compilation cache off, `extra_env` added): its JSON.
    With `xla_timers`, XLA logs its compile timers and the result gains `xla_phases` (`common.xla_phases`). A worker
    past `timeout_s`, or without CPU time for `stall_s` seconds (`run_watched`), is stopped and gives an error."""
    env = {**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "false", "PYTHONPATH": str(ROOT), **(extra_env or {})}
    if xla_timers:
        env.update(XLA_TIMERS)
    start = time.perf_counter()
    command = [str(python), str(WORKERS / f"{name}_worker.py"), json.dumps(spec)]
    returncode, stdout, stderr = run_watched(command, env, timeout_s, stall_s)
    if returncode is None:
        return {"ok": False, "library": name, "error": stderr}
    lines = stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        result = {"ok": False, "error": f"exit {returncode}, no JSON; stderr:\n{stderr[-3000:]}"}
    result.setdefault("library", name)
    result["process_s"] = time.perf_counter() - start
    if xla_timers:
        result["xla_phases"] = xla_phases(stderr)
    return result


def mapping_table(algo: str, config: dict) -> str:
    ours, theirs = jaxrl_config(algo, config), rejax_config(algo, config)
    lines = [
        f"### {algo.upper()} config mapping",
        "| neutral | value | jaxrl Config | rejax create() |",
        "|---|---|---|---|",
    ]
    jaxrl_names = {
        "epochs": "update_epochs",
        "minibatches": "num_minibatches",
        "batch_size": "replay_batch_size",
        "hidden": "hidden_sizes",
        "exploration_fraction": "epsilon_decay_fraction",
    }
    rejax_names = {
        "epochs": "num_epochs",
        "minibatches": "num_minibatches",
        "hidden": "agent_kwargs.hidden_layer_sizes" if algo == "ppo" else "(fixed at 64, 64)",
        "activation": "agent_kwargs.activation",
        "learning_starts": "fill_buffer",
        "updates_per_iteration": "num_epochs",
        "tau": "polyak = 1 - tau",
        "epsilon_start": "eps_start",
        "epsilon_end": "eps_end",
        "double": "ddqn",
        "dueling": "agent=DuelingQNetwork",
    }
    for field, value in config.items():
        mine = jaxrl_names.get(field, field)
        mine = f"{mine}={ours[mine]}" if mine in ours else "-"
        other = rejax_names.get(field, field)
        other = other if other in theirs or not other.isidentifier() else "-"
        lines.append(f"| {field} | {value} | {mine} | {other} |")
    extra = {k: v for k, v in ours.items() if k not in {jaxrl_names.get(f, f) for f in config}}
    lines.append(f"| (jaxrl only) | | {', '.join(f'{k}={v}' for k, v in extra.items())} | |")
    return "\n".join(lines)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def time_to_threshold(result: dict, curve: dict | None):
    """Median over seeds of steps_to_threshold / steps_per_s; None if no seed reached it."""
    if not curve or not result.get("ok"):
        return None
    return median([s / result["steps_per_s"] for s in curve["steps_to_threshold"] if s is not None])


def summarize(rounds: list[dict], algo: str, peer: str) -> dict:
    """Per-round ratios jaxrl / peer of one algorithm, and their medians."""
    curves = {}
    for r in rounds:
        for lib in ("jaxrl", peer):
            curve = r.get(algo, {}).get(lib, {}).get("curve")
            if curve:
                curves[lib] = curve
    per_round = []
    for r in rounds:
        ours, theirs = r.get(algo, {}).get("jaxrl"), r.get(algo, {}).get(peer)
        if not (ours and theirs and ours.get("ok") and theirs.get("ok")):
            continue
        ratio = {
            "round": r["round"],
            "throughput": ours["steps_per_s"] / theirs["steps_per_s"],
            "compile": ours["compile_s"] / theirs["compile_s"] if theirs["compile_s"] else None,
        }
        t_ours, t_theirs = time_to_threshold(ours, curves.get("jaxrl")), time_to_threshold(theirs, curves.get(peer))
        ratio["time_to_threshold"] = t_ours / t_theirs if t_ours and t_theirs else None
        ratio["time_to_threshold_s"] = [t_ours, t_theirs]
        per_round.append(ratio)
    summary = {
        "algo": algo,
        "peer": peer,
        "per_round": per_round,
        "median": {k: median([p[k] for p in per_round]) for k in ("throughput", "compile", "time_to_threshold")},
    }
    for lib in ("jaxrl", peer):
        if lib in curves:
            c = curves[lib]
            summary[f"{lib}_final_return"] = {
                "mean": c["final_return_mean"],
                "min": c["final_return_min"],
                "per_seed": c["final_return_per_seed"],
                "seeds_reaching_threshold": sum(s is not None for s in c["steps_to_threshold"]),
                "median_steps_to_threshold": median(c["steps_to_threshold"]),
                "vmapped_seeds_steps_per_s": c["steps_per_s"],
                "vmapped_seeds_compile_s": c["compile_s"],
            }
    return summary


def fmt(value, spec=".2f"):
    return "-" if value is None else format(value, spec)


def report(summaries: list[dict], rounds: list[dict], threshold: float) -> str:
    lines = [
        "| algo | jaxrl vs | round | throughput x (>1: jaxrl faster) | compile x (<1: jaxrl faster) | "
        f"time to {threshold:g} x (<1: jaxrl sooner) | jaxrl / peer steps/s | jaxrl / peer compile s | "
        f"jaxrl / peer s to {threshold:g} |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summaries:
        for p in s["per_round"]:
            r = next(x for x in rounds if x["round"] == p["round"])[s["algo"]]
            ours, theirs = r["jaxrl"], r[s["peer"]]
            lines.append(
                f"| {s['algo']} | {s['peer']} | {p['round']} | {fmt(p['throughput'])} | {fmt(p['compile'])} | "
                f"{fmt(p['time_to_threshold'])} | {ours['steps_per_s']:,.0f} / {theirs['steps_per_s']:,.0f} | "
                f"{ours['compile_s']:.1f} / {theirs['compile_s']:.1f} | "
                f"{fmt(p['time_to_threshold_s'][0], '.1f')} / {fmt(p['time_to_threshold_s'][1], '.1f')} |"
            )
        m = s["median"]
        lines.append(
            f"| {s['algo']} | {s['peer']} | **median** | **{fmt(m['throughput'])}** | **{fmt(m['compile'])}** | "
            f"**{fmt(m['time_to_threshold'])}** | | | |"
        )
    lines += ["", "| algo | library | seeds | final return mean (min) | seeds >= threshold | median steps to it |"]
    lines.append("|---|---|---|---|---|---|")
    shown = set()
    for s in summaries:
        for lib in ("jaxrl", s["peer"]):
            f = s.get(f"{lib}_final_return")
            if f and (s["algo"], lib) not in shown:
                shown.add((s["algo"], lib))
                lines.append(
                    f"| {s['algo']} | {lib} | {len(f['per_seed'])} | {f['mean']:.1f} ({f['min']:.1f}) | "
                    f"{f['seeds_reaching_threshold']} | {fmt(f['median_steps_to_threshold'], ',.0f')} |"
                )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="rounds of alternation (jaxrl, peer, peer, jaxrl)")
    parser.add_argument("--calls", type=int, default=1, help="timed calls of each compiled train per round (best)")
    parser.add_argument("--algos", nargs="+", choices=["ppo", "dqn"], default=["ppo", "dqn"])
    parser.add_argument("--seeds", type=int, default=8, help="vmapped seeds of the learning curves")
    parser.add_argument(
        "--threshold", type=float, default=None, help="return for the time-to-threshold (default 475; --quick: 200)"
    )
    parser.add_argument("--torch-steps", type=int, default=65_536, help="env steps of the PyTorch PPO run")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch baseline")
    parser.add_argument("--rebuild-venvs", action="store_true")
    parser.add_argument("--install-timeout", type=float, default=1200.0, help="seconds per venv install")
    parser.add_argument("--worker-timeout", type=float, default=3600.0)
    parser.add_argument("--out", default="benchmarks/results/peers.json")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="2 rounds, 2 seeds, PPO 49,152 and DQN 20,000 env steps, PyTorch 16,384 steps, threshold 200",
    )
    parser.add_argument("--report", metavar="JSON", help="print the tables of an earlier run's JSON and exit")
    args = parser.parse_args(argv)
    if args.report:
        saved = json.loads(Path(args.report).read_text())
        print(report(saved["summary"], saved["rounds"], saved["args"]["threshold"]))
        return
    configs = {"ppo": dict(PPO), "dqn": dict(DQN)}
    if args.quick:
        args.repeats, args.seeds, args.torch_steps = min(args.repeats, 2), min(args.seeds, 2), 16_384
        configs["ppo"]["total_timesteps"] = 6 * EVAL_EVERY["ppo"]
        configs["dqn"]["total_timesteps"] = 20_000
    if args.threshold is None:
        args.threshold = 200.0 if args.quick else 475.0

    start = time.perf_counter()
    for algo in args.algos:
        print(mapping_table(algo, configs[algo]) + "\n", flush=True)
    pins = [f"jax=={jax.__version__}", f"jaxlib=={jax.__version__}"]
    rejax_check = (
        "import jax, rejax; from importlib.metadata import version; "
        f"assert version('rejax') == {REJAX_VERSION!r} and jax.__version__ == {jax.__version__!r}"
    )
    rejax_venv = Venv("rejax", [f"rejax=={REJAX_VERSION}", "gymnax==0.0.9", *pins], rejax_check)
    rejax_python, message = rejax_venv.ensure(args.rebuild_venvs, args.install_timeout)
    print(message, flush=True)
    if rejax_python is None:
        raise SystemExit("rejax could not be installed; nothing to compare against")
    torch_python = None
    if args.no_torch:
        torch_message = "PyTorch baseline skipped (--no-torch)"
    else:
        torch_venv = Venv("torch", ["torch", "gymnasium", "numpy"], "import torch, gymnasium")
        torch_python, torch_message = torch_venv.ensure(args.rebuild_venvs, args.install_timeout)
        if torch_python is None:
            torch_message = f"PyTorch baseline skipped: {torch_message}"
    print(torch_message, flush=True)

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    info = machine()
    pythons = {"jaxrl": sys.executable, "rejax": rejax_python, "torch": torch_python}
    rounds: list[dict] = []

    def write(summaries=None):
        write_json(
            out,
            {
                "date": datetime.datetime.now().isoformat(timespec="seconds"),
                "machine": info,
                "args": vars(args),
                "configs": configs,
                "mapping": {
                    a: {"jaxrl": jaxrl_config(a, configs[a]), "rejax": rejax_config(a, configs[a])} for a in args.algos
                },
                "torch": torch_message,
                "wall_s": time.perf_counter() - start,
                "rounds": rounds,
                "summary": summaries,
            },
        )

    for round_index in range(args.repeats):
        this = {"round": round_index}
        rounds.append(this)
        for algo in args.algos:
            order = ["jaxrl", "rejax"] if round_index % 2 == 0 else ["rejax", "jaxrl"]
            if algo == "ppo" and torch_python is not None:
                order.append("torch")
            for lib in order:
                spec = {
                    "algo": algo,
                    "config": configs[algo],
                    "seed": 0,
                    "calls": args.calls,
                    "curve": round_index == 0 and lib != "torch",
                    "seeds": args.seeds,
                    "eval_every": EVAL_EVERY[algo],
                    "eval_episodes": 128,
                    "threshold": args.threshold,
                }
                if lib == "torch":
                    spec["config"] = {**configs[algo], "total_timesteps": args.torch_steps}
                result = run_worker(pythons[lib], lib, spec, args.worker_timeout)
                this.setdefault(algo, {})[lib] = result
                if result.get("ok"):
                    extra = f", compile {result['compile_s']:.1f} s" if lib != "torch" else ""
                    if "curve" in result:
                        c = result["curve"]
                        extra += (
                            f"; {c['seeds']} seeds: final return {c['final_return_mean']:.1f}, "
                            f"steps to {args.threshold:g}: {c['steps_to_threshold']}"
                        )
                    print(
                        f"round {round_index} {algo} {lib}: {result['steps_per_s']:,.0f} env steps/s{extra} "
                        f"({result['process_s']:.0f} s)",
                        flush=True,
                    )
                else:
                    print(f"round {round_index} {algo} {lib} FAILED: {result.get('error')}", flush=True)
                    if result.get("traceback"):
                        print(result["traceback"], flush=True)
                write()

    summaries = []
    for algo in args.algos:
        summaries.append(summarize(rounds, algo, "rejax"))
        if algo == "ppo" and torch_python is not None:
            summaries.append(summarize(rounds, algo, "torch"))
    write(summaries)
    print(
        f"\n## jaxrl vs peers, CartPole-v1 ({datetime.date.today()}; {info['processor']}, {info['cpu_count']} CPUs, "
        f"load {info['load_average_1_5_15min'][0]:.1f}; jax {info['jax']}; {args.repeats} rounds; "
        f"total {time.perf_counter() - start:.0f} s)\n"
    )
    print(report(summaries, rounds, args.threshold))
    print(f"\n{torch_message}\nwrote {out}")


if __name__ == "__main__":
    main()
