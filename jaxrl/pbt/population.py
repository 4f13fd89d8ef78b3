"""The population and its exploit/explore step: PBTConfig, the priors of the explored hyperparameters, validation
(one-line errors before anything compiles), the initial population, ranking, truncation selection, exploit and
explore (Jaderberg et al. 2017, "Population Based Training of Neural Networks", arXiv 1711.09846). Pure and
traceable: the compiled program (`jaxrl.pbt.program`) calls `ready_step` every `ready` iterations."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import envs
from jaxrl.algos import base
from jaxrl.sweep.space import leaf_dtype

FITNESS_METRIC = "episode_return"
EVAL_FITNESS_METRIC = "eval_return"
FITNESS = ("return", "eval")  # PBTConfig.fitness: the window's mean episode return, or the evaluation return
# TrainState fields a member keeps through an exploit: its own environment batch, the recurrent memory of that
# batch (hidden states and episode starts of its own episodes) and its own key
OWN_FIELDS = ("env", "env_state", "memory", "key")
# ...except the running statistics of observation and reward normalisation inside them, which the copied
# parameters were trained against: those follow the parent
FOLLOW_PARENT = tuple(t for t in (getattr(envs, "RunningMeanStd", None),) if t is not None)
KINDS = {
    "uniform": "uniform",
    "loguniform": "log_uniform",
    "log_uniform": "log_uniform",
    "int": "int_uniform",
    "int_uniform": "int_uniform",
}


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


class Prior(NamedTuple):
    """A hyperparameter's prior: kind (uniform, log_uniform, int_uniform) on [low, high]."""

    kind: str
    low: float
    high: float

    def sample(self, key: jax.Array, shape, dtype) -> jax.Array:
        if self.kind == "int_uniform":
            return jax.random.randint(key, shape, int(self.low), int(self.high) + 1).astype(dtype)
        u = jax.random.uniform(key, shape, jnp.float32)
        if self.kind == "log_uniform":
            low, high = np.log(self.low), np.log(self.high)
            return jnp.clip(jnp.exp(low + (high - low) * u), self.low, self.high).astype(dtype)
        return (self.low + (self.high - self.low) * u).astype(dtype)

    def clip(self, x: jax.Array) -> jax.Array:
        if self.kind == "int_uniform":
            x = jnp.round(x)
        return jnp.clip(x, jnp.asarray(self.low, x.dtype), jnp.asarray(self.high, x.dtype))


# ---------------------------------------------------------------------------------------------------------
# Validation (host, before anything compiles)
# ---------------------------------------------------------------------------------------------------------


def parse_prior(name: str, spec) -> Prior:
    """The Prior of `spec`: "KIND:LOW:HIGH" or (KIND, low, high); ValueError naming the field otherwise."""
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
    if not (np.isfinite(low) and np.isfinite(high) and low <= high):
        raise ValueError(f"{where}: bounds [{low}, {high}] need finite LOW <= HIGH.")
    if kind == "log_uniform" and low <= 0:
        raise ValueError(f"{where}: loguniform needs LOW > 0, got {low}.")
    if kind == "int_uniform" and (low != int(low) or high != int(high)):
        raise ValueError(f"{where}: int bounds must be integers, got [{low}, {high}].")
    return Prior(kind, low, high)


def _hyper_fields(config) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(config) if not base.is_static(f)}


