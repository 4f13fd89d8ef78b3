"""One sweep run by 2 processes (jax.distributed on CPU, over loopback) equals the single-process sweep.

The first test launches `jaxrl sweep` (python -m jaxrl.cli) twice as processes 0 and 1; the second runs the
Python API in 2 processes with keep_state=True (final states gathered from both). They share a persistent
compilation cache, so the second loads the program the first compiled.
"""

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import pytest

from conftest import COMPILE_CACHE, FAST_COMPILE, assert_trees_close, default_sigint
from jaxrl import sweep
from jaxrl.algos import ppo

CONFIG = ppo.Config(
    num_envs=4, num_steps=16, total_timesteps=4 * 16 * 5, update_epochs=2, num_minibatches=2, hidden_sizes=(16, 16)
)
LEARNING_RATES = [1e-3, 5e-3]
SEEDS, SEED = 3, 7
TIMEOUT_S = 300  # both processes, compile included (about 40 s of CPU each); on expiry both are killed, the test fails


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# processes 0 and 1 of the Python API: the same sweep, keep_state=True; each saves what it got
API_SCRIPT = textwrap.dedent(
    """
    import sys
    from jaxrl import sweep
    from jaxrl.run import compile
    process, port, cache, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    sweep.initialize_distributed(f"127.0.0.1:{{port}}", 2, process)
    compile.enable_compilation_cache(cache)
    import jax, numpy as np
    from jaxrl.algos import ppo
    config = ppo.Config(**{config})
    results = sweep.run(sweep.grid(config, learning_rate={lrs}), seeds={seeds}, seed={seed})
    assert results.num_processes == 2 and results.num_devices == 2
    leaves = jax.tree.leaves(results.state)
    keys = [jax.random.key_data(x) for x in leaves if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)]
    assert keys, "the state holds typed keys"
    np.savez(out, **results.metrics, **{{f"param_{{i}}": np.asarray(x) for i, x in
                                         enumerate(jax.tree.leaves(results.state.params))}},
             key=np.asarray(keys[0]))
    """
)


def cli_command(i, out, port, cache):
    flags = (
        f"sweep ppo --num-envs {CONFIG.num_envs} --num-steps {CONFIG.num_steps} "
        f"--total-timesteps {CONFIG.total_timesteps} --update-epochs {CONFIG.update_epochs} "
        f"--num-minibatches {CONFIG.num_minibatches} --hidden-sizes 16,16 --seeds {SEEDS} --seed {SEED} "
        f"--grid learning_rate={','.join(map(str, LEARNING_RATES))} --compile-cache {cache} "
        f"--coordinator 127.0.0.1:{port} --num-processes 2 --process-id {i} --out {out}"
    ).split()
    return [sys.executable, "-m", "jaxrl.cli", *flags]


def api_command(i, out, port, cache):
    config = {
        "num_envs": CONFIG.num_envs,
        "num_steps": CONFIG.num_steps,
        "total_timesteps": CONFIG.total_timesteps,
        "update_epochs": CONFIG.update_epochs,
        "num_minibatches": CONFIG.num_minibatches,
        "hidden_sizes": CONFIG.hidden_sizes,
    }
    script = API_SCRIPT.format(config=config, lrs=LEARNING_RATES, seeds=SEEDS, seed=SEED)
    return [sys.executable, "-c", script, str(i), str(port), str(cache), str(out / f"process{i}.npz")]


def cpu_env() -> dict[str, str]:
    """The environment of a CPU subprocess: XLA's one CPU device (a device count of the test process's XLA_FLAGS
    dropped; `--cpu-cores` chooses its own) at the suite's fast compile level (conftest.FAST_COMPILE)."""
    return {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": FAST_COMPILE}


def launch(command, out, cache):
    """Processes 0 and 1 of `command(i, out, port, cache)` on a free loopback port."""
    port = free_port()
    env = cpu_env()  # one CPU device per process: the global mesh has 2 devices in 2 processes
    return [
        subprocess.Popen(
            command(i, out, port, cache),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=default_sigint,
        )
        for i in range(2)
    ]


def wait_all(procs, timeout_s):
    """Outputs of every process; kills them all and fails the test when the deadline passes."""
    deadline = time.monotonic() + timeout_s
    outputs = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            outputs.append(out)
    except subprocess.TimeoutExpired:
        for proc in procs:
            proc.kill()
        tails = [proc.communicate()[0][-2000:] for proc in procs]
        pytest.fail(f"2-process sweep did not finish in {timeout_s} s; outputs:\n" + "\n---\n".join(tails))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return outputs


@pytest.fixture(scope="module")
def cache():
    return COMPILE_CACHE  # the session's (conftest): the processes load what another test compiled


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory, cache):
    """The 2-process `jaxrl sweep` and the single-process reference, compiled side by side."""
    out = tmp_path_factory.mktemp("two_processes")
    procs = launch(cli_command, out, cache)
    start = time.monotonic()
    try:
        single = sweep.run(sweep.grid(CONFIG, learning_rate=LEARNING_RATES), seeds=SEEDS, seed=SEED)
    finally:
        outputs = wait_all(procs, TIMEOUT_S - (time.monotonic() - start))
    for i, (proc, output) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, f"process {i}:\n{output[-3000:]}"
    return out, outputs, single


