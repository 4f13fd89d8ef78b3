"""Command line: `jaxrl train | sweep | eval | plot`. Every Config field is a flag, its comment the help.

Every error a user can cause ends in one line on stderr, `jaxrl: error: ...`, and a non-zero exit (2: a bad
argument, a run folder or checkpoint that cannot be used; 3: training diverged; 130: Ctrl-C), with no
traceback; `--debug` anywhere on the command line (or JAXRL_DEBUG=1) shows it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from pathlib import Path

from jaxrl import presets
from jaxrl.algos import ALGORITHMS
from jaxrl.algos.base import to_dict
from jaxrl.run.report import FINAL_FRACTION, final_window

DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "jaxrl", "xla")


def enable_compilation_cache(path: str) -> None:
    """JAX's persistent cache: a second run of the same program loads it instead of compiling it."""
    import jax

    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (`jaxrl train ppo: error: ...; see --help`) and no prefix matching of
    long flags (`allow_abbrev=False`: `--learning` is an unknown flag, not `--learning-rate`)."""

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _real(text: str) -> float:
    """A finite float (NaN and inf are refused here, before any Config is built)."""
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _number(text: str) -> int:
    """Accepts 500000, 5e5 or 500_000 for integer fields."""
    value = _real(text)
    if value != int(value):
        raise argparse.ArgumentTypeError(f"{text} is not an integer")
    return int(value)


def _devices(text: str):
    """--devices: a positive count or "all"."""
    if text == "all":
        return "all"
    count = _number(text)
    if count < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a device count >= 1, or all")
    return count


def _int_tuple(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of integers like 64,64") from None


def add_config_flags(parser: argparse.ArgumentParser, config_cls, title: str = "algorithm") -> None:
    group = parser.add_argument_group(f"{title} config")
    for field in dataclasses.fields(config_cls):
        flag = "--" + field.name.replace("_", "-")
        help_text = f"{field.metadata.get('help', '')} (default: {field.default})"
        default = field.default
        if isinstance(default, bool):
            group.add_argument(
                flag,
                dest=field.name,
                action=argparse.BooleanOptionalAction,
                default=argparse.SUPPRESS,
                help=help_text,
            )
        elif isinstance(default, int):
            group.add_argument(
                flag, dest=field.name, type=_number, metavar="N", default=argparse.SUPPRESS, help=help_text
            )
        elif isinstance(default, float):
            group.add_argument(
                flag, dest=field.name, type=_real, metavar="X", default=argparse.SUPPRESS, help=help_text
            )
        elif isinstance(default, tuple):
            group.add_argument(
                flag, dest=field.name, type=_int_tuple, metavar="A,B", default=argparse.SUPPRESS, help=help_text
            )
        else:
            group.add_argument(flag, dest=field.name, type=str, default=argparse.SUPPRESS, help=help_text)


def config_from_args(config_cls, args: argparse.Namespace):
    """The Config the flags give: the defaults (or, with `--preset`, `jaxrl.presets.get(ALGO, --env)`), then
    every flag given on top."""
    overrides = {
        f.name: getattr(args, f.name) for f in dataclasses.fields(config_cls) if getattr(args, f.name, None) is not None
    }
    if getattr(args, "preset", False):
        env = overrides.pop("env", config_cls().env)
        return presets.get(args.algo, env, **overrides)
    return config_cls(**overrides)


def read_run_folder(run_dir: Path) -> dict:
    """A run folder's config.json; ValueError (one line) when `run_dir` is missing or is not a run folder."""
    if not run_dir.is_dir():
        raise ValueError(f"{run_dir}: no such run folder.")
    path = run_dir / "config.json"
    if not path.is_file():
        raise ValueError(f"{run_dir} is not a run folder (no config.json).")
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{path} cannot be read: {error}") from error
    if not isinstance(saved, dict) or saved.get("algo") not in ALGORITHMS or "config" not in saved:
        raise ValueError(f"{path} is not a jaxrl run's config (no known 'algo' and 'config').")
    return saved


