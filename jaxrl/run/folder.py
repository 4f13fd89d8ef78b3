"""The run folder: its name (`make_run_dir`), its one owner (`RunLock`, run.lock), claiming it for a new run or
a resume, removing what a new run wrote when it stops before its first chunk, and reading it back (config.json:
`read_run_folder`, `load_run_config`; the wall times of metrics.csv; the settings a resume keeps,
`check_resume` and `resume_settings`).

A run folder has one owner: `run.lock` (PID and host) while a run is live; a lock whose process is gone (same
host) is stale and taken over. A new run never writes into a folder that holds a run (config.json,
metrics.csv, checkpoints/ or summary.json): it refuses with RunDirError, except a run that stopped before its
first checkpoint (`never_checkpointed`: nothing to resume), which a new run or a resume starts over.

Importing this module starts no JAX, so the command line refuses a folder it cannot use (`check_new_run_dir`,
`resumed_run`, `read_run_folder`), and a resume that changes the run's settings (`check_resume`), at once, before
it starts JAX.
"""

from __future__ import annotations

import csv
import dataclasses
import datetime
import json
import os
import re
import shutil
import socket
import time
from pathlib import Path
from typing import Any

from jaxrl.catalog import CATALOG, defaults
from jaxrl.run.checkpoint_steps import latest_iteration


class RunDirError(ValueError):
    """A run folder that cannot be used: it holds another run, is in use, or cannot be created or written."""


RUN_FILES = ("config.json", "metrics.csv", "checkpoints", "summary.json")
LOCK = "run.lock"


