"""The runner's compiled programs: the vmapped init, the chunk (`length` iterations of `algo.update` in a
`lax.scan`, optionally followed by a deterministic evaluation), the chunk plan, and compiling them side by side.

Evaluation keys come from their own stream, `eval_keys(seed, seeds)` folded with the iteration count, never
from the training keys, so evaluating changes no training number. The evaluation's results are the metrics
`eval_return` and `eval_length` (means over the episodes that ended within the env's time limit) and
`eval_finished` (the fraction that did).
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxrl import envs, parallel
from jaxrl.algos import base
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


def make_init(algo: Algorithm, config, mesh: Mesh | None = None):
    """The jitted init of every seed: keys [S] -> TrainState stacked over seeds. With a `mesh` of D devices
    (data parallelism, `jaxrl.parallel`): each device inits the per-device Config, and the state is
    device-stacked, leaves [D, S, ...]."""
    if mesh is None:
        return jax.jit(jax.vmap(lambda k: algo.init(config, k)))
    local = parallel.local_config(config, mesh.size)

    def init(keys):
        return parallel.add_device_axis(jax.vmap(lambda k: algo.init(local, k))(keys))

    in_specs, out_specs = (P(),), P(parallel.AXIS)
    return _jit_sharded(parallel.shard(init, mesh, in_specs=in_specs, out_specs=out_specs), mesh, in_specs, out_specs)


def abstract_state(algo: Algorithm, config, keys, devices: int):
    """`jax.eval_shape` of the runner's initial state on `devices` devices (leaves [D, S, ...], or [S, ...] for
    one), without needing those devices: the data-parallel init is emulated (`parallel.emulate`)."""
    if devices == 1:
        return jax.eval_shape(make_init(algo, config), keys)
    local = parallel.local_config(config, devices)
    init = parallel.emulate(jax.vmap(lambda k: algo.init(local, k)), devices, in_axes=None, out_axes=0)
    return jax.eval_shape(init, keys)


def make_chunk(algo: Algorithm, config, length: int, eval_episodes: int = 0):
    """The per-seed chunk program: `length` iterations of `algo.update` in a `lax.scan`.

    Without evaluation: `chunk(state) -> (state, metrics)`. With `eval_episodes > 0`:
    `chunk(state, eval_key, iteration) -> (state, metrics, {eval_return, eval_length, eval_finished})`, the chunk
    followed by a deterministic evaluation of the new state on `eval_episodes` episodes keyed by
    `fold_in(eval_key, iteration)`; `eval_return` is NaN when no episode ended within the env's time limit.
    """

    def chunk(state):
        return jax.lax.scan(lambda s, _: base.iteration(algo, config, s), state, None, length=length)

    if not eval_episodes:
        return chunk

    def chunk_and_evaluate(state, eval_key, iteration):
        state, metrics = chunk(state)
        with parallel.suspended():  # every device plays the same evaluation episodes with its (equal) parameters
            act, normalize = algo.evaluation_policy(config, state, deterministic=True)
            key = jax.random.fold_in(eval_key, iteration)
            out = evaluate(config.env, act, key, eval_episodes, normalize=normalize)
        finished = out["finished"] > 0
        scores = {
            "eval_return": jnp.where(finished, out["mean_return"], jnp.nan),
            "eval_length": out["mean_length"],
            "eval_finished": out["finished"] / eval_episodes,
        }
        return state, metrics, scores

    return chunk_and_evaluate


def make_chunk_program(algo: Algorithm, config, size: int, eval_episodes: int = 0, mesh: Mesh | None = None):
    """The jitted chunk over every seed (vmapped `make_chunk`); with a `mesh`, over a device-stacked state
    [D, S, ...] (each device runs the per-device Config; metrics and evaluation scores come back replicated)."""
    in_axes = (0, 0, None) if eval_episodes else 0
    if mesh is None:
        return jax.jit(jax.vmap(make_chunk(algo, config, size, eval_episodes), in_axes=in_axes))
    chunk = jax.vmap(make_chunk(algo, parallel.local_config(config, mesh.size), size, eval_episodes), in_axes=in_axes)
    stacked, replicated = P(parallel.AXIS), P()

    def program(state, *args):
        out = chunk(parallel.drop_device_axis(state), *args)
        return (parallel.add_device_axis(out[0]), *out[1:])

    in_specs = (stacked, replicated, replicated) if eval_episodes else (stacked,)
    out_specs = (stacked, replicated, replicated) if eval_episodes else (stacked, replicated)
    sharded = parallel.shard(program, mesh, in_specs=in_specs, out_specs=out_specs)
    return _jit_sharded(sharded, mesh, in_specs, out_specs)


def _jit_sharded(fn, mesh: Mesh, in_specs, out_specs):
    """`jax.jit` of a shard_map with its inputs and outputs placed as its specs say (so that a program compiled
    ahead of time takes the device-stacked state as the runner holds it)."""

    def named(specs):
        return jax.tree.map(lambda s: NamedSharding(mesh, s), specs, is_leaf=lambda s: isinstance(s, P))

    return jax.jit(fn, in_shardings=named(in_specs), out_shardings=named(out_specs))


def compile_programs(
    algo: Algorithm, config, init, keys, abstract_state, plan, eval_episodes: int, keys_eval, mesh=None
):
    """Compiles one vmapped chunk program per distinct (size, evaluated) of `plan` (over `mesh` when given),
    and runs `init` on `keys` unless `init` is None (a resume). XLA compiles outside the GIL, so the programs
    compile side by side on separate cores. Returns (initial state or None, {(size, evaluated): compiled chunk})."""
    iteration_arg = jax.ShapeDtypeStruct((), np.int32)

    def lower(size, with_eval):
        if with_eval:
            program = make_chunk_program(algo, config, size, eval_episodes, mesh)
            return program.lower(abstract_state, keys_eval, iteration_arg).compile()
        return make_chunk_program(algo, config, size, mesh=mesh).lower(abstract_state).compile()

    programs = set(plan)
    pool = ThreadPoolExecutor(max_workers=1 + len(programs))
    try:
        init_future = None if init is None else pool.submit(lambda: init.lower(keys).compile())
        futures = {p: pool.submit(lower, *p) for p in programs}
        compiled = {p: future.result() for p, future in futures.items()}
        state = None if init_future is None else init_future.result()(keys)
    except BaseException:  # Ctrl-C or a compile error: do not wait for the other compiles to finish
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return state, compiled


def estimate_memory(config, seeds: int = 1) -> int:
    """A rough lower bound, in bytes, of the memory a run needs for its data alone (not the networks, the
    optimiser or XLA's temporaries): per seed, the environment states of the env batch, the rollout
    (num_steps x num_envs steps of two observations and ~8 float32 scalars plus the action) and, for replay
    learners, the buffer (buffer_size transitions of the same size). Computed with `jax.eval_shape` of one env
    reset: nothing is allocated."""
    env = envs.make(config.env, 1)
    _, env_state = jax.eval_shape(env.reset, jax.random.key(0))
    state_bytes = sum(math.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(env_state))
    obs_bytes = 4 * math.prod(env.spec.observation_shape)
    step_bytes = 2 * obs_bytes + 4 * (8 + (1 if env.spec.discrete else env.spec.action_dim))
    per_seed = config.num_envs * (state_bytes + obs_bytes + config.num_steps * step_bytes)
    per_seed += getattr(config, "buffer_size", 0) * step_bytes
    return int(seeds * per_seed)


def device_memory() -> tuple[int | None, str]:
    """(bytes, description) of the memory of the default device: the accelerator's `bytes_limit`, or the
    host's physical memory for the CPU backend (None when unknown)."""
    device = jax.local_devices()[0]
    stats = device.memory_stats() or {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"]), f"{device.platform}:{device.id}"
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "this machine (CPU)"
    except (ValueError, OSError, AttributeError):
        return None, "this machine"


def check_memory(config, seeds: int = 1, what: str = "") -> None:
    """Raises ValueError when `estimate_memory(config, seeds)` exceeds the device's memory (`device_memory`)."""
    need = estimate_memory(config, seeds)
    have, where = device_memory()
    if have is not None and need > have:
        raise ValueError(
            f"Config.num_envs: {config.num_envs} environments x {config.num_steps} steps x {seeds} seed(s){what} "
            f"need at least {need / 2**30:.1f} GiB for the environment states and the rollout alone, more than the "
            f"{have / 2**30:.1f} GiB of {where}; use fewer environments, steps or seeds."
        )
