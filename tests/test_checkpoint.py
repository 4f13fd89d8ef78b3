"""Checkpoints: resume equals an uninterrupted run, Ctrl-C saves, corrupt or mismatched checkpoints and
diverging runs give clear errors."""

import csv
import dataclasses
import os
import signal
import subprocess
import sys
import time
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_trees_close, default_sigint, interrupt_on_chunk
from jaxrl.algos import ppo
from jaxrl.run import checkpoint, loop

CONFIG = ppo.Config(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 6, update_epochs=1, num_minibatches=2)


def csv_rows(run_dir):
    with open(run_dir / "metrics.csv", newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return loop.run(ppo, CONFIG, seeds=2, num_chunks=6, run_dir=tmp_path_factory.mktemp("full"), progress=False)


@pytest.mark.slow
def test_resume_equals_uninterrupted_run(tmp_path, monkeypatch, uninterrupted):
    interrupt_on_chunk(monkeypatch, 3)
    with pytest.raises(loop.Interrupted) as stop:
        loop.run(ppo, CONFIG, seeds=2, num_chunks=6, run_dir=tmp_path, progress=False, checkpoint_every=100)
    assert stop.value.iteration == 3
    assert checkpoint.latest_iteration(tmp_path / "checkpoints") == 3
    monkeypatch.undo()

    resumed = loop.run(ppo, CONFIG, seeds=2, num_chunks=6, run_dir=tmp_path, progress=False, resume=True)
    assert_trees_close(resumed.state, uninterrupted.state, rtol=0, atol=0)
    assert_trees_close(resumed.metrics, uninterrupted.metrics, rtol=0, atol=0)

    def without_wall(rows):  # wall-clock seconds differ between runs; the order (seed, iteration) does not
        return [{k: v for k, v in row.items() if k != "wall_s"} for row in rows]

    assert without_wall(csv_rows(tmp_path)) == without_wall(csv_rows(uninterrupted.run_dir))


@pytest.mark.slow
def test_mismatched_checkpoint_is_a_clear_error(tmp_path, uninterrupted):
    other = dataclasses.replace(CONFIG, learning_rate=1e-4)
    with pytest.raises(checkpoint.CheckpointError, match="learning_rate"):
        loop.run(ppo, other, seeds=2, num_chunks=6, run_dir=uninterrupted.run_dir, progress=False, resume=True)
    with pytest.raises(checkpoint.CheckpointError, match="no checkpoint"):
        loop.run(ppo, CONFIG, seeds=2, run_dir=tmp_path / "empty", progress=False, resume=True)


def _adam_per_parameter_array_and_raveled(seeds=2):
    """Parameters of `seeds` seeds and two optimiser states after the same two gradient steps: Adam per parameter
    array (the layout an earlier jaxrl saved) and the run's optimiser over one raveled vector."""
    import optax

    from jaxrl import optim

    keys = jax.random.split(jax.random.key(7), 4)
    params = {
        "critic": {"kernel": jax.random.normal(keys[0], (seeds, 3, 4)), "bias": jnp.zeros((seeds, 4))},
        "actor": {"kernel": jax.random.normal(keys[1], (seeds, 5, 2))},
    }
    per_array = optax.chain(optim.gradient_clipping(0.5), optax.adam(1e-3, eps=1e-5))
    raveled = optim.clipped_optimizer("adam", 1e-3, 0.5)
    states = []
    for tx in (per_array, raveled):
        state = jax.vmap(tx.init)(params)
        for key in keys[2:]:
            grads = jax.tree.map(lambda x, k=key: jax.random.normal(k, x.shape), params)
            state = jax.vmap(lambda g, s, tx=tx: tx.update(g, s)[1])(grads, state)
        states.append(state)
    return params, *states


@pytest.mark.slow
def test_an_optimiser_state_per_parameter_array_is_raveled_into_the_vector(tmp_path, capsys):
    """A checkpoint whose optimiser moments are per parameter array (an earlier jaxrl's layout) restores into the
    run's raveled vector: each seed's leaves, flattened row-major, concatenated in tree order (a NumPy reference),
    which is the order `optax.flatten` ravels in: the moments match what the raveled optimiser computed from the
    same gradients. One line on stderr says so."""
    params, per_array, raveled = _adam_per_parameter_array_and_raveled()
    checkpoint.save(tmp_path, 2, {"params": params, "opt_state": per_array}, {}, {"algo": "ppo"})
    iteration, restored, _ = checkpoint.restore(tmp_path, {"params": params, "opt_state": raveled}, {"algo": "ppo"})
    assert iteration == 2 and "an earlier jaxrl's layout" in capsys.readouterr().err
    assert jax.tree.structure(restored) == jax.tree.structure({"params": params, "opt_state": raveled})
    assert_trees_close(restored["params"], params, rtol=0, atol=0)
    saved_adam, restored_adam, raveled_adam = per_array[1][0], restored["opt_state"][1][0], raveled[1][0]
    for moment in ("mu", "nu"):
        tree = getattr(saved_adam, moment)
        leaves = [np.asarray(tree[m][k]) for m in ("actor", "critic") for k in sorted(tree[m])]
        reference = np.concatenate([leaf.reshape(2, -1) for leaf in leaves], axis=1)
        np.testing.assert_array_equal(np.asarray(getattr(restored_adam, moment)), reference)
        np.testing.assert_allclose(getattr(restored_adam, moment), getattr(raveled_adam, moment), rtol=1e-5)
    np.testing.assert_array_equal(restored_adam.count, raveled_adam.count)


def test_an_optimiser_tree_that_does_not_ravel_into_the_vector_is_one_line(tmp_path):
    params, per_array, raveled = _adam_per_parameter_array_and_raveled()
    checkpoint.save(tmp_path, 2, {"params": params, "opt_state": per_array}, {}, {"algo": "ppo"})
    longer = jax.tree.map(lambda x: jnp.concatenate([x, x], -1) if x.ndim == 2 and x.shape[1] > 1 else x, raveled)
    with pytest.raises(checkpoint.CheckpointError) as error:
        checkpoint.restore(tmp_path, {"params": params, "opt_state": longer}, {"algo": "ppo"})
    assert "ravel into (2, 26), not its (2, 52)" in str(error.value) and "\n" not in str(error.value)


def test_a_state_laid_out_otherwise_is_one_line_naming_the_leaves(tmp_path):
    """A checkpoint whose training state has other arrays than the one the run builds (another jaxrl version's
    optimiser state, say) is refused in one line naming a leaf on each side, not with orbax's structure error and
    its advice to delete the checkpoint; reading a part of it (`leave_out`) checks only that part."""
    saved = {"params": {"w": jnp.ones(3)}, "opt_state": ({"mu": jnp.zeros(3), "nu": jnp.zeros(3)},), "buffer": None}
    checkpoint.save(tmp_path, 4, saved, {"loss": np.zeros((1, 4))}, {"algo": "ppo"})
    wanted = {"params": {"w": jnp.ones(3)}, "opt_state": ({"flat": jnp.zeros(3)},), "buffer": None}
    with pytest.raises(checkpoint.CheckpointError) as error:
        checkpoint.restore(tmp_path, wanted, {"algo": "ppo"})
    message = str(error.value)
    assert "no opt_state/0/flat and holds opt_state/0/mu instead" in message and "another version of jaxrl" in message
    assert "\n" not in message and "delete" not in message
    iteration, restored, _ = checkpoint.restore(tmp_path, saved, {"algo": "ppo"})
    assert iteration == 4 and set(restored["opt_state"][0]) == {"mu", "nu"}


@pytest.mark.slow
def test_corrupt_checkpoint_is_a_clear_error(tmp_path, uninterrupted):
    import shutil

    shutil.copytree(uninterrupted.run_dir, tmp_path / "run")
    latest = tmp_path / "run" / "checkpoints" / str(checkpoint.latest_iteration(tmp_path / "run" / "checkpoints"))
    for path in (latest / "state").rglob("*"):
        if path.is_file() and path.stat().st_size > 0:
            path.write_bytes(b"garbage")
    with pytest.raises(checkpoint.CheckpointError, match="is corrupt: .*does not match the checksum"):
        loop.run(ppo, CONFIG, seeds=2, num_chunks=6, run_dir=tmp_path / "run", progress=False, resume=True)
    (latest / checkpoint.CHECKSUMS).unlink()  # without its checksums the step is incomplete: the one before it
    assert checkpoint.latest_iteration(tmp_path / "run" / "checkpoints") < int(latest.name)


@pytest.mark.slow
def test_divergence_stops_at_the_chunk_boundary(tmp_path):
    def update(setup, config, state):
        state, metrics = ppo.update(setup, config, state)
        poisoned = jnp.where(state.iteration >= 4, jnp.nan, 0.0)
        params = jax.tree.map(lambda x: x + poisoned, state.params)
        return state.replace(params=params), {**metrics, "value_loss": metrics["value_loss"] + poisoned}

    algo = types.SimpleNamespace(validate=ppo.validate, setup=ppo.setup, init=ppo.init, update=update)  # unregistered
    with pytest.raises(loop.Divergence, match=r"iterations 3-3: value_loss is nan") as error:
        loop.run(
            algo, CONFIG, seeds=1, num_chunks=6, run_dir=tmp_path, progress=False, checkpoint_every=1, name="poisoned"
        )
    assert "iteration 3" in str(error.value)
    assert checkpoint.latest_iteration(tmp_path / "checkpoints") == 3


@pytest.mark.slow
def test_sigint_to_cli_saves_a_loadable_checkpoint_and_complete_csv(tmp_path):
    run_dir = tmp_path / "run"
    argv = [
        sys.executable,
        "-m",
        "jaxrl.cli",
        "train",
        "ppo",
        "--num-envs",
        "4",
        "--num-steps",
        "16",
        "--total-timesteps",
        str(4 * 16 * 4000),
        "--update-epochs",
        "1",
        "--num-minibatches",
        "2",
        "--chunks",
        "400",
        "--checkpoint-every",
        "1000",
        "--no-progress",
        "--compile-cache",
        "none",
        "--run-dir",
        str(run_dir),
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=default_sigint)
    deadline = time.time() + 600  # wait for the event (20 iterations in metrics.csv), generously: compiling alone
    while time.time() < deadline and len(csv_rows(run_dir) if (run_dir / "metrics.csv").exists() else []) < 20:
        time.sleep(0.2)  # can take minutes on a loaded machine
    try:
        assert len(csv_rows(run_dir)) >= 20, "the run never reached iteration 20"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=600)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert "--resume" in err
    saved = checkpoint.latest_iteration(run_dir / "checkpoints")
    assert saved is not None and saved >= 10
    setup = ppo.setup(CONFIG)
    like = jax.eval_shape(jax.vmap(lambda k: ppo.init(setup, CONFIG, k)), jax.random.split(jax.random.key(0), 1))
    cli_config = dataclasses.replace(CONFIG, total_timesteps=4 * 16 * 4000)
    iteration, state, metrics = checkpoint.restore(
        run_dir / "checkpoints", like, __import__("json").loads((run_dir / "config.json").read_text())
    )
    assert iteration == saved and np.asarray(state.iteration)[0] == saved
    assert metrics["value_loss"].shape == (1, saved)
    rows = csv_rows(run_dir)
    assert len(rows) == saved and rows[-1]["iteration"] == str(saved - 1)
    assert cli_config.num_iterations == 4000


def test_zero_size_arrays_are_restored_empty(tmp_path):
    # MJX's physics state (Brax's mjx backend, MuJoCo Playground) holds arrays without elements: orbax cannot save
    # them, so they are left out and rebuilt from the abstract state
    state = {"q": jnp.arange(3.0), "act": jnp.zeros((0,)), "none": None, "key": jax.random.key(1)}
    checkpoint.save(tmp_path, 2, state, {"episode_return": np.ones((1, 2))}, {"a": 1})
    iteration, restored, _ = checkpoint.restore(tmp_path, jax.eval_shape(lambda: state), {"a": 1})
    assert iteration == 2 and restored["none"] is None
    assert restored["act"].shape == (0,) and restored["act"].dtype == jnp.float32
    assert_trees_close(restored, state)