def validate(config, pbt: PBTConfig) -> dict[str, Prior]:
    """Checks `pbt` against `config` (and `config` itself); returns the parsed priors. Each problem is a
    one-line ValueError naming the field."""
    base.algorithm_of(config).validate(config)
    if not (isinstance(pbt.population, int) and pbt.population >= 2):
        raise ValueError(f"PBTConfig.population: got {pbt.population!r}, a population needs at least 2 members.")
    iterations = config.num_iterations
    if not (isinstance(pbt.ready, int) and 1 <= pbt.ready <= iterations):
        raise ValueError(f"PBTConfig.ready: got {pbt.ready!r}, must be 1 to num_iterations = {iterations}.")
    if not (0 < pbt.truncation <= 0.5) or pbt.num_truncated < 1:
        raise ValueError(
            f"PBTConfig.truncation: got {pbt.truncation!r}, which replaces floor({pbt.truncation} * "
            f"{pbt.population}) = {pbt.num_truncated} members; it must select 1 to half of the population."
        )
    window = pbt.window
    if not (isinstance(window, int) and 1 <= window <= pbt.ready):
        raise ValueError(f"PBTConfig.fitness_window: got {window!r}, must be 1 to ready = {pbt.ready}.")
    if not (isinstance(pbt.eval_every, int) and not isinstance(pbt.eval_every, bool) and pbt.eval_every >= 0) or (
        pbt.eval_every and pbt.ready % pbt.eval_every and pbt.eval_every % pbt.ready
    ):
        raise ValueError(
            f"PBTConfig.eval_every: got {pbt.eval_every!r}, must divide ready = {pbt.ready} or be a multiple of it "
            "(evaluations fall on ready steps), or 0 for no evaluation."
        )
    if pbt.eval_every and not (
        isinstance(pbt.eval_episodes, int) and not isinstance(pbt.eval_episodes, bool) and pbt.eval_episodes >= 1
    ):
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
    if not factors or not all(isinstance(f, (int, float)) and np.isfinite(f) and f > 0 for f in factors):
        raise ValueError(f"PBTConfig.perturb_factors: got {pbt.perturb_factors!r}, need positive numbers.")
    if not 0.0 <= pbt.resample_probability <= 1.0:
        raise ValueError(f"PBTConfig.resample_probability: got {pbt.resample_probability!r}, must be in [0, 1].")
    if not pbt.explore:
        raise ValueError(
            "PBTConfig.explore: empty; name at least one hyperparameter, e.g. {'learning_rate': "
            "'loguniform:1e-5:1e-2'}."
        )
    fields = {f.name: f for f in dataclasses.fields(config)}
    hypers = [n for n, f in fields.items() if not base.is_static(f)]
    priors = {}
    for name, spec in pbt.explore.items():
        if name not in fields:
            raise ValueError(
                f"PBTConfig.explore[{name!r}]: {type(config).__qualname__} has no field {name!r}; "
                f"hyperparameters: {', '.join(hypers)}."
            )
        if base.is_static(fields[name]):
            raise ValueError(
                f"PBTConfig.explore[{name!r}]: a static field (compiled into the program) cannot change during "
                f"training; hyperparameters: {', '.join(hypers)}."
            )
        prior = parse_prior(name, spec)
        value = getattr(config, name)
        if not prior.low <= float(value) <= prior.high:
            raise ValueError(
                f"PBTConfig.explore[{name!r}]: bounds [{prior.low:g}, {prior.high:g}] exclude the starting value "
                f"Config.{name} = {value!r}; widen the prior or change the Config."
            )
        priors[name] = prior
    return priors


# ---------------------------------------------------------------------------------------------------------
# The population and its exploit/explore step (pure, traceable)
# ---------------------------------------------------------------------------------------------------------


def initial_population(config, pbt: PBTConfig, key: jax.Array, priors: dict[str, Prior] | None = None):
    """The P member Configs stacked (every hyperparameter a [P] array, float32 / int32 as in sweeps): the
    explored fields drawn from their priors (member 0 keeps `config`'s values with `keep_base`), the other
    hyperparameters `config`'s."""
    priors = validate(config, pbt) if priors is None else priors
    size = pbt.population
    keys = jax.random.split(key, len(priors))
    leaves = {}
    for name in _hyper_fields(config):
        value = getattr(config, name)
        leaves[name] = jnp.full((size,), value, leaf_dtype(value))
    for k, (name, prior) in zip(keys, priors.items(), strict=True):
        drawn = prior.sample(k, (size,), leaves[name].dtype)
        leaves[name] = drawn.at[0].set(leaves[name][0]) if pbt.keep_base else drawn
    return config.replace(**leaves)


def ranks(fitness: jax.Array) -> jax.Array:
    """[P] int32 rank of each member, 0 the best: higher fitness first, NaN (no finished episode) last, ties
    broken by the lower member index. A permutation of 0..P-1."""
    valid = ~jnp.isnan(fitness)
    f = jnp.where(valid, fitness, 0.0)
    index = jnp.arange(fitness.shape[0])
    # better[j, i]: member j ranks ahead of member i
    fj, fi, vj, vi = f[:, None], f[None, :], valid[:, None], valid[None, :]
    ahead = (fj > fi) | ((fj == fi) & (index[:, None] < index[None, :]))
    better = (vj & ~vi) | ((vj == vi) & ahead)
    return better.sum(0).astype(jnp.int32)


def fitness_of(returns: jax.Array, window: int) -> jax.Array:
    """[P] the NaN-mean over the last `window` rows of `returns` [iterations, P] (NaN where none is finite)."""
    recent = returns[-window:]
    finite = jnp.isfinite(recent)
    count = finite.sum(0)
    total = jnp.where(finite, recent, 0.0).sum(0)
    return jnp.where(count > 0, total / jnp.maximum(count, 1), jnp.nan)