@pytest.mark.slow
def test_two_processes_equal_one(cli_run):
    tmp_path, outputs, single = cli_run
    assert "process 1: done" in outputs[1]

    info = json.loads((tmp_path / "sweep.json").read_text())
    assert info["processes"] == 2 and info["devices"] == 2 and single.num_processes == 1
    rows = list(csv.DictReader(open(tmp_path / "results.csv")))
    expected = single.rows()
    assert len(rows) == len(expected) == len(LEARNING_RATES) * SEEDS * CONFIG.num_iterations
    for got, want in zip(rows, expected, strict=True):
        assert (int(got["config"]), int(got["seed"]), int(got["iteration"])) == (
            want["config"],
            want["seed"],
            want["iteration"],
        )
        assert float(got["learning_rate"]) == pytest.approx(want["learning_rate"])
        for name in single.metrics:
            np.testing.assert_allclose(float(got[name]), want[name], rtol=1e-5, atol=1e-6, err_msg=name)
    # not vacuous: the rows of process 1 (the second half of the batch) are there and differ from process 0's
    loss = np.array([float(r["value_loss"]) for r in rows]).reshape(len(LEARNING_RATES), SEEDS, -1)
    assert np.isfinite(loss).all() and not np.allclose(loss[0], loss[1])
    summary = list(csv.DictReader(open(tmp_path / "summary.csv")))
    assert [float(r["learning_rate"]) for r in summary] == pytest.approx(LEARNING_RATES)


@pytest.mark.extended
def test_two_processes_gather_final_states(cli_run, cache, tmp_path):
    """The Python API under jax.distributed: both processes get every run's metrics and final state (PRNG
    keys included), equal to the single-process sweep."""
    _, _, single = cli_run
    procs = launch(api_command, tmp_path, cache)
    start = time.monotonic()
    outputs = wait_all(procs, TIMEOUT_S)
    for i, (proc, output) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, f"process {i}:\n{output[-3000:]}"
    print(f"2-process API sweep with the compile cache warm: {time.monotonic() - start:.1f} s")
    params = [np.asarray(x) for x in jax.tree.leaves(single.state.params)]
    for i in range(2):
        saved = np.load(tmp_path / f"process{i}.npz")
        assert_trees_close({k: saved[k] for k in single.metrics}, single.metrics, rtol=1e-5, atol=1e-6)
        assert_trees_close([saved[f"param_{j}"] for j in range(len(params))], params, rtol=1e-5, atol=1e-6)
        keys = [x for x in jax.tree.leaves(single.state) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)]
        np.testing.assert_array_equal(saved["key"], np.asarray(jax.random.key_data(keys[0])))


# ---------------------------------------------------------------------------------------------------------------
# ONE training run over 2 processes: `jaxrl train --coordinator ...`
# ---------------------------------------------------------------------------------------------------------------

TRAIN_ITERATIONS = 4


def train_flags(iterations: int = TRAIN_ITERATIONS, chunks: int = 2, checkpoint_every: int = 1) -> list[str]:
    """`jaxrl train` of a tiny PPO (8 envs x 16 steps, 2 seeds) for `iterations`."""
    return (
        f"train ppo --num-envs 8 --num-steps 16 --total-timesteps {8 * 16 * iterations} --update-epochs 2 "
        f"--num-minibatches 2 --hidden-sizes 16,16 --seeds 2 --chunks {chunks} --checkpoint-every "
        f"{checkpoint_every} --no-progress"
    ).split()


TRAIN = train_flags()


