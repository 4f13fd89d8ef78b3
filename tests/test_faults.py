"""Failure behaviour as a contract (issue 15): every way a careful user can get a run folder, a checkpoint or a
command line wrong ends in one clear line and loses nothing on disk; the behaviours that already held
(determinism, exact resume after Ctrl-C, atomic checkpoints) stay.

The tables below are the contract: `CLI_CASES` (argv, exit code, words the one-line message must hold, what
must be unchanged or absent on disk) and `API_CASES` (a Python call, the exception, its words). They share one
finished tiny run folder (module scope); in-process `cli.main` calls cost no JAX import, and the cases that are
refused compile nothing. Subprocess cases (a real backend failure, real signals) are few, and the long ones are
marked slow.
"""

from __future__ import annotations

import csv
import dataclasses
import gc
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_trees_close, default_sigint
from jaxrl import cli
from jaxrl.algos import dqn, ppo
from jaxrl.run import checkpoint, compile, folder, logging, loop, report, session, signals
from jaxrl.sweep import summary

TINY = (
    "--num-envs 4 --num-steps 16 --total-timesteps 384 --update-epochs 1 --num-minibatches 2 --hidden-sizes 16,16"
    " --chunks 3 --checkpoint-every 1 --no-progress"
)
CONFIG = ppo.Config(
    num_envs=4, num_steps=16, total_timesteps=384, update_epochs=1, num_minibatches=2, hidden_sizes=(16, 16)
)  # what TINY trains: 6 iterations in 3 chunks of 2


