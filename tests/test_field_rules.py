"""Each Config field's own rule (`jaxrl.field_rules`): the command line refuses a flag by it before JAX starts, and
every algorithm's `validate` refuses the same value in the same words; the choices it names are the ones the
library offers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from jaxrl import estimators, field_rules, optim
from jaxrl.algos import ALGORITHMS, a2c, dpo, grpo
from jaxrl.algos.families import grouped
from jaxrl.catalog import CATALOG
from jaxrl.field_rules import RULES, Rule, rule_of
from jaxrl.networks import ACTIVATIONS, TORSOS
from jaxrl.networks.recurrent import CORES


def test_each_choice_is_one_the_library_offers():
    offered = {
        "activation": tuple(ACTIVATIONS),
        "torso": TORSOS,
        "core": CORES,
        "optimizer": optim.OPTIMIZERS,
        "pairs": estimators.PAIR_MODES,
        "reference": dpo.REFERENCES,
        "advantage": a2c.ADVANTAGES,
        "supervision": grpo.SUPERVISION,
        "kl_reference": grpo.KL_REFERENCES,
        "group_mode": grouped.GROUP_MODES,
    }
    for field, choices in offered.items():
        assert RULES[field].choices == tuple(choices), field


def test_every_rule_is_a_field_of_some_config():
    fields = {name for entry in CATALOG.values() for name, *_ in entry["fields"]}
    assert sorted(set(RULES) - fields) == []


def breaking(rule: Rule):
    """Values that break `rule`: below its bound (at it when open), above its top, a name it does not offer."""
    if rule.choices:
        return ["no-such-choice"]
    if rule.integer:
        return [int(rule.low) - 1]
    bad = [rule.low if rule.low_open else rule.low - 0.5]
    return bad + ([rule.high + 0.5] if rule.high is not None else [])


def ruled_fields():
    return [
        pytest.param(algo, field, id=f"{algo}.{field.name}")
        for algo, module in ALGORITHMS.items()
        for field in dataclasses.fields(module.Config)
        if rule_of(field.name) is not None
    ]


@pytest.mark.parametrize("algo,field", ruled_fields())
def test_validate_and_the_flags_refuse_the_same_values_in_the_same_words(algo, field):
    """Every value that breaks a field's rule: `check_values` (the flags, before JAX) and the algorithm's
    `validate` (any Config: the Python API, a preset, a resumed run) raise the same one-line ValueError. The
    default and the rule's closed bounds pass both."""
    module, rule = ALGORITHMS[algo], rule_of(field.name)
    for value in breaking(rule):
        with pytest.raises(ValueError) as flags:
            field_rules.check_values({field.name: value})
        with pytest.raises(ValueError) as config:
            module.validate(module.Config(**{field.name: value}))
        assert str(config.value) == str(flags.value), (field.name, value)
        assert str(flags.value).startswith(f"Config.{field.name}: ")
    for value in [field.default, *(b for b in (rule.low, rule.high) if b is not None and not rule.integer)]:
        if not (rule.low_open and value == rule.low):
            field_rules.check_values({field.name: value})


def test_a_stacked_sweep_config_is_checked_element_by_element():
    field_rules.check_value("gamma", np.array([0.9, 0.99, 1.0]))
    with pytest.raises(ValueError, match=r"Config.gamma: got \[0.9, 1.5\], must be <= 1.0."):
        field_rules.check_value("gamma", np.array([0.9, 1.5]))


def test_a_name_without_an_entry_follows_the_naming_conventions():
    assert rule_of("dual_learning_rate") == field_rules.POSITIVE
    assert rule_of("kl_coef") == field_rules.NON_NEGATIVE
    assert rule_of("hidden_sizes") is None
    field_rules.check_values({"hidden_sizes": (0,), "env": "anything"})  # no rule: `validate` checks these


def test_the_help_shows_each_flags_bounds(capsys):
    from jaxrl import cli

    shown = {}
    for algo in ("ppo", "dqn"):
        with pytest.raises(SystemExit):
            cli.main(["train", algo, "--help"])
        shown[algo] = " ".join(capsys.readouterr().out.split())
    assert "--gamma X discount factor (default: 0.99; 0 <= X <= 1)" in shown["ppo"]
    assert "--num-envs N parallel environments (default: 16; N >= 1)" in shown["ppo"]
    assert "(default: 0.2; X > 0)" in shown["ppo"]  # clip_eps
    assert "(default: 1.0; 0 < X <= 1)" in shown["dqn"]  # tau
    assert "(default: 1000; N >= 0)" in shown["dqn"]  # learning_starts
    assert "gelu or silu (default: tanh)" in shown["ppo"]  # a choice: the help names them
