"""A population's settings and their checks, without JAX: `PBTConfig`, the text of an explored hyperparameter's prior
("KIND:LOW:HIGH", the syntax of `jaxrl sweep --dist`), `jaxrl pbt`'s `--explore NAME=KIND:LOW:HIGH` flags, and the
checks of the settings alone and of the explored fields against a Config's fields. `jaxrl pbt` runs them before JAX
starts, with the fields and defaults the catalog lists; `jaxrl.pbt.population.validate` runs them on a Config."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from jaxrl.sweep_flags import DIST_KINDS

KINDS = DIST_KINDS  # a prior's kinds: uniform, log_uniform, int_uniform (and their spellings)
FITNESS = ("return", "eval")  # PBTConfig.fitness: the window's mean episode return, or the evaluation return


@dataclasses.dataclass(frozen=True)
class PBTConfig:
    """The population and its exploit/explore schedule.

    population: members P (>= 2). ready: iterations between exploit/explore steps. truncation: the fraction
    of members replaced at each step (the bottom floor(truncation P)) and the fraction their parents are drawn
    from (the top as many); 0 < floor(truncation P) <= P / 2. explore: {field: prior} of the hyperparameters
    to draw, perturb and resample (the sweep syntax, e.g. "loguniform:1e-5:1e-2"; its bounds clip
    perturbations). perturb_factors: the factors a perturbation multiplies by, one drawn uniformly.
    resample_probability: per explored field, the probability of a fresh draw from its prior instead of a
    perturbation. fitness_window: iterations of mean episode return a member's fitness averages (1 to ready;
    None: ready). keep_base: member 0 starts from the given Config's values (the others are drawn from the
    priors); False draws every member.
    eval_every: every `eval_every` iterations (a divisor or a multiple of ready; 0: never) each member plays
    `eval_episodes` fresh episodes with its deterministic policy inside the program, on the run's evaluation key stream
    (`eval_return`, `eval_length` and `eval_finished` among the metrics, NaN at the other iterations).
    fitness: what ranks the members at a ready step: "return", the mean episode return over the last
    `fitness_window` iterations, or "eval", the evaluation return of that iteration (needs eval_every).
    """

    population: int = 8
    ready: int = 10
    truncation: float = 0.25
    explore: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    perturb_factors: tuple[float, ...] = (0.8, 1.25)
    resample_probability: float = 0.25
    fitness_window: int | None = None
    keep_base: bool = True
    eval_every: int = 0
    eval_episodes: int = 16
    fitness: str = "return"

    @property
    def window(self) -> int:
        return self.ready if self.fitness_window is None else self.fitness_window

    @property
    def num_truncated(self) -> int:
        """Members replaced at each ready step (and members their parents are drawn from)."""
        return math.floor(self.truncation * self.population)


def read_explore(specs: Sequence[str] | None) -> dict[str, str]:
    """{name: "KIND:LOW:HIGH"} of `jaxrl pbt`'s `--explore NAME=KIND:LOW:HIGH` flags; ValueError naming the flag
    when one has no NAME= part."""
    explore = {}
    for text in specs or []:
        name, sep, spec = text.partition("=")
        if not sep or not name.strip() or not spec.strip():
            raise ValueError(
                f"--explore {text!r}: expected NAME=KIND:LOW:HIGH, e.g. learning_rate=loguniform:1e-5:1e-2."
            )
        explore[name.strip().replace("-", "_")] = spec.strip()
    return explore


def parse_prior(name: str, spec) -> tuple[str, float, float]:
    """(kind, low, high) of `spec`: "KIND:LOW:HIGH" or (KIND, low, high), kind one of uniform, log_uniform,
    int_uniform; ValueError naming the field otherwise."""
    where = f"PBTConfig.explore[{name!r}]"
    if isinstance(spec, str):
        parts = spec.split(":")
        if len(parts) != 3:
            raise ValueError(f"{where}: {spec!r} is not KIND:LOW:HIGH, e.g. loguniform:1e-5:1e-2.")
        kind, low, high = parts
    elif isinstance(spec, (tuple, list)) and len(spec) == 3:
        kind, low, high = spec
    else:
        raise ValueError(f"{where}: {spec!r} is not KIND:LOW:HIGH or (kind, low, high).")
    if str(kind).lower() not in KINDS:
        raise ValueError(f"{where}: unknown distribution {kind!r}; use one of {', '.join(sorted(KINDS))}.")
    kind = KINDS[str(kind).lower()]
    try:
        low, high = float(low), float(high)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: bounds {low!r}, {high!r} are not numbers.") from None
    if not (math.isfinite(low) and math.isfinite(high) and low <= high):
        raise ValueError(f"{where}: bounds [{low}, {high}] need finite LOW <= HIGH.")
    if kind == "log_uniform" and low <= 0:
        raise ValueError(f"{where}: loguniform needs LOW > 0, got {low}.")
    if kind == "int_uniform" and (low != int(low) or high != int(high)):
        raise ValueError(f"{where}: int bounds must be integers, got [{low}, {high}].")
    return kind, low, high


def _is_int(value, minimum: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= minimum


def check_settings(pbt: PBTConfig, num_iterations: int | None = None) -> None:
    """The checks of `pbt` alone (and of `ready` against the run's `num_iterations` when given): one-line
    ValueErrors naming the field."""
    if not _is_int(pbt.population, 2):
        raise ValueError(f"PBTConfig.population: got {pbt.population!r}, a population needs at least 2 members.")
    if not (_is_int(pbt.ready, 1) and (num_iterations is None or pbt.ready <= num_iterations)):
        most = "num_iterations" if num_iterations is None else f"num_iterations = {num_iterations}"
        raise ValueError(f"PBTConfig.ready: got {pbt.ready!r}, must be 1 to {most}.")
    if not (0 < pbt.truncation <= 0.5) or pbt.num_truncated < 1:
        raise ValueError(
            f"PBTConfig.truncation: got {pbt.truncation!r}, which replaces floor({pbt.truncation} * "
            f"{pbt.population}) = {pbt.num_truncated} members; it must select 1 to half of the population."
        )
    window = pbt.window
    if not (isinstance(window, int) and 1 <= window <= pbt.ready):
        raise ValueError(f"PBTConfig.fitness_window: got {window!r}, must be 1 to ready = {pbt.ready}.")
    if not _is_int(pbt.eval_every, 0) or (pbt.eval_every and pbt.ready % pbt.eval_every and pbt.eval_every % pbt.ready):
        raise ValueError(
            f"PBTConfig.eval_every: got {pbt.eval_every!r}, must divide ready = {pbt.ready} or be a multiple of it "
            "(evaluations fall on ready steps), or 0 for no evaluation."
        )
    if pbt.eval_every and not _is_int(pbt.eval_episodes, 1):
        raise ValueError(f"PBTConfig.eval_episodes: got {pbt.eval_episodes!r}, eval_every needs at least 1 episode.")
    if pbt.fitness not in FITNESS:
        raise ValueError(f"PBTConfig.fitness: got {pbt.fitness!r}, use one of {', '.join(map(repr, FITNESS))}.")
    if pbt.fitness == "eval" and not (pbt.eval_every and pbt.ready % pbt.eval_every == 0):
        raise ValueError(
            "PBTConfig.fitness: 'eval' ranks members by their evaluation return at every ready step, which needs "
            f"eval_every to divide ready = {pbt.ready} (e.g. eval_every = ready); got eval_every = {pbt.eval_every}."
        )
    if pbt.fitness == "eval" and pbt.fitness_window is not None:
        raise ValueError(
            "PBTConfig.fitness_window: averages training returns, which fitness 'eval' does not use; leave it None."
        )
    factors = tuple(pbt.perturb_factors)
    if not factors or not all(isinstance(f, (int, float)) and math.isfinite(f) and f > 0 for f in factors):
        raise ValueError(f"PBTConfig.perturb_factors: got {pbt.perturb_factors!r}, need positive numbers.")
    if not 0.0 <= pbt.resample_probability <= 1.0:
        raise ValueError(f"PBTConfig.resample_probability: got {pbt.resample_probability!r}, must be in [0, 1].")


def check_explore(
    explore: Mapping[str, Any],
    fields: Collection[str],
    hyperparameters: Sequence[str],
    owner: str = "Config",
    values: Mapping[str, Any] | None = None,
) -> dict[str, tuple[str, float, float]]:
    """{name: (kind, low, high)} of the priors in `explore`, each naming one of `hyperparameters` (the traced
    fields) of `owner`, whose fields are `fields`, with bounds that hold the field's starting value in `values`
    (when given). One-line ValueError naming the field otherwise."""
    if not explore:
        raise ValueError(
            "PBTConfig.explore: empty; name at least one hyperparameter, e.g. {'learning_rate': "
            "'loguniform:1e-5:1e-2'}."
        )
    priors = {}
    for name, spec in explore.items():
        if name not in fields:
            raise ValueError(
                f"PBTConfig.explore[{name!r}]: {owner} has no field {name!r}; "
                f"hyperparameters: {', '.join(hyperparameters)}."
            )
        if name not in hyperparameters:
            raise ValueError(
                f"PBTConfig.explore[{name!r}]: a static field (compiled into the program) cannot change during "
                f"training; hyperparameters: {', '.join(hyperparameters)}."
            )
        kind, low, high = priors[name] = parse_prior(name, spec)
        if values is not None and not low <= float(values[name]) <= high:
            raise ValueError(
                f"PBTConfig.explore[{name!r}]: bounds [{low:g}, {high:g}] exclude the starting value "
                f"Config.{name} = {values[name]!r}; widen the prior or change the Config."
            )
    return priors
