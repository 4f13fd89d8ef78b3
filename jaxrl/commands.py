"""What each `jaxrl` command does once its command line is parsed (`jaxrl.cli` parses and dispatches): train,
sweep, eval, plot, pbt, render and report, each a function of the parsed arguments that returns the exit status.
JAX and the algorithms are imported inside them, so importing this module starts neither."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path


def one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def config_from_args(config_cls, args: argparse.Namespace):
    """The Config the flags give: the defaults (or, with `--preset`, `jaxrl.presets.get(ALGO, --env)`), then
    every flag given on top."""
    overrides = {
        f.name: getattr(args, f.name) for f in dataclasses.fields(config_cls) if getattr(args, f.name, None) is not None
    }
    if getattr(args, "preset", False):
        from jaxrl import presets

        env = overrides.pop("env", config_cls().env)
        return presets.get(args.algo, env, **overrides)
    return config_cls(**overrides)


def start_jax(args, what: str) -> None:
    """Joins the processes of a multi-process command (--cpu-cores CPU devices each, default one), or makes
    --cpu-cores CPU devices (default: one per core this process may use), before JAX initialises its backend,
    with a CPU thread pool of --cpu-threads threads when given; turns on the compilation cache unless
    --compile-cache none (a folder that cannot be made is one warning line, and the command goes on without it)."""
    from jaxrl.sweep.devices import default_cpu_cores, start_processes

    single = args.coordinator is None and args.num_processes == 1  # processes that share a host share its cores
    cores = args.cpu_cores if args.cpu_cores is not None or not single else default_cpu_cores()
    start_processes(args.coordinator, args.num_processes, args.process_id, cores, what)
    if getattr(args, "cpu_threads", None) is not None:
        from jaxrl.run.hosts import check_backend
        from jaxrl.sweep.devices import use_cpu_threads

        use_cpu_threads(args.cpu_threads, start=check_backend)
    if args.compile_cache.lower() != "none":
        from jaxrl.run.compile import enable_compilation_cache

        try:
            os.makedirs(args.compile_cache, exist_ok=True)
        except OSError as error:  # the cache saves compiles; a run goes on without it
            reason = error.strerror or str(error)
            print(f"jaxrl: warning: --compile-cache {args.compile_cache}: {reason}; compiling without the persistent "
                  "cache", file=sys.stderr)  # fmt: skip
        else:
            enable_compilation_cache(args.compile_cache)


def status(args, text: str) -> None:
    """A status line on a terminal (stderr a tty, no --quiet): what the command is doing before its progress bar
    can show anything."""
    if not getattr(args, "quiet", False) and sys.stderr.isatty():
        print(f"jaxrl {args.command} {args.algo}: {text}", file=sys.stderr, flush=True)


def check_config_flags(args) -> None:
    """Refuses, in one line and before JAX starts:
    - a Config flag whose value breaks its field's own rule (a range, an integer's minimum, a choice:
      `jaxrl.field_rules`);
    - a plain env id that is neither gymnax's nor jaxrl's own (`jaxrl.catalog.check_env_id`);
    - fields that break the algorithm's rules together or with the env (`jaxrl.config_rules`: a minibatch count
      that does not divide the batch, a buffer too small, an image torso on vector observations, continuous actions
      for a Q-learner), with the env's facts that `jaxrl/env_ids.json` records, and a `--preset`'s values;
    - for `jaxrl sweep`, a --grid, --random or --dist flag that does not read (`jaxrl.sweep_flags`), names no field,
      or gives a value (a distribution's bounds) that breaks its field's rule;
    - for `jaxrl pbt`, its population settings (`--ready` against the run's iterations too) and --explore flags
      (`jaxrl.pbt_settings`);
    - for `jaxrl sweep` and `jaxrl pbt` in one CPU-only process, --devices beyond the devices it will have, and a
      population they do not split (`check_device_flags`).
    The algorithm's `validate` checks the whole Config again once JAX has started, the env's fit included."""
    from jaxrl import catalog, config_rules, field_rules

    entry = catalog.CATALOG[args.algo]
    given = {name: getattr(args, name) for name, *_ in entry["fields"] if hasattr(args, name)}
    kinds = {name: kind for name, kind, *_ in entry["fields"]}
    for name, value in given.items():
        if kinds[name] == "tuple" and value is not None:
            field_rules.check_positive_ints(name, value)
    field_rules.check_values(given)
    values, env = config_values(args.algo, args), None
    if not getattr(args, "resume", None) and "jaxrl.envs" not in sys.modules:  # an --env-module may have registered ids
        catalog.check_env_id(values["env"])
    if not getattr(args, "resume", None):
        env = env_facts(values["env"])
        config_rules.check_values(args.algo, values, env)
    if args.command == "sweep":
        from jaxrl import sweep_flags

        owner = f"jaxrl.algos.{args.algo}.Config"
        grid, dists = sweep_flags.read(kinds, entry["sweepable"], owner, args.grid, args.random, args.dist)
        for name, spec in {**grid, **(dists or {})}.items():
            for value in spec[1:] if isinstance(spec, tuple) else spec:
                field_rules.check_value(name, value)
    if args.command == "pbt" and not args.resume:
        from jaxrl import pbt_settings

        settings = pbt_config(args)
        explored = {name: values[name] for name in settings.explore if name in entry["sweepable"]}
        iterations = config_rules.num_iterations(values, env)
        pbt_settings.check_settings(settings, iterations)
        pbt_settings.check_explore(settings.explore, kinds, entry["sweepable"], "Config", explored)
        check_device_flags(args, values, settings.population)
    elif args.command == "sweep":
        check_device_flags(args, values)


def env_facts(env_id: str):
    """The `jaxrl.config_rules.EnvFacts` of `env_id`: those `jaxrl/env_ids.json` records (`catalog.env_facts`),
    or, once JAX and the envs are imported (an `--env-module`, or a call from Python), the env's own; None where
    neither judges it (before JAX, an id the file has no facts of for the installed version; an id that is not
    registered)."""
    from jaxrl import catalog

    if "jaxrl.envs" not in sys.modules:
        return catalog.env_facts(env_id)
    from jaxrl.algos.base import env_facts as made_env_facts

    try:
        return made_env_facts(env_id)
    except Exception:  # an unknown id: validate names it
        return None


def config_values(algo: str, args: argparse.Namespace) -> dict:
    """Every field of `algo`'s Config the flags give, by name, without importing the algorithm or JAX: each field's
    default (`jaxrl.catalog.defaults`), with `--preset` the preset's values for the env (`jaxrl.presets.overrides`),
    then every flag given on top."""
    from jaxrl import catalog

    values = catalog.defaults(algo)
    if getattr(args, "preset", False):
        from jaxrl import presets

        values.update(presets.overrides(algo, getattr(args, "env", None) or values["env"]))
    given = (name for name in values if getattr(args, name, None) is not None)
    return {**values, **{name: getattr(args, name) for name in given}}


def check_run_folder(args, new_dir: str | None) -> None:
    """Refuses, in one line and before JAX starts, a folder the command cannot use: a --resume folder that is not a
    run folder (or, for train, holds another algorithm's run), or, in a run of one process, the new run's named
    folder `new_dir` when it is a file, holds a run or cannot be made (nor train's --runs-dir, where no folder is
    named). The run checks again when it claims its folder."""
    from jaxrl.run import folder

    if args.resume:
        if args.command == "train":
            folder.resumed_run(Path(args.resume), args.algo)
        else:
            folder.read_run_folder(Path(args.resume))
    elif args.coordinator is None and args.num_processes == 1:
        if new_dir is not None:
            folder.check_new_run_dir(Path(new_dir))
            folder.check_folder_can_be_made(Path(new_dir), f"run folder {new_dir}")
        elif args.command == "train":
            folder.check_folder_can_be_made(Path(args.runs_dir), f"--runs-dir {args.runs_dir}")


def check_run_flags(args) -> None:
    """Refuses, in one line and before JAX starts, a count a `jaxrl train` run is given out of its range
    (`jaxrl.run.options`: --seeds, --seed, --chunks, --checkpoint-every, --eval-every, --eval-episodes,
    --seed-devices), and a resume given a setting its run does not have (`jaxrl.run.folder.check_resume`): a
    resume's counts are its run's, with the --chunks, --checkpoint-every and --seed-devices given now; then the
    devices (`check_device_flags`), and --wandb without the wandb package."""
    from jaxrl.run import folder, options

    if args.resume:
        _, s = folder.check_resume(Path(args.resume), args.algo, given_settings(args))
    else:
        s = {**config_values(args.algo, args), **folder.RUN_DEFAULTS, **run_flags(args)}
    seed_devices = 1 if args.seed_devices is None else args.seed_devices
    options.check_counts(s["seeds"], s["seed"], args.chunks, args.checkpoint_every, s["eval_every"], s["eval_episodes"],
                  seed_devices)  # fmt: skip
    check_device_flags(args, s)
    if args.wandb:
        from jaxrl.run.logging import check_wandb_installed

        check_wandb_installed()


def check_device_flags(args, values: dict, population: int | None = None) -> None:
    """Refuses, before JAX starts, the --devices (and --seed-devices) of one process whose only backend is the CPU
    (`jaxrl.device_rules.expected_cpu_devices`: --cpu-cores, else one device per core), in the words the runners
    use once JAX is up: more devices than the process will have; for `jaxrl train` a batch (`values`: the Config's
    fields) the devices do not divide and a seed split beside a data-parallel one or beyond the devices; for `jaxrl
    pbt` a `population` the devices do not split. With an accelerator, over several processes, or once JAX is
    imported (a call from Python: its devices are set), these wait for the runner; so do the per-device Config's own
    rules."""
    from jaxrl import device_rules

    single = args.coordinator is None and args.num_processes == 1 and "jax" not in sys.modules
    have = device_rules.expected_cpu_devices(args.cpu_cores) if single else None
    if have is None:
        return
    if args.command == "train":
        env = env_facts(values["env"])
        device_rules.check_train_devices(args.devices, args.seed_devices, have, "cpu", args.algo, values, env)
    elif args.devices is not None:
        device_rules.check_local_count(args.devices, have, "this run" if args.command == "sweep" else "this process")
        if population is not None:
            device_rules.check_population_split(population, args.devices, 1)


def run_flags(args) -> dict:
    """The run settings (`jaxrl.run.folder.RUN_DEFAULTS`: seeds, seed, evaluations, ...) the flags give."""
    from jaxrl.run.folder import RUN_DEFAULTS

    return {name: getattr(args, name) for name in RUN_DEFAULTS if getattr(args, name) is not None}


def given_settings(args) -> dict:
    """Every Config field and run setting the flags give, by name: what a resume compares with its run's."""
    from jaxrl import catalog

    fields = {name: getattr(args, name) for name, *_ in catalog.CATALOG[args.algo]["fields"] if hasattr(args, name)}
    return {**fields, **run_flags(args)}


def train_command(args) -> int:
    """`jaxrl train ALGO ...` (or `--resume RUN_DIR`): validates, names the run folder, trains, prints the summary."""
    check_config_flags(args)
    check_run_flags(args)
    check_run_folder(args, args.run_dir)
    status(args, f"starting JAX and {args.algo}")
    from jaxrl import catalog
    from jaxrl.algos import ALGORITHMS
    from jaxrl.algos.base import to_dict
    from jaxrl.run import folder, hosts, loop, report
    from jaxrl.sweep.devices import auto_cpu_threads, backend_initialized

    module = ALGORITHMS[args.algo]
    alone = args.coordinator is None and args.num_processes == 1
    chosen = args.cpu_threads is not None or backend_initialized()  # in-process after JAX started: its pool stays
    if not chosen and alone and not args.resume and args.devices in (None, "auto", 1):
        seeds = args.seeds if args.seeds is not None else folder.RUN_DEFAULTS["seeds"]
        config = config_from_args(module.Config, args)
        facts = catalog.env_facts(config.env)  # the env's time limit as jaxrl/env_ids.json records it, before JAX
        cores = 1 if args.devices == 1 else args.cpu_cores  # the devices a data-parallel run would take
        args.cpu_threads = auto_cpu_threads(config, seeds, cores, facts.time_limit if facts else None)
    start_jax(args, "training")
    hosts.check_backend()
    import jax

    lead = jax.process_index() == 0  # over several processes, process 0 alone writes and prints
    if args.resume:
        config, settings = folder.resume_settings(Path(args.resume), args.algo, given_settings(args))
    else:
        config, settings = config_from_args(module.Config, args), {**folder.RUN_DEFAULTS, **run_flags(args)}
    seed_devices = 1  # the devices the seeds are split over, whole seeds each
    if args.seed_devices is not None:
        seed_devices = args.seed_devices
        args.devices = 1 if args.devices in (None, "auto") else args.devices
    elif args.devices in (None, "auto"):
        from jaxrl.algos.base import auto_devices

        seed_devices = loop.auto_seed_devices(settings["seeds"])
        if seed_devices > 1:
            args.devices = 1
        else:
            args.devices = "all" if jax.process_count() > 1 else auto_devices(config, settings["seeds"])
    flags = {k: getattr(args, k) for k in ("checkpoint_every", "devices", "tensorboard", "target_return")}
    flags.update(seed_devices=seed_devices)
    flags.update(num_chunks=args.chunks, progress=not (args.no_progress or args.quiet), status=not args.quiet)
    flags.update(run_dir=args.resume, resume=bool(args.resume))
    plan = loop.validate_run(module, config, loop.RunOptions(**settings, **flags))  # before a run folder is named
    made = []  # the folders a new run's name made (removed again when the run leaves them empty)
    if not args.resume:
        if args.run_dir:
            named = Path(args.run_dir)
        else:  # claimed at once (mkdir): another run started in the same second gets its own folder
            made = [p for p in [*reversed(Path(args.runs_dir).parents), Path(args.runs_dir)] if not p.exists()]
            named = folder.make_run_dir(args.runs_dir, args.algo, config, create=lead)
            made = made + [named] if lead else []
        plan = plan.with_options(run_dir=named)
    run_dir = Path(plan.options.run_dir)
    try:
        if args.wandb and lead:
            from jaxrl.run.logging import WandbSink

            sink = WandbSink(args.wandb, name=run_dir.name, config={"algo": args.algo, **to_dict(config)})
            plan = plan.with_options(sinks=[sink])
        result = loop.execute(plan)
    except loop.Interrupted as stop:
        print(f"jaxrl: {stop.explain(args.algo, bool(args.resume))}", file=sys.stderr)
        return stop.exit_status  # 130 (Ctrl-C) or 143 (SIGTERM)
    except loop.Divergence as error:
        print(f"jaxrl: error: {error}", file=sys.stderr)
        return 3
    finally:
        folder.remove(made, [])  # only what is still empty: a run that stopped before writing anything
    if not lead:
        print(f"process {jax.process_index()}: done")
        return 0
    print(report.format_summary(report.summary(result, args.target_return)))
    print(f"run folder          {run_dir}")
    return 0


def run_sweep(args) -> int:
    """`jaxrl sweep ALGO ...`: one compiled program over configs x seeds, sharded over the devices of one or
    several processes; process 0 writes results.csv, summary.csv and sweep.json to --out."""
    check_config_flags(args)
    from jaxrl.run import folder

    if args.coordinator is None and args.num_processes == 1:
        folder.check_folder_can_be_made(Path(args.out), f"--out {args.out}")
    from jaxrl import sweep
    from jaxrl.algos import ALGORITHMS
    from jaxrl.algos.base import to_dict
    from jaxrl.sweep import parts
    from jaxrl.sweep.summary import write_sweep

    module = ALGORITHMS[args.algo]
    start_jax(args, "sweep")
    import jax

    try:
        base = config_from_args(module.Config, args)
        module.validate(base)
        points = sweep.space.from_flags(base, args.grid, args.random, args.dist, args.random_seed)
        devices = sweep.program.sweep_devices(base, len(points), args.seeds, args.devices)
        if jax.process_index() == 0:  # where the results go must be writable before anything trains
            folder.make_folder(Path(args.out), f"--out {args.out}")
        counts = f"{len(points)} config(s) x {args.seeds} seed(s) over {len(devices)} device(s)"
        if jax.process_index() == 0 and not args.quiet:
            print(f"sweep {args.algo} on {base.env}: {counts} in {jax.process_count()} process(es)", flush=True)
        options = dict(seeds=args.seeds, seed=args.seed, algo=module, devices=devices, method=args.method)
        options |= dict(device_independent=args.device_independent)
        if args.points_per_program is None:
            results = sweep.run(points, **options, keep_state=False)
        else:
            finished = [0]  # points whose results are written

            def write_part(so_far):
                if jax.process_index() == 0:
                    write_sweep(
                        Path(args.out), so_far, so_far, args.algo, to_dict(base), args.final_fraction, len(points)
                    )
                finished[0] = len(so_far.points)

            try:
                results = parts.run(points, args.points_per_program, write_part, **options, keep_state=False)
            except KeyboardInterrupt:
                if jax.process_index() == 0:
                    where = f"are in {args.out}" if finished[0] else "were written (none had finished)"
                    print(f"jaxrl: interrupted: the results of {finished[0]} of {len(points)} points {where}",
                          file=sys.stderr)  # fmt: skip
                return 130
    except (TypeError, ValueError) as error:
        print(f"jaxrl: error: {error}", file=sys.stderr)
        return 2
    if jax.process_index() != 0:  # process 0 alone writes and prints the summary
        print(f"process {jax.process_index()}: done (compile {results.compile_s:.1f} s, run {results.run_s:.2f} s)")
        return 0
    print(write_sweep(Path(args.out), results, points, args.algo, to_dict(base), args.final_fraction))
    return 0


def eval_command(args) -> int:
    """`jaxrl eval RUN_DIR`: the latest checkpoint of every seed (a population's: every member) on fresh episodes."""
    from jaxrl.run.folder import read_run_folder

    population = "pbt" in read_run_folder(Path(args.run_dir))  # before JAX starts: a wrong folder is refused at once
    from jaxrl.pbt.runner import evaluate_folder
    from jaxrl.run.evaluate import evaluate_checkpoint
    from jaxrl.run.hosts import check_backend

    check_backend()
    evaluate_run = evaluate_folder if population else evaluate_checkpoint
    for line in evaluate_run(Path(args.run_dir), args.episodes, args.seed):
        print(line)  # each as soon as it is measured
    return 0


def plot_command(args) -> int:
    from jaxrl.plot import plot

    try:
        print(plot(args.run_dirs, args.sensitivity, args.out, args.metric, args.x, args.final_fraction))
    except (OSError, KeyError, ValueError) as error:
        print(f"jaxrl: error: {error}", file=sys.stderr)
        return 2
    return 0


PBT_FLAGS = ("population", "ready", "truncation", "resample_probability")  # PBTConfig fields with a jaxrl pbt flag
PBT_EVAL_FLAGS = ("eval_every", "eval_episodes", "fitness")


def pbt_config(args):
    """The PBTConfig of `jaxrl pbt`'s flags (each one not given at PBTConfig's default); imports no JAX."""
    from jaxrl import pbt_settings

    given = {k: getattr(args, k) for k in PBT_FLAGS + PBT_EVAL_FLAGS if getattr(args, k) is not None}
    if not given.get("eval_every"):  # --eval-episodes is then the final evaluation's alone
        given.pop("eval_episodes", None)
    return pbt_settings.PBTConfig(**given, explore=pbt_settings.read_explore(args.explore))


def _pbt_settings(args, module):
    """(Config, PBTConfig, seed, chunks) of `jaxrl pbt`: from the flags, or with --resume from the folder (a flag
    given with another value than the folder's is refused in one line)."""
    from jaxrl import pbt, pbt_settings

    if not args.resume:
        return config_from_args(module.Config, args), pbt_config(args), args.seed or 0, args.chunks or 10
    explore = pbt_settings.read_explore(args.explore)
    algo, config, settings, seed, chunks = pbt.resume_settings(args.resume)
    if algo != args.algo:
        raise ValueError(f"--resume {args.resume}: it is a {algo} population; continue it with jaxrl pbt {algo}.")
    saved = {**dataclasses.asdict(settings), "seed": seed, "chunks": chunks}
    kept = (*PBT_FLAGS, "eval_every", "fitness", "seed", "chunks")
    kept += ("eval_episodes",) if settings.eval_every else ()  # the in-program evaluation's; else the final one's
    given = {k: getattr(args, k) for k in kept if getattr(args, k) is not None}
    given |= {f.name: getattr(args, f.name) for f in dataclasses.fields(config) if hasattr(args, f.name)}
    if explore:
        given["explore"] = explore
    saved |= {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    changed = [k for k, v in given.items() if (list(v) if isinstance(v, tuple) else v) != (
        list(saved[k]) if isinstance(saved[k], tuple) else saved[k])]  # fmt: skip
    if changed:
        flags = ", ".join("--" + k.replace("_", "-") for k in changed)
        raise ValueError(f"--resume {args.resume} keeps the population's settings, but {flags} differ: drop them.")
    return config, settings, seed, chunks


def pbt_command(args) -> int:
    """`jaxrl pbt ALGO ...` (or `--resume DIR`): one population in compiled chunks with checkpoints, over the
    devices of one or several processes; process 0 writes its folder to --out and prints the summary."""
    try:
        check_config_flags(args)
        check_run_folder(args, args.out)
    except ValueError as error:
        return _pbt_refusal(error)
    from jaxrl import pbt
    from jaxrl.algos import ALGORITHMS
    from jaxrl.run import checkpoint, folder, loop

    module = ALGORITHMS[args.algo]
    start_jax(args, "pbt")
    import jax

    lead = jax.process_index() == 0
    out = args.resume or args.out
    try:
        config, settings, seed, chunks = _pbt_settings(args, module)
        module.validate(config)
        options = dict(num_chunks=chunks, checkpoint_every=args.checkpoint_every, resume=bool(args.resume))
        options |= dict(progress=not (args.no_progress or args.quiet), devices=args.devices)
        episodes = args.eval_episodes if args.eval_episodes is not None else settings.eval_episodes
        options |= dict(tensorboard=args.tensorboard, eval_episodes=episodes)
        independent = args.device_independent  # a resume keeps its population's (a different one is refused)
        if args.resume and independent is None:
            independent = folder.read_run_folder(Path(args.resume)).get("device_independent", False)
        options |= dict(device_independent=bool(independent))
        log = (lambda s: None) if args.quiet or not lead else (lambda s: print(s, flush=True))
        text = pbt.run_to_folder(out, args.algo, config, settings, seed, log=log, **options)
        print(text if lead else f"process {jax.process_index()}: done")
    except loop.Interrupted as stop:
        if lead:
            print(f"jaxrl: {stop.explain(args.algo, bool(args.resume), command='pbt')}", file=sys.stderr)
        return stop.exit_status
    except (TypeError, ValueError, checkpoint.CheckpointError) as error:
        return _pbt_refusal(error)
    return 0


def _pbt_refusal(error: BaseException) -> int:
    """`jaxrl pbt`'s one-line error (exit 2); the run folder's messages name jaxrl train's flag, here --out."""
    from jaxrl.run.folder import RunDirError

    text = one_line(error)
    if isinstance(error, RunDirError):
        text = text.replace("--run-dir", "--out")
    print(f"jaxrl: error: {text}", file=sys.stderr)
    return 2


def render_command(args) -> int:
    from jaxrl.render_request import check_out, check_seed_index
    from jaxrl.run.folder import read_run_folder

    saved = read_run_folder(Path(args.run_dir))  # before JAX starts: a wrong folder or request is refused at once
    check_out(args.out)
    if isinstance(saved.get("seeds"), int):
        check_seed_index(args.seed_index, saved["seeds"])
    from jaxrl.render import prefer_offscreen_gl, render_run

    prefer_offscreen_gl()  # before anything imports MuJoCo

    for line in render_run(args.run_dir, args.out, args.seed_index, args.episodes, not args.stochastic, args.seed,
                           args.fps, progress=True, max_steps=args.max_steps):  # fmt: skip
        print(line)
    return 0


def report_command(args) -> int:
    from jaxrl.report import write_report

    try:
        print(write_report(args.paths, args.out, args.reps, args.seed))
    except (OSError, KeyError, ValueError) as error:
        print(f"jaxrl: error: {one_line(error)}", file=sys.stderr)
        return 2
    return 0


RUNNERS = {
    "train": train_command,
    "sweep": run_sweep,
    "eval": eval_command,
    "plot": plot_command,
    "pbt": pbt_command,
    "render": render_command,
    "report": report_command,
}