def load_run_config(run_dir: Path):
    """(algo module, Config, seeds, seed) from a run folder's config.json."""
    saved = read_run_folder(run_dir)
    module = ALGORITHMS[saved["algo"]]
    fields = {f.name for f in dataclasses.fields(module.Config)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in saved["config"].items() if k in fields}
    return module, module.Config(**values), saved["seeds"], saved["seed"]


def evaluate_run(run_dir: Path, episodes: int, seed: int) -> int:
    """Restores the latest checkpoint of every seed and prints deterministic and stochastic returns."""
    import jax
    import numpy as np

    from jaxrl.run import checkpoint
    from jaxrl.run.evaluate import evaluate

    if episodes < 1:
        raise ValueError(f"--episodes {episodes}: need at least one episode.")
    module, config, seeds, base_seed = load_run_config(run_dir)
    saved = read_run_folder(run_dir)
    keys = jax.random.split(jax.random.key(base_seed), seeds)
    like = jax.eval_shape(jax.vmap(lambda k: module.init(config, k)), keys)
    from jaxrl.run.compile import abstract_state

    def like_for(devices):  # a data-parallel run's checkpoint: its state laid out for one device
        return abstract_state(module, config, keys, devices)

    iteration, states, _ = checkpoint.restore(run_dir / "checkpoints", like, saved, like_for=like_for)
    print(f"{run_dir}: {saved['algo']} on {config.env}, checkpoint after iteration {iteration}, {episodes} episodes")
    for mode in ("deterministic", "stochastic"):

        def one_seed(state, mode=mode):
            act, normalize = module.evaluation_policy(config, state, deterministic=mode == "deterministic")
            return evaluate(config.env, act, jax.random.key(seed), episodes, normalize=normalize)["mean_return"]

        returns = np.asarray(jax.jit(jax.vmap(one_seed))(states))
        print(f"{mode:14s} mean return {returns.mean():9.2f}   per seed {', '.join(f'{r:.1f}' for r in returns)}")
    return 0


def _field_value(config_cls, name: str, text: str):
    """`text` parsed as a value of Config field `name` (int fields accept 5e5, bool fields true/false)."""
    fields = {f.name: f for f in dataclasses.fields(config_cls)}
    if name not in fields:
        raise ValueError(f"Config.{name}: unknown field of {config_cls.__module__}.Config.")
    default = fields[name].default
    if isinstance(default, bool):
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"Config.{name}: {text!r} is not true or false.")
        return text.lower() in ("true", "1")
    if isinstance(default, int):
        return _number(text)
    return float(text)


def _split_assignment(text: str, flag: str) -> tuple[str, str]:
    name, sep, values = text.partition("=")
    if not sep or not name or not values:
        raise ValueError(f"{flag} {text!r}: expected NAME=VALUES, e.g. {flag} learning_rate=1e-3,3e-3.")
    return name.strip().replace("-", "_"), values.strip()


DIST_KINDS = {"uniform": "uniform", "loguniform": "log_uniform", "log_uniform": "log_uniform", "int": "int_uniform"}
DIST_KINDS["int_uniform"] = "int_uniform"


