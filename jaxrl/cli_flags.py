"""The flags of each `jaxrl` command: their names, value types, defaults and help texts, as data (`COMMANDS`), and
the value types a Config field's flag takes by its kind in `jaxrl.catalog` (`FLAG_KINDS`). `jaxrl.cli` builds the
parsers from them. A value type refuses a malformed value in argparse's words (`ArgumentTypeError`), before any
Config is built."""

from __future__ import annotations

import argparse
import math
import os

from jaxrl.run.report import FINAL_FRACTION

# the persistent compilation cache's folder: $JAXRL_COMPILE_CACHE when set (a shared or faster disk), else the user's
DEFAULT_CACHE = os.environ.get("JAXRL_COMPILE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "jaxrl", "xla")


def real(text: str) -> float:
    """A finite float (NaN and inf are refused here, before any Config is built)."""
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def real_or_inf(text: str) -> float:
    """A finite float, or inf (a field where inf means no limit: kind "float_or_inf" in the catalog)."""
    if text.strip().lower() in ("inf", "+inf", "infinity"):
        return math.inf
    return real(text)


def number(text: str) -> int:
    """Accepts 500000, 5e5 or 500_000 for integer fields."""
    value = real(text)
    if value != int(value):
        raise argparse.ArgumentTypeError(f"{text} is not an integer")
    return int(value)


def count(text: str) -> int:
    """A positive integer (seeds, episodes, devices, cores, threads, points), in `number`'s spellings."""
    value = number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a count >= 1")
    return value


def devices_value(text: str):
    """--devices: a positive count, "all" or "auto"."""
    if text in ("all", "auto"):
        return text
    if number(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a device count >= 1, all or auto")
    return number(text)


def int_tuple(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of integers like 64,64") from None


FLAG_KINDS = {
    "bool": {"action": argparse.BooleanOptionalAction},
    "int": {"type": number, "metavar": "N"},
    "float": {"type": real, "metavar": "X"},
    "float_or_inf": {"type": real_or_inf, "metavar": "X"},
    "tuple": {"type": int_tuple, "metavar": "A,B"},
    "str": {"type": str},
}


# The flags of each command's own group: (flag, argparse keywords); help texts are the --help of the command.
# fmt: off
PROCESS_FLAGS = [
    ("--coordinator", dict(default=None, metavar="HOST:PORT", help="multi-process: address of process 0")),
    ("--num-processes", dict(type=count, default=1, help="multi-process: number of processes")),
    ("--process-id", dict(type=int, default=None, help="multi-process: this process, 0 .. N-1")),
]
QUIET_FLAG = ("--quiet", dict(action="store_true", help="print only the results (the final summary), warnings and"
    " errors: no status lines, no progress bar"))
CACHE_FLAG = ("--compile-cache", dict(default=DEFAULT_CACHE, help="folder of JAX's persistent compilation cache"
        " (default $JAXRL_COMPILE_CACHE, else ~/.cache/jaxrl/xla); 'none' turns it off"))
CPU_THREADS_FLAG = ("--cpu-threads", dict(type=count, default=None, help="XLA's CPU thread pool of N threads"
    " (default: one per core this process may use); on one device, 1 runs small programs, such as DQN at 10 envs,"
    " faster"))
TRAIN_FLAGS = [
    ("--seeds", dict(type=number, default=None, help="seeds trained in parallel (one vmapped program; default 1)")),
    ("--seed", dict(type=number, default=None, help="base random seed (default 0)")),
    ("--runs-dir", dict(default="runs", help="parent folder of the run folder")),
    ("--run-dir", dict(default=None, help="exact run folder (overrides --runs-dir)")),
    ("--chunks", dict(type=number, default=20, help="compiled chunks (progress updates) per run")),
    ("--target-return", dict(type=real, default=None, help="also report the seconds until each seed's return first"
        " reached this")),
    ("--no-progress", dict(action="store_true", help="hide the progress bar")),
    QUIET_FLAG,
    ("--resume", dict(default=None, metavar="RUN_DIR", help="continue the run in RUN_DIR from its latest checkpoint"
        " with its own settings (a flag given with another value is refused, except --chunks, --checkpoint-every and"
        " other flags that change no number)")),
    ("--checkpoint-every", dict(type=number, default=5, help="save a checkpoint every N chunks (N >= 1)")),
    ("--tensorboard", dict(action="store_true", help="also write TensorBoard event files")),
    ("--devices", dict(type=devices_value, default="auto", metavar="N|all|auto", help="train each seed's one policy"
        " data-parallel over N devices (or all): num_envs / N envs per device, gradients averaged. auto: with"
        " several seeds, whole seeds on each local device (on a CPU one device per core; copies of seed 0, dropped"
        " from the results, fill the last device where the devices do not divide the seeds); else every local"
        " device when the algorithm is data-parallel, the count divides num_envs and, on a CPU, each device gets at"
        " least 256 of the seeds x num_envs environments or, without a replay buffer, 4096 of the seeds x num_envs"
        " x num_steps samples; else 1 (over several processes the devices of every"
        " process count: whole seeds on each, the same number of devices from each process, else all; a resume"
        " may use another count)")),
    ("--seed-devices", dict(type=number, default=None, metavar="N", help="split the seeds over N devices, whole"
        " seeds each (default: --devices auto's choice; copies of seed 0, dropped from the results, fill the last"
        " device where N does not divide the seeds; over several processes a multiple of their count, the same"
        " number of devices from each)")),
    ("--device-independent", dict(action="store_true", default=None, help="compile without XLA's algebraic"
        " simplifier, so that each seed's numbers are the same bits on one device and with the seeds split over"
        " several (a little slower; a resume keeps it)")),
    ("--cpu-cores", dict(type=count, default=None, help="make N XLA CPU devices (default: one per core this process"
        " may use; one per process of a multi-process run)")),
    ("--cpu-threads", dict(type=count, default=None, help="XLA's CPU thread pool of N threads (default: 1 for a"
        " small run on one device: an MLP of at most 128 units a layer, no image torso or core, at most 32 envs over"
        " all seeds; else one per core)")),
    *PROCESS_FLAGS,
    ("--eval-every", dict(type=number, default=None, metavar="K", help="evaluate the deterministic policy inside"
        " every K-th compiled chunk and the last (0, the default: never)")),
    ("--eval-episodes", dict(type=number, default=None, help="fresh episodes per evaluation and seed (default 16)")),
    ("--wandb", dict(default=None, metavar="PROJECT", help="also log to Weights & Biases (pip install 'jaxrl[wandb]';"
        " WANDB_MODE=offline works without network)")),
    CACHE_FLAG,
]
SWEEP_FLAGS = [
    ("--grid", dict(action="append", metavar="NAME=V1,V2", help="values of a hyperparameter field; several --grid"
        " flags give their cartesian product")),
    ("--random", dict(type=count, default=None, metavar="N", help="draw N random points (with --dist)")),
    ("--dist", dict(action="append", metavar="NAME=KIND:LOW:HIGH", help="distribution of a field for --random:"
        " uniform, loguniform or int (both ends included) with LOW:HIGH, or a list V1,V2,... to choose from")),
    ("--random-seed", dict(type=int, default=0, help="seed of the --random draws")),
    ("--seeds", dict(type=count, default=4, help="seeds per config")),
    ("--seed", dict(type=int, default=0, help="base random seed of the training runs")),
    ("--out", dict(default="sweep", help="folder for results.csv, summary.csv and sweep.json")),
    ("--final-fraction", dict(type=float, default=FINAL_FRACTION, help="fraction of the last iterations averaged into"
        " a run's final return")),
    ("--points-per-program", dict(type=count, default=None, metavar="N", help="run the points in parts of N, one"
        " compiled program each, writing the results of the finished points after every part (default: all in one)")),
    ("--method", dict(default="jit", choices=["jit", "shard_map"], help="how the batch is sharded")),
    ("--devices", dict(type=count, default=None, help="shard over the first N devices (default: all)")),
    ("--device-independent", dict(action="store_true", help="compile without XLA's algebraic simplifier, so that"
        " every row is the same bits on any device count (a little slower)")),
    ("--cpu-cores", dict(type=count, default=None, help="XLA CPU devices of this process (default: one per core it may"
        " use; one per process of a multi-process run)")),
    CPU_THREADS_FLAG,
    *PROCESS_FLAGS,
    CACHE_FLAG,
    QUIET_FLAG,
]
EVAL_FLAGS = [
    ("run_dir", dict(help="run folder (with config.json and checkpoints/)")),
    ("--episodes", dict(type=count, default=100, help="episodes per seed, played in parallel")),
    ("--seed", dict(type=int, default=12345, help="seed of the evaluation episodes' keys")),
]
PLOT_FLAGS = [
    ("run_dirs", dict(nargs="*", help="run folders (each with metrics.csv); a sweep's results.csv or folder plots its"
        " sensitivity")),
    ("--sensitivity", dict(default=None, metavar="RESULTS_CSV", help="final return vs each swept hyperparameter of"
        " this sweep table (jaxrl sweep's results.csv)")),
    ("--out", dict(default=None, help="PNG file to write (default: learning_curves.png, or sensitivity.png)")),
    ("--metric", dict(default="episode_return", help="metric column on the y axis")),
    ("--x", dict(default="env_steps", choices=["env_steps", "wall_s"], help="x axis of learning curves")),
    ("--final-fraction", dict(type=float, default=FINAL_FRACTION, help="sensitivity: fraction of the last iterations"
        " averaged into a run's final value")),
]
PBT_FLAGS = [
    ("--population", dict(type=int, default=None, help="members trained side by side (default 8)")),
    ("--ready", dict(type=int, default=None, help="iterations between exploit/explore steps (default 10)")),
    ("--explore", dict(action="append", metavar="NAME=KIND:LOW:HIGH", help="a hyperparameter to explore and its prior"
        " (uniform, loguniform or int); its bounds clip perturbations; repeatable")),
    ("--truncation", dict(type=float, default=None, help="fraction of members replaced (and of parents; default"
        " 0.25)")),
    ("--resample-probability", dict(type=float, default=None, help="chance of a fresh draw instead of a perturbation"
        " (default 0.25)")),
    ("--seed", dict(type=int, default=None, help="random seed of the population (default 0)")),
    ("--out", dict(default="pbt", help="run folder for config.json, checkpoints/, metrics.csv, lineage.csv,"
        " lineage.png, summary.json and tensorboard/")),
    ("--chunks", dict(type=number, default=None, help="compiled chunks of whole ready blocks (progress updates and"
        " checkpoints; default 10)")),
    ("--checkpoint-every", dict(type=number, default=1, help="save a checkpoint every N chunks (N >= 1)")),
    ("--resume", dict(default=None, metavar="DIR", help="continue the population in DIR from its latest checkpoint"
        " with its own settings")),
    ("--device-independent", dict(action="store_true", default=None, help="compile without XLA's algebraic"
        " simplifier, so that every member's numbers are the same bits on any device count (a little slower; a"
        " resume keeps it)")),
    ("--tensorboard", dict(action="store_true", help="also write TensorBoard event files: one run per member"
        " (training metrics, fitness, rank, parent, hyperparameters) and one for the population")),
    ("--eval-every", dict(type=number, default=None, metavar="K", help="every K iterations (a divisor or a"
        " multiple of --ready) each member plays --eval-episodes fresh episodes with its deterministic policy,"
        " inside the compiled program"
        " (eval_return in metrics.csv, lineage.csv and TensorBoard; default 0: never)")),
    ("--fitness", dict(default=None, choices=["return", "eval"], help="what ranks the members at a ready step: the"
        " mean episode return of the last ready iterations (return, the default) or the evaluation return of that"
        " iteration (eval; needs an --eval-every that divides --ready)")),
    ("--eval-episodes", dict(type=number, default=None, metavar="N", help="fresh episodes of each --eval-every"
        " evaluation, and of the best member's at the end, played with its deterministic and its stochastic policy"
        " and reported apart (default 16; 0: no evaluation at the end)")),
    ("--no-progress", dict(action="store_true", help="hide the progress bar")),
    QUIET_FLAG,
    ("--devices", dict(type=count, default=None, help="shard the members over the first N local devices (default:"
        " all; the population a multiple of N); over several processes, always every process's devices (each"
        " process trains its share of the members; process 0 writes --out)")),
    *PROCESS_FLAGS,
    ("--cpu-cores", dict(type=count, default=None, help="XLA CPU devices of this process (default: one per core it may"
        " use; one per process of a multi-process run)")),
    CPU_THREADS_FLAG,
    CACHE_FLAG,
]
RENDER_FLAGS = [
    ("run_dir", dict(help="run folder (with config.json and checkpoints/)")),
    ("--out", dict(default="episode.gif", help="animation to write, .gif or .mp4 (default episode.gif); the contact"
        " sheet goes beside it as .png")),
    ("--seed-index", dict(type=int, default=0, help="which of the run's seeds plays (default 0)")),
    ("--episodes", dict(type=count, default=1, help="episodes played one after the other (default 1)")),
    ("--stochastic", dict(action="store_true", help="sample actions (default: the deterministic policy)")),
    ("--seed", dict(type=int, default=12345, help="seed of the episodes' keys (default 12345)")),
    ("--fps", dict(type=count, default=20, help="frames per second of the animation (default 20)")),
    ("--max-steps", dict(type=count, default=None, help="steps drawn of each episode at most (default: the env's time"
        " limit; Brax and MuJoCo Playground: 200)")),
]
REPORT_FLAGS = [
    ("paths", dict(nargs="+", metavar="RUN_OR_SWEEP", help="run folders and sweep folders (or their results.csv)")),
    ("--out", dict(default="report", help="folder of report.md and its PNGs (default report)")),
    ("--reps", dict(type=count, default=2000, help="bootstrap resamples of each interval (default 2000)")),
    ("--seed", dict(type=int, default=0, help="seed of the bootstrap (default 0)")),
]
COMMANDS = {  # command: (help, flags, its algorithms' group title or None)
    "train": ("train an agent; writes a run folder and prints a summary", TRAIN_FLAGS, "run"),
    "sweep": ("train a grid or random sweep x seeds in one compiled program", SWEEP_FLAGS, "sweep"),
    "eval": ("evaluate a run's latest checkpoint on fresh episodes (a population's: every member, the best named)",
             EVAL_FLAGS, None),
    "plot": ("learning curves of run folders, or a sweep's final return per hyperparameter, as a PNG",
             PLOT_FLAGS, None),
    "pbt": ("population-based training: members that copy better members and explore, in one compiled program",
            PBT_FLAGS, "pbt"),
    "render": ("a trained policy's episodes as a GIF or MP4 and a contact sheet PNG", RENDER_FLAGS, None),
    "report": ("aggregate metrics (IQM, median, mean, optimality gap, profiles, P(X > Y)) of run and sweep folders"
               " as Markdown and PNGs", REPORT_FLAGS, None),
}
PRESET_FLAG = ("--preset", dict(action="store_true", help="start from the tuned config of jaxrl.presets for this"
    " algorithm and --env (flags still override)"))
# fmt: on