def run_dir_name(algo_name: str, env: str, stamp: str) -> str:
    """`ALGO-ENV-STAMP` made of characters safe in every shell and tool (letters, digits, `.`, `_`, `-`): any
    other run of characters (the `:` of `navix:Navix-Empty-5x5-v0`, a `/`, a space) becomes one `-`. The full
    env id stays in config.json."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", f"{algo_name}-{env}-{stamp}")


def make_run_dir(root: str | Path, algo_name: str, config, create: bool = True) -> Path:
    """A new folder `root/ALGO-ENV-YYYYmmdd-HHMMSS` (`run_dir_name`), with a -2, -3, ... suffix when that name
    is taken. With `create` (the default) the folder is claimed atomically (`mkdir`, which fails when another
    process made it first): two runs started in the same second get two folders. `create=False`: only a free
    path, nothing made."""
    name = run_dir_name(algo_name, config.env, datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    if create:
        make_folder(Path(root), f"--runs-dir {root}")
    for suffix in range(1, 10_000):
        path = Path(root) / (name if suffix == 1 else f"{name}-{suffix}")
        if not create:
            if not path.exists():
                return path
            continue
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
        except OSError as error:
            raise RunDirError(f"cannot create run folder {path}: {error.strerror or error}.") from error
    raise RunDirError(f"no free run folder name {name}-N under {root}; choose a --run-dir.")


def holds_run(run_dir: Path) -> list[str]:
    """The run files (config.json, metrics.csv, checkpoints, summary.json) that `run_dir` holds."""
    return [name for name in RUN_FILES if (run_dir / name).exists()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _process_start(pid: int) -> float | None:
    """When process `pid` of this host started (seconds since the epoch, to about 1 s), from /proc; None where
    /proc cannot tell."""
    try:
        boot = float(Path("/proc/stat").read_text().split("btime", 1)[1].split()[0])
        ticks = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def _command_line(pid: int) -> str | None:
    """The command line of process `pid` of this host, from /proc (None where unreadable)."""
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    text = " ".join(w.decode(errors="replace") for w in words if w)
    return text[:200] + " ..." if len(text) > 200 else text or None


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{max(seconds, 0):.0f} s"


class RunLock:
    """`run_dir/run.lock` holding {"pid", "host", "started"} while a run is live. Created atomically (a
    complete temporary file hard-linked into place, which fails when the lock exists). A lock is stale, and
    replaced, when its process no longer runs on this host, or when the process of that PID started after the
    lock was written (the PID was reused: it cannot be the run that wrote it). One of another host, or of a
    live process that may be its run, is refused, saying how to tell (PID, host, the lock's age, that process's
    command line) and how to clear it (delete run.lock when that run is gone)."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / LOCK
        self.held = False

    def acquire(self) -> None:
        info = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        tmp = self.path.with_name(f"{LOCK}.{os.getpid()}.tmp")
        try:
            try:
                tmp.write_text(json.dumps(info))
            except OSError as error:
                reason = error.strerror or error
                raise RunDirError(f"run folder {self.path.parent} is not writable: {reason}.") from error
            for _ in range(2):
                try:
                    os.link(tmp, self.path)
                    self.held = True
                    return
                except FileExistsError:
                    self._take_over_if_stale()
            raise RunDirError(f"run folder {self.path.parent}: could not take its lock {self.path}.")
        finally:
            tmp.unlink(missing_ok=True)

    def _take_over_if_stale(self) -> None:
        try:
            owner = json.loads(self.path.read_text())
            pid, host = int(owner["pid"]), str(owner["host"])
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError):
            owner, pid, host = {}, None, None
        written = owner.get("started") if isinstance(owner.get("started"), (int, float)) else None
        here = socket.gethostname()
        if pid is not None and host == here:
            alive = _alive(pid)
            began = _process_start(pid) if alive else None
            if not alive or (began is not None and written is not None and began > written + 2):
                self.path.unlink(missing_ok=True)  # stale: its process is gone, or the PID now names another
                return
        raise RunDirError(self._in_use(pid, host, written, here))

    def _in_use(self, pid: int | None, host: str | None, written: float | None, here: str) -> str:
        """Why the lock is refused: who holds it, how to tell whether that is a run of this folder, how to clear it."""
        where = f"run folder {self.path.parent} is in use by another training"
        clear = f"if that run no longer runs, delete {self.path}; otherwise wait for it or choose another --run-dir."
        if pid is None:
            return f"{where} (an unreadable lock {self.path}); {clear}"
        when = ""
        if written is not None:
            stamp = datetime.datetime.fromtimestamp(written).strftime("%Y-%m-%d %H:%M:%S")
            when = f", its lock written {stamp}, {_age(time.time() - written)} ago"
        if host != here:
            return f"{where} (process {pid} on {host}{when}); {clear}"
        command = _command_line(pid)
        shown = f"that process runs: {command}" if command else "that process's command line is unreadable"
        return (
            f"{where} (process {pid} on {host}{when}; {shown}); if that is not a jaxrl training of this folder "
            f"(a PID reused after a kill), delete {self.path}; otherwise wait for it or choose another --run-dir."
        )

    def release(self) -> None:
        """Removes the lock. Never raises: a lock that cannot be removed (its folder turned read-only) stays,
        stale once this process is gone (the next run takes it over), and never hides the error that ended
        the run."""
        if self.held:
            self.held = False
            try:
                self.path.unlink(missing_ok=True)
            except OSError:
                pass


def never_checkpointed(run_dir: Path) -> bool:
    """Whether `run_dir` holds a run that stopped before its first checkpoint (killed while compiling, or
    before the first save): config.json, no complete checkpoint and no summary.json. Nothing in it can be
    resumed, so a new run or a resume starts it over (`start_over`). A config.json that is not a jaxrl run's
    does not count."""
    if (run_dir / "summary.json").exists() or latest_iteration(run_dir / "checkpoints") is not None:
        return False
    try:
        saved = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(saved, dict) and "algo" in saved and "config" in saved  # a jaxrl run's, not any file


def start_over(run_dir: Path) -> None:
    """Removes what a run that never checkpointed left (metrics.csv, TensorBoard files, unfinished checkpoint
    folders), under its lock; config.json stays until the new start writes its own."""
    remove([], [run_dir / name for name in ("metrics.csv", "metrics.csv.tmp", "tensorboard", "checkpoints")])


