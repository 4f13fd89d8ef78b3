"""One sweep run by 2 processes (jax.distributed on CPU, over loopback) equals the single-process sweep.

The first test launches `jaxrl sweep` (python -m jaxrl.cli) twice as processes 0 and 1; the second runs the
Python API in 2 processes with keep_state=True (final states gathered from both). They share a persistent
compilation cache, so the second loads the program the first compiled.
"""

import csv
import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import jax
import numpy as np
import pytest

from conftest import assert_trees_close
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
    from jaxrl import cli, sweep
    process, port, cache, out = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    sweep.initialize_distributed(f"127.0.0.1:{{port}}", 2, process)
    cli.enable_compilation_cache(cache)
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


def launch(command, out, cache):
    """Processes 0 and 1 of `command(i, out, port, cache)` on a free loopback port."""
    port = free_port()
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)  # one CPU device per process: the global mesh has 2 devices in 2 processes
    return [
        subprocess.Popen(
            command(i, out, port, cache), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
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
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("xla_cache")


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


@pytest.mark.slow
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
