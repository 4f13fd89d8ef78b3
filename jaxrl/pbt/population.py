"""The population and its exploit/explore step: the priors of the explored hyperparameters, validation against a
Config (one-line errors before anything compiles; `PBTConfig` and the checks that need no JAX are
`jaxrl.pbt_settings`), the initial population, ranking, truncation selection, exploit and
explore (Jaderberg et al. 2017, "Population Based Training of Neural Networks", arXiv 1711.09846). Pure and
traceable: the compiled program (`jaxrl.pbt.program`) calls `ready_step` every `ready` iterations."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import envs, pbt_settings
from jaxrl.algos import base
from jaxrl.pbt_settings import FITNESS, KINDS, PBTConfig  # noqa: F401 (re-exported by jaxrl.pbt)
from jaxrl.sweep.space import leaf_dtype

FITNESS_METRIC = "episode_return"
EVAL_FITNESS_METRIC = "eval_return"
# TrainState fields a member keeps through an exploit: its own environment batch, the recurrent memory of that
# batch (hidden states and episode starts of its own episodes) and its own key
OWN_FIELDS = ("env", "env_state", "memory", "key")
# ...except the running statistics of observation and reward normalisation inside them, which the copied
# parameters were trained against: those follow the parent
FOLLOW_PARENT = tuple(t for t in (getattr(envs, "RunningMeanStd", None),) if t is not None)


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
    return Prior(*pbt_settings.parse_prior(name, spec))


def _hyper_fields(config) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(config) if not base.is_static(f)}


def validate(config, pbt: PBTConfig) -> dict[str, Prior]:
    """Checks `pbt` against `config` (and `config` itself); returns the parsed priors. Each problem is a
    one-line ValueError naming the field (`jaxrl.pbt_settings`)."""
    base.algorithm_of(config).validate(config)
    pbt_settings.check_settings(pbt, config.num_iterations)
    hypers = list(_hyper_fields(config))
    values = {name: getattr(config, name) for name in hypers}
    fields = [f.name for f in dataclasses.fields(config)]
    specs = pbt_settings.check_explore(pbt.explore, fields, hypers, type(config).__qualname__, values)
    return {name: Prior(*spec) for name, spec in specs.items()}


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


def fitness_source(pbt: PBTConfig, names) -> str:
    """The metric the ready steps rank by: `eval_return` with `fitness` "eval", else `episode_return`, which must
    be one of the algorithm's metric `names` (a one-line ValueError otherwise)."""
    if pbt.fitness == "eval":
        return EVAL_FITNESS_METRIC
    if FITNESS_METRIC not in names:
        raise ValueError(f"PBT ranks members by the {FITNESS_METRIC!r} metric, which this algorithm lacks.")
    return FITNESS_METRIC


def block_fitness(metrics: Mapping[str, jax.Array], pbt: PBTConfig) -> jax.Array:
    """[P] the fitness ranking the members at a ready step, from the metrics {name: [ready, P]} of the block it
    ends: `fitness` "return", the mean `episode_return` over the last `fitness_window` iterations
    (`fitness_of`); "eval", the `eval_return` of its last iteration (evaluated: eval_every divides ready)."""
    source = fitness_source(pbt, metrics)
    return metrics[source][-1] if source == EVAL_FITNESS_METRIC else fitness_of(metrics[source], pbt.window)


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
