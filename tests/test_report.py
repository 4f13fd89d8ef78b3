"""`jaxrl report`: entries read from run and sweep folders, aggregate tables against a plain NumPy reference,
the PNGs, the folders left untouched, and one-line errors."""

import csv
import hashlib
import json
import re
import subprocess
import sys

import numpy as np
import pytest

from jaxrl import report

ITERATIONS = 20  # the final window is the last 2 iterations (10%)
CARTPOLE_RANDOM, CARTPOLE_REFERENCE = 22.12, 500.0  # jaxrl/reference_scores.toml


def write_run(folder, algo, env, returns):
    """A run folder as `jaxrl train` writes it: config.json and metrics.csv, returns [seeds, iterations]."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"algo": algo, "seeds": len(returns), "config": {"env": env}}))
    with open(folder / "metrics.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["seed", "iteration", "env_steps", "episode_return"])
        for s, row in enumerate(returns):
            for i, value in enumerate(row):
                writer.writerow([s, i, 64 * (i + 1), value])
    return folder


def write_sweep(folder, algo, env, name, values, returns):
    """A sweep folder as `jaxrl sweep` writes it: sweep.json and results.csv, returns [configs, seeds, iterations]."""
    folder.mkdir(parents=True)
    (folder / "sweep.json").write_text(json.dumps({"algo": algo, "config": {"env": env}}))
    with open(folder / "results.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["config", name, "seed", "iteration", "env_steps", "episode_return"])
        for c, per_seed in enumerate(returns):
            for s, row in enumerate(per_seed):
                for i, value in enumerate(row):
                    writer.writerow([c, values[c], s, i, 64 * (i + 1), value])
    return folder


def curves(finals, rng):
    """Curves [seeds, ITERATIONS] whose last 2 iterations average to `finals`."""
    out = rng.uniform(0, 100, size=(len(finals), ITERATIONS))
    out[:, -2:] = np.asarray(finals)[:, None] + np.array([-1.0, 1.0])
    return out


def reference_iqm(values):
    v = np.sort(np.asarray(values).ravel())
    k = len(v) // 4
    return v[k : len(v) - k].mean()


def reference_improvement(x, y):
    return np.mean([1.0 if a > b else 0.5 if a == b else 0.0 for a in x for b in y])


def snapshot(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def folders(tmp_path):
    rng = np.random.default_rng(0)
    ppo = [200.0, 450.0, 300.0, 500.0]
    dqn = [100.0, 150.0, 480.0, 30.0]
    return dict(
        ppo=write_run(tmp_path / "ppo-run", "ppo", "CartPole-v1", curves(ppo, rng)),
        dqn=write_run(tmp_path / "dqn-run", "dqn", "CartPole-v1", curves(dqn, rng)),
        sweep=write_sweep(
            tmp_path / "sweep", "ppo", "CartPole-v1", "lr", [1e-3, 3e-3], [curves(p, rng) for p in (ppo, dqn)]
        ),
        finals=dict(ppo=ppo, dqn=dqn),
    )


def test_entries_from_a_run_and_a_sweep(folders):
    (run,) = report.read_entries(folders["ppo"])
    assert (run.label, run.env_id, run.is_run) == ("ppo", "CartPole-v1", True)
    np.testing.assert_allclose(run.final, folders["finals"]["ppo"])
    points = report.read_entries(folders["sweep"] / "results.csv")
    assert [p.label for p in points] == ["ppo lr=0.001", "ppo lr=0.003"]
    np.testing.assert_allclose(points[1].final, folders["finals"]["dqn"])
    assert not points[0].is_run


def test_aggregates_and_improvement_equal_a_numpy_reference(folders):
    entries = [e for key in ("ppo", "dqn") for e in report.read_entries(folders[key])]
    matrices, tasks = report.score_matrices(entries)
    assert tasks == {"ppo": ["CartPole-v1"], "dqn": ["CartPole-v1"]}
    normalised = {k: (np.array(v) - CARTPOLE_RANDOM) / (CARTPOLE_REFERENCE - CARTPOLE_RANDOM) for k, v in
                  folders["finals"].items()}  # fmt: skip
    np.testing.assert_allclose(matrices["ppo"][:, 0], normalised["ppo"], rtol=1e-12)
    results = report.aggregates(matrices, reps=200, seed=0)
    np.testing.assert_allclose(results["IQM"][0]["ppo"], reference_iqm(normalised["ppo"]), rtol=1e-12)
    np.testing.assert_allclose(results["mean"][0]["dqn"], normalised["dqn"].mean(), rtol=1e-12)
    np.testing.assert_allclose(results["optimality gap"][0]["dqn"], 1 - np.minimum(normalised["dqn"], 1).mean())
    low, high = results["IQM"][1]["ppo"]
    assert normalised["ppo"].min() <= low <= results["IQM"][0]["ppo"] <= high <= normalised["ppo"].max()
    points, cis = report.improvements(matrices, tasks, reps=200, seed=0)
    assert list(points) == ["ppo > dqn"]
    np.testing.assert_allclose(points["ppo > dqn"], reference_improvement(normalised["ppo"], normalised["dqn"]))
    assert 0.0 <= cis["ppo > dqn"][0] <= cis["ppo > dqn"][1] <= 1.0


@pytest.mark.slow
def test_report_writes_tables_and_pngs_and_leaves_the_folders_untouched(folders, tmp_path):
    before = {key: snapshot(folders[key]) for key in ("ppo", "dqn", "sweep")}
    path = report.write_report([folders["ppo"], folders["dqn"], folders["sweep"]], tmp_path / "out", reps=100)
    text = path.read_text()
    rows = [line for line in text.splitlines() if re.match(r"\| (ppo|dqn)", line)]
    assert len(rows) == 4 + 4 + 6  # runs table, aggregates table, 6 pairs of the 4 labels
    finals = {k: (np.array(v) - CARTPOLE_RANDOM) / (CARTPOLE_REFERENCE - CARTPOLE_RANDOM) for k, v in
              folders["finals"].items()}  # fmt: skip
    assert f"| ppo > dqn | {reference_improvement(finals['ppo'], finals['dqn']):.3f} [" in text
    for png in ("aggregates.png", "profiles.png", "improvement.png", "learning_curves.png"):
        data = (tmp_path / "out" / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5_000, png
        assert f"]({png})" in text
    assert {key: snapshot(folders[key]) for key in ("ppo", "dqn", "sweep")} == before


def test_env_without_reference_scores_is_shown_but_not_aggregated(tmp_path):
    run = write_run(tmp_path / "r", "ppo", "my-own-env", curves([1.0, 2.0], np.random.default_rng(1)))
    text = report.write_report([run], tmp_path / "out", reps=10).read_text()
    assert "| ppo | my-own-env | 2 | 1.5" in text and "no reference" in text
    assert "Aggregate metrics" not in text


@pytest.mark.slow
def test_cli_report_and_its_one_line_errors(folders, tmp_path):
    out = tmp_path / "cli"
    ok = subprocess.run(
        [sys.executable, "-m", "jaxrl.cli", "report", str(folders["ppo"]), str(folders["dqn"]), "--out", str(out),
         "--reps", "50"], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.strip() == str(out / "report.md") and (out / "report.md").is_file()
    bad = subprocess.run(
        [sys.executable, "-m", "jaxrl.cli", "report", str(tmp_path), "--out", str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "neither a run folder" in bad.stderr