def cli(*args: str, timeout_s: int = TIMEOUT_S) -> str:
    """`jaxrl ARGS` in one fresh CPU process (1 device unless --cpu-cores); its output, or the test fails."""
    env = cpu_env()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "jaxrl.cli", *args], env=env, capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"jaxrl {' '.join(args)} did not finish in {timeout_s} s")
    assert done.returncode == 0, f"jaxrl {' '.join(args)}:\n{done.stdout}\n{done.stderr[-3000:]}"
    return done.stdout


def train_processes(*flags: str, own=lambda i: []):
    """`command(i, out, port, cache)` for `launch`: process i of `jaxrl train ... FLAGS` (or another command's
    FLAGS) over 2 processes; `own(i)`: the flags of process i alone."""

    def command(i, out, port, cache):
        multi = ["--coordinator", f"127.0.0.1:{port}", "--num-processes", "2", "--process-id", str(i)]
        return [sys.executable, "-m", "jaxrl.cli", *flags, *own(i), "--compile-cache", str(cache), *multi]

    return command


def beside_one_process(flags: list[str], single: list[str], out, cache) -> list[str]:
    """`jaxrl FLAGS` over 2 processes and, side by side, `jaxrl SINGLE` in one process of 2 CPU devices; the 2
    processes' outputs, once all three exited 0 (or the test fails)."""
    procs = launch(train_processes(*flags), out, cache)
    start = time.monotonic()
    try:
        cli(*single, "--cpu-cores", "2", "--compile-cache", str(cache))
    finally:
        outputs = wait_all(procs, TIMEOUT_S - (time.monotonic() - start))
    for i, (proc, output) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, f"process {i}:\n{output[-3000:]}"
    return outputs


def metric_rows(run_dir) -> list[dict]:
    rows = list(csv.DictReader(open(run_dir / "metrics.csv")))
    return sorted(rows, key=lambda r: (int(r["seed"]), int(r["iteration"])))


def final_state(run_dir):
    """The latest checkpoint's state of a run folder, on this process's one device."""
    from jaxrl.run import checkpoint
    from jaxrl.run.compile import abstract_state
    from jaxrl.run.folder import load_run_config, read_run_folder

    module, config, seeds, seed = load_run_config(run_dir)
    keys = jax.random.split(jax.random.key(seed), seeds)
    like = abstract_state(module, config, keys, 1)
    info = read_run_folder(run_dir)
    _, state, _ = checkpoint.restore(
        run_dir / "checkpoints", like, info, like_for=lambda d: abstract_state(module, config, keys, d)
    )
    return state


@pytest.mark.extended
def test_train_over_two_processes_writes_one_run_folder(tmp_path, cache):
    """`jaxrl train ppo ... --devices all --coordinator --num-processes 2 --process-id i` (1 CPU device per
    process) trains each seed's ONE policy over both: process 0 alone writes the run folder (one metrics row per
    seed and iteration, no lock left, the summary printed once), and its metrics equal a single-process `--devices
    2 --cpu-cores 2` run to rtol 1e-5. Its 2-device checkpoint evaluates on one process with one device; a copy
    cut back to its first checkpoint resumes over 2 processes to the uninterrupted run bit for bit (metrics and
    state) and on one process (2 CPU devices) to it within rtol 1e-5."""
    two, single = tmp_path / "two", tmp_path / "single"
    over_two = [*TRAIN, "--devices", "all", "--run-dir", str(two)]
    outputs = beside_one_process(over_two, [*TRAIN, "--run-dir", str(single), "--devices", "2"], tmp_path, cache)
    assert "run folder" in outputs[0] and "run folder" not in outputs[1] and "process 1: done" in outputs[1]
    assert sorted(p.name for p in two.iterdir()) == ["checkpoints", "config.json", "metrics.csv", "summary.json"]
    assert json.loads((two / "summary.json").read_text())["seeds"] == 2
    rows, reference = metric_rows(two), metric_rows(single)
    assert len(rows) == len(reference) == 2 * TRAIN_ITERATIONS
    for got, want in zip(rows, reference, strict=True):
        for name in got:
            if name != "wall_s":
                np.testing.assert_allclose(float(got[name]), float(want[name]), rtol=1e-5, atol=1e-6, err_msg=name)

    assert "deterministic" in cli("eval", str(two), "--episodes", "2")  # one process, one device

    cut, cut_single = tmp_path / "cut", tmp_path / "cut_single"
    shutil.copytree(two, cut)
    shutil.rmtree(cut / "checkpoints" / str(TRAIN_ITERATIONS))  # back to the checkpoint after chunk 1
    shutil.copytree(cut, cut_single)
    resume = ["train", "ppo", "--resume"]
    procs = launch(train_processes(*resume, str(cut), "--no-progress", "--devices", "all"), tmp_path, cache)
    outputs = wait_all(procs, TIMEOUT_S)
    for i, (proc, output) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, f"resume, process {i}:\n{output[-3000:]}"
    cli(*resume, str(cut_single), "--devices", "2", "--cpu-cores", "2", "--no-progress", "--compile-cache", str(cache))
    for got, want, near in zip(metric_rows(cut), rows, metric_rows(cut_single), strict=True):
        for name in got:
            if name != "wall_s":
                assert got[name] == want[name], name
                np.testing.assert_allclose(float(near[name]), float(want[name]), rtol=1e-5, atol=1e-6, err_msg=name)
    assert_trees_close(final_state(cut), final_state(two), rtol=0, atol=0)  # bit for bit, keys included