def snapshot(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under `folder`: what "unchanged on disk" compares."""
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def call(argv: list[str], capsys) -> tuple[int, str, str]:
    """`jaxrl ARGV` in this process: (exit code, stdout, stderr); argparse's exits count as exit codes."""
    try:
        code = cli.main(argv)
    except SystemExit as stop:
        code = stop.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished 6-iteration PPO run folder written by the CLI (checkpoints after iterations 4 and 6)."""
    run = tmp_path_factory.mktemp("finished") / "run"
    assert cli.main(["train", "ppo", *TINY.split(), "--run-dir", str(run)]) == 0
    assert checkpoint.latest_iteration(run / "checkpoints") == 6
    return run


@pytest.fixture
def run_copy(finished, tmp_path) -> Path:
    """A copy of the finished run that a case may damage."""
    shutil.copytree(finished, tmp_path / "copy")
    return tmp_path / "copy"


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def corrupt_checkpoint(run: Path, tmp: Path) -> str:
    """Flips 4 KB (or the whole file, when smaller) inside the largest array data file (orbax's `d/` folders)
    of the latest checkpoint, as in the issue (unverified, orbax restored such damage silently); returns that
    file's name."""
    latest = run / "checkpoints" / str(checkpoint.latest_iteration(run / "checkpoints"))
    data_files = [p for p in (latest / "state").rglob("*") if p.is_file() and p.parent.name == "d"]
    target = max(data_files, key=lambda p: p.stat().st_size)
    data = bytearray(target.read_bytes())
    start = max(0, len(data) // 2 - 2048)
    for i in range(start, min(len(data), start + 4096)):
        data[i] ^= 0xFF
    target.write_bytes(bytes(data))
    return target.name


def remove_checksums(run: Path, tmp: Path, steps=(6,)) -> None:
    for step in steps:
        (run / "checkpoints" / str(step) / checkpoint.CHECKSUMS).unlink()


def truncate_unverified(run: Path, tmp: Path) -> None:
    """Every checksums file removed and every array data file of the latest checkpoint cut to half its size."""
    remove_checksums(run, tmp, (4, 6))
    for path in (run / "checkpoints" / "6" / "state").rglob("*"):
        if path.is_file() and path.parent.name == "d":
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def write_lock(run: Path, tmp: Path, pid=None, host=None, started=None) -> None:
    """A run.lock of process `pid` (default: this one) on `host`, written at `started` (default: now)."""
    started = time.time() if started is None else started
    info = {"pid": os.getpid() if pid is None else pid, "host": host or socket.gethostname(), "started": started}
    (run / folder.LOCK).write_text(json.dumps(info))


def make_file(run: Path, tmp: Path) -> None:
    (tmp / "a_file").write_text("not a folder")


def edit_config(run: Path, tmp: Path, **changes) -> None:
    """Edits the run's config.json: each change sets a key, or removes it when its value is `...`."""
    info = json.loads((run / "config.json").read_text())
    for key, value in changes.items():
        info.pop(key) if value is ... else info.__setitem__(key, value)
    (run / "config.json").write_text(json.dumps(info))


SETUPS: dict[str, Callable[[Path, Path], object]] = {
    "none": lambda run, tmp: None,
    "corrupt": corrupt_checkpoint,
    "live lock": write_lock,
    "other host lock": lambda run, tmp: write_lock(run, tmp, pid=1, host="elsewhere.example"),
    "file": make_file,
    "latest without checksums": remove_checksums,
    "no checksums": lambda run, tmp: remove_checksums(run, tmp, (4, 6)),
    "unverified and truncated": truncate_unverified,
    "no seeds": lambda run, tmp: edit_config(run, tmp, seeds=...),
    "null config": lambda run, tmp: edit_config(run, tmp, config=None),
    "seeds 0": lambda run, tmp: edit_config(run, tmp, seeds=0),
}


@dataclasses.dataclass
class CliCase:
    """`jaxrl ARGV` ({run}: a copy of the finished run, {tmp}: an empty folder) after `setup`: exits with `code`,
    prints one line on stderr holding every word of `words` and none of `absent_words`, leaves the run copy
    byte for byte unchanged when `unchanged`, and creates none of `absent` (paths under {tmp})."""

    name: str
    argv: str
    code: int
    words: tuple[str, ...]
    setup: str = "none"
    unchanged: bool = True
    absent: tuple[str, ...] = ()
    absent_words: tuple[str, ...] = ()


CLI_CASES = [
    # 1. a new run into an existing run folder: refused, nothing overwritten
    CliCase("new run into a run folder", f"train ppo {TINY} --run-dir {{run}}", 2, ("already holds a run", "--resume")),
    # 2. a folder owned by a live run; one owned by another host's run
    CliCase("live lock", f"train ppo {TINY} --resume {{run}}", 2, ("in use", f"process {os.getpid()}"), "live lock"),
    CliCase("other host's lock", "train ppo --resume {run}", 2, ("elsewhere.example", "delete"), "other host lock"),
    # 3. corrupt checkpoint data: refused naming the file, by resume and by eval
    CliCase(
        "corrupt checkpoint: resume", "train ppo --resume {run} --no-progress", 2, ("corrupt", "checksum"), "corrupt"
    ),
    CliCase("corrupt checkpoint: eval", "eval {run} --episodes 2", 2, ("corrupt", "checksum"), "corrupt"),
    # checksums deleted: never a silent loss of verification; unverifiable damaged data: one line
    CliCase(
        "checksums of the latest deleted",
        "train ppo --resume {run} --no-progress",
        0,
        ("checkpoints/6 has no checksums.json", "restored checkpoint 4, the latest verified one"),
        "latest without checksums",
        unchanged=False,
    ),
    CliCase("every checksums deleted", "eval {run} --episodes 2", 0, ("restored it unverified",), "no checksums"),
    CliCase(
        "unverified damaged data: resume",
        "train ppo --resume {run} --no-progress",
        2,
        ("checkpoints/6 cannot be restored", "no checksums.json", "delete that checkpoint folder"),
        "unverified and truncated",
    ),
    CliCase(
        "unverified damaged data: eval",
        "eval {run} --episodes 2",
        2,
        ("checkpoints/6 cannot be restored", "no checksums.json"),
        "unverified and truncated",
    ),
    # 4. resume semantics: changed flags refused naming only them; another algorithm's run; stored config wins
    CliCase(
        "resume with changed flags",
        "train ppo --resume {run} --learning-rate 1e-3 --seeds 5 --num-envs 4",
        2,
        ("--learning-rate 0.001", "--seeds 5", "0.0025"),
        absent_words=("--num-envs", "clip_eps", "{"),
    ),
    CliCase("resume with another algorithm", "train dqn --resume {run}", 2, ("ppo run", "jaxrl train ppo --resume")),
    # 5. bad runner arguments: refused before compiling, no folder made
    CliCase(
        "checkpoint every 0",
        f"train ppo {TINY} --checkpoint-every 0 --run-dir {{tmp}}/new",
        2,
        ("checkpoint_every",),
        absent=("new",),
    ),  # fmt: skip
    CliCase("seeds 0", f"train ppo {TINY} --seeds 0 --runs-dir {{tmp}}/runs", 2, ("seeds",), absent=("runs",)),
    CliCase("chunks 0", f"train ppo {TINY} --chunks 0 --run-dir {{tmp}}/new", 2, ("num_chunks",), absent=("new",)),
    CliCase("chunks 1e12", "train ppo --chunks 1e12 --run-dir {tmp}/new", 2, ("--chunks", "at most"), absent=("new",)),
    # 6. user errors that used to end in tracebacks
    CliCase(
        "num-envs inf", "train ppo --num-envs inf --run-dir {tmp}/new", 2, ("--num-envs", "finite"), absent=("new",)
    ),
    CliCase("total-timesteps inf", "train ppo --total-timesteps inf", 2, ("--total-timesteps", "finite")),
    CliCase("ent-coef nan", "train ppo --ent-coef nan", 2, ("--ent-coef", "finite")),
    CliCase(
        "total-timesteps 1e30",
        "train ppo --total-timesteps 1e30 --run-dir {tmp}/new",
        2,
        ("--total-timesteps", "2**31"),
        absent=("new",),
    ),  # fmt: skip
    CliCase("hidden sizes not ints", "train ppo --hidden-sizes 64,x", 2, ("--hidden-sizes", "integers")),
    CliCase("eval of a missing folder", "eval {tmp}/missing", 2, ("no such run folder",)),
    CliCase("eval of a non-run folder", "eval {tmp}", 2, ("not a run folder",)),
    CliCase("resume of a missing folder", "train ppo --resume {tmp}/missing", 2, ("no such run folder",)),
    CliCase("run-dir is a file", f"train ppo {TINY} --run-dir {{tmp}}/a_file", 2, ("is a file",), "file"),
    CliCase("run-dir under a file", f"train ppo {TINY} --run-dir {{tmp}}/a_file/run", 2, ("cannot create",), "file"),
    # 7. stronger validation, through the CLI
    CliCase("negative ent-coef", "train ppo --ent-coef -0.1", 2, ("Config.ent_coef", ">= 0")),
    CliCase("zero hidden size", "train ppo --hidden-sizes 0,64", 2, ("Config.hidden_sizes", "positive")),
    CliCase(
        "10 million envs",
        "train ppo --num-envs 1e8 --num-minibatches 1 --total-timesteps 1e11 --run-dir {tmp}/new",
        2,
        ("GiB", "fewer"),
        absent=("new",),
    ),  # fmt: skip
    # 8. a hand-edited config.json: one line naming the file and the key, wherever it is read
    CliCase("config.json without seeds: resume", "train ppo --resume {run}", 2, ("config.json", "'seeds'"), "no seeds"),
    CliCase("config.json without seeds: eval", "eval {run} --episodes 2", 2, ("config.json", "'seeds'"), "no seeds"),
    CliCase(
        "config.json null config: resume", "train ppo --resume {run}", 2, ("config.json", "'config'"), "null config"
    ),  # noqa: E501
    CliCase("config.json null config: eval", "eval {run}", 2, ("config.json", "'config'"), "null config"),
    CliCase("config.json seeds 0: resume", "train ppo --resume {run}", 2, ("config.json", "'seeds'", "0"), "seeds 0"),
    # 9. the smaller items
    CliCase("flag prefixes are not abbreviations", "train ppo --learning 1e-3", 2, ("unrecognized", "--learning")),
    CliCase("sweep flag prefix", "sweep ppo --final 0.2", 2, ("unrecognized", "--final")),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", CLI_CASES, ids=[c.name for c in CLI_CASES])
def test_cli_case(case: CliCase, run_copy, tmp_path, capsys):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    SETUPS[case.setup](run_copy, tmp)
    before = snapshot(run_copy)
    argv = case.argv.format(run=run_copy, tmp=tmp).split()
    code, out, err = call(argv, capsys)
    assert code == case.code, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for word in case.words:
        assert word in err, (word, err)
    for word in case.absent_words:
        assert word not in err, (word, err)
    if case.unchanged:
        assert snapshot(run_copy) == before
    for path in case.absent:
        assert not (tmp / path).exists(), path


# --- Python API ---------------------------------------------------------------------------------------------


def run_tiny(**kwargs):
    return loop.run(ppo, kwargs.pop("config", CONFIG), num_chunks=3, progress=False, **kwargs)


API_CASES = [
    # (name, call, exception, words)
    ("ent_coef nan", lambda: ppo.validate(dataclasses.replace(CONFIG, ent_coef=float("nan"))), "ent_coef", "finite"),
    ("vf_coef inf", lambda: ppo.validate(dataclasses.replace(CONFIG, vf_coef=float("inf"))), "vf_coef", "finite"),
    ("vf_coef negative", lambda: ppo.validate(dataclasses.replace(CONFIG, vf_coef=-1.0)), "vf_coef", ">= 0"),
    ("hidden size 0", lambda: ppo.validate(dataclasses.replace(CONFIG, hidden_sizes=(0,))), "hidden_sizes", "positive"),
    ("hidden size -1", lambda: dqn.validate(dqn.Config(hidden_sizes=(64, -1))), "hidden_sizes", "positive"),
    ("string lr", lambda: ppo.validate(dataclasses.replace(CONFIG, learning_rate="1e-3")), "learning_rate", "real"),
    (
        "jnp lr",
        lambda: run_tiny(config=dataclasses.replace(CONFIG, learning_rate=jnp.float32(-1))),
        "learning_rate",
        ">",
    ),
    ("array nan gamma", lambda: ppo.validate(dataclasses.replace(CONFIG, gamma=np.array([0.9, np.nan]))), "gamma", ""),
    ("jnp.ones(2) lr", lambda: ppo.validate(CONFIG.replace(learning_rate=jnp.ones(2))), "learning_rate", "()"),
    ("shape (1,) gamma", lambda: dqn.validate(dqn.Config(gamma=np.array([0.99]))), "gamma", "shape (1,)"),
    (
        "jnp.ones(2) through run",
        lambda: run_tiny(config=dataclasses.replace(CONFIG, clip_eps=jnp.ones(2))),
        "Config.clip_eps",
        "scalar",
    ),
    ("float num_envs", lambda: ppo.validate(dataclasses.replace(CONFIG, num_envs=4.0)), "num_envs", "integer"),
    ("bool as int", lambda: ppo.validate(dataclasses.replace(CONFIG, num_steps=True)), "num_steps", "integer"),
    ("checkpoint_every 0", lambda: run_tiny(checkpoint_every=0), "checkpoint_every", ">= 1"),
    ("seeds 0", lambda: run_tiny(seeds=0), "seeds", "at least one"),
    (
        "1e30 steps",
        lambda: run_tiny(config=dataclasses.replace(CONFIG, total_timesteps=10**30)),
        "total_timesteps",
        "2**31",
    ),
    (
        "memory",
        lambda: run_tiny(config=dataclasses.replace(CONFIG, num_envs=10**8, num_minibatches=1, total_timesteps=10**11)),
        "GiB",
        "",
    ),
]


@pytest.mark.parametrize(("name", "fn", "word", "word2"), API_CASES, ids=[c[0] for c in API_CASES])
def test_api_case(name, fn, word, word2, monkeypatch):
    def no_compiling(*args, **kwargs):
        raise AssertionError("compiled before refusing")

    monkeypatch.setattr(session, "compile_programs", no_compiling)
    with pytest.raises(ValueError) as error:
        fn()
    message = str(error.value)
    assert word in message and word2 in message, message


@pytest.mark.slow
def test_api_resume_with_another_config_writes_nothing(run_copy):
    """Issue item 4: refused naming only the differing field, config.json untouched, and the folder still
    resumes with the right config."""
    before = snapshot(run_copy)
    other = dataclasses.replace(CONFIG, learning_rate=1e-4)
    with pytest.raises(checkpoint.CheckpointError) as error:
        run_tiny(config=other, run_dir=run_copy, resume=True)
    assert "config.learning_rate: saved 0.0025, now 0.0001" in str(error.value)
    assert "clip_eps" not in str(error.value)
    assert snapshot(run_copy) == before
    result = run_tiny(run_dir=run_copy, resume=True)  # the right config: the finished run, nothing to train
    assert result.iterations_run == 0 and not (run_copy / folder.LOCK).exists()


@pytest.mark.slow
def test_api_new_run_into_a_run_folder_is_refused(run_copy):
    before = snapshot(run_copy)
    with pytest.raises(folder.RunDirError, match="already holds a run"):
        run_tiny(run_dir=run_copy)
    assert snapshot(run_copy) == before


# --- bespoke rows: locks, resume, atomic checkpoints, throughput, Ctrl-C, --debug, sweeps -------------------


@pytest.mark.slow
def test_stale_lock_is_taken_over_and_a_finished_resume_prints_sane_throughput(run_copy, capsys):
    """A lock left by a dead process (kill -9) of this host is stale: the resume takes it over and removes it at
    the end. Resuming a finished run trains nothing and says so instead of an absurd steps/s; its summary.json
    (the compile and run seconds of the run that trained) stays as it was."""
    write_lock(run_copy, run_copy, pid=dead_pid())
    metrics, summary_json = (run_copy / "metrics.csv").read_text(), (run_copy / "summary.json").read_text()
    code, out, err = call(["train", "ppo", "--resume", str(run_copy), "--no-progress", "--num-envs", "4"], capsys)
    assert code == 0, err
    assert "no iterations left to train" in out and "env steps/s" not in out
    assert not (run_copy / folder.LOCK).exists()
    assert (run_copy / "metrics.csv").read_text() == metrics
    assert (run_copy / "summary.json").read_text() == summary_json


@pytest.mark.slow
def test_a_lock_whose_pid_was_reused_is_taken_over(run_copy, capsys):
    """The PID of a kill -9'ed run, reused by an unrelated process that started after the lock was written,
    cannot be that run: the lock is stale and the resume takes it over."""
    other = subprocess.Popen(["sleep", "600"])
    try:
        write_lock(run_copy, run_copy, pid=other.pid, started=time.time() - 3600)
        code, out, err = call(["train", "ppo", "--resume", str(run_copy), "--no-progress"], capsys)
    finally:
        other.kill()
        other.wait()
    assert code == 0, err
    assert not (run_copy / folder.LOCK).exists()


@pytest.mark.slow
def test_a_lock_held_by_a_live_process_says_how_to_tell_and_how_to_clear(run_copy, capsys):
    """A live process of this host that may hold the lock (it started before the lock was written): refused,
    naming the PID, the host, when the lock was written and that process's command line, and how to clear it."""
    other = subprocess.Popen(["sleep", "600"])
    try:
        _wait_for(lambda: Path(f"/proc/{other.pid}/cmdline").read_bytes().startswith(b"sleep"), 60)
        write_lock(run_copy, run_copy, pid=other.pid)  # written after that process started: it may be its run
        before = snapshot(run_copy)
        code, out, err = call(["train", "ppo", "--resume", str(run_copy), "--no-progress"], capsys)
    finally:
        other.kill()
        other.wait()
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    for word in (f"process {other.pid} on {socket.gethostname()}", "sleep 600", "ago", f"delete {run_copy}/run.lock"):
        assert word in err, (word, err)
    assert snapshot(run_copy) == before


def test_a_full_disk_when_taking_the_lock_leaves_nothing(tmp_path, monkeypatch, capsys):
    """Writing run.lock's temporary file fails after creating it (a full disk): one line, exit 2, and no stray
    run.lock.<pid>.tmp nor the new run's folder left behind."""
    write_text = Path.write_text

    def disk_full(self, *args, **kwargs):
        if self.name.startswith(f"{folder.LOCK}."):
            write_text(self, "")
            raise OSError(28, "No space left on device", str(self))
        return write_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", disk_full)
    (tmp_path / "runs").mkdir()
    code, out, err = call(["train", "ppo", *TINY.split(), "--run-dir", str(tmp_path / "runs" / "new")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "No space left on device" in err, err
    assert list((tmp_path / "runs").rglob("*")) == []


def test_lock_is_exclusive_while_held(tmp_path):
    first = folder.RunLock(tmp_path)
    first.acquire()
    with pytest.raises(folder.RunDirError, match="in use"):
        folder.RunLock(tmp_path).acquire()
    first.release()
    second = folder.RunLock(tmp_path)
    second.acquire()  # released: free again
    second.release()


@pytest.mark.slow
@pytest.mark.parametrize("where", ["compile_programs", "chunk_plan", "eval_keys"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_swallowed_by_a_gc_callback_before_training_still_stops_the_run(
    where, signum, tmp_path, monkeypatch, capsys
):
    """A stop signal while the run prepares can land in jax's `_xla_gc_callback`; Python then prints "Exception
    ignored ... KeyboardInterrupt" with a traceback and carries on (found in CI: a SIGINT while compiling ran
    to the end with exit code 0; a SIGTERM after the lock was taken printed the traceback). Here a gc callback
    raises the stop at three moments before training: the run must stop as a signal during compilation (its
    new folder removed, the signal remembered), print nothing, and leave the unraisable hook as it was."""
    original = getattr(session, where)

    def with_a_stop_in_gc(*args, **kwargs):
        def interrupt(phase, info):
            gc.callbacks.remove(interrupt)
            raise loop.Stop(signum)

        gc.callbacks.append(interrupt)
        gc.collect()  # the callback's exception goes to sys.unraisablehook, not to this frame
        return original(*args, **kwargs)

    monkeypatch.setattr(session, where, with_a_stop_in_gc)
    hook = sys.unraisablehook
    run = tmp_path / "run"
    with pytest.raises(loop.Interrupted) as stop:
        run_tiny(run_dir=run)
    assert stop.value.compiling and stop.value.signum == signum and not run.exists()
    assert capsys.readouterr().err == "" and sys.unraisablehook is hook


def assert_resume_finishes_as(run: Path, finished: Path) -> None:
    """Resuming `run`, stopped after iteration 4, trains its last 2 iterations to `finished`'s state, metrics and
    metrics.csv, bit for bit."""
    resumed = run_tiny(run_dir=run, resume=True)
    assert resumed.iterations_run == 2
    _, full_state, full_metrics = checkpoint.restore(finished / "checkpoints", resumed.state, _info(finished))
    assert_trees_close(resumed.state, full_state, rtol=0, atol=0)
    assert_trees_close(resumed.metrics, full_metrics, rtol=0, atol=0)
    assert _rows(run) == _rows(finished)


@pytest.mark.slow
def test_exact_resume_after_ctrl_c(finished, tmp_path, monkeypatch):
    """Already worked, stays: Ctrl-C after chunk 2 saves; the resume equals the uninterrupted run bit for bit
    (state, metrics, metrics.csv)."""
    write = logging.CsvSink.write
    calls = []

    def interrupt_after_second_chunk(self, *args):
        write(self, *args)
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(logging.CsvSink, "write", interrupt_after_second_chunk)
    run = tmp_path / "run"
    with pytest.raises(loop.Interrupted) as stop:
        run_tiny(run_dir=run, checkpoint_every=10)
    assert stop.value.iteration == 4 and not stop.value.compiling and not (run / folder.LOCK).exists()
    monkeypatch.setattr(logging.CsvSink, "write", write)
    assert_resume_finishes_as(run, finished)


@pytest.mark.slow
def test_a_second_ctrl_c_while_a_chunk_runs_keeps_that_chunk(finished, tmp_path, monkeypatch):
    """A chunk consumes the state it is given (donated), so a stop that lands before its result is held could
    save no state. Two Ctrl-C's as the second chunk's result arrives (the earliest Python can run their handler):
    the run stops at that boundary with the second chunk saved, and the resume equals the uninterrupted run bit for
    bit."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("the run installs its signal handlers in the main thread only")
    check = loop._check_finite

    def two_ctrl_c_in_the_second_chunk(plan, held, *args):
        if held.done == 2:  # the first chunk held 2 iterations
            assert all(x.is_deleted() for x in jax.tree.leaves(held.state))  # the second chunk consumed it
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)
        return check(plan, held, *args)

    monkeypatch.setattr(loop, "_check_finite", two_ctrl_c_in_the_second_chunk)
    run = tmp_path / "run"
    with pytest.raises(loop.Interrupted) as stop:
        run_tiny(run_dir=run, checkpoint_every=10)
    assert stop.value.iteration == 4 and checkpoint.latest_iteration(run / "checkpoints") == 4
    monkeypatch.setattr(loop, "_check_finite", check)
    assert_resume_finishes_as(run, finished)


def _info(run: Path) -> dict:
    return json.loads((run / "config.json").read_text())


def _rows(run: Path) -> list[dict]:
    with open(run / "metrics.csv", newline="") as f:
        return [{k: v for k, v in row.items() if k != "wall_s"} for row in csv.DictReader(f)]


@pytest.mark.slow
def test_determinism_across_chunkings(finished):
    """Already worked, stays: the same (config, seed) gives the same numbers in one chunk as in three."""
    one = loop.run(ppo, CONFIG, num_chunks=1, progress=False)
    _, state, metrics = checkpoint.restore(finished / "checkpoints", one.state, _info(finished))
    assert_trees_close(one.state, state, rtol=0, atol=0)
    assert_trees_close(one.metrics, metrics, rtol=0, atol=0)


@pytest.mark.slow
def test_checkpoint_cut_short_after_finalisation_resumes_from_the_previous(run_copy, finished):
    """A kill between orbax's atomic finalisation and the checksums leaves a step without them: it does not
    count, the resume continues from the step before and ends with the uninterrupted run's numbers; an orbax
    temporary folder of a kill mid-save is ignored too."""
    (run_copy / "checkpoints" / "6" / checkpoint.CHECKSUMS).unlink()
    (run_copy / "checkpoints" / "8.orbax-checkpoint-tmp-1").mkdir()
    assert checkpoint.latest_iteration(run_copy / "checkpoints") == 4
    resumed = run_tiny(run_dir=run_copy, resume=True)
    assert resumed.iterations_run == 2
    assert (run_copy / "checkpoints" / "6" / checkpoint.CHECKSUMS).exists()
    assert _rows(run_copy) == _rows(finished)


@pytest.mark.slow
def test_corrupt_checkpoint_names_the_file(run_copy):
    name = corrupt_checkpoint(run_copy, run_copy)
    with pytest.raises(checkpoint.CheckpointError, match=f"corrupt: .*{name} does not match"):
        run_tiny(run_dir=run_copy, resume=True)


@pytest.mark.slow
def test_ctrl_c_during_compilation(tmp_path, run_copy, monkeypatch, capsys):
    """Ctrl-C while compiling: exit 130 and one line; a new run leaves no folder behind, a resume leaves its
    folder unchanged."""

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(session, "compile_programs", interrupted)
    code, _, err = call(["train", "ppo", *TINY.split(), "--run-dir", str(tmp_path / "new")], capsys)
    assert code == 130 and "during compilation" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "new").exists()
    shutil.rmtree(run_copy / "checkpoints" / "6")  # so that the resume has a chunk to compile
    before = snapshot(run_copy)
    code, _, err = call(["train", "ppo", "--resume", str(run_copy), "--no-progress"], capsys)
    assert code == 130 and "unchanged" in err and snapshot(run_copy) == before


def test_debug_shows_the_traceback(tmp_path, capsys):
    with pytest.raises(ValueError, match="checkpoint_every"):
        cli.main(["train", "ppo", "--checkpoint-every", "0", "--debug"])
    with pytest.raises(ValueError, match="no such run folder"):
        cli.main(["eval", str(tmp_path / "missing"), "--debug"])


def test_sweep_point_with_nan_losses_has_no_final_return():
    """A sweep point whose losses are NaN every iteration is reported as diverged, not with the finite-looking
    return its random policy still collects."""
    iterations = 10
    returns = np.full((2, 3, iterations), 20.0)
    losses = np.zeros((2, 3, iterations))
    losses[1] = np.nan
    results = type(
        "Results",
        (),
        {
            "points": [{"learning_rate": 1e-3}, {"learning_rate": 1e3}],
            "metrics": {"episode_return": returns, "value_loss": losses},
            "final": lambda self, name, fraction: report.final_return(self.metrics[name], fraction),
        },
    )()
    rows = summary.sweep_summary(results)
    assert rows[0]["final_return_mean"] == 20.0 and rows[0]["diverged"] == 0
    assert np.isnan(rows[1]["final_return_mean"]) and rows[1]["diverged"] == 3 and rows[1]["seeds"] == 0
    assert "3 diverged" in summary.format_sweep_summary(rows, ["learning_rate"])


SWEEP = "sweep ppo --num-envs 4 --num-steps 16 --total-timesteps 128 --update-epochs 1 --num-minibatches 2"
SWEEP += " --hidden-sizes 16,16 --grid learning_rate=1e-3,2e-3,3e-3 --seeds 2 --points-per-program 1"


@pytest.mark.extended
def test_a_sweep_in_parts_keeps_the_finished_points_when_interrupted(tmp_path, monkeypatch, capsys):
    """`--points-per-program 1`: the results of each finished part are written at once, so a Ctrl-C in the third
    part leaves the first two points' results.csv, summary.csv and sweep.json, said in one line, exit 130."""
    from jaxrl.sweep import program

    run, calls = program.run, []

    def interrupted_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return run(*args, **kwargs)

    monkeypatch.setattr(program, "run", interrupted_third)
    out = tmp_path / "out"
    code, printed, err = call([*SWEEP.split(), "--out", str(out)], capsys)
    assert code == 130, err
    assert err.strip().splitlines() == [f"jaxrl: interrupted: the results of 2 of 3 points are in {out}"]
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert {(r["config"], r["learning_rate"]) for r in rows} == {("0", "0.001"), ("1", "0.002")}
    assert len(rows) == 2 * 2 * 2 and len(list(csv.DictReader(open(out / "summary.csv")))) == 2
    info = json.loads((out / "sweep.json").read_text())
    assert info["points"] == [{"learning_rate": 1e-3}, {"learning_rate": 2e-3}] and info["points_total"] == 3
    assert sorted(p.name for p in out.iterdir()) == ["results.csv", "summary.csv", "sweep.json"]  # no .tmp left

    monkeypatch.setattr(program, "run", run)
    code, printed, err = call([*SWEEP.split(), "--out", str(out)], capsys)
    assert code == 0 and err == "", err
    assert len(list(csv.DictReader(open(out / "summary.csv")))) == 3 and "points_total" not in json.loads(
        (out / "sweep.json").read_text()
    )


@pytest.mark.slow
def test_memory_estimate_is_rough_but_grows_with_the_batch_and_the_layers():
    small, big = compile.memory_parts(CONFIG), compile.memory_parts(dataclasses.replace(CONFIG, num_envs=400))
    assert big["rollout"] == 100 * small["rollout"] and big["activations"] == 100 * small["activations"]
    wide = compile.memory_parts(dataclasses.replace(CONFIG, hidden_sizes=(1600, 1600)))
    assert wide["gradients"] > 1000 * small["gradients"] and wide["state"] > 3 * wide["gradients"]  # params + Adam
    assert compile.estimate_memory(CONFIG, seeds=3) == 3 * compile.estimate_memory(CONFIG)


@pytest.mark.parametrize(
    ("flags", "flag"),
    [
        ("--num-envs 1e7 --num-steps 16 --total-timesteps 2e8", "--num-envs"),
        ("--hidden-sizes 100000000", "--hidden-sizes"),
        ("--buffer-size 1e9", "--buffer-size"),
    ],
    ids=["10 million envs", "hidden 1e8", "dqn buffer 1e9"],
)
def test_a_run_that_cannot_fit_is_refused_naming_the_flag_to_lower(flags, flag, tmp_path, monkeypatch, capsys):
    """The estimate covers the parameters, the optimiser state, the rollout and the activations: a run that
    needs more than the device (16 GiB here) is refused before compiling, naming the flag to lower."""

    def no_compiling(*args, **kwargs):
        raise AssertionError("compiled before refusing")

    monkeypatch.setattr(compile, "device_memory", lambda: (16 * 2**30, "a 16 GiB device"))
    monkeypatch.setattr(session, "compile_programs", no_compiling)
    algo = "dqn" if "buffer" in flags else "ppo"
    code, out, err = call(["train", algo, *flags.split(), "--run-dir", str(tmp_path / "new")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "GiB" in err and "16.0 GiB of a 16 GiB device" in err and f"lower {flag} " in err, err
    assert not (tmp_path / "new").exists()


@pytest.mark.slow
def test_running_out_of_device_memory_in_the_first_chunk_is_one_line(tmp_path, monkeypatch, capsys):
    """XLA failing to allocate in the first chunk (past the estimate): one line naming the flags to lower,
    exit 2, and the new run's folder removed (nothing of it was trained)."""

    def out_of_memory(*args, **kwargs):
        raise jax.errors.JaxRuntimeError(
            "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 105226887168 bytes.\nBufferAssignment: ..."
        )

    monkeypatch.setattr(session.Session, "chunk", out_of_memory)
    code, out, err = call(["train", "ppo", *TINY.split(), "--run-dir", str(tmp_path / "new")], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for word in ("ran out of memory", "105226887168 bytes", "--num-envs", "--hidden-sizes"):
        assert word in err, (word, err)
    assert not (tmp_path / "new").exists()


# --- subprocesses: a real unavailable backend, real signals --------------------------------------------------


def _jaxrl(args: list[str], **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "jaxrl.cli", *args],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, **env},
    )


@pytest.mark.slow
def test_unavailable_backend_is_one_line(tmp_path):
    done = _jaxrl(["train", "ppo", *TINY.split(), "--run-dir", str(tmp_path / "new")], JAX_PLATFORMS="cuda")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "JAX_PLATFORMS=cuda" in done.stderr
    assert not (tmp_path / "new").exists()


LONG = (
    "train ppo --num-envs 4 --num-steps 16 --total-timesteps 256000 --update-epochs 1 --num-minibatches 2"
    " --hidden-sizes 16,16 --chunks 400 --checkpoint-every 1 --no-progress --compile-cache none"
)


def _wait_for(predicate, seconds=600.0):
    """Waits for the event `predicate` tells (a file, a checkpoint), polling, up to a deadline generous enough
    for a loaded machine (compiling alone can take minutes there)."""
    deadline = time.time() + seconds
    while time.time() < deadline and not predicate():
        time.sleep(0.1)
    assert predicate()


@pytest.mark.extended
def test_two_live_trainings_and_kill_9(tmp_path):
    """A second training into a live run's folder is refused while the first runs (its lock); kill -9 of the
    first (mid-save or not) leaves a stale lock and a loadable last checkpoint: the resume continues."""
    run = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "jaxrl.cli", *LONG.split(), "--run-dir", str(run)])
    try:
        _wait_for(lambda: (checkpoint.latest_iteration(run / "checkpoints") or 0) >= 20)
        second = _jaxrl(["train", "ppo", "--resume", str(run), "--no-progress"])
        assert second.returncode == 2 and "in use" in second.stderr, second.stderr
        again = _jaxrl([*LONG.split(), "--run-dir", str(run)])
        assert again.returncode == 2 and "already holds a run" in again.stderr
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=600)
    finally:
        first.kill()
    assert (run / folder.LOCK).exists()  # stale now
    saved = checkpoint.latest_iteration(run / "checkpoints")
    setup = ppo.setup(CONFIG)
    like = jax.eval_shape(jax.vmap(lambda k: ppo.init(setup, CONFIG, k)), jax.random.split(jax.random.key(0), 1))
    iteration, _, metrics = checkpoint.restore(run / "checkpoints", like, _info(run))
    assert iteration == saved and metrics["value_loss"].shape == (1, saved)


@pytest.mark.extended
def test_sigint_during_compilation_of_a_real_run(tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "jaxrl.cli", *LONG.split(), "--run-dir", str(run)],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_sigint,
    )
    _wait_for(lambda: (run / folder.LOCK).exists())  # validated and claimed: compiling now
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 130 and "Traceback" not in err, err
    if "during compilation" in err:
        assert not run.exists()
    else:  # the compile had finished: an ordinary interrupt with a checkpoint
        assert "--resume" in err and checkpoint.latest_iteration(run / "checkpoints") is not None


# --- run folder names, honest output -------------------------------------------------------------------------


class _Stamp:
    """A `datetime.datetime` whose now() is always the same second (two runs started in one second)."""

    SECOND = __import__("datetime").datetime(2026, 1, 2, 3, 4, 5)

    @staticmethod
    def now():
        return _Stamp.SECOND


def test_run_folder_names_are_shell_safe_and_claimed_atomically(tmp_path, monkeypatch):
    monkeypatch.setattr(folder, "datetime", __import__("types").SimpleNamespace(datetime=_Stamp))
    navix = dataclasses.replace(CONFIG, env="navix:Navix-Empty-5x5-v0")
    first = folder.make_run_dir(tmp_path, "ppo", navix)
    second = folder.make_run_dir(tmp_path, "ppo", navix)
    assert first.name == "ppo-navix-Navix-Empty-5x5-v0-20260102-030405" and first.is_dir()
    assert second.name == first.name + "-2" and second.is_dir()
    assert folder.run_dir_name("ppo", "a b/c:d", "1") == "ppo-a-b-c-d-1"


@pytest.mark.slow
def test_two_new_runs_in_one_second_get_two_folders(tmp_path, monkeypatch, capsys):
    """The second run of one second into one --runs-dir is not refused: it gets the -2 folder."""
    monkeypatch.setattr(folder, "datetime", __import__("types").SimpleNamespace(datetime=_Stamp))
    runs = tmp_path / "runs"
    other = runs / "ppo-CartPole-v1-20260102-030405"  # another run's folder, made this second
    other.mkdir(parents=True)
    (other / "config.json").write_text("{}")
    code, out, err = call(["train", "ppo", *TINY.split(), "--runs-dir", str(runs)], capsys)
    assert code == 0, err
    assert (runs / f"{other.name}-2" / "summary.json").is_file() and f"{other.name}-2" in out
    assert (other / "config.json").read_text() == "{}"


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("raise RuntimeError('no display')", ("RuntimeError: no display",)),
        ("def broken(:\n", ("SyntaxError",)),
        ("import not_a_module_anywhere_xyz", ("ModuleNotFoundError", "not_a_module_anywhere_xyz")),
        (None, ("ModuleNotFoundError",)),  # the module itself is missing
    ],
    ids=["RuntimeError", "SyntaxError", "its import fails", "missing"],
)
def test_env_module_that_fails_to_import_is_one_line(source, words, tmp_path, monkeypatch, capsys):
    name = f"jaxrl_test_env_module_{abs(hash(str(source))) % 10**8}"
    if source is not None:
        (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, err = call(["--env-module", name, "train", "ppo", "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and f"--env-module {name} failed to import" in err, err
    for word in words:
        assert word in err, err
    assert not (tmp_path / "run").exists()


def test_metrics_csv_is_in_seed_iteration_order_resumed_or_not(tmp_path):
    """Rows are appended chunk by chunk; the closed file is in (seed, iteration) order, and a resume (the
    checkpoint's iterations rewritten, then the new chunks) gives the same file as an uninterrupted run."""

    def chunk(first, size):  # 2 seeds, metric value = 10 * seed + iteration
        return {"m": np.array([[10.0 * s + first + i for i in range(size)] for s in range(2)])}, first, 64

    whole = logging.CsvSink(tmp_path / "whole.csv")
    for first in (0, 2, 4):
        whole.write(*chunk(first, 2))
    whole.close()
    (tmp_path / "resumed.csv").write_text("stale")
    resumed = logging.CsvSink(tmp_path / "resumed.csv", atomic=True)
    resumed.write(*chunk(0, 4))  # the checkpoint's 4 iterations
    resumed.commit()
    resumed.write(*chunk(4, 2))
    resumed.close()
    rows = [(r["seed"], r["iteration"], r["m"]) for r in csv.DictReader(open(tmp_path / "whole.csv"))]
    assert rows == [(str(s), str(i), f"{10 * s + i:g}") for s in range(2) for i in range(6)]
    assert (tmp_path / "whole.csv").read_text() == (tmp_path / "resumed.csv").read_text()


def _tensorboard_steps(directory: Path, tag: str) -> list[int]:
    """The steps of every `tag` scalar in the event files of `directory` (TFRecords of tensorboardX's Event
    protos; a purge_step hides the later steps of the files before it, as TensorBoard does)."""
    import struct

    from tensorboardX.proto import event_pb2

    steps = []
    for path in sorted(directory.glob("events.out.tfevents.*")):
        data, offset, events = path.read_bytes(), 0, []
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12 : offset + 12 + length])
            offset += 12 + length + 4
            events.append(event)
        for event in events:
            if event.session_log.status == event.session_log.START and event.step:
                steps = [s for s in steps if s < event.step]  # purged
            steps += [event.step for v in event.summary.value if v.tag == tag]
    return steps


def test_a_resume_within_the_second_keeps_the_interrupted_runs_tensorboard_steps(tmp_path, monkeypatch):
    """tensorboardX names event files by the second; a resume's sink made in the same second as the interrupted
    run's gets a file of its own, read after it, so the steps before the resume point stay."""
    import tensorboardX.event_file_writer

    monkeypatch.setattr(tensorboardX.event_file_writer.time, "time", lambda: 1733430000.25)
    metrics = {"value_loss": np.ones((1, 3))}
    interrupted = logging.TensorBoardSink(tmp_path)
    interrupted.write(metrics, 0, 64)  # steps 64, 128, 192; the checkpoint was after 128
    interrupted.close()
    resumed = logging.TensorBoardSink(tmp_path, resume_step=192)
    resumed.write(metrics, 2, 64)  # steps 192, 256, 320
    resumed.close()
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 2
    assert _tensorboard_steps(tmp_path, "value_loss") == [64, 128, 192, 256, 320]


@pytest.mark.slow
def test_resume_evaluates_at_the_uninterrupted_runs_iterations(tmp_path, monkeypatch):
    """Ctrl-C after chunk 1 of 3, then a resume: the chunk plan is the run's (not recomputed from the resume
    point), so the evaluations run after the same iterations (2, 4, 6) and metrics.csv equals the
    uninterrupted run's; TensorBoard holds every step once."""
    options = dict(eval_every=1, eval_episodes=2, tensorboard=True, checkpoint_every=1)
    whole = run_tiny(run_dir=tmp_path / "a", **options)
    write, calls = logging.TensorBoardSink.write, []  # the last sink: a Ctrl-C comes after every sink wrote

    def interrupt_after_first_chunk(self, *args):
        write(self, *args)
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt

    monkeypatch.setattr(logging.TensorBoardSink, "write", interrupt_after_first_chunk)
    with pytest.raises(loop.Interrupted) as stop:
        run_tiny(run_dir=tmp_path / "b", **options)
    assert stop.value.iteration == 2
    monkeypatch.setattr(logging.TensorBoardSink, "write", write)
    resumed = run_tiny(run_dir=tmp_path / "b", resume=True, **options)
    evaluated = np.flatnonzero(np.isfinite(resumed.metrics["eval_return"][0])) + 1
    assert list(evaluated) == [2, 4, 6] == list(np.flatnonzero(np.isfinite(whole.metrics["eval_return"][0])) + 1)
    assert _rows(tmp_path / "b") == _rows(tmp_path / "a")
    steps = CONFIG.env_steps_per_iteration * np.arange(1, 7)
    assert _tensorboard_steps(tmp_path / "b" / "tensorboard", "value_loss") == list(steps)
    assert _tensorboard_steps(tmp_path / "a" / "tensorboard", "value_loss") == list(steps)


def _stop_once_locked(monkeypatch) -> None:
    """Makes the next run meet a SIGTERM right after it took its folder's lock, while it claims the folder."""
    acquire = folder.RunLock.acquire

    def acquire_then_stop(self):
        acquire(self)
        monkeypatch.setattr(folder.RunLock, "acquire", acquire)
        raise signals.Stop(signal.SIGTERM)

    monkeypatch.setattr(folder.RunLock, "acquire", acquire_then_stop)


def test_a_sigterm_while_a_new_run_claims_its_folder_exits_143_and_leaves_nothing(tmp_path, monkeypatch, capsys):
    """A SIGTERM that lands while a new run claims its folder (its lock taken, its checks not done) stops the run
    as a SIGTERM while compiling does: exit 143, one line that says so, the folder and its lock removed. A
    population's run (`pbt.run`) stops the same way."""
    from jaxrl import pbt

    _stop_once_locked(monkeypatch)
    run = tmp_path / "run"
    code, _, err = call(["train", "ppo", *TINY.split(), "--run-dir", str(run)], capsys)
    assert code == 143, err
    assert err.splitlines() == [
        f"jaxrl: stopped by SIGTERM during compilation: nothing was trained and {run} was left as it was before. "
        "Continue with: the same command"
    ]
    assert not run.exists()
    _stop_once_locked(monkeypatch)
    population = pbt.PBTConfig(population=4, ready=2, explore={"learning_rate": "loguniform:1e-4:1e-2"})
    with pytest.raises(loop.Interrupted) as stop:
        pbt.run(CONFIG, population, tmp_path / "population", progress=False)
    assert stop.value.exit_status == 143 and stop.value.compiling
    assert not (tmp_path / "population").exists()


@pytest.mark.slow
def test_a_sigterm_while_a_resume_claims_its_folder_exits_143_and_changes_nothing(run_copy, monkeypatch, capsys):
    """A SIGTERM right after a resume took its folder's lock: exit 143, one line, the lock released and every
    file as it was; the resume then runs."""
    before = snapshot(run_copy)
    _stop_once_locked(monkeypatch)
    code, _, err = call(["train", "ppo", "--resume", str(run_copy), "--no-progress"], capsys)
    assert code == 143 and len(err.splitlines()) == 1 and "stopped by SIGTERM during compilation" in err, err
    assert snapshot(run_copy) == before and not (run_copy / folder.LOCK).exists()
    assert call(["train", "ppo", "--resume", str(run_copy), "--no-progress"], capsys)[0] == 0


def test_a_stop_signal_no_command_reported_exits_by_its_number(monkeypatch, capsys):
    """A stop signal that reaches the command line unreported (no run's `Interrupted`) still exits as a shell
    reports the signal: 130 and "interrupted" for Ctrl-C, 143 and "stopped by SIGTERM" for a SIGTERM."""
    for error, code, words in ((KeyboardInterrupt(), 130, "interrupted"),
                               (signals.Stop(signal.SIGTERM), 143, "stopped by SIGTERM")):  # fmt: skip

        def command(args, error=error):
            raise error

        monkeypatch.setitem(cli.RUNNERS, "report", command)
        assert call(["report", "x"], capsys)[::2] == (code, f"jaxrl: {words}\n")


@pytest.mark.slow
@pytest.mark.parametrize("when", ["training", "compiling"])
def test_sigterm_checkpoints_releases_the_lock_and_exits_143(when, tmp_path):
    """A cluster scheduler's SIGTERM is a Ctrl-C: while training, the run stops at the next chunk boundary with
    a checkpoint, releases its lock and prints one line, exit 143; while compiling, a new run's folder is
    removed. The test waits for the event (the lock, a checkpoint) before it signals, under a hard timeout."""
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "jaxrl.cli", *LONG.split(), "--run-dir", str(run)]
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    try:
        if when == "training":
            _wait_for(lambda: (checkpoint.latest_iteration(run / "checkpoints") or 0) >= 1)
        else:
            _wait_for(lambda: (run / folder.LOCK).exists())
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 143 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1 and "SIGTERM" in err, err
    if "during compilation" in err:  # the compile was still running (always so for "compiling", unless fast)
        assert not run.exists()
        return
    assert not (run / folder.LOCK).exists() and f"--resume {run}" in err
    saved = checkpoint.latest_iteration(run / "checkpoints")
    rows = _rows(run)
    assert saved >= 1 and len(rows) == saved and f"after iteration {saved}" in err


@pytest.mark.slow
def test_a_folder_turning_read_only_mid_run_shows_the_real_error(tmp_path, monkeypatch, capsys):
    """Writing checkpoint 4 is denied and so is removing run.lock: the one line is the checkpoint's error, not
    the lock's (its release in `finally` no longer replaces the error that ended the run)."""
    save, unlink = checkpoint.save, Path.unlink

    def denied_at_4(directory, iteration, *args, **kwargs):
        if iteration == 4:
            raise PermissionError(13, "Permission denied", str(Path(directory) / "4"))
        return save(directory, iteration, *args, **kwargs)

    def read_only_lock(self, *args, **kwargs):
        if self.name == folder.LOCK:
            raise PermissionError(13, "Permission denied", str(self))
        return unlink(self, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "save", denied_at_4)
    monkeypatch.setattr(Path, "unlink", read_only_lock)
    code, out, err = call(["train", "ppo", *TINY.split(), "--run-dir", str(tmp_path / "run")], capsys)
    assert code == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert "checkpoint 4" in err and "Permission denied" in err and "run.lock" not in err, err
    assert checkpoint.latest_iteration(tmp_path / "run" / "checkpoints") == 2


def _assert_full_disk_at_the_second_checkpoint(code: int, err: str, run: Path, named: Path | None = None) -> None:
    """One line naming the checkpoint, the cause, what is kept and the resume of `named` (default: `run`)."""
    assert code == 2 and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    resume = f"--resume {named or run}"
    for word in ("writing checkpoint 4", "No space left on device", "checkpoint 2 is kept", resume):
        assert word in err, (word, err)
    assert checkpoint.latest_iteration(run / "checkpoints") == 2
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["2"]  # nothing of the failed save is left


@pytest.mark.slow
def test_a_full_disk_at_the_second_checkpoint_is_one_line_and_resumes(finished, tmp_path, monkeypatch, capsys):
    """The file system reports no free space at the second checkpoint (a fake layer: `_free_bytes`): one line
    naming the checkpoint and what is kept, exit 2, nothing written; once there is space, the resume ends like
    an uninterrupted run."""
    calls = []

    def full_at_the_second(directory):
        calls.append(directory)
        return 0 if len(calls) == 2 else None

    monkeypatch.setattr(checkpoint, "_free_bytes", full_at_the_second)
    run = tmp_path / "run"
    code, out, err = call(["train", "ppo", *TINY.split(), "--run-dir", str(run)], capsys)
    _assert_full_disk_at_the_second_checkpoint(code, err, run)
    monkeypatch.undo()
    code, out, err = call(["train", "ppo", "--resume", str(run), "--no-progress"], capsys)
    assert code == 0 and err == "", err
    assert _rows(run) == _rows(finished)


def _unshare_works() -> bool:
    try:
        return subprocess.run(["unshare", "-rm", "true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@pytest.mark.extended
@pytest.mark.skipif(sys.platform != "linux" or not _unshare_works(), reason="needs a mount namespace (unshare -rm)")
def test_a_real_full_disk_at_the_second_checkpoint(finished, tmp_path):
    """The same on a real full disk: a tmpfs in a private mount namespace, sized from the footprint on it of a
    finished run made the same way just before (its two checkpoints and the rest, less half a checkpoint), so that
    the first checkpoint fits and the second does not, whatever a checkpoint weighs on this machine: half a
    checkpoint on either side, for the files orbax holds while it writes the first and for what the rest of the
    folder (metrics rows, the summary) grows by after the second. The check of the free space is off, so that orbax
    itself meets the full disk (its error logs and its late tracebacks were the noise). What the run left is
    copied out and resumed."""
    mount, kept = tmp_path / "tmpfs", tmp_path / "kept"
    mount.mkdir()
    run, probe = mount / "run", mount / "probe"
    script = (
        "import sys; from jaxrl.run import checkpoint; checkpoint._free_bytes = lambda d: None; "
        "from jaxrl import cli; sys.exit(cli.main(sys.argv[1:]))"
    )

    def train(folder: Path) -> str:
        return " ".join(
            map(repr, [sys.executable, "-c", script, "train", "ppo", *TINY.split(), "--run-dir", str(folder)])
        )

    used = f"df --output=used -B1 {mount} | tail -1"
    shell = (
        f"mount -t tmpfs -o size=64m tmpfs {mount} && {train(probe)} > /dev/null 2>&1 && all=$({used}) && "
        f"cp -r {probe}/checkpoints/6 {mount}/one && one=$(( $({used}) - all )) && rm -rf {probe} {mount}/one && "
        f"mount -o remount,size=$((all - one / 2)) tmpfs {mount} && "
        f"{train(run)} 2> {tmp_path / 'err'}; code=$?; cp -r {run} {kept}; exit $code"
    )
    done = subprocess.run(["unshare", "-rm", "sh", "-c", shell], capture_output=True, text=True, timeout=600)
    _assert_full_disk_at_the_second_checkpoint(done.returncode, (tmp_path / "err").read_text(), kept, run)
    resumed = _jaxrl(["train", "ppo", "--resume", str(kept), "--no-progress"])
    assert resumed.returncode == 0 and resumed.stderr == "", resumed.stderr
    assert _rows(kept) == _rows(finished)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["new run", "resume"])
def test_a_run_killed_before_its_first_checkpoint_starts_over_in_place(how, finished, tmp_path, capsys):
    """A folder with config.json but no checkpoint (the run was killed while compiling: a stale lock, perhaps
    a few metrics.csv rows) is not "already holds a run" / "no checkpoint" forever: a new run or a resume
    into it starts over, said in one line, and ends like an uninterrupted run."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(finished / "config.json", run / "config.json")
    (run / "metrics.csv").write_text("seed,iteration\n0,0\n")
    write_lock(run, tmp_path, pid=dead_pid())
    argv = ["train", "ppo", *(TINY.split() if how == "new run" else ["--no-progress"])]
    code, out, err = call([*argv, "--resume" if how == "resume" else "--run-dir", str(run)], capsys)
    assert code == 0, err
    assert err.strip().splitlines() == [
        f"jaxrl: {run} held a run stopped before its first checkpoint: starting it over"
    ]
    assert checkpoint.latest_iteration(run / "checkpoints") == 6 and not (run / folder.LOCK).exists()
    assert _rows(run) == _rows(finished)
