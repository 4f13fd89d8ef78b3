"""The compiled PBT program: `lax.scan` over ready blocks, each a `lax.scan` of `ready` vmapped iterations of the
population (with `eval_every`, in pieces of `eval_every` iterations each followed by every member's evaluation)
followed by the exploit/explore step (`jaxrl.pbt.population.ready_step`), inside one program with no host round
trip. `make_chunk` runs a given number of blocks from a given population (the chunked runner,
`jaxrl.pbt.runner`, calls it between checkpoints); `make_program` and `make_pbt` run the whole schedule."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxrl.algos import base
from jaxrl.pbt.lineage import Lineage
from jaxrl.pbt.population import EVAL_FITNESS_METRIC, PBTConfig, block_fitness, initial_population, ready_step, validate
from jaxrl.run.compile import EVAL_METRICS, EVAL_STREAM, evaluation_scores

# ---------------------------------------------------------------------------------------------------------
# The program
# ---------------------------------------------------------------------------------------------------------


def eval_stream(key: jax.Array, population: int) -> jax.Array:
    """[P] the members' evaluation keys of `make_pbt(config, pbt)(key)`: `split(fold_in(key, EVAL_STREAM), P)`,
    for `key(seed)` the evaluation stream of `jaxrl train` (`run.compile.eval_keys(seed, P)`), never a training
    key. The evaluation after iteration i plays from `fold_in(keys[m], i)`, whatever member m then holds."""
    return jax.random.split(jax.random.fold_in(key, EVAL_STREAM), population)


def _parts(config, pbt: PBTConfig):
    """(init, iterations, block_of) of the population: `init(c, k)` one member's TrainState; `iterations(states,
    configs, length, start, eval_keys)` `length` vmapped iterations from iteration `start` (a multiple of
    `eval_every`, or of ready where `eval_every` is a multiple of ready), each member evaluated after every
    iteration that is a multiple of `eval_every`; `block_of(eval_keys)` the scan body
    `block(carry, (step_key, fire, index))`: ready block `index`'s iterations then the exploit/explore step
    (skipped where `fire` is False), its record (fitness, rank, exploited, parent, hyperparameters before and
    after, evaluation return or None)."""
    priors = validate(config, pbt)
    algo = base.algorithm_of(config)
    names = list(priors)
    every, episodes = pbt.eval_every, pbt.eval_episodes

    # as in `base.train`, each member's setup is built from its own (traced) Config, so that nothing a setup
    # might read of a hyperparameter is fixed at the given config's value
    def init(c, k):
        return base.initial_state(c, k, base.make_setup(c, algo), algo)

    def iterate(c, s):
        return base.iteration(algo, base.make_setup(c, algo), c, s)

    def plain(states, configs, length):
        # the configs are constants of the loop (not carried), as in `base.train`
        def body(states, _):
            return jax.vmap(iterate)(configs, states)

        return jax.lax.scan(body, states, None, length=length)

    def evaluate_members(states, configs, eval_keys, iteration):
        def one(c, s, k):
            return evaluation_scores(algo, c, s, k, iteration, episodes, setup=base.make_setup(c, algo))

        return jax.vmap(one)(configs, states, eval_keys)

    def iterations(states, configs, length, start=0, eval_keys=None):
        if not every:
            return plain(states, configs, length)
        size = eval_keys.shape[0]
        if every > pbt.ready:  # a multiple of ready: the last iteration is evaluated where it is a multiple of every
            states, trained = plain(states, configs, length)
            end = start + length

            def evaluated(states):
                scores = evaluate_members(states, configs, eval_keys, end)
                return {n: scores[n].astype(jnp.float32) for n in EVAL_METRICS}

            def blank(states):
                return {n: jnp.full((size,), jnp.nan, jnp.float32) for n in EVAL_METRICS}

            last = jax.lax.cond(end % every == 0, evaluated, blank, states)
            nans = jnp.full((length - 1, size), jnp.nan, jnp.float32)
            return states, {**trained, **{n: jnp.concatenate([nans, last[n][None]]) for n in EVAL_METRICS}}
        pieces, rest = divmod(length, every)
        metrics, scores = [], []
        if pieces:

            def piece(states, j):
                states, metrics = plain(states, configs, every)
                return states, (metrics, evaluate_members(states, configs, eval_keys, start + (j + 1) * every))

            states, (trained, evaluated) = jax.lax.scan(piece, states, jnp.arange(pieces, dtype=jnp.int32))
            metrics.append(jax.tree.map(lambda x: x.reshape((pieces * every,) + x.shape[2:]), trained))
            # each evaluation at the last iteration of its piece, NaN at the others
            blank = jnp.full((pieces, every, size), jnp.nan, jnp.float32)
            scores.append({n: blank.at[:, -1].set(evaluated[n]).reshape(pieces * every, size) for n in EVAL_METRICS})
        if rest:
            states, trained = plain(states, configs, rest)
            metrics.append(trained)
            scores.append({n: jnp.full((rest, size), jnp.nan, jnp.float32) for n in EVAL_METRICS})
        joined = jax.tree.map(lambda *xs: jnp.concatenate(xs), *metrics) if len(metrics) > 1 else metrics[0]
        evaluations = jax.tree.map(lambda *xs: jnp.concatenate(xs), *scores) if len(scores) > 1 else scores[0]
        return states, {**joined, **evaluations}

    def block_of(eval_keys):
        def block(carry, xs):
            step_key, fire, index = xs
            states, configs = carry
            states, metrics = iterations(states, configs, pbt.ready, index * pbt.ready, eval_keys)
            # the block's last iteration: evaluated where eval_every divides ready, else NaN between evaluations
            evaluated = metrics[EVAL_FITNESS_METRIC][-1] if every else None
            fitness = block_fitness(metrics, pbt)
            before = {n: getattr(configs, n) for n in names}
            states, configs, (rank, parent, exploited) = ready_step(
                states, configs, fitness, step_key, pbt, priors, fire
            )
            after = {n: getattr(configs, n) for n in names}
            return (states, configs), (metrics, (fitness, rank, exploited, parent, before, after, evaluated))

        return block

    return init, iterations, block_of


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
    init, iterations, block_of = _parts(config, pbt)
    ready, num_iterations = pbt.ready, config.num_iterations
    blocks, remainder = divmod(num_iterations, ready)

    def program(configs, member_keys, key, eval_keys=None):
        if pbt.eval_every and eval_keys is None:
            eval_keys = eval_stream(key, pbt.population)
        states = jax.vmap(init)(configs, member_keys)
        xs = (jax.random.split(key, blocks), fire_schedule(config, pbt), jnp.arange(blocks, dtype=jnp.int32))
        carry, (metrics, record) = jax.lax.scan(block_of(eval_keys), (states, configs), xs)
        metrics = jax.tree.map(lambda x: x.reshape((blocks * ready,) + x.shape[2:]), metrics)
        if remainder:
            states, rest = iterations(*carry, remainder, blocks * ready, eval_keys)
            carry = (states, carry[1])
            metrics = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), metrics, rest)
        lineage = _lineage(jnp.arange(1, blocks + 1) * ready, record)
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
    """The pure `chunk(states, configs, keys, fire, first, eval_keys=None) -> (states, configs, metrics,
    lineage)`: the ready blocks `first, first + 1, ...` (one per entry of `keys` [n] and `fire` [n], from
    `step_keys` and `fire_schedule`) of a population (leaves [P, ...]), then `tail` more iterations without a
    ready step (the run's iterations past its last whole block); with `eval_every`, `eval_keys` [P] are the
    members' (`eval_stream` of the run's key). Metrics {name: [P, n * ready + tail]}, lineage the n steps'.
    Chunks one after the other run the schedule of `make_program`."""
    _, iterations, block_of = _parts(config, pbt)
    ready = pbt.ready

    def chunk(states, configs, keys, fire, first, eval_keys=None):
        n = keys.shape[0]
        xs = (keys, fire, first + jnp.arange(n, dtype=jnp.int32))
        (states, configs), (metrics, record) = jax.lax.scan(block_of(eval_keys), (states, configs), xs)
        metrics = jax.tree.map(lambda x: x.reshape((n * ready,) + x.shape[2:]), metrics)
        if tail:
            states, rest = iterations(states, configs, tail, (first + n) * ready, eval_keys)
            metrics = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), metrics, rest)
        lineage = _lineage((first + jnp.arange(1, n + 1)) * ready, record)
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