def resume_cut_over_two_processes(run_dir, tmp_path, cache):
    """A copy of `run_dir` cut back to its checkpoint after chunk 1 (of 2), resumed over 2 processes: (the copy,
    the processes' outputs), once both exited 0 (or the test fails)."""
    cut = tmp_path / "cut"
    shutil.copytree(run_dir, cut)
    shutil.rmtree(cut / "checkpoints" / str(TRAIN_ITERATIONS))
    procs = launch(train_processes("train", "ppo", "--resume", str(cut)), tmp_path, cache)
    outputs = wait_all(procs, TIMEOUT_S)
    for i, (proc, output) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, f"resume, process {i}:\n{output[-3000:]}"
    return cut, outputs


@pytest.mark.extended
def test_seeds_split_over_two_processes_equal_one_process_bit_for_bit(tmp_path, cache):
    """`jaxrl train ... --seeds 3 --device-independent` over 2 processes (1 CPU device each): `--devices auto`
    splits the seeds over both, each process's device training whole seeds (a copy of seed 0 pads process 1's).
    Process 0 alone writes the run folder, and its metrics and final state equal the same run in one process on 2
    CPU devices bit for bit. A copy cut back to its first checkpoint resumes over 2 processes to the same bits,
    and the checkpoint evaluates on one process with one device. `--seed-devices 3` over 2 processes is
    refused."""
    split = [*TRAIN, "--seeds", "3", "--device-independent"]  # --devices auto: --seed-devices 2
    two, single = tmp_path / "two", tmp_path / "single"
    one = [*split, "--run-dir", str(single), "--seed-devices", "2"]
    outputs = beside_one_process([*split, "--run-dir", str(two)], one, tmp_path, cache)
    assert "on 2 devices, up to 2 seed(s) each" in outputs[0] and "process 1: done" in outputs[1]
    assert json.loads((two / "summary.json").read_text())["seed_devices"] == 2
    rows = metric_rows(two)
    assert len(rows) == 3 * TRAIN_ITERATIONS
    for got, want in zip(rows, metric_rows(single), strict=True):
        assert {k: v for k, v in got.items() if k != "wall_s"} == {k: v for k, v in want.items() if k != "wall_s"}
    assert_trees_close(final_state(two), final_state(single), rtol=0, atol=0)  # keys included

    assert "deterministic" in cli("eval", str(two), "--episodes", "2")  # one process, one device

    cut, _ = resume_cut_over_two_processes(two, tmp_path, cache)
    for got, want in zip(metric_rows(cut), rows, strict=True):
        assert {k: v for k, v in got.items() if k != "wall_s"} == {k: v for k, v in want.items() if k != "wall_s"}
    assert_trees_close(final_state(cut), final_state(two), rtol=0, atol=0)

    odd = [*TRAIN, "--seeds", "3", "--seed-devices", "3", "--run-dir", str(tmp_path / "odd")]
    outputs = wait_all(launch(train_processes(*odd), tmp_path, cache), TIMEOUT_S)
    for output in outputs:  # both refuse it, before compiling
        assert "seed_devices=3: over 2 processes each process takes the same number" in output, output[-2000:]


