"""One sweep run by 2 processes (jax.distributed on CPU, over loopback) equals the single-process sweep."""

import csv
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

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


def launch(out, port):
    flags = (
        f"sweep ppo --num-envs {CONFIG.num_envs} --num-steps {CONFIG.num_steps} "
        f"--total-timesteps {CONFIG.total_timesteps} --update-epochs {CONFIG.update_epochs} "
        f"--num-minibatches {CONFIG.num_minibatches} --hidden-sizes 16,16 --seeds {SEEDS} --seed {SEED} "
        f"--grid learning_rate={','.join(map(str, LEARNING_RATES))} --compile-cache none "
        f"--coordinator 127.0.0.1:{port} --num-processes 2"
    ).split()
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)  # one CPU device per process: the global mesh has 2 devices in 2 processes
    return [
        subprocess.Popen(
            [sys.executable, "-m", "jaxrl.cli", *flags, "--process-id", str(i), "--out", str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
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


def test_two_processes_equal_one(tmp_path):
    procs = launch(tmp_path, free_port())
    start = time.monotonic()
    try:
        # the reference compiles while the two processes do
        single = sweep.run(sweep.grid(CONFIG, learning_rate=LEARNING_RATES), seeds=SEEDS, seed=SEED, keep_state=False)
    finally:
        outputs = wait_all(procs, TIMEOUT_S - (time.monotonic() - start))
    for i, (proc, out) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, f"process {i}:\n{out[-3000:]}"
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