def sweep_from_args(module, base, args):
    """The `jaxrl.sweep.Sweep` of `--grid NAME=V1,V2 ...` or `--random N --dist NAME=KIND:LOW:HIGH ...`."""
    from jaxrl import sweep

    if args.random is not None:
        if args.grid:
            raise ValueError("use either --grid or --random with --dist, not both.")
        if not args.dist:
            raise ValueError("--random N needs at least one --dist NAME=KIND:LOW:HIGH (or NAME=V1,V2,...).")
        dists = {}
        for text in args.dist:
            name, spec = _split_assignment(text, "--dist")
            kind, _, bounds = spec.partition(":")
            if kind.lower() in DIST_KINDS:
                low, sep, high = bounds.partition(":")
                if not sep:
                    raise ValueError(f"--dist {text!r}: expected {name}={kind}:LOW:HIGH.")
                dists[name] = (
                    DIST_KINDS[kind.lower()],
                    _field_value(module.Config, name, low),
                    _field_value(module.Config, name, high),
                )
            elif ":" in spec:
                known = ", ".join(sorted(DIST_KINDS))
                raise ValueError(f"--dist {text!r}: unknown distribution {kind!r}; use one of {known}, or V1,V2,...")
            else:
                dists[name] = [_field_value(module.Config, name, v) for v in spec.split(",") if v]
        return sweep.random(base, args.random, seed=args.random_seed, **dists)
    if args.dist:
        raise ValueError("--dist needs --random N (the number of points to draw).")
    values = {}
    for text in args.grid or []:
        name, spec = _split_assignment(text, "--grid")
        values[name] = [_field_value(module.Config, name, v) for v in spec.split(",") if v]
    return sweep.grid(base, **values) if values else sweep.from_points(base, [{}])


def diverged(metrics: dict) -> "np.ndarray":  # noqa: F821
    """[..., seeds] True where any loss metric ({name: [..., iterations]}) was non-finite at some iteration:
    the runner's divergence rule (`jaxrl.run.loop`), applied to a sweep's runs after the fact."""
    import numpy as np

    losses = [np.asarray(v) for k, v in metrics.items() if "loss" in k]
    if not losses:
        return np.zeros(next(iter(metrics.values())).shape[:-1], bool)
    return np.any([~np.isfinite(v).all(-1) for v in losses], axis=0)


def sweep_summary(results, fraction: float = FINAL_FRACTION) -> list[dict]:
    """Per config: its point, the final return (`jaxrl.run.report.final_return`: the mean over the last
    `fraction` of iterations) averaged over seeds, and its 95% bootstrap interval over seeds. A run whose
    losses went non-finite (`diverged`) has no final return (NaN) and is counted under `diverged`."""
    import numpy as np

    from jaxrl.plot import bootstrap_interval

    bad = diverged(results.metrics)  # [C, S]
    final = np.where(bad, np.nan, results.final("episode_return", fraction))  # [C, S]
    with np.errstate(all="ignore"):
        mean, low, high = bootstrap_interval(final.T)
    rows = []
    for c, point in enumerate(results.points):
        finite = np.isfinite(final[c])
        rows.append(
            {
                "config": c,
                **point,
                "seeds": int(finite.sum()),
                "diverged": int(bad[c].sum()),
                "final_return_mean": float(mean[c]),
                "ci95_low": float(low[c]),
                "ci95_high": float(high[c]),
            }
        )
    return rows


def format_sweep_summary(rows: list[dict], names: list[str]) -> str:
    header = ["config", *names, "seeds", "final return", "95% interval"]
    table = [header]
    for row in rows:
        interval = f"[{row['ci95_low']:.1f}, {row['ci95_high']:.1f}]"
        final = f"{row['final_return_mean']:.1f}"
        if row.get("diverged"):
            final = f"{final} ({row['diverged']} diverged)"
        table.append([str(row["config"]), *(f"{row[n]:.4g}" for n in names), str(row["seeds"]), final, interval])
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True)) for r in table)