@pytest.mark.extended
def test_a_resume_over_two_processes_may_switch_from_envs_split_to_seeds_split(tmp_path, cache):
    """A 2-seed run over 2 processes with `--devices all` (each seed's envs split over both processes' devices),
    cut back to its first checkpoint and resumed over 2 processes with `--devices auto` (whole seeds on each
    process's device): both processes exit 0, the resume says its seed split, the rows before the cut are the
    first run's, every iteration of both seeds is logged once, and summary.json records 2 seed devices."""
    envs_split = tmp_path / "envs"
    outputs = wait_all(launch(train_processes(*TRAIN, "--devices", "all", "--run-dir", str(envs_split)), tmp_path,
                              cache), TIMEOUT_S)  # fmt: skip
    assert "process 1: done" in outputs[1], outputs[1][-2000:]
    before = json.loads((envs_split / "summary.json").read_text())
    assert before["devices"] == 2 and before.get("seed_devices", 1) == 1, before  # each seed over both devices
    cut, outputs = resume_cut_over_two_processes(envs_split, tmp_path, cache)
    assert "on 2 devices, 1 seed(s) each" in outputs[0], outputs[0][-2000:]
    first, resumed = metric_rows(envs_split), metric_rows(cut)
    assert [(r["seed"], r["iteration"]) for r in resumed] == [(r["seed"], r["iteration"]) for r in first]
    half = TRAIN_ITERATIONS // 2
    kept = [r for r in first if int(r["iteration"]) < half]
    assert [r for r in resumed if int(r["iteration"]) < half] == kept  # written before the cut, kept as they were
    summary = json.loads((cut / "summary.json").read_text())
    assert summary["seed_devices"] == 2 and summary["seeds"] == 2


@pytest.mark.slow
def test_train_over_two_processes_fails_together(tmp_path, cache):
    """A run folder that process 0 refuses (it holds a run): process 0 exits with its one-line error and
    process 1, instead of waiting for it in a collective, with one naming process 0; both before compiling."""
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "config.json").write_text("{}")
    start = time.monotonic()
    procs = launch(train_processes(*TRAIN, "--run-dir", str(taken)), tmp_path, cache)
    outputs = wait_all(procs, 120)
    assert procs[0].returncode == 2 and "already holds a run" in outputs[0], outputs[0][-2000:]
    assert procs[1].returncode == 2 and "process 0 could not create" in outputs[1], outputs[1][-2000:]
    assert sorted(p.name for p in taken.iterdir()) == ["config.json"]
    print(f"both processes stopped after {time.monotonic() - start:.1f} s")


def interrupt_process_1_once(procs, csv_path, lines: int) -> None:
    """SIGINT to process 1 once `csv_path` has `lines` lines (or a process ended, or the deadline passed); then
    both processes exit 130, or the test fails."""
    import signal

    deadline = time.monotonic() + TIMEOUT_S
    while not csv_path.exists() or len(csv_path.read_text().splitlines()) < lines:
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            break
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGINT)
    outputs = wait_all(procs, max(10.0, deadline - time.monotonic()))
    assert [p.returncode for p in procs] == [130, 130], "\n---\n".join(o[-2000:] for o in outputs)


@pytest.mark.extended
def test_ctrl_c_in_one_process_stops_both_at_a_chunk_boundary(tmp_path, cache):
    """SIGINT to process 1 alone while a 2-process run trains: both processes stop at the same chunk boundary
    (exit 130) and process 0 writes the checkpoint of the iterations every process completed."""
    run_dir = tmp_path / "cut"
    long = train_flags(iterations=1000, chunks=500, checkpoint_every=1000)
    procs = launch(train_processes(*long, "--run-dir", str(run_dir)), tmp_path, cache)
    interrupt_process_1_once(procs, run_dir / "metrics.csv", 9)  # a few chunks went by
    from jaxrl.run import checkpoint

    done = checkpoint.latest_iteration(run_dir / "checkpoints")
    assert done is not None and 0 < done < 1000
    assert len(metric_rows(run_dir)) == 2 * done  # the checkpoint holds what the metrics show, on both seeds


# ---------------------------------------------------------------------------------------------------------------
# ONE population over 2 processes: `jaxrl pbt --coordinator ...`
# ---------------------------------------------------------------------------------------------------------------

# 4 members of a tiny PPO for 6 iterations, exploit/explore after iterations 2 and 4 (the last ready step, after
# iteration 6, does not fire), in 3 chunks of one ready block each
PBT = (
    "pbt ppo --num-envs 4 --num-steps 16 --total-timesteps 384 --update-epochs 1 --num-minibatches 2 "
    "--hidden-sizes 16,16 --population 4 --ready 2 --explore learning_rate=loguniform:1e-4:1e-2 "
    "--resample-probability 0.5 --chunks 3 --eval-episodes 2 --no-progress"
).split()