def block_fitness(metrics: Mapping[str, jax.Array], pbt: PBTConfig) -> jax.Array:
    """[P] the fitness ranking the members at a ready step, from the metrics {name: [ready, P]} of the block it
    ends: `fitness` "return", the mean `episode_return` over the last `fitness_window` iterations
    (`fitness_of`); "eval", the `eval_return` of its last iteration (evaluated: eval_every divides ready)."""
    if pbt.fitness == "eval":
        return metrics[EVAL_FITNESS_METRIC][-1]
    if FITNESS_METRIC not in metrics:
        raise ValueError(f"PBT ranks members by the {FITNESS_METRIC!r} metric, which this algorithm lacks.")
    return fitness_of(metrics[FITNESS_METRIC], pbt.window)


def select_parents(rank: jax.Array, num_truncated: int, key: jax.Array, fire=True) -> tuple[jax.Array, jax.Array]:
    """(parent [P], exploited [P]): each member of the bottom `num_truncated` ranks (when `fire`) takes a parent
    drawn uniformly from the top `num_truncated`; every other member is its own parent."""
    size = rank.shape[0]
    order = jnp.zeros(size, jnp.int32).at[rank].set(jnp.arange(size, dtype=jnp.int32))  # order[r]: rank r's
    exploited = (rank >= size - num_truncated) & jnp.asarray(fire)
    drawn = order[jax.random.randint(key, (size,), 0, num_truncated)]
    return jnp.where(exploited, drawn, jnp.arange(size, dtype=jnp.int32)), exploited


def exploit(states, configs, parent: jax.Array):
    """Every member takes its parent's TrainState (all but `OWN_FIELDS`, whose normalisation statistics
    `FOLLOW_PARENT` it takes too) and hyperparameters; a member that is its own parent keeps them bit for bit."""
    if not dataclasses.is_dataclass(states):
        raise TypeError(f"PBT needs a dataclass TrainState (with env and key fields), got {type(states).__name__}.")
    take = lambda tree: jax.tree.map(lambda x: x[parent], tree)  # noqa: E731

    def own(tree):
        follow = lambda node: isinstance(node, FOLLOW_PARENT)  # noqa: E731
        return jax.tree.map(lambda node: take(node) if follow(node) else node, tree, is_leaf=follow)

    copied = {
        f.name: own(getattr(states, f.name)) if f.name in OWN_FIELDS else take(getattr(states, f.name))
        for f in dataclasses.fields(states)
    }
    return states.replace(**copied), take(configs)


def explore(configs, exploited: jax.Array, priors: dict[str, Prior], pbt: PBTConfig, key: jax.Array):
    """The explored fields of the `exploited` members perturbed (times a factor drawn from `perturb_factors`,
    clipped to the prior's bounds) or, each with `resample_probability`, drawn afresh from the prior; the
    other members' values unchanged."""
    factors = jnp.asarray(pbt.perturb_factors, jnp.float32)
    keys = jax.random.split(key, len(priors))
    new = {}
    for k, (name, prior) in zip(keys, priors.items(), strict=True):
        k_factor, k_resample, k_prior = jax.random.split(k, 3)
        value = getattr(configs, name)
        size = value.shape[0]
        factor = factors[jax.random.randint(k_factor, (size,), 0, factors.shape[0])]
        perturbed = prior.clip((value.astype(jnp.float32) * factor)).astype(value.dtype)
        resampled = prior.sample(k_prior, (size,), value.dtype)
        resample = jax.random.uniform(k_resample, (size,)) < pbt.resample_probability
        new[name] = jnp.where(exploited, jnp.where(resample, resampled, perturbed), value)
    return configs.replace(**new)


def ready_step(
    states, configs, fitness: jax.Array, key: jax.Array, pbt: PBTConfig, priors: dict[str, Prior], fire=True
):
    """One exploit/explore step on a population (leaves [P, ...]) of the given fitness [P]. Returns (states,
    configs, (rank, parent, exploited)); with `fire` False nothing changes."""
    k_select, k_explore = jax.random.split(key)
    rank = ranks(fitness)
    parent, exploited = select_parents(rank, pbt.num_truncated, k_select, fire)
    states, configs = exploit(states, configs, parent)
    return states, explore(configs, exploited, priors, pbt, k_explore), (rank, parent, exploited)