def run_sweep(args) -> int:
    """`jaxrl sweep ALGO ...`: one compiled program over configs x seeds, sharded over the devices of one or
    several processes; process 0 writes results.csv, summary.csv and sweep.json to --out."""
    import csv

    from jaxrl import sweep

    module = ALGORITHMS[args.algo]
    start_processes(args, "sweep")
    if args.compile_cache.lower() != "none":
        enable_compilation_cache(args.compile_cache)
    import jax

    try:
        base = config_from_args(module.Config, args)
        module.validate(base)
        points = sweep_from_args(module, base, args)
        devices = jax.devices()
        if args.devices is not None:
            if not 1 <= args.devices <= len(devices):
                raise ValueError(f"--devices {args.devices}: this run has {len(devices)} device(s).")
            devices = devices[: args.devices]
        if args.seeds < 1:
            raise ValueError(f"--seeds {args.seeds}: need at least one seed.")
        from jaxrl.run.compile import check_memory

        runs_per_device = -(-len(points) * args.seeds // len(devices))
        check_memory(base, runs_per_device, f" (runs of {len(points)} config(s) per device)")
    except (TypeError, ValueError) as error:
        print(f"jaxrl: error: {error}", file=sys.stderr)
        return 2
    lead = jax.process_index() == 0
    if lead:
        print(
            f"sweep {args.algo} on {base.env}: {len(points)} config(s) x {args.seeds} seed(s) over {len(devices)} "
            f"device(s) in {jax.process_count()} process(es)",
            flush=True,
        )
    try:
        results = sweep.run(
            points, seeds=args.seeds, seed=args.seed, algo=module, devices=devices, method=args.method, keep_state=False
        )
    except ValueError as error:
        print(f"jaxrl: error: {error}", file=sys.stderr)
        return 2
    if not lead:
        print(f"process {jax.process_index()}: done (compile {results.compile_s:.1f} s, run {results.run_s:.2f} s)")
        return 0
    out = Path(args.out)
    results.to_csv(out / "results.csv")
    rows = sweep_summary(results, args.final_fraction)
    with open(out / "summary.csv", "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    info = {
        "algo": args.algo,
        "config": to_dict(base),
        "points": points.points,
        "seeds": args.seeds,
        "seed": args.seed,
        "devices": results.num_devices,
        "processes": results.num_processes,
        "compile_s": round(results.compile_s, 3),
        "run_s": round(results.run_s, 3),
        "steps_per_second": round(results.steps_per_second),
    }
    (out / "sweep.json").write_text(json.dumps(info, indent=2))
    print(format_sweep_summary(rows, points.names))
    print(
        f"final return: mean of the last {final_window(len(results.env_steps), args.final_fraction)} iteration(s) "
        f"({args.final_fraction:.0%}) per seed; interval: 95% bootstrap over seeds\n"
        f"compile {results.compile_s:.2f} s, run {results.run_s:.2f} s ({results.steps_per_second:,.0f} env steps/s, "
        f"all runs; {results.num_devices} device(s), {results.num_processes} process(es))\n"
        f"results           {out / 'results.csv'}\n"
        f"plot              jaxrl plot --sensitivity {out / 'results.csv'}"
    )
    return 0


def add_process_flags(group) -> None:
    """--coordinator, --num-processes and --process-id: one run (or sweep) over several processes or hosts."""
    group.add_argument("--coordinator", default=None, metavar="HOST:PORT", help="multi-process: address of process 0")
    group.add_argument("--num-processes", type=int, default=1, help="multi-process: number of processes")
    group.add_argument("--process-id", type=int, default=None, help="multi-process: this process, 0 .. N-1")


def start_processes(args, what: str) -> None:
    """Joins the processes of a multi-process command (`sweep.initialize_distributed`), or makes --cpu-cores
    CPU devices; before JAX initialises its backend. ValueError when the flags are incomplete."""
    from jaxrl import sweep

    if args.coordinator is not None or args.num_processes > 1:
        if args.coordinator is None or args.process_id is None:
            raise ValueError(f"a multi-process {what} needs --coordinator HOST:PORT and --process-id.")
        sweep.initialize_distributed(args.coordinator, args.num_processes, args.process_id, args.cpu_cores)
    elif args.cpu_cores is not None:
        sweep.use_cpu_cores(args.cpu_cores)


def algorithm_parsers(commands, command: str, help: str):
    """One sub-parser per registered algorithm under `jaxrl COMMAND`: yields (parser, name, algorithm); the
    Config flags are added after the caller's own groups."""
    parser = commands.add_parser(command, help=help, allow_abbrev=False)
    algos = parser.add_subparsers(dest="algo", required=True, metavar="ALGO")
    for name, module in ALGORITHMS.items():
        sub = algos.add_parser(
            name,
            allow_abbrev=False,
            help=(module.__doc__ or "").strip().splitlines()[0],
            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        )
        yield sub, name, module
        sub.add_argument(
            "--preset",
            action="store_true",
            help="start from the tuned config of jaxrl.presets for this algorithm and --env (flags still override)",
        )
        add_config_flags(sub, module.Config, name)


def add_sweep_parser(commands) -> None:
    help_text = "train a grid or random sweep x seeds in one compiled program"
    for sub, _, _ in algorithm_parsers(commands, "sweep", help_text):
        group = sub.add_argument_group("sweep")
        group.add_argument(
            "--grid",
            action="append",
            metavar="NAME=V1,V2",
            help="values of a hyperparameter field; several --grid flags give their cartesian product",
        )
        group.add_argument("--random", type=int, default=None, metavar="N", help="draw N random points (with --dist)")
        group.add_argument(
            "--dist",
            action="append",
            metavar="NAME=KIND:LOW:HIGH",
            help="distribution of a field for --random: uniform, loguniform or int (both ends included) with "
            "LOW:HIGH, or a list V1,V2,... to choose from",
        )
        group.add_argument("--random-seed", type=int, default=0, help="seed of the --random draws")
        group.add_argument("--seeds", type=int, default=4, help="seeds per config")
        group.add_argument("--seed", type=int, default=0, help="base random seed of the training runs")
        group.add_argument("--out", default="sweep", help="folder for results.csv, summary.csv and sweep.json")
        group.add_argument(
            "--final-fraction",
            type=float,
            default=FINAL_FRACTION,
            help="fraction of the last iterations averaged into a run's final return",
        )
        group.add_argument("--method", default="jit", choices=["jit", "shard_map"], help="how the batch is sharded")
        group.add_argument("--devices", type=int, default=None, help="shard over the first N devices (default: all)")
        group.add_argument(
            "--cpu-cores", type=int, default=None, help="XLA CPU devices of this process (one per core to use)"
        )
        add_process_flags(group)
        group.add_argument(
            "--compile-cache",
            default=DEFAULT_CACHE,
            help="folder of JAX's persistent compilation cache; 'none' turns it off",
        )


def _sweep_table(path: str) -> Path | None:
    """The results.csv that `path` names (the file, or a sweep folder holding one and no metrics.csv)."""
    path = Path(path)
    if path.is_file() and path.suffix == ".csv":
        return path
    if path.is_dir() and (path / "results.csv").exists() and not (path / "metrics.csv").exists():
        return path / "results.csv"
    return None


def plot_command(args) -> int:
    from jaxrl.plot import learning_curves, sensitivity

    tables = [t for t in map(_sweep_table, args.run_dirs) if t is not None]
    if args.sensitivity is not None:
        tables.insert(0, Path(args.sensitivity))
    try:
        if tables:
            if len(tables) != 1 or len(args.run_dirs) > (0 if args.sensitivity else 1):
                raise ValueError("plot one sweep table at a time, and not together with run folders.")
            print(sensitivity(tables[0], args.out or "sensitivity.png", args.metric, args.final_fraction))
        elif args.run_dirs:
            print(learning_curves(args.run_dirs, args.out or "learning_curves.png", args.metric, args.x))
        else:
            raise ValueError("give run folders (learning curves) or --sensitivity RESULTS_CSV.")
    except (OSError, KeyError, ValueError) as error:
        print(f"jaxrl: error: {error}", file=sys.stderr)
        return 2
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="jaxrl",
        description="Reinforcement learning compiled end to end in JAX. Errors are one line; --debug (anywhere) "
        "shows the traceback. --env-module MODULE (anywhere, repeatable) imports MODULE first, so that the "
        "environments it registers with jaxrl.envs.register are valid --env ids.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for sub, _, _ in algorithm_parsers(commands, "train", "train an agent; writes a run folder and prints a summary"):
        run_group = sub.add_argument_group("run")
        run_group.add_argument(
            "--seeds", type=_number, default=None, help="seeds trained in parallel (one vmapped program; default 1)"
        )
        run_group.add_argument("--seed", type=_number, default=None, help="base random seed (default 0)")
        run_group.add_argument("--runs-dir", default="runs", help="parent folder of the run folder")
        run_group.add_argument("--run-dir", default=None, help="exact run folder (overrides --runs-dir)")
        run_group.add_argument("--chunks", type=_number, default=20, help="compiled chunks (progress updates) per run")
        run_group.add_argument(
            "--target-return",
            type=float,
            default=None,
            help="also report the seconds until each seed's return first reached this",
        )
        run_group.add_argument("--no-progress", action="store_true", help="hide the progress bar")
        run_group.add_argument(
            "--resume",
            default=None,
            metavar="RUN_DIR",
            help="continue the run in RUN_DIR from its latest checkpoint with its own settings (a flag given with "
            "another value is refused, except --chunks, --checkpoint-every and other flags that change no number)",
        )
        run_group.add_argument(
            "--checkpoint-every", type=_number, default=5, help="save a checkpoint every N chunks (N >= 1)"
        )
        run_group.add_argument("--tensorboard", action="store_true", help="also write TensorBoard event files")
        run_group.add_argument(
            "--devices",
            type=_devices,
            default=None,
            metavar="N|all",
            help="train each seed's one policy data-parallel over N devices (or all): num_envs / N envs per "
            "device, gradients averaged (default 1, over several processes all; a resume may use another count)",
        )
        run_group.add_argument(
            "--cpu-cores", type=_number, default=None, help="make N XLA CPU devices (one per core), for --devices"
        )
        add_process_flags(run_group)
        run_group.add_argument(
            "--eval-every",
            type=_number,
            default=None,
            metavar="K",
            help="evaluate the deterministic policy inside every K-th compiled chunk and the last (0, the default: "
            "never)",
        )
        run_group.add_argument(
            "--eval-episodes", type=_number, default=None, help="fresh episodes per evaluation and seed (default 16)"
        )
        run_group.add_argument(
            "--wandb",
            default=None,
            metavar="PROJECT",
            help="also log to Weights & Biases (pip install 'jaxrl[wandb]'; WANDB_MODE=offline works without network)",
        )
        run_group.add_argument(
            "--compile-cache",
            default=DEFAULT_CACHE,
            help="folder of JAX's persistent compilation cache; 'none' turns it off",
        )
    add_sweep_parser(commands)
    evaluate = commands.add_parser(
        "eval", help="evaluate a run's latest checkpoint on fresh episodes", allow_abbrev=False
    )
    evaluate.add_argument("run_dir", help="run folder (with config.json and checkpoints/)")
    evaluate.add_argument("--episodes", type=int, default=100, help="episodes per seed, played in parallel")
    evaluate.add_argument("--seed", type=int, default=12345, help="seed of the evaluation episodes' keys")
    plot = commands.add_parser(
        "plot",
        help="learning curves of run folders, or a sweep's final return per hyperparameter, as a PNG",
        allow_abbrev=False,
    )
    plot.add_argument(
        "run_dirs",
        nargs="*",
        help="run folders (each with metrics.csv); a sweep's results.csv or folder plots its sensitivity",
    )
    plot.add_argument(
        "--sensitivity",
        default=None,
        metavar="RESULTS_CSV",
        help="final return vs each swept hyperparameter of this sweep table (jaxrl sweep's results.csv)",
    )
    plot.add_argument(
        "--out", default=None, help="PNG file to write (default: learning_curves.png, or sensitivity.png)"
    )
    plot.add_argument("--metric", default="episode_return", help="metric column on the y axis")
    plot.add_argument("--x", default="env_steps", choices=["env_steps", "wall_s"], help="x axis of learning curves")
    plot.add_argument(
        "--final-fraction",
        type=float,
        default=FINAL_FRACTION,
        help="sensitivity: fraction of the last iterations averaged into a run's final value",
    )
    return parser


# Flags a resume may give with a different value: they change no number of the run.
RESUME_FREE = (
    "chunks",
    "checkpoint_every",
    "no_progress",
    "tensorboard",
    "target_return",
    "wandb",
    "compile_cache",
    "devices",
    "cpu_cores",
    "coordinator",
    "num_processes",
    "process_id",
)
RUN_DEFAULTS = {"seeds": 1, "seed": 0, "eval_every": 0, "eval_episodes": 16}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def resume_settings(module, args):
    """(Config, seeds, seed, eval_every, eval_episodes) of `--resume RUN_DIR`, from its config.json. A flag
    given with a value different from the run's is refused (naming each such flag); flags that change no
    number (RESUME_FREE: --chunks, --checkpoint-every, --no-progress, ...) may differ."""
    run_dir = Path(args.resume)
    saved = read_run_folder(run_dir)
    if saved["algo"] != args.algo:
        raise ValueError(
            f"--resume {run_dir}: it is a {saved['algo']} run; continue it with jaxrl train {saved['algo']} "
            f"--resume {run_dir}."
        )
    _, config, seeds, seed = load_run_config(run_dir)
    stored_eval = saved.get("eval") or {"every": 0, "episodes": RUN_DEFAULTS["eval_episodes"]}
    stored = {**to_dict(config), "seeds": seeds, "seed": seed, "eval_every": stored_eval["every"]}
    if stored_eval["every"]:
        stored["eval_episodes"] = stored_eval["episodes"]
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(module.Config) if hasattr(args, f.name)}
    given.update({k: getattr(args, k) for k in RUN_DEFAULTS if getattr(args, k) is not None})
    changed = []
    for name, value in given.items():
        value = list(value) if isinstance(value, tuple) else value
        if name in stored and stored[name] != value:
            changed.append(f"{_flag(name)} {value} (the run's: {stored[name]})")
    if changed:
        raise ValueError(
            f"--resume {run_dir} keeps the run's settings, but {'; '.join(changed)} differ: drop "
            f"{'it' if len(changed) == 1 else 'them'}, or start a new run with another --run-dir."
        )
    return config, seeds, seed, stored_eval["every"], stored_eval["episodes"]


