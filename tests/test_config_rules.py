"""The rules a Config keeps across its fields and with its env (`jaxrl.config_rules`), checked before JAX starts on
the values the command line's flags give and the env facts `jaxrl/env_ids.json` records (a suite's env's too),
refuse what each algorithm's `validate` refuses, in its words, and pass what it passes."""

from __future__ import annotations

import argparse

import pytest

from conftest import refusal
from jaxrl import catalog, commands, config_rules, presets
from jaxrl.algos import ALGORITHMS

# The fields each case sets: a case breaks one rule where the algorithm has those fields, or none (the first).
CASES = [
    {},
    {"total_timesteps": 1},
    {"num_minibatches": 7},
    {"vf_minibatches": 7},
    {"num_envs": 4, "num_steps": 128, "num_minibatches": 8, "core": "gru"},
    {"core": "gtrxl", "core_size": 30},
    {"core": "gtrxl", "core_size": 32},
    {"core": "lstm", "bound_mean": True},
    {"num_envs": 8, "buffer_size": 100},
    {"num_envs": 8, "buffer_size": 8},
    {"learning_starts": 10**9},
    {"n_step": 0},
    {"n_step": 3},
    {"core": "gru", "burn_in": 40, "sequence_length": 40},
    {"group_size": 1},
    {"horizon": 10, "num_minibatches": 7},
    {"horizon": 10, "total_timesteps": 100},
    {"whole_episodes": True, "normalize_observations": True},
    {"core": "gru", "critic": "q"},
    {"torso": "cnn"},
    {"torso": "cnn", "env": "Breakout-MinAtar"},
    {"env": "Pendulum-v1"},
    {"env": "CartPole-v1"},
    {"env": "Pendulum-v1", "critic": "q"},
    {"expected": True, "env": "Pendulum-v1"},
    {"horizon": 0, "num_minibatches": 7},
    {"horizon": 0, "total_timesteps": 1000},
    {"env": "navix:Navix-Empty-5x5-v0", "torso": "cnn"},
    {"env": "xminigrid:MiniGrid-Empty-5x5", "horizon": 0, "num_minibatches": 7},
    {"env": "brax:inverted_pendulum"},
]


def test_every_algorithm_has_its_rules():
    assert set(config_rules.BY_ALGORITHM) == set(ALGORITHMS) == set(catalog.CATALOG)


def test_without_the_envs_facts_its_rules_wait_for_validate(monkeypatch):
    """An env an --env-module registers, or a recorded id under another version of gymnax or of its suite than the
    one recorded: no facts, so the torso, the action space and a horizon of 0 pass before JAX."""
    ppo = {**commands.config_values("ppo", argparse.Namespace()), "torso": "cnn"}
    config_rules.check_values("ppo", ppo, None)
    with pytest.raises(ValueError, match=r"^Config\.torso: 'cnn' needs image observations"):
        config_rules.check_values("ppo", ppo, config_rules.EnvFacts((4,), True, 500))
    grpo = {**commands.config_values("grpo", argparse.Namespace()), "num_minibatches": 7}
    config_rules.check_values("grpo", grpo, None)
    assert config_rules.num_iterations(grpo, None) is None
    assert catalog.env_facts("mine:Task") is None and catalog.env_facts("MyTask-v0") is None
    navix = catalog.ENV_IDS["suite_ids"]["navix"]
    monkeypatch.setitem(catalog.ENV_IDS["suite_ids"], "navix", {**navix, "version": "0.0.0"})
    monkeypatch.setitem(catalog.ENV_IDS, "gymnax_version", "0.0.0")
    assert catalog.env_facts("navix:Navix-Empty-5x5-v0") is None and catalog.env_facts("CartPole-v1") is None


def test_the_gtrxl_heads_are_the_cores():
    from jaxrl.networks.gtrxl import GTrXLCore

    assert config_rules.GTRXL_HEADS == GTrXLCore.num_heads


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_the_rules_before_jax_refuse_what_validate_refuses_in_its_words(algo):
    """For every case whose fields the algorithm has: the flags' values (`commands.config_values`) checked by the
    algorithm's rules, with the facts the catalog records of the env, give the refusal `validate` gives the Config
    those flags make, or none where it gives none."""
    module, entry = ALGORITHMS[algo], catalog.CATALOG[algo]
    fields = {name for name, *_ in entry["fields"]}
    seen = {"refused": 0, "passed": 0}
    for case in CASES:
        if not set(case) <= fields:
            continue
        values = commands.config_values(algo, argparse.Namespace(**case))
        env = catalog.env_facts(values["env"])
        assert env is not None or not catalog.recorded_version_installed(values["env"]), values["env"]
        early = refusal(config_rules.check_values, algo, values, env)
        late = refusal(module.validate, module.Config(**case))
        if env is None:  # another version of gymnax or the suite: the env's rules wait for validate
            assert early in (None, late), (algo, case)
            continue
        assert early == late, (algo, case)
        seen["refused" if late else "passed"] += 1
    assert seen["refused"] >= 2 and seen["passed"] >= 1, seen


@pytest.mark.parametrize(("algo", "env"), presets.available())
def test_under_a_preset_the_rules_before_jax_refuse_what_validate_refuses(algo, env):
    """`jaxrl train ALGO --env ENV --preset FLAGS`: the preset's values (read without JAX) with the flags on top,
    checked before JAX, give the refusal `validate` gives `presets.get(ALGO, ENV, **FLAGS)`, or none; the preset
    alone passes."""
    module, fields = ALGORITHMS[algo], {name for name, *_ in catalog.CATALOG[algo]["fields"]}
    env_facts = catalog.env_facts(env)
    refused = 0
    for case in PRESET_CASES:
        if not set(case) <= fields:
            continue
        values = commands.config_values(algo, argparse.Namespace(preset=True, env=env, **case))
        early = refusal(config_rules.check_values, algo, values, env_facts)
        late = refusal(module.validate, presets.get(algo, env, **case))
        if env_facts is None:  # another gymnax version: the env's rules wait for validate
            assert early in (None, late), (algo, env, case)
            continue
        assert early == late, (algo, env, case)
        assert case or late is None, (algo, env)
        refused += late is not None
    assert refused >= 1


# Flags on top of a preset: none, then each breaking a rule with some preset's own values.
PRESET_CASES = [{}, {"total_timesteps": 1}, {"num_envs": 5, "num_steps": 101}, {"num_envs": 3, "buffer_size": 100}]


def test_a_tuple_fields_rule_before_jax_is_the_one_validate_applies():
    """`hidden_sizes` (the tuple field) checked before JAX (`field_rules.check_positive_ints`) refuses what PPO's
    and SAC's `validate` refuse, in their words, and passes what they pass."""
    from jaxrl import field_rules

    for algo in ("ppo", "sac"):
        module = ALGORITHMS[algo]
        for value in [(0, 64), (64, -1), (64, 64), (8,)]:
            early = refusal(field_rules.check_positive_ints, "hidden_sizes", value)
            late = refusal(module.validate, module.Config(hidden_sizes=value))
            assert early == late and (early is None) == (min(value) >= 1), (algo, value, early, late)
