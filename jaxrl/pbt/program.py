"""The compiled PBT program: one loop over the population's iterations (`lax.fori_loop`, the number of iterations
traced), each iteration every member's training iteration (vmapped), then, where the iteration is a multiple of
`eval_every`, every member's evaluation, and where it ends a ready block, the exploit/explore step
(`jaxrl.pbt.population.ready_step`), both under `lax.cond`: one copy of each in the program, inside one program with
no host round trip. `make_chunk` runs a given number of iterations from a given population (the chunked runner,
`jaxrl.pbt.runner`, calls the one compiled chunk between checkpoints, whatever each chunk's length);
`make_program` and `make_pbt` run the whole schedule."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.algos import base
from jaxrl.pbt.lineage import Lineage
from jaxrl.pbt.population import (
    EVAL_FITNESS_METRIC,
    PBTConfig,
    block_fitness,
    fitness_source,
    initial_population,
    ready_step,
    validate,
)
from jaxrl.run.compile import EVAL_STREAM, evaluation_scores, no_evaluation

# ---------------------------------------------------------------------------------------------------------
# The program
# ---------------------------------------------------------------------------------------------------------


def eval_stream(key: jax.Array, population: int) -> jax.Array:
    """[P] the members' evaluation keys of `make_pbt(config, pbt)(key)`: `split(fold_in(key, EVAL_STREAM), P)`,
    for `key(seed)` the evaluation stream of `jaxrl train` (`run.compile.eval_keys(seed, P)`), never a training
    key. The evaluation after iteration i plays from `fold_in(keys[m], i)`, whatever member m then holds."""
    return jax.random.split(jax.random.fold_in(key, EVAL_STREAM), population)


def _parts(config, pbt: PBTConfig):
    """(init, span) of the population: `init(c, k)` one member's TrainState; `span(states, configs, keys, fire,
    first, length, capacity, eval_keys)` its iterations from the start of ready block `first`, `length` of them
    (traced, at most the static `capacity`): after each iteration that is a multiple of `eval_every` every member
    is evaluated, and after the b-th ready block of the span the exploit/explore step runs with `keys[b]` (skipped
    where `fire[b]` is False). Returns (states, configs, metrics {name: [capacity, P]}, record), the metrics past
    `length` zero (NaN for the evaluation's) and the record one row per ready block of the capacity (fitness, rank,
    exploited, parent, hyperparameters before and after, evaluation return or None), rows past the span's blocks
    zero."""
    priors = validate(config, pbt)
    algo = base.algorithm_of(config)
    names = list(priors)
    every, episodes, ready = pbt.eval_every, pbt.eval_episodes, pbt.ready

    # as in `base.train`, each member's setup is built from its own (traced) Config, so that nothing a setup
    # might read of a hyperparameter is fixed at the given config's value
    def init(c, k):
        return base.initial_state(c, k, base.make_setup(c, algo), algo)

    # `iterate` and `ready_record` are jitted so that the trace `span` takes of each for the shapes of its buffers
    # is the one its loop reuses (one trace of each, not two)
    @jax.jit
    def iterate(states, configs):
        return jax.vmap(lambda c, s: base.iteration(algo, base.make_setup(c, algo), c, s))(configs, states)

    def evaluate(states, configs, eval_keys, iteration):
        def one(c, s, k):
            return evaluation_scores(algo, c, s, k, iteration, episodes, setup=base.make_setup(c, algo))

        return jax.vmap(one)(configs, states, eval_keys)

    @jax.jit
    def ready_record(states, configs, block, key, fire, evaluated):
        fitness = block_fitness(block, pbt)  # block: {the fitness source: [ready, P]}
        before = {n: getattr(configs, n) for n in names}
        states, configs, (rank, parent, exploited) = ready_step(states, configs, fitness, key, pbt, priors, fire)
        after = {n: getattr(configs, n) for n in names}
        return states, configs, (fitness, rank, exploited, parent, before, after, evaluated)

    def span(states, configs, keys, fire, first, length, capacity: int, eval_keys=None):
        size, blocks = pbt.population, capacity // ready
        start = jnp.asarray(first, jnp.int32) * ready
        shapes = jax.eval_shape(iterate, states, configs)[1]
        source = fitness_source(pbt, shapes)
        metrics = {n: jnp.zeros((capacity, *x.shape), x.dtype) for n, x in shapes.items()}
        blank = no_evaluation((size,)) if every else {}
        metrics |= {n: jnp.full((capacity, size), jnp.nan, jnp.float32) for n in blank}
        window = jnp.full((ready, size), jnp.nan, jnp.float32)  # the fitness source over the current block
        evaluated = blank.get(EVAL_FITNESS_METRIC)
        key, flag = jax.ShapeDtypeStruct((), keys.dtype), jax.ShapeDtypeStruct((), jnp.bool_)
        row = jax.eval_shape(ready_record, states, configs, {source: window}, key, flag, evaluated)[2]
        records = jax.tree.map(lambda x: jnp.zeros((blocks, *x.shape), x.dtype), row)

        def one_iteration(j, carry):
            states, configs, window, metrics, records = carry
            states, out = iterate(states, configs)
            done = start + j + 1  # iterations trained
            if every:
                scored = lambda s: evaluate(s, configs, eval_keys, done)  # noqa: E731
                out |= jax.lax.cond(done % every == 0, scored, lambda s: blank, states)
            metrics = {n: metrics[n].at[j].set(out[n]) for n in metrics}
            window = window.at[j % ready].set(out[source].astype(jnp.float32))
            if not blocks:
                return states, configs, window, metrics, records

            def readied(operand):
                states, configs, records = operand
                b = j // ready
                states, configs, row = ready_record(
                    states, configs, {source: window}, keys[b], fire[b], out.get(EVAL_FITNESS_METRIC)
                )
                return states, configs, jax.tree.map(lambda buf, x: buf.at[b].set(x), records, row)

            operand = (states, configs, records)
            states, configs, records = jax.lax.cond((j + 1) % ready == 0, readied, lambda o: o, operand)
            return states, configs, window, metrics, records

        carry = (states, configs, window, metrics, records)
        states, configs, _, metrics, records = jax.lax.fori_loop(0, length, one_iteration, carry)
        return states, configs, metrics, records

    return init, span


def fire_schedule(config, pbt: PBTConfig) -> jax.Array:
    """[blocks] whether each block's exploit/explore step fires: all but a step after the run's last iteration."""
    blocks = config.num_iterations // pbt.ready
    return (jnp.arange(1, blocks + 1) * pbt.ready) < config.num_iterations


def _lineage(steps, record) -> Lineage:
    fitness, rank, exploited, parent, before, after, evaluated = record
    return Lineage(steps, fitness, rank, exploited, parent, before, after, evaluated)


def make_program(config, pbt: PBTConfig):
    """Validates and returns the pure `program(configs, member_keys, key, eval_keys=None) -> (states, metrics,
    lineage)` of a given population: `configs` stacked [P] (`initial_population`), member i initialised from
    `member_keys[i]` exactly as `base.train(configs[i], member_keys[i])` is, `key` the exploit/explore draws,
    `eval_keys` [P] the members' evaluation keys with `eval_every` (None: `eval_stream(key, P)`). States leaves
    [P, ...], metrics {name: [P, num_iterations]} as `jax.vmap(base.train)` returns them (with `eval_every`, and
    the evaluation's)."""
    init, span = _parts(config, pbt)
    ready, num_iterations = pbt.ready, config.num_iterations

    def program(configs, member_keys, key, eval_keys=None):
        if pbt.eval_every and eval_keys is None:
            eval_keys = eval_stream(key, pbt.population)
        states = jax.vmap(init)(configs, member_keys)
        keys = jax.random.split(key, num_iterations // ready)
        fire = fire_schedule(config, pbt)
        states, _, metrics, record = span(states, configs, keys, fire, 0, num_iterations, num_iterations, eval_keys)
        lineage = _lineage(jnp.arange(1, keys.shape[0] + 1) * ready, record)
        return states, jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), metrics), lineage

    return program


def make_start(config, pbt: PBTConfig):
    """The pure `start(key) -> (states, configs)`: the population of `make_pbt(config, pbt)(key)` before its
    first iteration (the same splits of `key`)."""
    init, _ = _parts(config, pbt)

    def start(key):
        k_population, k_members, _ = jax.random.split(key, 3)
        configs = initial_population(config, pbt, k_population)
        return jax.vmap(init)(configs, jax.random.split(k_members, pbt.population)), configs

    return start


def step_keys(config, pbt: PBTConfig, key: jax.Array) -> jax.Array:
    """[blocks] the exploit/explore keys of `make_pbt(config, pbt)(key)`, one per ready block."""
    return jax.random.split(jax.random.split(key, 3)[2], config.num_iterations // pbt.ready)


def make_chunk(config, pbt: PBTConfig, capacity: int):
    """The pure `chunk(states, configs, keys, fire, first, length, eval_keys=None) -> (states, configs, metrics,
    lineage)`: `length` iterations (traced, at most `capacity`) of a population (leaves [P, ...]) from the start
    of ready block `first`, the exploit/explore step after each whole block b of them with `keys[b]` and `fire[b]`
    (`capacity // ready` of each, from `step_keys` and `fire_schedule`); with `eval_every`, `eval_keys` [P] are the
    members' (`eval_stream` of the run's key). Metrics {name: [P, capacity]} and the lineage's `capacity // ready`
    rows, of which the first `length` iterations and `length // ready` rows are the chunk's. One compiled chunk
    runs chunks of every length; chunks one after the other run the schedule of `make_program`."""
    _, span = _parts(config, pbt)
    ready = pbt.ready

    def chunk(states, configs, keys, fire, first, length, eval_keys=None):
        states, configs, metrics, record = span(states, configs, keys, fire, first, length, capacity, eval_keys)
        lineage = _lineage((first + jnp.arange(1, capacity // ready + 1)) * ready, record)
        return states, configs, jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), metrics), lineage

    return chunk


def make_pbt(config, pbt: PBTConfig):
    """Validates (one-line ValueErrors, before compiling) and returns the pure `run(key) -> (states, metrics,
    lineage)`, ready to jit: the population drawn from the priors (`initial_population`), trained with
    exploit/explore every `pbt.ready` iterations, each member evaluated every `pbt.eval_every` iterations on
    `eval_stream(key, P)`. States leaves [P, ...] (the final population), metrics {name: [P, num_iterations]},
    lineage a `Lineage`."""
    priors = validate(config, pbt)
    program = make_program(config, pbt)

    def run(key):
        k_population, k_members, k_pbt = jax.random.split(key, 3)
        configs = initial_population(config, pbt, k_population, priors)
        members = jax.random.split(k_members, pbt.population)
        return program(configs, members, k_pbt, eval_stream(key, pbt.population) if pbt.eval_every else None)

    return run
