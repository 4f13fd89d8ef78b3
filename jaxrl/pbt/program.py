"""The compiled PBT program: `lax.scan` over ready blocks, each a `lax.scan` of `ready` vmapped iterations of the
population followed by the exploit/explore step (`jaxrl.pbt.population.ready_step`), inside one program with no
host round trip. `make_chunk` runs a given number of blocks from a given population (the chunked runner,
`jaxrl.pbt.runner`, calls it between checkpoints); `make_program` and `make_pbt` run the whole schedule."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.algos import base
from jaxrl.pbt.lineage import Lineage
from jaxrl.pbt.population import FITNESS_METRIC, PBTConfig, fitness_of, initial_population, ready_step, validate

# ---------------------------------------------------------------------------------------------------------
# The program
# ---------------------------------------------------------------------------------------------------------


def _parts(config, pbt: PBTConfig):
    """(init, iterations, block) of the population: `init(c, k)` one member's TrainState; `iterations(states,
    configs, length)` `length` vmapped iterations; `block(carry, (step_key, fire))` `ready` iterations then the
    exploit/explore step (skipped where `fire` is False), its record (fitness, rank, exploited, parent,
    hyperparameters before and after)."""
    priors = validate(config, pbt)
    algo = base.algorithm_of(config)
    names = list(priors)

    # as in `base.train`, each member's setup is built from its own (traced) Config, so that nothing a setup
    # might read of a hyperparameter is fixed at the given config's value
    def init(c, k):
        return base.initial_state(c, k, base.make_setup(c, algo), algo)

    def iterate(c, s):
        return base.iteration(algo, base.make_setup(c, algo), c, s)

    def iterations(states, configs, length):
        # the configs are constants of the loop (not carried), as in `base.train`
        def body(states, _):
            return jax.vmap(iterate)(configs, states)

        return jax.lax.scan(body, states, None, length=length)

    def block(carry, xs):
        step_key, fire = xs
        states, configs = carry
        states, metrics = iterations(states, configs, pbt.ready)
        if FITNESS_METRIC not in metrics:
            raise ValueError(f"PBT ranks members by the {FITNESS_METRIC!r} metric, which this algorithm lacks.")
        fitness = fitness_of(metrics[FITNESS_METRIC], pbt.window)
        before = {n: getattr(configs, n) for n in names}
        states, configs, (rank, parent, exploited) = ready_step(states, configs, fitness, step_key, pbt, priors, fire)
        record = (fitness, rank, exploited, parent, before, {n: getattr(configs, n) for n in names})
        return (states, configs), (metrics, record)

    return init, iterations, block


def fire_schedule(config, pbt: PBTConfig) -> jax.Array:
    """[blocks] whether each block's exploit/explore step fires: all but a step after the run's last iteration."""
    blocks = config.num_iterations // pbt.ready
    return (jnp.arange(1, blocks + 1) * pbt.ready) < config.num_iterations


def make_program(config, pbt: PBTConfig):
    """Validates and returns the pure `program(configs, member_keys, key) -> (states, metrics, lineage)` of a
    given population: `configs` stacked [P] (`initial_population`), member i initialised from
    `member_keys[i]` exactly as `base.train(configs[i], member_keys[i])` is, `key` the exploit/explore draws.
    States leaves [P, ...], metrics {name: [P, num_iterations]} as `jax.vmap(base.train)` returns them."""
    init, iterations, block = _parts(config, pbt)
    ready, num_iterations = pbt.ready, config.num_iterations
    blocks, remainder = divmod(num_iterations, ready)

    def program(configs, member_keys, key):
        states = jax.vmap(init)(configs, member_keys)
        fire = fire_schedule(config, pbt)
        carry, (metrics, record) = jax.lax.scan(block, (states, configs), (jax.random.split(key, blocks), fire))
        metrics = jax.tree.map(lambda x: x.reshape((blocks * ready,) + x.shape[2:]), metrics)
        if remainder:
            states, rest = iterations(*carry, remainder)
            carry = (states, carry[1])
            metrics = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), metrics, rest)
        fitness, rank, exploited, parent, before, after = record
        lineage = Lineage(jnp.arange(1, blocks + 1) * ready, fitness, rank, exploited, parent, before, after)
        return carry[0], jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), metrics), lineage

    return program


def make_start(config, pbt: PBTConfig):
    """The pure `start(key) -> (states, configs)`: the population of `make_pbt(config, pbt)(key)` before its
    first iteration (the same splits of `key`)."""
    init, _, _ = _parts(config, pbt)

    def start(key):
        k_population, k_members, _ = jax.random.split(key, 3)
        configs = initial_population(config, pbt, k_population)
        return jax.vmap(init)(configs, jax.random.split(k_members, pbt.population)), configs

    return start


def step_keys(config, pbt: PBTConfig, key: jax.Array) -> jax.Array:
    """[blocks] the exploit/explore keys of `make_pbt(config, pbt)(key)`, one per ready block."""
    return jax.random.split(jax.random.split(key, 3)[2], config.num_iterations // pbt.ready)


def make_chunk(config, pbt: PBTConfig, tail: int = 0):
    """The pure `chunk(states, configs, keys, fire, first) -> (states, configs, metrics, lineage)`: the ready
    blocks `first, first + 1, ...` (one per entry of `keys` [n] and `fire` [n], from `step_keys` and
    `fire_schedule`) of a population (leaves [P, ...]), then `tail` more iterations without a ready step (the
    run's iterations past its last whole block). Metrics {name: [P, n * ready + tail]}, lineage the n steps'.
    Chunks one after the other run the schedule of `make_program`."""
    _, iterations, block = _parts(config, pbt)
    ready = pbt.ready

    def chunk(states, configs, keys, fire, first):
        n = keys.shape[0]
        (states, configs), (metrics, record) = jax.lax.scan(block, (states, configs), (keys, fire))
        metrics = jax.tree.map(lambda x: x.reshape((n * ready,) + x.shape[2:]), metrics)
        if tail:
            states, rest = iterations(states, configs, tail)
            metrics = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), metrics, rest)
        fitness, rank, exploited, parent, before, after = record
        steps = (first + jnp.arange(1, n + 1)) * ready
        lineage = Lineage(steps, fitness, rank, exploited, parent, before, after)
        return states, configs, jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), metrics), lineage

    return chunk


def make_pbt(config, pbt: PBTConfig):
    """Validates (one-line ValueErrors, before compiling) and returns the pure `run(key) -> (states, metrics,
    lineage)`, ready to jit: the population drawn from the priors (`initial_population`), trained with
    exploit/explore every `pbt.ready` iterations. States leaves [P, ...] (the final population), metrics
    {name: [P, num_iterations]}, lineage a `Lineage`."""
    priors = validate(config, pbt)
    program = make_program(config, pbt)

    def run(key):
        k_population, k_members, k_pbt = jax.random.split(key, 3)
        configs = initial_population(config, pbt, k_population, priors)
        return program(configs, jax.random.split(k_members, pbt.population), k_pbt)

    return run