def population_checkpoint(out):
    """(iteration, {"states", "hyper"}, metrics) of the latest checkpoint of a population's folder."""
    from jaxrl import pbt
    from jaxrl.run import checkpoint
    from jaxrl.run.folder import read_run_folder

    _, config, settings, seed, _ = pbt.runner.resume_settings(out)
    like = pbt.runner.checkpoint_like(config, settings, seed)
    return checkpoint.restore(out / "checkpoints", like, read_run_folder(out))


def assert_same_population(got, want):
    """Two population folders hold the same run bit for bit: lineage.csv, metrics.csv, the best member's
    evaluation, and the latest checkpoint (TrainStates, keys included, hyperparameters, every iteration's metrics
    and the lineage)."""
    for name in ("lineage.csv", "metrics.csv"):
        assert (got / name).read_text() == (want / name).read_text(), name
    best = [json.loads((run / "summary.json").read_text())["best_member_eval"] for run in (got, want)]
    assert best[0] == best[1]
    (done, *saved), (want_done, *want_saved) = population_checkpoint(got), population_checkpoint(want)
    assert done == want_done
    assert_trees_close(saved, want_saved, rtol=0, atol=0)


@pytest.mark.extended
def test_population_over_two_processes_equals_one_process_on_two_devices(tmp_path, cache):
    """`jaxrl pbt ppo ... --coordinator --num-processes 2 --process-id i` (1 CPU device per process, 2 members
    each) trains ONE population whose ready steps copy members across the processes: its folder (lineage.csv,
    metrics.csv, the best member's evaluation, the final checkpoint) equals a single-process `--cpu-cores 2` run's
    bit for bit. Process 1, given another --out, writes nothing there. Cut back to its checkpoint after
    iteration 4, the folder resumes over 2 processes to the uninterrupted run, bit for bit."""
    two, single, elsewhere = tmp_path / "two", tmp_path / "single", tmp_path / "process1"

    command = train_processes(*PBT, own=lambda i: ["--out", str(elsewhere if i else two)])
    procs = launch(command, tmp_path, cache)
    start = time.monotonic()
    try:
        cli(*PBT, "--out", str(single), "--cpu-cores", "2", "--compile-cache", str(cache))
    finally:
        outputs = wait_all(procs, TIMEOUT_S - (time.monotonic() - start))
    for i, (proc, output) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, f"process {i}:\n{output[-3000:]}"
    assert "best member" in outputs[0] and outputs[1].strip().endswith("process 1: done"), outputs[1][-2000:]
    assert "over 2 device(s)" in outputs[0] and not elsewhere.exists()
    assert sorted(p.name for p in two.iterdir()) == sorted(p.name for p in single.iterdir())
    exploited = [row["exploited"] == "True" for row in csv.DictReader(open(two / "lineage.csv"))]
    assert len(exploited) == 3 * 4 and any(exploited)  # not vacuous: members were copied
    assert_same_population(two, single)

    cut = tmp_path / "cut"
    shutil.copytree(two, cut)
    shutil.rmtree(cut / "checkpoints" / "6")  # back to the checkpoint after iteration 4
    procs = launch(train_processes("pbt", "ppo", "--resume", str(cut), "--eval-episodes", "2"), tmp_path, cache)
    outputs = wait_all(procs, TIMEOUT_S)
    for i, (proc, output) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, f"resume, process {i}:\n{output[-3000:]}"
    assert_same_population(cut, two)


@pytest.mark.extended
def test_ctrl_c_in_one_process_stops_a_population_at_a_ready_block(tmp_path, cache):
    """SIGINT to process 1 alone while a 2-process `jaxrl pbt` trains (one ready block per chunk): both processes
    stop at the same chunk boundary (exit 130), and process 0's checkpoint holds every member's iterations up to
    that boundary, which lineage.csv shows too."""
    out = tmp_path / "cut"
    long = [*PBT[: PBT.index("--total-timesteps") + 1], str(4 * 16 * 400), *PBT[PBT.index("--total-timesteps") + 2 :]]
    long[long.index("--chunks") + 1] = "200"  # 400 iterations: 200 chunks of one ready block
    procs = launch(train_processes(*long, own=lambda i: ["--out", str(tmp_path / "p1" if i else out)]), tmp_path, cache)
    lineage = out / "lineage.csv"
    interrupt_process_1_once(procs, lineage, 1 + 3 * 4)  # 3 ready blocks went by
    done, *_ = population_checkpoint(out)
    assert done is not None and 6 <= done < 400 and done % 2 == 0, done  # 3 ready blocks or more, whole blocks
    steps = {int(row["iteration"]) for row in csv.DictReader(open(lineage))}
    assert max(steps) == done, (sorted(steps), done)
