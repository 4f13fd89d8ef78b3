"""Presets: tuned (algorithm, env) Configs kept in the package and shared by the CLI, the suite and user code."""

import dataclasses

import pytest

from jaxrl import presets
from jaxrl.algos import ALGORITHMS


@pytest.mark.parametrize("algo, env", presets.available())
def test_every_preset_is_a_valid_config_of_its_algorithm(algo, env):
    config = presets.get(algo, env)
    assert type(config) is ALGORITHMS[algo].Config and config.env == env
    for field, value in presets.PRESETS[algo, env].items():
        assert getattr(config, field) == value, field
    ALGORITHMS[algo].validate(config)  # raises if the preset cannot run


def test_get_applies_changes_on_top_and_defaults_without_a_preset():
    config = presets.get("ppo", "Pendulum-v1", total_timesteps=12_345, learning_rate=3e-4)
    assert config.total_timesteps == 12_345 and config.learning_rate == 3e-4 and config.num_minibatches == 32
    plain = presets.get("dqn", "CartPole-v1")
    assert plain == ALGORITHMS["dqn"].Config(env="CartPole-v1")
    assert presets.overrides("dqn", "CartPole-v1") == {}
    with pytest.raises(ValueError, match="not one of"):
        presets.get("ppo2", "CartPole-v1")


def test_the_suite_uses_the_presets():
    from benchmarks import suite

    _, config = suite.make_config("ppo", "MountainCar-v0", 100_000)
    assert config == dataclasses.replace(presets.get("ppo", "MountainCar-v0"), total_timesteps=100_000)
    _, replay = suite.make_config("grpo-replay", "Pendulum-v1", 100_000)
    assert replay.replay_ratio == 1 and replay.update_epochs == presets.PRESETS["grpo", "Pendulum-v1"]["update_epochs"]