def check_backend() -> None:
    """Initialises JAX's backend now, so that an unavailable one (JAX_PLATFORMS=cuda without a GPU) is one
    clear line instead of a traceback later."""
    import jax

    try:
        jax.devices()
    except Exception as error:  # RuntimeError, or (jax 0.10, a platform without its plugin) a bare AssertionError
        first = str(error).strip().splitlines()[0] if str(error).strip() else "no such backend is installed"
        platforms = os.environ.get("JAX_PLATFORMS")
        hint = f" (JAX_PLATFORMS={platforms}; unset it or install that backend)" if platforms else ""
        raise ValueError(f"JAX backend unavailable{hint}: {first}") from error


def train_command(args) -> int:
    from jaxrl.run import loop, report

    module = ALGORITHMS[args.algo]
    start_processes(args, "training")  # before JAX initialises its backend
    check_backend()
    import jax

    lead = jax.process_index() == 0  # over several processes, process 0 alone writes and prints
    if args.devices is None:
        args.devices = "all" if jax.process_count() > 1 else 1
    if args.compile_cache.lower() != "none":
        enable_compilation_cache(args.compile_cache)
    if args.resume:
        config, args.seeds, args.seed, args.eval_every, args.eval_episodes = resume_settings(module, args)
        run_dir = Path(args.resume)
    else:
        for name, default in RUN_DEFAULTS.items():
            if getattr(args, name) is None:
                setattr(args, name, default)
        config = config_from_args(module.Config, args)
    runner = dict(
        seeds=args.seeds,
        seed=args.seed,
        num_chunks=args.chunks,
        checkpoint_every=args.checkpoint_every,
        eval_every=args.eval_every,
        eval_episodes=args.eval_episodes,
        devices=args.devices,
    )
    loop.validate_run(module, config, **runner)  # before a run folder is named or created
    if not args.resume:
        run_dir = Path(args.run_dir) if args.run_dir else loop.make_run_dir(args.runs_dir, args.algo, config, False)
    sinks = []
    if args.wandb and lead:
        from jaxrl.run.logging import WandbSink

        sinks.append(WandbSink(args.wandb, name=run_dir.name, config={"algo": args.algo, **to_dict(config)}))
    try:
        result = loop.run(
            module,
            config,
            **runner,
            run_dir=run_dir,
            progress=not args.no_progress,
            tensorboard=args.tensorboard,
            resume=bool(args.resume),
            sinks=sinks,
            target_return=args.target_return,
        )
    except loop.Interrupted as stop:
        if stop.compiling and not args.resume:
            where = f"nothing was trained and {run_dir} was left as it was before"
        elif stop.compiling:
            where = f"nothing was trained; {run_dir} is unchanged"
        else:
            where = f"after iteration {stop.iteration}; checkpoint and metrics saved in {run_dir}"
        again = (
            f"jaxrl train {args.algo} --resume {run_dir}" if args.resume or not stop.compiling else "the same command"
        )
        print(f"jaxrl: interrupted {'during compilation: ' if stop.compiling else ''}{where}. "
              f"Continue with: {again}", file=sys.stderr)  # fmt: skip
        return 130
    except loop.Divergence as error:
        print(f"jaxrl: error: {error}", file=sys.stderr)
        return 3
    if not lead:
        print(f"process {jax.process_index()}: done")
        return 0
    print(report.format_summary(report.summary(result, args.target_return)))
    print(f"run folder          {run_dir}")
    return 0


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text