def claim_new(run_dir: Path) -> tuple[RunLock, list[Path], bool]:
    """Creates (or takes an empty) run folder for a new run and locks it; returns the lock, what was created
    (removed again if the run stops before its first chunk) and whether it starts over a run that never
    checkpointed (`never_checkpointed`)."""
    check_new_run_dir(run_dir)
    created = make_folder(run_dir, f"run folder {run_dir}")
    lock = RunLock(run_dir)
    try:
        lock.acquire()
        existing = holds_run(run_dir)  # again, under the lock: another run may have started meanwhile
        restart = bool(existing) and never_checkpointed(run_dir)
        if existing and not restart:
            raise RunDirError(_holds_message(run_dir, existing))
        if restart:
            start_over(run_dir)
    except BaseException:
        lock.release()
        remove(created, [])
        raise
    return lock, created, restart


def check_new_run_dir(run_dir: Path) -> None:
    """RunDirError (one line) when a new run cannot take `run_dir`: it is a file, or it holds a run that checkpointed
    (a run that never did is started over). `claim_new` checks again under the folder's lock."""
    run_dir = Path(run_dir)
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(f"run folder {run_dir} is a file; choose another --run-dir.")
    existing = holds_run(run_dir) if run_dir.is_dir() else []
    if existing and not never_checkpointed(run_dir):
        raise RunDirError(_holds_message(run_dir, existing))


def make_folder(path: Path, what: str) -> list[Path]:
    """Makes the folder `path` (and its parents); returns the folders made. RunDirError, one line naming `what`
    (`run folder X`, `--runs-dir X`, `--out X`), where it cannot be made."""
    path = Path(path)
    made = [p for p in [*reversed(path.parents), path] if not p.exists()]
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        remove(made, [])
        raise RunDirError(f"cannot create {what}: {error.strerror or error}.") from error
    return made


def check_folder_can_be_made(path: Path, what: str) -> None:
    """`make_folder`'s refusal before anything runs: the folder is made and what was made removed again."""
    remove(make_folder(path, what), [])


def _holds_message(run_dir: Path, existing: list[str]) -> str:
    return (
        f"run folder {run_dir} already holds a run ({', '.join(existing)}); continue it with --resume {run_dir} "
        "(resume=True) or choose a new --run-dir."
    )


def claim_resume(run_dir: Path, info: dict) -> tuple[RunLock, bool]:
    """Locks the run folder of a resume and checks its config.json against `info` (nothing is written); returns
    the lock and whether the run starts over (it never checkpointed: `never_checkpointed`, `start_over`)."""
    from jaxrl.run.checkpoint import CheckpointError, differences

    if not (run_dir / "config.json").is_file():
        raise CheckpointError(f"no checkpoint in {run_dir}: it is not a run folder (no config.json).")
    lock = RunLock(run_dir)
    try:
        lock.acquire()
        try:
            saved = json.loads((run_dir / "config.json").read_text())
        except (OSError, ValueError) as error:
            raise CheckpointError(f"{run_dir / 'config.json'} cannot be read: {error}") from error
        changed = differences(saved, info)
        if changed:
            raise CheckpointError(
                f"run folder {run_dir} was written by a different run: {changed}. A resume keeps the run's "
                "settings; start a new run to change them."
            )
        restart = never_checkpointed(run_dir)
        if restart:
            start_over(run_dir)
    except BaseException:
        lock.release()
        raise
    return lock, restart


def previous_wall(run_dir: Path | None, done: int) -> list[float]:
    """The wall_s of iterations 0 .. done-1 as the run's metrics.csv recorded them (NaN where it does not)."""
    wall = [float("nan")] * done
    try:
        with open(run_dir / "metrics.csv", newline="") as file:
            for row in csv.DictReader(file):
                i = int(row["iteration"])
                if row["seed"] == "0" and 0 <= i < done:
                    wall[i] = float(row["wall_s"])
    except (OSError, KeyError, ValueError, TypeError):
        pass
    return wall


def remove(created: list[Path], files: list[Path]) -> None:
    """Removes the `files` a new run wrote and the folders it `created` (deepest first, only when empty)."""
    for path in files:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    for folder in reversed(created):
        try:
            folder.rmdir()
        except OSError:
            pass


