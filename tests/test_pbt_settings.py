"""A population's settings checked without JAX (`jaxrl.pbt_settings`): `jaxrl pbt` refuses its flags before JAX
starts in the words `jaxrl.pbt.validate` uses on the Config the same flags make (a `--preset`'s values included),
for every algorithm."""

from __future__ import annotations

import dataclasses

import pytest

from jaxrl import cli, commands, pbt_settings
from jaxrl.algos import ALGORITHMS
from jaxrl.algos.base import is_static
from jaxrl.pbt import population


def refusal(error_of) -> str | None:
    try:
        error_of()
    except ValueError as error:
        return str(error)
    return None


def both(algo: str, *flags: str) -> tuple[str | None, str | None]:
    """(the refusal before JAX, the refusal of `jaxrl.pbt.validate` on the flags' Config and PBTConfig) of
    `jaxrl pbt ALGO FLAGS`; None where it passes."""
    args = cli.build_parser("pbt").parse_args(["pbt", algo, *flags])
    early = refusal(lambda: commands.check_config_flags(args))
    config = commands.config_from_args(ALGORITHMS[algo].Config, args)
    late = refusal(lambda: population.validate(config, commands.pbt_config(args)))
    return early, late


def cases():
    """Per algorithm: explore specs that break each check on its first traced positive float field (and its first
    static int field), then one that passes."""
    for algo, module in ALGORITHMS.items():
        fields = dataclasses.fields(module.Config)
        traced = next(f for f in fields if not is_static(f) and isinstance(f.default, float) and f.default > 0)
        static = next(f for f in fields if is_static(f) and isinstance(f.default, int))
        start = traced.default
        name = traced.name
        refused = (
            "nope=uniform:0:1",
            f"{static.name}=int:1:8",
            f"{name}=uniform:{start * 2}:{start * 3}",
            f"{name}=loguniform:0:{start}",
            f"{name}=gauss:0:{start}",
            f"{name}=uniform:{start}",
            f"{name}=uniform:{start * 2}:{start / 2}",
            f"{name}=int:0.5:{start * 2}",
        )
        for spec in refused:
            yield pytest.param(algo, ["--explore", spec], True, id=f"{algo}-{spec}")
        good = f"{name}=uniform:{start / 2}:{start * 2}"
        yield pytest.param(algo, ["--explore", good], False, id=f"{algo}-{good}")


@pytest.mark.parametrize(("algo", "flags", "refused"), list(cases()))
def test_an_explore_flag_is_refused_before_jax_as_validate_refuses_it(algo, flags, refused):
    early, late = both(algo, *flags)
    assert early == late and (early is not None) == refused, (early, late)


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--population", "1"],
        ["--truncation", "0.9"],
        ["--truncation", "0.1"],
        ["--resample-probability", "1.5"],
        ["--eval-every", "3"],
        ["--eval-every", "-1"],
        ["--fitness", "eval"],
        ["--ready", "0"],
        ["--learning-rate", "1e-2", "--explore", "learning_rate=loguniform:1e-4:1e-3"],
        ["--learning-rate", "5e-4", "--explore", "learning_rate=loguniform:1e-4:1e-3"],
        ["--ready", "5", "--eval-every", "5", "--fitness", "eval"],
    ],
)
def test_a_settings_flag_is_refused_before_jax_as_validate_refuses_it(flags):
    explore = [] if "--explore" in flags or not flags else ["--explore", "gamma=uniform:0.9:0.999"]
    early, late = both("ppo", *flags, *explore)
    assert early == late


def test_ready_is_checked_against_the_runs_iterations_a_presets_too():
    """`ready` beyond the run's iterations is refused before JAX as `validate` refuses it, a grouped learner's too
    (its horizon the env's time limit, from the facts the catalog records), and so is a prior that excludes a
    field's starting value; under a `--preset` the iterations and the starting values are the preset's."""
    early, late = both("ppo", "--total-timesteps", "2048", "--ready", "5", "--explore", "gamma=uniform:0.9:1")
    assert early == late == "PBTConfig.ready: got 5, must be 1 to num_iterations = 2."
    early, late = both("grpo", "--total-timesteps", "40000", "--ready", "5", "--explore", "clip_eps=uniform:0.1:0.3")
    assert early == late == "PBTConfig.ready: got 5, must be 1 to num_iterations = 2."
    preset = ("ppo", "--env", "Pendulum-v1", "--preset")
    early, late = both(*preset, "--ready", "100", "--explore", "gamma=uniform:0.9:1")
    assert early == late == "PBTConfig.ready: got 100, must be 1 to num_iterations = 97."
    assert both(*preset, "--ready", "97", "--explore", "gamma=uniform:0.9:1") == (None, None)
    early, late = both(*preset, "--explore", "gamma=uniform:0.96:1")
    assert early == late and "the starting value Config.gamma = 0.95" in early  # the default, 0.99, is inside


def test_an_explore_flag_without_a_name_is_one_line():
    for text in ("learning_rate", "=uniform:0:1", "gamma="):
        with pytest.raises(ValueError, match=r"^--explore .*: expected NAME=KIND:LOW:HIGH, e\.g\. learning_rate="):
            pbt_settings.read_explore([text])
    assert pbt_settings.read_explore(["ent-coef = uniform:0:0.1"]) == {"ent_coef": "uniform:0:0.1"}
