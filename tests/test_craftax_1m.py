"""benchmarks.craftax_1m without training: its score against a NumPy reference, its configs against Craftax's PPO
baseline, the merge of result rows and the table. The training itself runs on an accelerator (its docstring)."""

import json

import numpy as np
import pytest

from benchmarks import craftax_1m


def test_score_is_the_final_return_as_a_percentage_of_226_with_a_bootstrap_interval():
    rng = np.random.default_rng(0)
    returns = rng.uniform(0.0, 10.0, size=(4, 20))  # [seeds, iterations]; the last 10% is the last 2
    final, percent, finished, mean, interval = craftax_1m.score(returns)
    np.testing.assert_allclose(final, returns[:, -2:].mean(axis=1))
    np.testing.assert_allclose(percent, 100.0 * returns[:, -2:].mean(axis=1) / 226.0)
    assert mean == pytest.approx(percent.mean())
    # the percentile bootstrap of a mean over 4 seeds lies within the seeds' range and around their mean
    assert percent.min() <= interval[0] < mean < interval[1] <= percent.max()


def test_a_seed_without_a_finished_episode_is_left_out_of_the_score():
    returns = np.full((3, 10), np.nan)
    returns[0, -1], returns[1, -1] = 4.52, 2.26  # seed 2 finished no episode in the last iteration
    _, percent, finished, mean, interval = craftax_1m.score(returns)
    assert np.isnan(percent[2]) and finished.size == 2
    assert mean == pytest.approx(1.5)
    assert interval[0] == pytest.approx(1.0) and interval[1] == pytest.approx(2.0)  # resamples of two seeds
    _, _, none, nan_mean, nan_interval = craftax_1m.score(np.full((2, 10), np.nan))
    assert none.size == 0 and np.isnan(nan_mean) and np.isnan(nan_interval).all()


@pytest.mark.parametrize("core", ["none", "gru"])
def test_configs_follow_craftax_ppo_baseline(core):
    config = craftax_1m.config_for(core, 1_000_000, quick=False)
    assert config.env == "craftax:Craftax-Symbolic-v1"
    for field, value in craftax_1m.BASELINE.items():
        assert getattr(config, field) == value, field
    assert config.num_iterations == 15  # 1e6 // (1024 * 64), as the baseline computes it
    assert config.hidden_sizes == ((512, 512, 512) if core == "none" else (512,))
    assert config.core == core and (core == "none" or config.core_size == 512)
    fewer = craftax_1m.config_for(core, 1_000_000, quick=False, num_envs=256)
    assert fewer.num_envs == 256 and fewer.num_iterations == 61


def test_rows_merge_by_setting_and_render_one_table_line_each(tmp_path):
    def row(core, num_envs, percent):
        return {
            "core": core, "num_envs": num_envs, "num_steps": 64, "iterations": 15, "seeds": 4,
            "env_steps_per_seed": 983_040, "percent_of_max_mean": percent, "percent_of_max_interval_95": [0.5, 2.5],
            "percent_of_max_per_seed": [percent] * 4, "final_return_per_seed": [percent * 2.26] * 4,
            "compile_s": 70.0, "run_s": 40.0, "env_steps_per_s": 98_304,
            "curve_env_steps": [65_536, 983_040], "curve_return_per_seed": [[0.0, 3.0]] * 4,
        }  # fmt: skip

    path = tmp_path / "craftax_1m.json"
    path.write_text(json.dumps({"rows": [row("none", 1024, 1.0), row("gru", 1024, 1.1)]}))
    merged = craftax_1m.merge(path, [row("gru", 1024, 1.4), row("none", 256, 2.0)])
    assert [(r["core"], r["num_envs"], r["percent_of_max_mean"]) for r in merged] == [
        ("none", 1024, 1.0),
        ("gru", 1024, 1.4),
        ("none", 256, 2.0),
    ]
    record = {"device": "cpu (cpu)", "machine": {"jax": "0"}, "rows": merged}
    lines = [line for line in craftax_1m.markdown(record).splitlines() if line.startswith("| ")]
    assert len(lines) == 1 + len(merged)
    assert "| gru | 1024 x 64 | 15 | 4 | 983,040 | 1.40 [0.50, 2.50] |" in lines[2]
    craftax_1m.plot(record, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 0