def run_info(algo_name, seeds, seed, config, eval_every, eval_episodes, device_independent=False) -> dict:
    """The content of a run's config.json: the algorithm, seeds, base seed, Config, evaluation setting and, when
    on, `device_independent`."""
    from jaxrl.algos.base import to_dict

    info = {"algo": algo_name, "seeds": seeds, "seed": seed, "config": to_dict(config)}
    if eval_every:  # changes the metrics a checkpoint holds, so a resume must use the same setting
        info["eval"] = {"every": eval_every, "episodes": eval_episodes}
    if device_independent:  # another program, other last bits: a resume keeps it
        info["device_independent"] = True
    return json.loads(json.dumps(info))  # as config.json holds it (lists for tuples)


@dataclasses.dataclass
class Claim:
    """A run folder held by a run: its `lock` (None without a folder, or off process 0), the folders a new run
    `created` and the files it writes (`written`), which `discard` removes again, and whether it `restarted`
    a run that never checkpointed (the same in every process)."""

    lock: RunLock | None = None
    created: list[Path] = dataclasses.field(default_factory=list)
    written: list[Path] = dataclasses.field(default_factory=list)
    restarted: bool = False  # the folder held a run that never checkpointed: it starts over

    def discard(self) -> None:
        """A new run that stops before its first chunk finished removes what it wrote (nothing to keep)."""
        if self.lock is not None and self.written:
            self.lock.release()
            remove(self.created, self.written)

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()


def claim(run_dir: Path | None, resume: bool, info: dict) -> Claim:
    """Claims `run_dir` for a run with config.json `info` (process 0 does; the others wait for it): a resume
    locks it and checks its config.json (`claim_resume`), a new run creates and locks it (`claim_new`). An error
    or a stop signal while it claims releases the lock and removes what a new run made."""
    from jaxrl.run import hosts

    if run_dir is None:
        return Claim()
    if resume:
        lock, restart = hosts.on_lead(lambda: claim_resume(run_dir, info), f"resume {run_dir}") or (None, False)
        return Claim(lock, restarted=hosts.any_process(restart))
    lock, created, restart = hosts.on_lead(lambda: claim_new(run_dir), f"create {run_dir}") or (None, [], False)
    written = [run_dir / name for name in ("config.json", "metrics.csv", "tensorboard")] if hosts.lead() else []
    return Claim(lock, created, written, hosts.any_process(restart))


