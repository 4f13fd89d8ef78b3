"""Metric sinks (CSV, TensorBoard) and learning-curve plots."""

import struct

import numpy as np
import pytest
from tensorboardX.proto import event_pb2

from jaxrl import cli
from jaxrl.plot import bootstrap_interval, read_metrics
from jaxrl.run import logging


def read_tensorboard(directory):
    """{tag: [(step, value)]} from TFRecord event files (8-byte length, 4-byte crc, payload, 4-byte crc)."""
    scalars = {}
    for path in sorted(directory.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12 : offset + 12 + length])
            offset += 12 + length + 4
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def fake_metrics(seeds=3, size=4, first=0):
    rng = np.random.default_rng(first)
    return {
        "episode_return": rng.normal(100, 10, (seeds, size)).astype(np.float32),
        "value_loss": rng.random((seeds, size)).astype(np.float32),
    }


def test_tensorboard_scalars_read_back(tmp_path):
    sink = logging.TensorBoardSink(tmp_path)
    chunks = [fake_metrics(first=0), fake_metrics(first=4)]
    chunks[1]["episode_return"][:, 1] = np.nan  # no episode finished in that iteration
    for i, metrics in enumerate(chunks):
        sink.write(metrics, 4 * i, 64)
    sink.close()
    scalars = read_tensorboard(tmp_path)
    steps = [step for step, _ in scalars["episode_return"]]
    assert steps == [64 * k for k in (1, 2, 3, 4, 5, 7, 8)]  # the all-NaN iteration is skipped
    expected = np.concatenate([c["episode_return"] for c in chunks], axis=1).mean(0)
    np.testing.assert_allclose([v for _, v in scalars["episode_return"]], np.delete(expected, 5), rtol=1e-6)
    seed2 = [v for _, v in scalars["seed_2/value_loss"]]
    np.testing.assert_allclose(seed2, np.concatenate([c["value_loss"][2] for c in chunks]), rtol=1e-6)


def test_csv_round_trips_through_read_metrics(tmp_path):
    sink = logging.CsvSink(tmp_path / "metrics.csv")
    first, second = fake_metrics(first=0), fake_metrics(first=4)
    sink.write(first, 0, 32, wall_s=np.arange(4) + 1.0)
    sink.write(second, 4, 32, wall_s=np.arange(4) + 5.0)
    sink.close()
    data = read_metrics(tmp_path)
    np.testing.assert_allclose(
        data["episode_return"], np.concatenate([first["episode_return"], second["episode_return"]], 1), rtol=1e-5
    )
    np.testing.assert_array_equal(data["env_steps"][0], 32 * np.arange(1, 9))
    np.testing.assert_array_equal(data["wall_s"][1], np.arange(1, 9))


def test_bootstrap_interval_brackets_the_mean_and_narrows_with_more_seeds():
    rng = np.random.default_rng(0)
    few = rng.normal(0, 1, (4, 50))
    many = rng.normal(0, 1, (64, 50))
    mean, low, high = bootstrap_interval(few)
    assert np.all(low <= mean) and np.all(mean <= high)
    _, low_many, high_many = bootstrap_interval(many)
    assert np.mean(high_many - low_many) < 0.6 * np.mean(high - low)
    # 95% intervals of the mean of N(0, 1) with 64 seeds cover the true mean 0 in most columns
    assert np.mean((low_many <= 0) & (0 <= high_many)) > 0.8


def test_plot_command_writes_a_png(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        sink = logging.CsvSink(tmp_path / name / "metrics.csv")
        sink.write(fake_metrics(), 0, 64)
        sink.close()
    out = tmp_path / "curves.png"
    assert cli.main(["plot", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


@pytest.mark.slow
def test_wandb_sink_offline(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    sink = logging.WandbSink("jaxrl-test", name="offline", config={"algo": "ppo"}, directory=tmp_path)
    metrics = fake_metrics()
    metrics["episode_return"][:, 3] = np.nan  # no episode finished in the last iteration: not logged
    sink.write(metrics, 0, 64, wall_s=np.arange(4) + 1.0)
    summary = dict(sink.run.summary)
    sink.close()
    assert summary["_step"] == 4 * 64 and summary["iteration"] == 3 and summary["wall_s"] == 4.0
    assert summary["episode_return"] == pytest.approx(float(metrics["episode_return"][:, 2].mean()), rel=1e-6)
    assert summary["seed_1/value_loss"] == pytest.approx(float(metrics["value_loss"][1, 3]), rel=1e-6)
    assert wandb.run is None  # finished
    assert list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))  # written locally, no network


def test_wandb_without_a_login_is_one_line_and_leaves_no_run_folder(tmp_path, monkeypatch, capsys):
    """`jaxrl train --wandb PROJECT` where wandb has no login: one line (exit 2) that names the project, wandb's
    reason and the ways on (a login, or WANDB_MODE=offline), and the run folder it had named is gone; without the
    wandb package, the install command."""
    import importlib.util

    from jaxrl import cli

    wandb = pytest.importorskip("wandb")

    def no_login(**_):
        raise wandb.errors.UsageError("No API key configured. Use `wandb login` to log in.")

    monkeypatch.setattr(wandb, "init", no_login)
    flags = "--num-envs 4 --num-steps 8 --total-timesteps 64 --num-minibatches 2 --update-epochs 1 --no-progress"
    argv = ["train", "ppo", *flags.split(), "--runs-dir", str(tmp_path / "runs"), "--wandb", "proj"]
    assert cli.main(argv) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("jaxrl: error: wandb project 'proj': No API key configured.") and "\n" not in line, line
    assert "WANDB_MODE=offline" in line and "wandb login" in line
    assert not (tmp_path / "runs").exists()
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ImportError, match=r"pip install 'jaxrl\[wandb\]'"):
        logging.check_wandb_installed()