def _command(args) -> int:
    if args.command == "sweep":
        return run_sweep(args)
    if args.command == "plot":
        return plot_command(args)
    if args.command == "eval":
        check_backend()
        return evaluate_run(Path(args.run_dir), args.episodes, args.seed)
    return train_command(args)


def import_env_modules(argv: list[str]) -> list[str]:
    """Imports the module of every `--env-module MODULE` (or `--env-module=MODULE`, anywhere on the command line,
    any number of times) and returns `argv` without them: a module that calls `jaxrl.envs.register` at import
    makes its ids valid `--env` values for train, sweep and eval."""
    import importlib

    rest, modules, i = [], [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--env-module" and i + 1 < len(argv):
            modules.append(argv[i + 1])
            i += 2
            continue
        if arg.startswith("--env-module="):
            modules.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
        i += 1
    if modules and os.getcwd() not in sys.path:  # `python -m` would find a module of the working folder too
        sys.path.insert(0, os.getcwd())
    for module in modules:
        importlib.import_module(module)
    return rest


def main(argv: list[str] | None = None) -> int:
    """`jaxrl ...`: parses `argv` (default sys.argv[1:]) and runs the command; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("JAXRL_DEBUG", "") not in ("", "0")
    argv = [a for a in argv if a != "--debug"]
    try:
        argv = import_env_modules(argv)
    except ImportError as error:
        if debug:
            raise
        print(f"jaxrl: error: --env-module: {_one_line(error)}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    from jaxrl.run.checkpoint import CheckpointError
    from jaxrl.run.hosts import LeadFailed

    try:
        return _command(args)
    except KeyboardInterrupt:
        if debug:
            raise
        print("jaxrl: interrupted", file=sys.stderr)
        return 130
    except (ValueError, TypeError, OSError, OverflowError, ImportError, CheckpointError, LeadFailed) as error:
        if debug:
            raise
        print(f"jaxrl: error: {_one_line(error)}", file=sys.stderr)
        return 2
    except Exception as error:  # a bug, not a user error: still one line, the traceback with --debug
        if debug:
            raise
        print(
            f"jaxrl: internal error: {type(error).__name__}: {_one_line(error)} (rerun with --debug for the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
