"""`jaxrl sweep` (grid and random points from flags, results table, summary) and `jaxrl plot` on a sweep."""

import argparse
import csv
import json

import numpy as np
import pytest

from jaxrl import cli
from jaxrl.algos import ppo
from jaxrl.plot import read_sweep

TINY = (
    "--num-envs 4 --num-steps 16 --total-timesteps 320 --update-epochs 1 --num-minibatches 2 --hidden-sizes 16,16"
    " --compile-cache none"
)


def sweep_args(text):
    args = cli.build_parser().parse_args(["sweep", "ppo", *text.split()])
    return cli.sweep_from_args(ppo, cli.config_from_args(ppo.Config, args), args)


def test_grid_and_random_flags():
    grid = sweep_args("--grid learning_rate=1e-3,3e-3 --grid clip-eps=0.1,0.2,0.3")
    assert len(grid) == 6 and grid.points[1] == {"learning_rate": 1e-3, "clip_eps": 0.2}
    random = sweep_args(
        "--random 50 --random-seed 2 --dist learning_rate=loguniform:1e-4:1e-2 --dist ent_coef=0,0.01"
        " --dist gae_lambda=uniform:0.8:1"
    )
    lr = np.array([p["learning_rate"] for p in random.points])
    assert len(random) == 50 and lr.min() >= 1e-4 and lr.max() <= 1e-2
    assert {p["ent_coef"] for p in random.points} == {0.0, 0.01}
    assert all(0.8 <= p["gae_lambda"] <= 1 for p in random.points)
    assert sweep_args("").points == [{}]  # no flags: the base config alone


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ("--grid num_envs=4,8", "static field"),
        ("--grid learning_rate", "expected NAME=VALUES"),
        ("--grid learning_rate=1e-3 --random 3 --dist clip_eps=uniform:0.1:0.2", "either --grid or --random"),
        ("--random 3", "needs at least one --dist"),
        ("--dist clip_eps=uniform:0.1:0.2", "needs --random"),
        ("--random 3 --dist clip_eps=normal:0:1", "unknown distribution 'normal'"),
        ("--random 3 --dist clip_eps=uniform:0.1", "expected clip_eps=uniform:LOW:HIGH"),
        ("--grid learning_rate=-1,1e-3", "sweep point 0"),
        ("--seeds 0", "need at least one seed"),
    ],
)
def test_bad_sweep_flags_are_clear_errors(flags, message, tmp_path, capsys):
    assert cli.main(["sweep", "ppo", *flags.split(), "--out", str(tmp_path)]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "results.csv").exists()


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_multi_process_flags_need_the_coordinator_and_the_process_id(command, tmp_path, capsys):
    """The same check for both commands (`cli.start_processes`), before JAX joins any process."""
    out_flag, what = ("--run-dir", "training") if command == "train" else ("--out", "sweep")
    for flags in ("--coordinator 127.0.0.1:1", "--num-processes 2 --process-id 0"):
        assert cli.main([command, "ppo", *flags.split(), out_flag, str(tmp_path / "out")]) == 2
        assert f"a multi-process {what} needs --coordinator" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_sweep_command_writes_results_summary_and_plot(tmp_path, capsys):
    out = tmp_path / "sweep"
    argv = f"sweep ppo {TINY} --grid learning_rate=1e-3,5e-3 --seeds 3 --seed 1 --out {out}"
    assert cli.main(argv.split()) == 0
    printed = capsys.readouterr().out
    assert "2 config(s) x 3 seed(s)" in printed and "95% interval" in printed and "compile" in printed

    rows = list(csv.DictReader(open(out / "results.csv")))
    assert len(rows) == 2 * 3 * 5 and rows[0]["learning_rate"] == "0.001"
    summary = list(csv.DictReader(open(out / "summary.csv")))
    _, _, final = read_sweep(out / "results.csv")
    for row, runs in zip(summary, final, strict=True):
        assert float(row["final_return_mean"]) == pytest.approx(np.nanmean(runs), rel=1e-6)  # float32 metrics
        assert float(row["ci95_low"]) <= float(row["final_return_mean"]) <= float(row["ci95_high"])
        assert row["seeds"] == "3"
    info = json.loads((out / "sweep.json").read_text())
    assert info["points"] == [{"learning_rate": 1e-3}, {"learning_rate": 5e-3}] and info["processes"] == 1
    assert info["config"]["num_envs"] == 4 and info["seeds"] == 3

    # `jaxrl plot FOLDER` recognises a sweep folder and draws the sensitivity plot
    assert cli.main(["plot", str(out), "--out", str(tmp_path / "s.png")]) == 0
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"
    assert cli.main(["plot", "--sensitivity", str(out / "results.csv"), "--out", str(tmp_path / "t.png")]) == 0
    assert (tmp_path / "t.png").stat().st_size > 10_000


def test_plot_needs_something_to_plot(capsys):
    assert cli.main(["plot"]) == 2
    assert "--sensitivity" in capsys.readouterr().err


def test_field_values_follow_the_field_type():
    assert cli._field_value(ppo.Config, "num_envs", "1e3") == 1000
    assert cli._field_value(ppo.Config, "anneal_lr", "false") is False
    assert cli._field_value(ppo.Config, "learning_rate", "3e-4") == 3e-4
    with pytest.raises((ValueError, argparse.ArgumentTypeError)):
        cli._field_value(ppo.Config, "num_envs", "2.5")


def test_preset_flag_starts_from_the_package_preset_and_flags_override():
    from jaxrl import presets
    from jaxrl.algos import ppo

    args = cli.build_parser().parse_args(
        ["train", "ppo", "--env", "Pendulum-v1", "--preset", "--learning-rate", "3e-4"]
    )
    config = cli.config_from_args(ppo.Config, args)
    assert config == presets.get("ppo", "Pendulum-v1", learning_rate=3e-4)
    assert config.num_minibatches == presets.PRESETS["ppo", "Pendulum-v1"]["num_minibatches"]
    plain = cli.config_from_args(ppo.Config, cli.build_parser().parse_args(["train", "ppo", "--env", "Pendulum-v1"]))
    assert plain == ppo.Config(env="Pendulum-v1")
