"""The runner's compiled programs: the vmapped init, the chunk (`length` iterations of `algo.update` in a
`lax.scan`, optionally followed by a deterministic evaluation), the chunk plan, and compiling them side by side.

Evaluation keys come from their own stream, `eval_keys(seed, seeds)` folded with the iteration count, never
from the training keys, so evaluating changes no training number. The evaluation's results are the metrics
`eval_return` and `eval_length` (means over the episodes that ended within the env's time limit) and
`eval_finished` (the fraction that did).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.algos.base import Algorithm
from jaxrl.run.evaluate import evaluate

EVAL_STREAM = 0x6576616C  # "eval": folded into the base key for the evaluation key stream
EVAL_METRICS = ("eval_return", "eval_length", "eval_finished")


def chunk_sizes(num_iterations: int, num_chunks: int) -> list[int]:
    """Splits the iterations into about `num_chunks` equal chunks (one compile); when no divisor of
    `num_iterations` gives between half and twice `num_chunks` chunks, into chunks of two sizes (two compiles).
    """
    num_chunks = max(1, min(num_chunks, num_iterations))
    divisors = [
        d
        for d in range(1, num_iterations + 1)
        if num_iterations % d == 0 and num_chunks / 2 <= num_iterations // d <= 2 * num_chunks
    ]
    if divisors:
        size = min(divisors, key=lambda d: abs(num_iterations // d - num_chunks))
        return [size] * (num_iterations // size)
    size = -(-num_iterations // num_chunks)
    full, last = divmod(num_iterations, size)
    return [size] * full + ([last] if last else [])


def chunk_plan(remaining: int, num_chunks: int, eval_every: int) -> list[tuple[int, bool]]:
    """(size, evaluated) of each chunk of the `remaining` iterations: every `eval_every`-th chunk and the last
    end with an evaluation (none with eval_every=0)."""
    sizes = chunk_sizes(remaining, num_chunks) if remaining > 0 else []
    last = len(sizes) - 1
    return [(size, bool(eval_every) and ((i + 1) % eval_every == 0 or i == last)) for i, size in enumerate(sizes)]


def eval_keys(seed: int, seeds: int) -> jax.Array:
    """[seeds] keys of the evaluation stream: `split(fold_in(key(seed), EVAL_STREAM), seeds)`, disjoint from
    the training keys `split(key(seed), seeds)`. Evaluation after iteration i uses `fold_in(key, i)`."""
    return jax.random.split(jax.random.fold_in(jax.random.key(seed), EVAL_STREAM), seeds)


def make_init(algo: Algorithm, config):
    """The jitted init of every seed: keys [S] -> TrainState stacked over seeds."""
    return jax.jit(jax.vmap(lambda k: algo.init(config, k)))


def make_chunk(algo: Algorithm, config, length: int, eval_episodes: int = 0):
    """The per-seed chunk program: `length` iterations of `algo.update` in a `lax.scan`.

    Without evaluation: `chunk(state) -> (state, metrics)`. With `eval_episodes > 0`:
    `chunk(state, eval_key, iteration) -> (state, metrics, {eval_return, eval_length, eval_finished})`, the chunk
    followed by a deterministic evaluation of the new state on `eval_episodes` episodes keyed by
    `fold_in(eval_key, iteration)`; `eval_return` is NaN when no episode ended within the env's time limit.
    """

    def chunk(state):
        return jax.lax.scan(lambda s, _: algo.update(config, s), state, None, length=length)

    if not eval_episodes:
        return chunk

    def chunk_and_evaluate(state, eval_key, iteration):
        state, metrics = chunk(state)
        act, normalize = algo.evaluation_policy(config, state, deterministic=True)
        out = evaluate(config.env, act, jax.random.fold_in(eval_key, iteration), eval_episodes, normalize=normalize)
        finished = out["finished"] > 0
        scores = {
            "eval_return": jnp.where(finished, out["mean_return"], jnp.nan),
            "eval_length": out["mean_length"],
            "eval_finished": out["finished"] / eval_episodes,
        }
        return state, metrics, scores

    return chunk_and_evaluate


def compile_programs(algo: Algorithm, config, init, keys, abstract_state, plan, eval_episodes: int, keys_eval):
    """Compiles one vmapped chunk program per distinct (size, evaluated) of `plan`, and runs `init` on `keys`
    unless `init` is None (a resume). XLA compiles outside the GIL, so the programs compile side by side on
    separate cores. Returns (initial state or None, {(size, evaluated): compiled chunk})."""
    iteration_arg = jax.ShapeDtypeStruct((), np.int32)

    def lower(size, with_eval):
        if with_eval:
            program = jax.jit(jax.vmap(make_chunk(algo, config, size, eval_episodes), in_axes=(0, 0, None)))
            return program.lower(abstract_state, keys_eval, iteration_arg).compile()
        return jax.jit(jax.vmap(make_chunk(algo, config, size))).lower(abstract_state).compile()

    programs = set(plan)
    with ThreadPoolExecutor(max_workers=1 + len(programs)) as pool:
        init_future = None if init is None else pool.submit(lambda: init.lower(keys).compile())
        futures = {p: pool.submit(lower, *p) for p in programs}
        compiled = {p: future.result() for p, future in futures.items()}
        state = None if init_future is None else init_future.result()(keys)
    return state, compiled