def read_run_folder(run_dir: Path) -> dict:
    """A run folder's config.json; ValueError (one line) when `run_dir` is missing or is not a run folder."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"{run_dir}: no such run folder.")
    path = run_dir / "config.json"
    if not path.is_file():
        raise ValueError(f"{run_dir} is not a run folder (no config.json).")
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{path} cannot be read: {error}") from error
    if not isinstance(saved, dict) or saved.get("algo") not in CATALOG or "config" not in saved:
        raise ValueError(f"{path} is not a jaxrl run's config (no known 'algo' and 'config').")
    problem = _config_json_problem(saved)
    if problem:
        raise ValueError(f"{path}: {problem}; restore the file as the run wrote it, or start a new run.")
    return saved


def _is_count(value, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def _config_json_problem(saved: dict) -> str:
    """'' when a run's config.json holds every key a resume or an evaluation reads, with a usable value; else
    what is wrong, naming the key."""
    if not isinstance(saved["config"], dict):
        return f"'config' is {json.dumps(saved['config'])}, not the run's Config fields"
    for key, minimum in (("seeds", 1), ("seed", 0)):
        if key not in saved:
            return f"the key '{key}' is missing"
        if not _is_count(saved[key], minimum):
            return f"'{key}' is {json.dumps(saved[key])}, not an integer >= {minimum}"
    evaluation = saved.get("eval")
    usable = isinstance(evaluation, dict) and _is_count(evaluation.get("every"), 0)
    if evaluation is not None and not (usable and _is_count(evaluation.get("episodes"), 1)):
        return f'\'eval\' is {json.dumps(evaluation)}, not {{"every": chunks, "episodes": episodes}}'
    return ""


def load_run_config(run_dir: Path, saved: dict | None = None):
    """(algo module, Config, seeds, seed) from a run folder's config.json (`saved`: as `read_run_folder` read
    it)."""
    from jaxrl.algos import ALGORITHMS

    saved = read_run_folder(run_dir) if saved is None else saved
    module = ALGORITHMS[saved["algo"]]
    fields = {f.name for f in dataclasses.fields(module.Config)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in saved["config"].items() if k in fields}
    return module, module.Config(**values), saved["seeds"], saved["seed"]


# Settings of `jaxrl train` a resume may give with a different value: they change no number of the run.
RESUME_FREE = (
    "chunks",
    "checkpoint_every",
    "no_progress",
    "quiet",
    "tensorboard",
    "target_return",
    "wandb",
    "compile_cache",
    "devices",
    "seed_devices",
    "cpu_cores",
    "coordinator",
    "num_processes",
    "process_id",
)
# when neither given nor resumed
RUN_DEFAULTS = {"seeds": 1, "seed": 0, "eval_every": 0, "eval_episodes": 16, "device_independent": False}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def resumed_run(run_dir: Path, algo_name: str) -> dict:
    """The config.json of a run folder that `jaxrl train ALGO --resume` continues; ValueError (one line) when it
    is not a run folder (`read_run_folder`) or holds another algorithm's run."""
    saved = read_run_folder(run_dir)
    if saved["algo"] != algo_name:
        raise ValueError(
            f"--resume {run_dir}: it is a {saved['algo']} run; continue it with jaxrl train {saved['algo']} "
            f"--resume {run_dir}."
        )
    return saved


def check_resume(run_dir: Path, algo_name: str, given: dict) -> tuple[dict, dict]:
    """(config.json, the run's settings) of resuming `run_dir` as an `algo_name` run, read without JAX: the
    settings by name as config.json holds them (every Config field, the catalog's default where config.json
    predates the field; seeds, seed, eval_every, eval_episodes, device_independent). `given`: the settings given
    for the resume ({Config field or RUN_DEFAULTS name: value}); one with a value different from the run's is
    refused (naming each such flag). Settings that change no number (RESUME_FREE: --chunks, --checkpoint-every,
    --no-progress, ...) are not compared."""
    run_dir = Path(run_dir)
    saved = resumed_run(run_dir, algo_name)
    fields = {name: list(value) if isinstance(value, tuple) else value for name, value in defaults(algo_name).items()}
    stored_eval = saved.get("eval") or {"every": 0, "episodes": RUN_DEFAULTS["eval_episodes"]}
    stored = {**fields, **{name: value for name, value in saved["config"].items() if name in fields}}
    stored.update(seeds=saved["seeds"], seed=saved["seed"], eval_every=stored_eval["every"])
    stored.update(eval_episodes=stored_eval["episodes"], device_independent=saved.get("device_independent", False))
    compared = stored if stored_eval["every"] else {k: v for k, v in stored.items() if k != "eval_episodes"}
    changed = []
    for name, value in given.items():
        value = list(value) if isinstance(value, tuple) else value
        if name in compared and compared[name] != value:
            changed.append(f"{_flag(name)} {value} (the run's: {compared[name]})")
    if changed:
        raise ValueError(
            f"--resume {run_dir} keeps the run's settings, but {'; '.join(changed)} differ: drop "
            f"{'it' if len(changed) == 1 else 'them'}, or start a new run with another --run-dir."
        )
    return saved, stored


def resume_settings(run_dir: Path, algo_name: str, given: dict) -> tuple[Any, dict]:
    """(Config, {seeds, seed, eval_every, eval_episodes, device_independent}) of resuming `run_dir` as an
    `algo_name` run, from its config.json; refuses a `given` setting the run does not have (`check_resume`)."""
    saved, stored = check_resume(run_dir, algo_name, given)
    _, config, _, _ = load_run_config(Path(run_dir), saved)
    return config, {name: stored[name] for name in RUN_DEFAULTS}
