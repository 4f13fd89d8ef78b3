"""The scorecard's bookkeeping: which (entry, env) rows run, resume, budget fractions and the table."""

import json
import subprocess
import sys

import pytest

from benchmarks import scorecard
from benchmarks.common import write_json


def fake_run(calls):
    def run_one(entry, env, budget, seeds, seed=0, eval_episodes=32):
        calls.append((entry, env, budget))
        final = scorecard.ENVIRONMENTS[env][1] + (1.0 if entry == "ppo" else -5.0)
        return {
            "algo": entry,
            "env": env,
            "seeds": seeds,
            "budget": budget,
            "env_steps": budget,
            "final_per_seed": [final] * seeds,
            "final_mean": final,
            "final_ci": [final, final],
            "eval_per_seed": [final + 2] * seeds,
            "eval_mean": final + 2,
            "eval_ci": [final + 2, final + 2],
            "compile_s": 1.0,
            "run_s": 2.0,
            "steps_per_s": budget * seeds / 2.0,
            "curve_steps": [budget // 2, budget],
            "returns": [[final - 1, final]] * seeds,
            "config": {},
        }

    return run_one


@pytest.mark.parametrize("entry", scorecard.ENTRIES)
def test_every_entry_makes_a_config_or_says_why(entry):
    for env in ("CartPole-v1", "Pendulum-v1", "Breakout-MinAtar"):
        try:
            _, config = scorecard.make_config(entry, env, scorecard.budget_for(entry, env))
        except ValueError as error:
            assert str(error)  # n/a rows carry the reason
            continue
        assert config.env == env and config.num_iterations >= 1


def test_variant_applies_its_overrides():
    _, config = scorecard.make_config("grpo-replay", "CartPole-v1", 100_000)
    assert config.replay_ratio == 1
    assert scorecard.budget_for("dqn", "CartPole-v1") == int(500_000 * scorecard.BUDGET_SCALE["dqn"])


@pytest.mark.slow
def test_resume_keeps_finished_rows_and_reruns_shorter_ones(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(scorecard, "run_one", fake_run(calls))
    monkeypatch.setattr(scorecard, "plot_env", lambda *args: None)
    out = tmp_path / "s"
    args = ["--algos", "ppo", "dqn", "--envs", "CartPole-v1", "--seeds", "2", "--out", str(out)]
    scorecard.main([*args, "--budget-fraction", "0.1"])
    assert calls == [("ppo", "CartPole-v1", 50_000), ("dqn", "CartPole-v1", 10_000)]
    calls.clear()
    scorecard.main([*args, "--budget-fraction", "0.1", "--resume"])  # everything is there: nothing runs
    assert calls == []
    scorecard.main([*args, "--algos", "ppo", "--resume"])  # the full budget replaces the short row
    assert calls == [("ppo", "CartPole-v1", 500_000)]
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    assert [(r["algo"], r["budget"]) for r in rows] == [("ppo", 500_000), ("dqn", 10_000)]
    text = out.with_suffix(".md").read_text()
    assert "| ppo | CartPole-v1 | 5e+05 | 1 | 501.0 [501.0, 501.0] | yes | 503.0 [503.0, 503.0] | yes | 500 |" in text
    dqn_row = "| dqn | CartPole-v1 | 1e+04 | 0.1 | 495.0 [495.0, 495.0] | no (-5.0) | 497.0 [497.0, 497.0] | no (-3.0)"
    assert dqn_row in text
    assert "| algorithm | CartPole-v1 (500) |" in text  # the summary matrix: entries x environments
    assert "| ppo | train 501.0 (yes) / eval 503.0 (yes) |" in text
    assert "| dqn | train 495.0 (-5.0) / eval 497.0 (-3.0) at 0.1 budget |" in text


def test_the_results_are_rendered_again_from_the_json_through_jaxrl_report(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(scorecard, "run_one", fake_run(calls))
    monkeypatch.setattr(scorecard, "plot_env", lambda *args: None)
    cells = [("ppo", "CartPole-v1"), ("dqn", "CartPole-v1"), ("ppo", "Pendulum-v1"), ("ddpg", "Pendulum-v1")]
    rows = [scorecard.run_one(a, e, scorecard.budget_for(a, e), 8) for a, e in cells]
    rows.append({"algo": "ddpg", "env": "CartPole-v1", "skipped": "discrete actions"})
    out = tmp_path / "s"
    write_json(out.with_suffix(".json"), {"meta": {"date": "2026-01-01", "machine": "x", "jax": "0"}, "rows": rows})
    saved = out.with_suffix(".json").read_bytes()
    calls.clear()
    scorecard.main(["--from-json", "--out", str(out)])
    assert calls == [] and out.with_suffix(".json").read_bytes() == saved  # nothing ran, the source is as it was
    text = out.with_suffix(".md").read_text()
    section = scorecard.aggregate_section(rows, "s")  # what the docs' scorecard page shows (scripts/docs.py)
    assert section and text.endswith(section) and "![performance profiles](s_profiles.png)" in section
    matrices, tasks = scorecard.score_matrices(rows)
    assert tasks == {"ppo": ["CartPole-v1", "Pendulum-v1"], "dqn": ["CartPole-v1"], "ddpg": ["Pendulum-v1"]}
    # dqn evaluates at 497 on CartPole: (497 - 22.12) / (500 - 22.12), random and reference of reference_scores.toml
    assert "| dqn | CartPole-v1 | 8 | 0.994 [0.994, 0.994] |" in text
    assert (tmp_path / "s_aggregates.png").stat().st_size > 0 and (tmp_path / "s_profiles.png").stat().st_size > 0
    with pytest.raises(SystemExit):
        scorecard.main(["--from-json", "--out", str(tmp_path / "missing")])


def test_inapplicable_rows_are_listed_not_run(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(scorecard, "run_one", fake_run(calls))
    monkeypatch.setattr(scorecard, "plot_env", lambda *args: None)
    out = tmp_path / "s"
    scorecard.main(["--algos", "ddpg", "--envs", "CartPole-v1", "--seeds", "1", "--out", str(out)])  # discrete actions
    assert calls == []
    assert "| ddpg | CartPole-v1 | n/a:" in out.with_suffix(".md").read_text()


def test_an_error_while_training_is_raised_not_listed(tmp_path, monkeypatch):
    def broken(entry, env, budget, seeds, seed=0, eval_episodes=32):
        raise ValueError("Incompatible shapes for broadcasting")

    monkeypatch.setattr(scorecard, "run_one", broken)
    with pytest.raises(ValueError, match="broadcasting"):
        scorecard.main(["--algos", "ppo", "--envs", "CartPole-v1", "--seeds", "1", "--out", str(tmp_path / "s")])


@pytest.mark.extended
def test_a_real_row_has_both_returns_and_the_evaluation_is_deterministic():
    """One tiny real run: the evaluation column is the mean return of the final policies' fresh episodes, the same
    on a second call (fixed evaluation keys), and within CartPole's range."""
    row = scorecard.run_one("ppo", "CartPole-v1", 4096, seeds=2, eval_episodes=4)
    assert len(row["eval_per_seed"]) == 2 and row["eval_episodes"] == 4
    assert all(1.0 <= x <= 500.0 for x in row["eval_per_seed"])
    assert row["eval_ci"][0] <= row["eval_mean"] <= row["eval_ci"][1]
    again = scorecard.run_one("ppo", "CartPole-v1", 4096, seeds=2, eval_episodes=4)
    assert again["eval_per_seed"] == row["eval_per_seed"] and again["final_per_seed"] == row["final_per_seed"]


def test_the_old_module_name_points_at_the_scorecard():
    """`python -m benchmarks.suite` (the scorecard's former name) fails with one line naming the new module."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.suite"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip().count("\n") == 0 and "python -m benchmarks.scorecard" in out.stderr
    with pytest.raises(ImportError, match="benchmarks.scorecard"):
        import benchmarks.suite  # noqa: F401
