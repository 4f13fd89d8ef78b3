"""The rules a Config field's value keeps on its own, by the field's name: a range, an integer's minimum or a
set of choices. A name keeps one meaning in every Config, so one rule holds for it wherever it appears.

The rules import nothing of JAX: `jaxrl train`, `sweep` and `pbt` check the flags they are given against them
before JAX starts, and `jaxrl.algos.base.check_fields` checks every field of a Config against the same rules. An
algorithm's `validate` adds what one field cannot say alone: a count that must divide another, an env that must fit
the network.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Mapping


@dataclasses.dataclass(frozen=True)
class Rule:
    """`low <= value <= high` (`low < value` with `low_open`); with `integer`, `low` is an integer's minimum; with
    `choices`, the value is one of them."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    integer: bool = False
    choices: tuple[str, ...] = ()


def at_least(minimum: int) -> Rule:
    return Rule(low=minimum, integer=True)


def one_of(*choices: str) -> Rule:
    return Rule(choices=choices)


POSITIVE = Rule(low=0.0, low_open=True)
NON_NEGATIVE = Rule(low=0.0)
FRACTION = Rule(low=0.0, high=1.0)  # [0, 1]: a discount, a lambda, a probability
STEP_SIZE = Rule(low=0.0, high=1.0, low_open=True)  # (0, 1]: a Polyak step, a backtracking factor
COUNT = at_least(1)

RULES: dict[str, Rule] = {
    # the run and its batch
    "total_timesteps": COUNT,
    "num_envs": COUNT,
    "num_steps": COUNT,
    "update_epochs": COUNT,
    "num_minibatches": COUNT,
    "num_groups": COUNT,
    "group_size": COUNT,
    "horizon": at_least(0),
    "replay_ratio": at_least(0),
    "replay_capacity": COUNT,
    "behaviour_lag": at_least(0),
    "ref_update_interval": COUNT,
    # networks and optimisers
    "torso": one_of("mlp", "cnn", "cnn_large"),
    "activation": one_of("tanh", "relu", "gelu", "silu"),
    "optimizer": one_of("adam", "rmsprop", "radam"),
    "core": one_of("none", "gru", "lstm", "lru", "gtrxl"),
    "core_size": COUNT,
    "max_grad_norm": POSITIVE,
    # returns and advantages
    "gamma": FRACTION,
    "gae_lambda": FRACTION,
    "q_lambda": FRACTION,
    "vtrace_lambda": FRACTION,
    "n_step": at_least(0),
    "advantage": one_of("n_step", "gae"),
    "reward_scale": POSITIVE,
    "advantage_eps": NON_NEGATIVE,
    # policy-gradient objectives
    "clip_eps": POSITIVE,
    "clip_rho": POSITIVE,
    "clip_c": POSITIVE,
    "clip_pg_rho": POSITIVE,
    "rho_bar": POSITIVE,
    "critic": one_of("value", "q"),
    "group_mode": one_of("start", "branch"),
    "supervision": one_of("outcome", "process"),
    "kl_reference": one_of("none", "initial", "moving"),
    "ref_tau": FRACTION,
    "pairs": one_of("best_worst", "all"),
    "reference": one_of("behaviour", "initial", "moving"),
    "beta": POSITIVE,
    "margin": NON_NEGATIVE,
    # TRPO and V-MPO's trust regions
    "cg_iters": COUNT,
    "backtrack_iters": COUNT,
    "vf_epochs": COUNT,
    "vf_minibatches": COUNT,
    "max_kl": POSITIVE,
    "damping": NON_NEGATIVE,
    "cg_tol": NON_NEGATIVE,
    "backtrack_coef": STEP_SIZE,
    "epsilon_eta": POSITIVE,
    "epsilon_alpha": POSITIVE,
    "epsilon_alpha_mu": POSITIVE,
    "epsilon_alpha_sigma": POSITIVE,
    "init_temperature": POSITIVE,
    "init_alpha": POSITIVE,
    # replay and value learning
    "buffer_size": COUNT,
    "replay_batch_size": COUNT,
    "updates_per_iteration": COUNT,
    "learning_starts": at_least(0),
    "target_update_interval": COUNT,
    "td_loss": one_of("huber", "l2"),
    "tau": STEP_SIZE,
    "epsilon_start": FRACTION,
    "epsilon_end": FRACTION,
    "epsilon_decay_fraction": FRACTION,
    "priority_alpha": FRACTION,
    "priority_beta": FRACTION,
    "priority_beta_end": FRACTION,
    "priority_eps": POSITIVE,
    "sequence_length": COUNT,
    "burn_in": at_least(0),
    # continuous control
    "num_critics": COUNT,
    "exploration_noise": NON_NEGATIVE,
    "policy_delay": COUNT,
    "policy_noise": NON_NEGATIVE,
    "noise_clip": NON_NEGATIVE,
    "alpha": POSITIVE,
}


