"""Command line: `jaxrl train ALGO [--field value ...]`. Every Config field is a flag, its comment the help."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

from jaxrl.algos import ALGORITHMS

DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "jaxrl", "xla")


def enable_compilation_cache(path: str) -> None:
    """JAX's persistent cache: a second run of the same program loads it instead of compiling it."""
    import jax

    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def _number(text: str) -> int:
    """Accepts 500000, 5e5 or 500_000 for integer fields."""
    value = float(text.replace("_", ""))
    if value != int(value):
        raise argparse.ArgumentTypeError(f"{text} is not an integer")
    return int(value)


def _int_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.replace(" ", "").split(",") if x)


def add_config_flags(parser: argparse.ArgumentParser, config_cls) -> None:
    group = parser.add_argument_group(f"{config_cls.__module__.rsplit('.', 1)[-1]} config")
    for field in dataclasses.fields(config_cls):
        flag = "--" + field.name.replace("_", "-")
        help_text = f"{field.metadata.get('help', '')} (default: {field.default})"
        default = field.default
        if isinstance(default, bool):
            group.add_argument(
                flag, dest=field.name, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        elif isinstance(default, int):
            group.add_argument(flag, dest=field.name, type=_number, metavar="N", help=help_text)
        elif isinstance(default, float):
            group.add_argument(flag, dest=field.name, type=float, metavar="X", help=help_text)
        elif isinstance(default, tuple):
            group.add_argument(flag, dest=field.name, type=_int_tuple, metavar="A,B", help=help_text)
        else:
            group.add_argument(flag, dest=field.name, type=str, help=help_text)


def config_from_args(config_cls, args: argparse.Namespace):
    overrides = {
        f.name: getattr(args, f.name) for f in dataclasses.fields(config_cls) if getattr(args, f.name, None) is not None
    }
    return config_cls(**overrides)


def load_run_config(run_dir: Path):
    """(algo module, Config, seeds, seed) from a run folder's config.json."""
    saved = json.loads((run_dir / "config.json").read_text())
    module = ALGORITHMS[saved["algo"]]
    fields = {f.name for f in dataclasses.fields(module.Config)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in saved["config"].items() if k in fields}
    return module, module.Config(**values), saved["seeds"], saved["seed"]


def evaluate_run(run_dir: Path, episodes: int, seed: int) -> int:
    """Restores the latest checkpoint of every seed and prints deterministic and stochastic returns."""
    import jax
    import numpy as np

    from jaxrl import checkpoint
    from jaxrl.evaluate import evaluate

    module, config, seeds, base_seed = load_run_config(run_dir)
    saved = json.loads((run_dir / "config.json").read_text())
    keys = jax.random.split(jax.random.key(base_seed), seeds)
    like = jax.eval_shape(jax.vmap(lambda k: module.init(config, k)), keys)
    try:
        iteration, states, _ = checkpoint.restore(run_dir / "checkpoints", like, saved)
    except checkpoint.CheckpointError as error:
        print(f"jaxrl: error: {error}", file=sys.stderr)
        return 2
    print(f"{run_dir}: {saved['algo']} on {config.env}, checkpoint after iteration {iteration}, {episodes} episodes")
    for mode in ("deterministic", "stochastic"):

        def one_seed(state, mode=mode):
            act, normalize = module.evaluation_policy(config, state, deterministic=mode == "deterministic")
            return evaluate(config.env, act, jax.random.key(seed), episodes, normalize=normalize)["mean_return"]

        returns = np.asarray(jax.jit(jax.vmap(one_seed))(states))
        print(f"{mode:14s} mean return {returns.mean():9.2f}   per seed {', '.join(f'{r:.1f}' for r in returns)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxrl", description="Reinforcement learning compiled end to end in JAX.")
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="train an agent; writes a run folder and prints a summary")
    algos = train.add_subparsers(dest="algo", required=True, metavar="ALGO")
    for name, module in ALGORITHMS.items():
        sub = algos.add_parser(
            name,
            help=(module.__doc__ or "").strip().splitlines()[0],
            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        )
        run_group = sub.add_argument_group("run")
        run_group.add_argument("--seeds", type=int, default=1, help="seeds trained in parallel (one vmapped program)")
        run_group.add_argument("--seed", type=int, default=0, help="base random seed")
        run_group.add_argument("--runs-dir", default="runs", help="parent folder of the run folder")
        run_group.add_argument("--run-dir", default=None, help="exact run folder (overrides --runs-dir)")
        run_group.add_argument("--chunks", type=int, default=20, help="compiled chunks (progress updates) per run")
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
            help="continue the run in RUN_DIR from its latest checkpoint (its config.json wins)",
        )
        run_group.add_argument("--checkpoint-every", type=int, default=5, help="save a checkpoint every N chunks")
        run_group.add_argument("--tensorboard", action="store_true", help="also write TensorBoard event files")
        run_group.add_argument(
            "--compile-cache",
            default=DEFAULT_CACHE,
            help="folder of JAX's persistent compilation cache; 'none' turns it off",
        )
        add_config_flags(sub, module.Config)
    evaluate = commands.add_parser("eval", help="evaluate a run's latest checkpoint on fresh episodes")
    evaluate.add_argument("run_dir", help="run folder (with config.json and checkpoints/)")
    evaluate.add_argument("--episodes", type=int, default=100, help="episodes per seed, played in parallel")
    evaluate.add_argument("--seed", type=int, default=12345, help="seed of the evaluation episodes' keys")
    plot = commands.add_parser("plot", help="learning curves of run folders as a PNG")
    plot.add_argument("run_dirs", nargs="+", help="run folders (each with metrics.csv)")
    plot.add_argument("--out", default="learning_curves.png", help="PNG file to write")
    plot.add_argument("--metric", default="episode_return", help="metrics.csv column on the y axis")
    plot.add_argument("--x", default="env_steps", choices=["env_steps", "wall_s"], help="x axis")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "plot":
        from jaxrl.plot import learning_curves

        print(learning_curves(args.run_dirs, args.out, args.metric, args.x))
        return 0
    if args.command == "eval":
        return evaluate_run(Path(args.run_dir), args.episodes, args.seed)
    from jaxrl import checkpoint
    from jaxrl import train as runner

    module = ALGORITHMS[args.algo]
    if args.compile_cache.lower() != "none":
        enable_compilation_cache(args.compile_cache)
    try:
        if args.resume:
            _, config, args.seeds, args.seed = load_run_config(Path(args.resume))
        else:
            config = config_from_args(module.Config, args)
        module.validate(config)
    except (OSError, TypeError, ValueError) as error:
        print(f"jaxrl: error: {error}", file=sys.stderr)
        return 2
    if args.resume:
        run_dir = Path(args.resume)
    else:
        run_dir = Path(args.run_dir) if args.run_dir else runner.make_run_dir(args.runs_dir, args.algo, config)
    try:
        result = runner.run(
            module,
            config,
            seeds=args.seeds,
            seed=args.seed,
            num_chunks=args.chunks,
            run_dir=run_dir,
            progress=not args.no_progress,
            checkpoint_every=args.checkpoint_every,
            tensorboard=args.tensorboard,
            resume=bool(args.resume),
        )
    except runner.Interrupted as stop:
        print(
            f"jaxrl: interrupted after iteration {stop.iteration}; checkpoint and metrics saved in {run_dir}. "
            f"Continue with: jaxrl train {args.algo} --resume {run_dir}",
            file=sys.stderr,
        )
        return 130
    except runner.Divergence as error:
        print(f"jaxrl: error: {error}", file=sys.stderr)
        return 3
    except checkpoint.CheckpointError as error:
        print(f"jaxrl: error: {error}", file=sys.stderr)
        return 2
    info = runner.summary(result, args.target_return)
    (run_dir / "summary.json").write_text(json.dumps(info, indent=2))
    print(runner.format_summary(info))
    print(f"run folder          {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
