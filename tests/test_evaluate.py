"""Evaluation on fresh episodes, and `jaxrl eval RUN_DIR`."""

import csv
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_trees_close, interrupt_on_chunk
from jaxrl import cli, envs
from jaxrl.algos import ALGORITHMS, base
from jaxrl.run import checkpoint
from jaxrl.run.evaluate import evaluate, restore_latest


@pytest.mark.slow
def test_each_episode_counted_once_from_reset_to_its_end():
    always_left = jax.jit(
        lambda key: evaluate("CartPole-v1", lambda obs, k: jnp.zeros(obs.shape[0], jnp.int32), key, num_episodes=8)
    )
    out = jax.tree.map(np.asarray, always_left(jax.random.key(0)))
    assert out["finished"] == 8
    np.testing.assert_array_equal(out["returns"], out["lengths"])  # CartPole pays 1 per step
    assert np.all((out["lengths"] >= 5) & (out["lengths"] <= 20))  # pushing one way falls within ~10 steps
    # reference: the same 8 episodes stepped one env at a time in Python until each first ends
    env = envs.make("CartPole-v1", 8)
    reset_key, run_key = jax.random.split(jax.random.key(0))
    obs, state = env.reset(reset_key)
    step = jax.jit(env.step)  # one program for the 40 calls (called eagerly, each call compiles its conds again)
    lengths, alive = np.zeros(8, int), np.ones(8, bool)
    for keys in jax.random.split(run_key, (40, 2)):
        obs, state, _, terminated, truncated, _ = step(keys[1], state, jnp.zeros(8, jnp.int32))
        lengths += alive
        alive &= ~np.asarray(terminated | truncated)
    np.testing.assert_array_equal(out["lengths"], lengths)


@pytest.mark.slow
def test_episodes_longer_than_max_steps_are_not_counted():
    out = evaluate("CartPole-v1", lambda obs, k: (obs[:, 2] > 0).astype(jnp.int32), jax.random.key(1), 4, max_steps=3)
    assert int(out["finished"]) == 0 and np.isnan(np.asarray(out["returns"])).all()


@pytest.mark.slow
def test_eval_command_on_a_run_folder(tmp_path, capsys):
    run_dir = tmp_path / "run"
    argv = "train ppo --num-envs 4 --num-steps 16 --total-timesteps 256 --update-epochs 1 --num-minibatches 2"
    assert cli.main([*argv.split(), "--no-progress", "--run-dir", str(run_dir)]) == 0
    capsys.readouterr()
    assert cli.main(["eval", str(run_dir), "--episodes", "4"]) == 0
    out = capsys.readouterr().out
    assert "checkpoint after iteration 4" in out and "deterministic" in out and "stochastic" in out


@pytest.mark.slow
def test_evaluating_a_checkpoint_reads_no_replay_buffer(tmp_path, capsys):
    """`jaxrl eval` and `jaxrl render` restore the latest checkpoint without its replay buffer (most of an
    off-policy run's state) and optimiser state, which no policy reads: both are None, and every other field equals
    the whole checkpoint's, bit for bit."""
    run_dir = tmp_path / "run"
    argv = "train dqn --num-envs 4 --total-timesteps 400 --buffer-size 4000 --learning-starts 64 --hidden-sizes 16"
    assert cli.main([*argv.split(), "--replay-batch-size", "16", "--no-progress", "--run-dir", str(run_dir)]) == 0
    saved, module, config, iteration, states = restore_latest(run_dir)
    assert states.buffer is None and states.opt_state is None and iteration == 100
    keys = jax.random.split(jax.random.key(saved["seed"]), saved["seeds"])
    like = jax.eval_shape(jax.vmap(lambda k: base.initial_state(config, k, algo=module)), keys)
    _, whole, _ = checkpoint.restore(run_dir / "checkpoints", like, saved)
    assert jax.tree.leaves(whole.buffer)  # what the run saved
    assert jax.tree.leaves(whole.opt_state)
    policy_only = whole.replace(buffer=None, opt_state=None)
    assert_trees_close(checkpoint.unwrap_keys(states), checkpoint.unwrap_keys(policy_only), 0, 0)
    capsys.readouterr()
    assert cli.main(["eval", str(run_dir), "--episodes", "2"]) == 0
    assert "checkpoint after iteration 100" in capsys.readouterr().out


@pytest.mark.slow
def test_a_checkpoint_with_the_optimiser_per_parameter_array_plays_and_resumes(tmp_path, capsys, monkeypatch):
    """A run checkpointed by a jaxrl whose optimiser state is per parameter array (not over one raveled vector), and
    interrupted: `jaxrl eval` plays it, since no policy reads the optimiser state, and a resume reads the moments
    into the raveled vector, says so in one line and trains to the end."""
    from jaxrl import optim

    run_dir = tmp_path / "run"
    argv = "train ppo --num-envs 4 --num-steps 16 --total-timesteps 512 --update-epochs 1 --num-minibatches 2"
    monkeypatch.setattr(optim.optax, "flatten", lambda transformation: transformation)
    interrupt_on_chunk(monkeypatch, 2)
    assert cli.main([*argv.split(), "--no-progress", "--chunks", "4", "--run-dir", str(run_dir)]) != 0
    monkeypatch.undo()
    stopped = checkpoint.latest_iteration(run_dir / "checkpoints")
    assert 0 < stopped < 8
    capsys.readouterr()
    assert cli.main(["eval", str(run_dir), "--episodes", "2"]) == 0
    assert f"checkpoint after iteration {stopped}" in capsys.readouterr().out
    assert cli.main(["train", "ppo", "--resume", str(run_dir), "--no-progress"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "an earlier jaxrl's layout" in line]
    assert len(notes) == 1 and "opt_state" not in notes[0]
    assert checkpoint.latest_iteration(run_dir / "checkpoints") == 8
    iterations = [int(row["iteration"]) for row in csv.DictReader((run_dir / "metrics.csv").open())]
    assert iterations == list(range(8))


@pytest.mark.extended
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_algorithm_has_an_evaluation_policy(name):
    """On the algorithm's default env (CartPole for discrete algorithms, a continuous env for the others)."""
    module = ALGORITHMS[name]
    fields = {f.name for f in dataclasses.fields(module.Config)}
    small = {k: v for k, v in {"num_envs": 4, "num_steps": 8}.items() if k in fields}
    config = module.Config(**small)
    spec = envs.make(config.env).spec
    state = jax.jit(lambda key: base.initial_state(config, key, algo=module))(jax.random.key(0))
    obs = jnp.zeros((5, *spec.observation_shape), jnp.float32)
    for deterministic in (True, False):
        act, normalize = base.evaluation_policy(config, state, deterministic, algo=module)
        actions = np.asarray(act(normalize(obs), jax.random.key(1)))
        if spec.discrete:
            assert actions.shape == (5,) and np.all((actions >= 0) & (actions < spec.action_dim))
        else:
            assert actions.shape == (5, spec.action_dim) and np.isfinite(actions).all()
