"""The chunked runner and the command line."""

import csv
import dataclasses
import json

import jax
import numpy as np
import pytest

from conftest import assert_trees_close
from jaxrl import cli
from jaxrl import train as runner
from jaxrl.algos import ppo

CONFIG = ppo.Config(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 7, update_epochs=2, num_minibatches=2)


def test_chunk_sizes_cover_the_run():
    for n, chunks in [(195, 20), (97, 20), (1, 20), (7, 3), (244, 20)]:
        sizes = runner.chunk_sizes(n, chunks)
        assert sum(sizes) == n and len(set(sizes)) <= 2 and all(s > 0 for s in sizes)


def test_chunked_run_equals_one_train_call(tmp_path):
    result = runner.run(ppo, CONFIG, seeds=2, seed=3, num_chunks=3, run_dir=tmp_path, progress=False)
    assert len(runner.chunk_sizes(CONFIG.num_iterations, 3)) > 1  # really chunked: 7 iterations as 3+3+1
    keys = jax.random.split(jax.random.key(3), 2)
    state, metrics = jax.jit(jax.vmap(ppo.make_train(CONFIG)))(keys)
    # XLA fuses init into the first update when both share a program, so agreement is to float32 rounding
    assert_trees_close(result.state, state, rtol=1e-5, atol=1e-6)
    assert_trees_close(result.metrics, dict(metrics), rtol=1e-4, atol=1e-5)
    one_chunk = runner.run(ppo, CONFIG, seeds=2, seed=3, num_chunks=1, progress=False)
    assert_trees_close(result.state, one_chunk.state, rtol=0, atol=0)  # chunking itself changes nothing

    rows = list(csv.DictReader(open(tmp_path / "metrics.csv")))
    assert len(rows) == 2 * CONFIG.num_iterations
    last = [r for r in rows if r["seed"] == "1" and r["iteration"] == str(CONFIG.num_iterations - 1)][0]
    assert int(last["env_steps"]) == CONFIG.total_timesteps
    assert float(last["value_loss"]) == pytest.approx(float(metrics["value_loss"][1, -1]), rel=1e-5)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["config"]["num_envs"] == 4 and saved["seeds"] == 2


def test_cli_trains_and_writes_a_run_folder(tmp_path, capsys):
    argv = (
        "train ppo --num-envs 4 --num-steps 16 --total-timesteps 4.48e2 --update-epochs 1 --num-minibatches 2"
        " --no-anneal-lr --hidden-sizes 32,32 --seeds 2 --no-progress --target-return 20 --compile-cache none"
    )
    code = cli.main([*argv.split(), "--run-dir", str(tmp_path / "run")])
    assert code == 0
    out = capsys.readouterr().out
    assert "final return" in out and "compile" in out
    saved = json.loads((tmp_path / "run" / "config.json").read_text())["config"]
    assert saved["total_timesteps"] == 448 and saved["anneal_lr"] is False and saved["hidden_sizes"] == [32, 32]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["seeds"] == 2 and len(summary["seconds_to_target_per_seed"]) == 2


def test_cli_bad_config_is_a_clear_error(tmp_path, capsys):
    code = cli.main(["train", "ppo", "--num-minibatches", "3", "--run-dir", str(tmp_path / "run")])
    assert code == 2
    assert "num_minibatches" in capsys.readouterr().err


def test_every_config_field_is_a_flag():
    help_text = cli.build_parser()._subparsers._group_actions[0].choices["train"]
    sub = help_text._subparsers._group_actions[0].choices["ppo"].format_help()
    for field in dataclasses.fields(ppo.Config):
        assert "--" + field.name.replace("_", "-") in sub
        assert field.metadata["help"].split()[0] in sub


def test_time_to_return_uses_first_crossing():
    metrics = {"episode_return": np.array([[10.0, np.nan, 480.0, 300.0], [10.0, 20.0, 30.0, 40.0]])}
    result = runner.RunResult(
        CONFIG, None, metrics, np.arange(1, 5) * 64, np.array([1.0, 2.0, 3.0, 4.0]), 1.0, 3.0, None
    )
    times = result.time_to_return(475)
    assert times[0] == 3.0 and np.isnan(times[1])
