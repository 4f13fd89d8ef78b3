"""Defaults that hold up: `jaxrl.run.report.stability` (the last 10% of iterations against the best window of
that width, on the mean curve of the seeds), and DQN's default Config at 10x its budget, where a collapse was
measured (DQN's old defaults: best 327, final 224 at 10x over 4 seeds), ends within bounds of its best.

Every other algorithm's stability at 10x its budget is a benchmark, not a test: `benchmarks/stability.py` (4 seeds,
one vmapped program per algorithm) writes the table (benchmarks/results/stability_offpolicy.md, the docs'
Stability page). The learning checks are in each algorithm's test module."""

import dataclasses

import jax
import numpy as np
import pytest

from conftest import runner_jit
from jaxrl.algos import dqn
from jaxrl.run.report import stability

SCALE = 10
SEEDS = 2
# DQN at 10x: on one x86 CPU its 2 seeds ended at 414 after a best of 500 (a drop of 17.5% of the learned range,
# 27% for one seed), within 5% on another; the seeds' numbers depend on the CPU XLA compiles for
TOLERANCE, SEED_TOLERANCE = 0.20, 0.35  # of the learned range: on the seed-mean curve, for any one seed


def test_stability_measures_the_drop_on_the_learned_range():
    rising = np.tile(np.linspace(0.0, 100.0, 100), (2, 1))
    assert stability(rising)["drop"] == pytest.approx(0.0)
    collapsed = np.concatenate([np.full((2, 10), 20.0), np.full((2, 40), 220.0), np.full((2, 50), 120.0)], axis=1)
    result = stability(collapsed)
    assert (result["first"], result["best"], result["final"]) == pytest.approx((20.0, 220.0, 120.0))
    assert result["drop"] == pytest.approx(0.5) and result["worst_seed_drop"] == pytest.approx(0.5)
    pendulum = np.concatenate([np.full((1, 10), -1200.0), np.full((1, 40), -137.0), np.full((1, 50), -150.0)], 1)
    assert stability(pendulum)["drop"] == pytest.approx(13 / 1063)  # both solved: 1% of the learned range
    one_seed_fails = np.stack(
        [np.r_[np.full(10, 20.0), np.full(90, 500.0)], np.r_[np.full(10, 20.0), np.full(40, 500.0), np.full(50, 9.0)]]
    )
    held = stability(one_seed_fails)  # the mean curve loses half of its range; the failed seed all of it
    assert held["drop"] == pytest.approx((500 - 254.5) / 480) and held["worst_seed_drop"] == pytest.approx(491 / 480)
    with_nan = collapsed.copy()
    with_nan[0, -5:] = np.nan  # iterations without a finished episode do not count
    assert stability(with_nan)["final"] == pytest.approx(120.0)


@pytest.mark.extended
def test_dqn_defaults_hold_at_ten_times_their_budget():
    default = dqn.Config()
    config = dataclasses.replace(default, total_timesteps=default.total_timesteps * SCALE)
    _, metrics = runner_jit(jax.vmap(dqn.make_train(config)))(jax.random.split(jax.random.key(0), SEEDS))
    result = stability(np.asarray(metrics["episode_return"]))
    assert result["drop"] <= TOLERANCE and result["worst_seed_drop"] <= SEED_TOLERANCE, (f"{SCALE}x", result)