def rule_of(name: str) -> Rule | None:
    """The rule of the field `name`: its entry in `RULES`, else the naming conventions, a `*_coef` is a weight >= 0
    and a `learning_rate` or `*_learning_rate` a step size > 0; None for a field no rule constrains."""
    if name in RULES:
        return RULES[name]
    if name.endswith("_coef"):
        return NON_NEGATIVE
    if name == "learning_rate" or name.endswith("_learning_rate"):
        return POSITIVE
    return None


def describe(rule: Rule | None, symbol: str = "X") -> str:
    """The bounds of `rule` as `--help` shows them beside a flag's default ("0 <= X <= 1", "N >= 1"); "" for a rule
    of choices (each flag's help names them) or none."""
    if rule is None or rule.choices or rule.low is None:
        return ""
    low = f"{rule.low:g} {'<' if rule.low_open else '<='} {symbol}"
    if rule.high is not None:
        return f"{low} <= {rule.high:g}"
    return f"{symbol} {'>' if rule.low_open else '>='} {rule.low:g}"


def check(condition: bool, field: str, message: str) -> None:
    """Raises ValueError("Config.<field>: <message>") unless `condition`."""
    if not condition:
        raise ValueError(f"Config.{field}: {message}")


def check_positive_ints(field: str, value) -> None:
    """A field of integers (a tuple default, such as `hidden_sizes`): a tuple or list of integers >= 1."""
    whole = isinstance(value, (tuple, list)) and all(
        isinstance(x, numbers.Integral) and not isinstance(x, bool) and x >= 1 for x in value
    )
    check(whole, field, f"got {value!r}, must be positive integers (e.g. 64,64).")


def _all(values, test) -> bool:
    """`test` of every element: of a number, or of a NumPy array's elements (a stacked sweep Config's field)."""
    if hasattr(values, "shape"):
        import numpy as np

        return bool(np.all(test(values)))
    return bool(test(values))


def shown(values):
    if hasattr(values, "shape"):
        return values.item() if values.size == 1 else values.tolist()
    return values


def check_range(field: str, values, low=None, high=None, low_open: bool = False) -> None:
    """`low <= values <= high` (`low < values` with `low_open`), each element of an array."""
    if low is not None:
        ok = _all(values, (lambda v: v > low) if low_open else (lambda v: v >= low))
        check(ok, field, f"got {shown(values)}, must be {'>' if low_open else '>='} {low}.")
    if high is not None:
        check(_all(values, lambda v: v <= high), field, f"got {shown(values)}, must be <= {high}.")


def check_int(field: str, value, minimum: int) -> None:
    """An integer (not a bool) >= `minimum`."""
    integer = isinstance(value, int) and not isinstance(value, bool)
    if not integer and type(value).__module__ == "numpy":  # a NumPy integer, without importing NumPy here
        integer = getattr(value, "dtype", None) is not None and value.dtype.kind in "iu"
    check(integer and value >= minimum, field, f"got {value!r}, must be an integer >= {minimum}.")


def check_choice(field: str, value, allowed) -> None:
    check(value in allowed, field, f"{value!r} is not one of {', '.join(map(str, allowed))}.")


def check_value(field: str, value, rule: Rule | None = None) -> None:
    """`value` (a host-known number, a NumPy array of them, or a string) keeps the rule of `field` (`rule_of`
    unless given); raises ValueError("Config.<field>: ...") naming what it must be."""
    rule = rule_of(field) if rule is None else rule
    if rule is None:
        return
    if rule.choices:
        check_choice(field, value, rule.choices)
    elif rule.integer:
        check_int(field, value, int(rule.low))
    else:
        check_range(field, value, rule.low, rule.high, rule.low_open)


def check_values(values: Mapping[str, object]) -> None:
    """Each of `values` ({field: value}, e.g. the Config flags a command was given) keeps its field's rule."""
    for field, value in values.items():
        check_value(field, value)
