"""The runner's compiled programs: the vmapped init, the chunk (`length` iterations of `algo.update` in a
`lax.fori_loop`, `length` an argument, optionally followed by a deterministic evaluation under `lax.cond`, so that
every chunk of a run, whatever its size and with or without an evaluation, is one compiled program), the chunk
plan, compiling the init and the chunk side by side, and JAX's persistent compilation cache
(`enable_compilation_cache`).

The seeds of a run are one batch axis, laid out one of three ways: on one device; over a `seeds_mesh`, each
device training whole seeds (the seed axis sharded; the seeds never talk to each other, so nothing crosses
devices); or over a data-parallel `mesh`, each seed's one policy trained over every device (`jaxrl.parallel`).

A chunk program consumes the state it is given: the state is donated to it (`donate_argnums`), so XLA writes
the new state into the old one's buffers. A run then holds one training state, not two, and does not copy it
(replay buffer included) at the start of every chunk; the old state's arrays are deleted once the chunk is
called.

Evaluation keys come from their own stream, `eval_keys(seed, seeds)` folded with the iteration count, never
from the training keys, so evaluating changes no training number. The evaluation's results are the metrics
`eval_return` and `eval_length` (means over the episodes that ended within the env's time limit) and
`eval_finished` (the fraction that did).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxrl import envs, parallel
from jaxrl.algos import base
from jaxrl.algos.base import Algorithm
from jaxrl.episodes import evaluate

EVAL_STREAM = 0x6576616C  # "eval": folded into the base key for the evaluation key stream
EVAL_METRICS = ("eval_return", "eval_length", "eval_finished")
SEED_AXIS = "seeds"  # the axis of a seeds mesh


# XLA's algebraic simplifier rewrites the program differently for one device and for a module partitioned over
# several (e.g. optax's clip `t / g_norm` becomes `t * (1 / g_norm)` on one device only), which rounds the numbers
# differently by device count; without it a sweep's rows, and a run's seeds split over devices, are bit-identical
# on any device count (measured: PPO, 4 rows x 30 iterations, 1 vs 2 CPU devices; PPO's defaults, 4 seeds,
# seed_devices 1 vs 2), at some speed
DEVICE_INDEPENDENT_OPTIONS = {"xla_disable_hlo_passes": "algsimp"}

# XLA's optimisation level 2 instead of its default 3 for CPU code: programs as fast, in 0.76-0.92x the compile
# seconds (PureJaxRL's PPO and DQN configs, 8 vmapped seeds, SAC, MinAtar's CNN; benchmarks/results/notes/
# one_device_limits.md), whose numbers differ from level 3's in the last bits (the golden cases are recorded at it)
CPU_COMPILE_OPTIONS = {"xla_backend_optimization_level": 2}

# XLA's CPU code in 512-bit vectors instead of LLVM's preferred 256 bits, on an AMD CPU with AVX-512 (whose cores run
# 512-bit instructions at full clock): PPO at PureJaxRL's CartPole config, alone and over 8 vmapped seeds, ran
# 1.07-1.13x faster on an AMD EPYC family 26, with other last bits; DQN's program there ran as fast, with the same bits;
# both compiled in 0.98-0.99x the seconds of 256-bit code (benchmarks/results/notes/one_device_limits.md). Other CPUs
# keep XLA's default width.
WIDE_VECTOR_OPTIONS = {"xla_cpu_prefer_vector_width": 512}


def cpu_fields(cpuinfo: str) -> dict[str, str]:
    """The first processor's fields ("vendor_id", "flags", "cpu family", ...) of a Linux `/proc/cpuinfo` text."""
    fields = {}
    for line in cpuinfo.split("\n\n", 1)[0].splitlines():
        name, _, value = line.partition(":")
        fields[name.strip()] = value.strip()
    return fields


@functools.cache
def this_cpu() -> dict[str, str]:
    """`cpu_fields` of this machine's /proc/cpuinfo ({} where there is none)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as file:
            return cpu_fields(file.read())
    except OSError:
        return {}


def amd_avx512(fields: dict[str, str]) -> bool:
    """Whether a processor's `cpu_fields` describe an AMD CPU with AVX-512."""
    return fields.get("vendor_id") == "AuthenticAMD" and "avx512f" in fields.get("flags", "").split()


def wide_vectors() -> bool:
    """Whether the runner compiles CPU code with `WIDE_VECTOR_OPTIONS` here: on an AMD CPU with AVX-512."""
    return amd_avx512(this_cpu())


def compiler_options(device_independent: bool = False) -> dict | None:
    """The XLA options jaxrl compiles its programs with: on a CPU backend `CPU_COMPILE_OPTIONS`, or the level XLA_FLAGS
    names when it names one (read at each call), and `WIDE_VECTOR_OPTIONS` where `wide_vectors()` unless XLA_FLAGS
    names a vector width; `DEVICE_INDEPENDENT_OPTIONS` when asked. Pass them to your own compiles as
    `jax.jit(train).lower(key).compile(compiler_options())`."""
    options = {}
    if jax.default_backend() == "cpu":
        flags = os.environ.get("XLA_FLAGS", "")
        named = re.findall(r"--xla_backend_optimization_level=(\d+)", flags)
        options.update({"xla_backend_optimization_level": int(named[-1])} if named else CPU_COMPILE_OPTIONS)
        if wide_vectors() and "--xla_cpu_prefer_vector_width" not in flags:
            options.update(WIDE_VECTOR_OPTIONS)
    if device_independent:
        options.update(DEVICE_INDEPENDENT_OPTIONS)
    return options or None


def seeds_mesh(count: int) -> Mesh:
    """The 1-D mesh of `count` devices over the seed axis, each training whole seeds: the first `count` local
    devices, or over several processes the first `count / processes` devices of each, process by process (so
    process p holds the p-th block of the seeds)."""
    processes = jax.process_count()
    if processes == 1:
        return Mesh(np.array(jax.local_devices()[:count]), (SEED_AXIS,))
    each = count // processes
    devices = [[d for d in jax.devices() if d.process_index == p][:each] for p in range(processes)]
    return Mesh(np.array([d for block in devices for d in block]), (SEED_AXIS,))


def seed_sharding(mesh: Mesh) -> NamedSharding:
    """The seed axis (the leading axis of every leaf of a run's state) split over a seeds mesh."""
    return NamedSharding(mesh, P(SEED_AXIS))


def padded_seeds(seeds: int, devices: int) -> int:
    """The seeds a run of `seeds` trains when split over `devices`: the next multiple of `devices` (each device
    trains as many; the extra ones are copies of seed 0, trained alongside and dropped from every result)."""
    return -(-seeds // devices) * devices


def pad_seeds(tree, count: int):
    """Every leaf of `tree` (seeds on axis 0) with copies of its seed 0 appended up to `count` seeds."""

    def pad(x):
        extra = count - x.shape[0]
        if extra == 0:
            return x
        stack = np if isinstance(x, np.ndarray) else jnp
        return stack.concatenate([x, stack.repeat(x[:1], extra, axis=0)])

    return jax.tree.map(pad, tree)


def _jit_over_seeds(fn, mesh: Mesh, split: int, whole: int = 0, donate: tuple[int, ...] = ()):
    """`jax.jit` of `fn`, a function vmapped over seeds, with its first `split` arguments and every output split
    over `mesh` along the seed axis and its last `whole` arguments on every device: XLA's SPMD partitioner gives
    each device its seeds' share of the program. `donate`: the arguments it consumes (`donate_argnums`)."""
    seeds, every = seed_sharding(mesh), NamedSharding(mesh, P())
    return jax.jit(fn, in_shardings=(seeds,) * split + (every,) * whole, out_shardings=seeds, donate_argnums=donate)


def chunk_sizes(num_iterations: int, num_chunks: int) -> list[int]:
    """Splits the iterations into about `num_chunks` equal chunks; when no divisor of `num_iterations` gives
    between half and twice `num_chunks` chunks, into equal chunks and a shorter last one (the same program).
    O(num_chunks): only the chunk counts between half and twice `num_chunks` are tried (a tie goes to more
    chunks), never every iteration."""
    num_chunks = max(1, min(num_chunks, num_iterations))
    counts = range(min(2 * num_chunks, num_iterations), (num_chunks + 1) // 2 - 1, -1)
    even = [k for k in counts if num_iterations % k == 0]
    if even:
        count = min(even, key=lambda k: abs(k - num_chunks))
        return [num_iterations // count] * count
    size = -(-num_iterations // num_chunks)
    full, last = divmod(num_iterations, size)
    return [size] * full + ([last] if last else [])


def chunk_plan(num_iterations: int, num_chunks: int, eval_every: int) -> list[tuple[int, bool]]:
    """(size, evaluated) of each chunk of a run of `num_iterations` iterations: every `eval_every`-th chunk and
    the last end with an evaluation (none with eval_every=0). A pure function of the run's settings, never of a
    resume point (`rest_of_plan` cuts it there), so a resumed run evaluates at the same iterations."""
    sizes = chunk_sizes(num_iterations, num_chunks) if num_iterations > 0 else []
    last = len(sizes) - 1
    return [(size, bool(eval_every) and ((i + 1) % eval_every == 0 or i == last)) for i, size in enumerate(sizes)]


def rest_of_plan(plan: list[tuple[int, bool]], done: int) -> tuple[int, list[tuple[int, bool]]]:
    """What is left of `plan` after `done` iterations: (index in `plan` of the first chunk left, its chunks).
    A `done` inside a chunk (a checkpoint of another --chunks) shortens that chunk to end where it ended, with
    its evaluation; O(number of chunks)."""
    end = 0
    for index, (size, evaluated) in enumerate(plan):
        end += size
        if end > done:
            return index, [(end - done, evaluated), *plan[index + 1 :]]
    return len(plan), []


def eval_keys(seed: int, seeds: int) -> jax.Array:
    """[seeds] keys of the evaluation stream: `split(fold_in(key(seed), EVAL_STREAM), seeds)`, disjoint from
    the training keys `split(key(seed), seeds)`. Evaluation after iteration i uses `fold_in(key, i)`."""
    return jax.random.split(jax.random.fold_in(jax.random.key(seed), EVAL_STREAM), seeds)


def make_init(algo: Algorithm, config, mesh: Mesh | None = None, seeds_mesh: Mesh | None = None):
    """The jitted init of every seed: keys [S] -> TrainState stacked over seeds, split over `seeds_mesh` when
    given. With a `mesh` of D devices (data parallelism, `jaxrl.parallel`): each device inits the per-device
    Config, and the state is device-stacked, leaves [D, S, ...]."""
    if mesh is None:
        init = jax.vmap(lambda k: base.initial_state(config, k, algo=algo))
        return jax.jit(init) if seeds_mesh is None else _jit_over_seeds(init, seeds_mesh, 1)
    local = parallel.local_config(config, mesh.size)

    def init(keys):
        return parallel.add_device_axis(jax.vmap(lambda k: base.initial_state(local, k, algo=algo))(keys))

    in_specs, out_specs = (P(),), P(parallel.AXIS)
    return _jit_sharded(parallel.shard(init, mesh, in_specs=in_specs, out_specs=out_specs), mesh, in_specs, out_specs)


def abstract_state(algo: Algorithm, config, keys, devices: int):
    """`jax.eval_shape` of the runner's initial state on `devices` devices (leaves [D, S, ...], or [S, ...] for
    one), without needing those devices: the data-parallel init is emulated (`parallel.emulate`)."""
    if devices == 1:
        return jax.eval_shape(make_init(algo, config), keys)
    local = parallel.local_config(config, devices)
    init = parallel.emulate(
        jax.vmap(lambda k: base.initial_state(local, k, algo=algo)), devices, in_axes=None, out_axes=0
    )
    return jax.eval_shape(init, keys)


def make_chunk(algo: Algorithm, config, capacity: int, eval_episodes: int = 0):
    """The per-seed chunk program: `length` iterations of `algo.update` in a `lax.fori_loop`, `length` (traced) at
    most the static `capacity`, so that chunks of every size up to it are one compiled program. Its metrics are
    {name: [capacity, ...]}, the rows past `length` zero (`cut_metrics` drops them).

    Without evaluation: `chunk(state, length) -> (state, metrics)`. With `eval_episodes > 0`:
    `chunk(state, eval_key, iteration, evaluate, length) -> (state, metrics, {eval_return, eval_length,
    eval_finished})`, the chunk followed, where `evaluate` (a traced bool, under `lax.cond`) holds, by a
    deterministic evaluation of the new state on `eval_episodes` episodes keyed by `fold_in(eval_key, iteration)`;
    `eval_return` is NaN when no episode ended within the env's time limit, and every score NaN where `evaluate` is
    False. So one compiled program runs a run's chunks with and without an evaluation.
    """

    def chunk(state, length):
        setup = base.make_setup(config, algo)
        # jitted so that its trace for the metrics' shapes is the one the loop reuses (one trace, not two)
        iterate = jax.jit(lambda s: base.iteration(algo, setup, config, s))
        shapes = jax.eval_shape(iterate, state)[1]
        rows = jax.tree.map(lambda x: jnp.zeros((capacity, *x.shape), x.dtype), shapes)

        def one(i, carry):
            state, rows = carry
            state, metrics = iterate(state)
            return state, jax.tree.map(lambda buf, x: buf.at[i].set(x), rows, metrics)

        return jax.lax.fori_loop(0, length, one, (state, rows))

    if not eval_episodes:
        return chunk

    def chunk_and_evaluate(state, eval_key, iteration, evaluate, length):
        state, metrics = chunk(state, length)

        def scored(state):
            with parallel.suspended():  # every device plays the same evaluation episodes with its (equal) parameters
                return evaluation_scores(algo, config, state, eval_key, iteration, eval_episodes)

        return state, metrics, jax.lax.cond(evaluate, scored, lambda state: no_evaluation(), state)

    return chunk_and_evaluate


def cut_metrics(metrics: dict, size: int) -> dict:
    """A chunk's metrics {name: [seeds, capacity, ...]} (host arrays) cut to the `size` iterations it ran."""
    return jax.tree.map(lambda x: x[:, :size], metrics)


def evaluation_scores(algo: Algorithm, config, state, eval_key, iteration, episodes: int, setup=None):
    """{eval_return, eval_length, eval_finished} (float32) of `state`'s deterministic policy on `episodes` fresh
    episodes keyed by `fold_in(eval_key, iteration)`: the mean return and length of the episodes that ended within
    the env's time limit (`eval_return` NaN when none did) and the fraction that did. Traceable; `setup` as
    `base.evaluation_policy` takes it."""
    act, normalize = base.evaluation_policy(config, state, deterministic=True, setup=setup, algo=algo)
    key = jax.random.fold_in(eval_key, iteration)
    out = evaluate(config.env, act, key, episodes, normalize=normalize)
    finished = out["finished"] > 0
    scores = {
        "eval_return": jnp.where(finished, out["mean_return"], jnp.nan),
        "eval_length": out["mean_length"],
        "eval_finished": out["finished"] / episodes,
    }
    return {n: scores[n].astype(jnp.float32) for n in EVAL_METRICS}


def no_evaluation(shape: tuple[int, ...] = ()) -> dict[str, jax.Array]:
    """The scores where no evaluation ran: NaN (float32, `shape`) for each of `EVAL_METRICS`, as
    `evaluation_scores` gives them where one did."""
    return {n: jnp.full(shape, jnp.nan, jnp.float32) for n in EVAL_METRICS}


def make_chunk_program(
    algo: Algorithm,
    config,
    capacity: int,
    eval_episodes: int = 0,
    mesh: Mesh | None = None,
    seeds_mesh: Mesh | None = None,
):
    """The jitted chunk over every seed (vmapped `make_chunk`, chunks of at most `capacity` iterations, their
    number the last argument), the seeds split over `seeds_mesh` when given; with a `mesh`, over a device-stacked
    state [D, S, ...] (each device runs the per-device Config; metrics and evaluation scores come back
    replicated). It consumes the state (donated: the new state takes its buffers)."""
    in_axes = (0, 0, None, None, None) if eval_episodes else (0, None)
    if mesh is None:
        chunk = jax.vmap(make_chunk(algo, config, capacity, eval_episodes), in_axes=in_axes)
        if seeds_mesh is None:
            return jax.jit(chunk, donate_argnums=0)
        return _jit_over_seeds(chunk, seeds_mesh, *((2, 3) if eval_episodes else (1, 1)), donate=(0,))
    local = parallel.local_config(config, mesh.size)
    chunk = jax.vmap(make_chunk(algo, local, capacity, eval_episodes), in_axes=in_axes)
    stacked, replicated = P(parallel.AXIS), P()

    def program(state, *args):
        out = chunk(parallel.drop_device_axis(state), *args)
        return (parallel.add_device_axis(out[0]), *out[1:])

    in_specs = (stacked, *(replicated,) * (len(in_axes) - 1))
    out_specs = (stacked, replicated, replicated) if eval_episodes else (stacked, replicated)
    sharded = parallel.shard(program, mesh, in_specs=in_specs, out_specs=out_specs)
    return _jit_sharded(sharded, mesh, in_specs, out_specs, donate=(0,))


def _jit_sharded(fn, mesh: Mesh, in_specs, out_specs, donate: tuple[int, ...] = ()):
    """`jax.jit` of a shard_map with its inputs and outputs placed as its specs say (so that a program compiled
    ahead of time takes the device-stacked state as the runner holds it); `donate` as `_jit_over_seeds`'s."""

    def named(specs):
        return jax.tree.map(lambda s: NamedSharding(mesh, s), specs, is_leaf=lambda s: isinstance(s, P))

    return jax.jit(fn, in_shardings=named(in_specs), out_shardings=named(out_specs), donate_argnums=donate)


def compile_programs(
    algo: Algorithm,
    config,
    init,
    keys,
    abstract_state,
    capacity: int,
    eval_episodes: int,
    keys_eval,
    mesh=None,
    seeds_mesh=None,
    compiler_options: dict | None = None,
):
    """Compiles the vmapped chunk program for chunks of at most `capacity` iterations (over `mesh` or
    `seeds_mesh` when given; with XLA's `compiler_options`, e.g. `DEVICE_INDEPENDENT_OPTIONS`), with the
    evaluation (its `evaluate` argument saying which chunks play it) when `eval_episodes` > 0, and runs `init` on
    `keys` unless `init` is None (a resume). XLA compiles outside the GIL, so the init and the chunk compile side
    by side on separate cores. Returns (initial state or None, compiled chunk or None for a `capacity` of 0)."""
    count = jax.ShapeDtypeStruct((), np.int32)  # the chunk's length, and the evaluation's iteration
    evaluation = (keys_eval, count, jax.ShapeDtypeStruct((), np.bool_)) if eval_episodes else ()
    program = make_chunk_program(algo, config, capacity, eval_episodes, mesh=mesh, seeds_mesh=seeds_mesh)

    def compile_chunk():
        return program.lower(abstract_state, *evaluation, count).compile(compiler_options)

    compile_init = None if init is None else lambda: init.lower(keys).compile(compiler_options)
    compiled_init, chunk = side_by_side(compile_init, compile_chunk if capacity else None)
    return (None if compiled_init is None else compiled_init(keys)), chunk


def side_by_side(*calls):
    """The results of `calls` (functions of no argument; None: skipped, its result None), each called in a
    thread of its own: XLA compiles outside the GIL, so compiles run on separate cores. The wait is in this
    thread, where a Ctrl-C arrives at once; a Ctrl-C or an error does not wait for the other calls to finish."""
    pool = ThreadPoolExecutor(max_workers=max(1, sum(call is not None for call in calls)))
    try:
        futures = [None if call is None else pool.submit(call) for call in calls]
        results = [None if future is None else future.result() for future in futures]
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown()
    return results


def _bytes(tree) -> int:
    return sum(math.prod(x.shape) * x.dtype.itemsize for x in jax.tree.leaves(tree))


def memory_parts(config, seeds: int = 1, init=None) -> dict[str, int]:
    """A rough lower bound, in bytes, of what a run holds at once, by part: "state" (the training state of every
    seed, `jax.eval_shape` of the jitted init, `init` when the caller has one (`make_init`), so that its trace
    serves the compile too: parameters, optimiser state, environment states, a replay buffer),
    "gradients" (one more copy of the parameters), "rollout" (num_steps x num_envs steps of two observations,
    ~8 float32 scalars and the action; twice for minibatch learners, which shuffle a copy) and "activations"
    (the hidden layers' outputs of the actor and the critic over the largest batch one pass sees: a minibatch,
    the whole rollout, or a replay batch). Nothing is compiled or allocated."""
    init = make_init(base.algorithm_of(config), config) if init is None else init
    state = jax.eval_shape(init, jax.random.split(jax.random.key(0), seeds))
    spec = envs.make(config.env, 1).spec
    obs_bytes = 4 * math.prod(spec.observation_shape)
    step_bytes = 2 * obs_bytes + 4 * (8 + (1 if spec.discrete else spec.action_dim))
    steps = config.num_envs * config.num_steps
    copies = 2 if hasattr(config, "num_minibatches") else 1
    if hasattr(config, "buffer_size"):
        rows = max(config.num_envs, getattr(config, "replay_batch_size", 0))
    else:
        rows = max(config.num_envs, steps // getattr(config, "num_minibatches", 1))
    width = sum(getattr(config, "hidden_sizes", ()))
    return {
        "state": _bytes(state),
        "gradients": _bytes(getattr(state, "params", ())),
        "rollout": seeds * copies * steps * step_bytes,
        "activations": seeds * rows * width * 4 * 2,
    }


def estimate_memory(config, seeds: int = 1) -> int:
    """The sum of `memory_parts`: a rough lower bound, in bytes, of the memory a run needs."""
    return sum(memory_parts(config, seeds).values())


# What to lower when a run does not fit: each such flag set back to its default, the one that frees the most wins.
LOWER = {
    "num_envs": "fewer environments",
    "num_steps": "fewer steps per iteration",
    "hidden_sizes": "smaller layers",
    "buffer_size": "a smaller replay buffer",
}


def _flag_to_lower(config, seeds: int) -> str:
    """The flag (`LOWER`, or --seeds) whose default shrinks the estimate most, with what lowering it means."""
    defaults = type(config)()
    options = {"--seeds": (estimate_memory(config, 1), "fewer seeds")} if seeds > 1 else {}
    for name, what in LOWER.items():
        if hasattr(config, name) and getattr(config, name) != getattr(defaults, name):
            smaller = dataclasses.replace(config, **{name: getattr(defaults, name)})
            options["--" + name.replace("_", "-")] = (estimate_memory(smaller, seeds), what)
    if not options:
        return "--num-envs (fewer environments)"
    flag, (_, what) = min(options.items(), key=lambda item: item[1][0])
    return f"{flag} ({what})"


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


def _gib(size: int) -> str:
    return f"{size / 2**30:.1f} GiB"


def check_memory(config, seeds: int = 1, what: str = "", init=None) -> None:
    """Raises ValueError, naming the flag to lower, when `estimate_memory(config, seeds)` exceeds the device's
    memory (`device_memory`). `init`: the run's jitted init, when the caller has it (`memory_parts`)."""
    have, where = device_memory()
    if have is None:
        return
    parts = memory_parts(config, seeds, init)
    need = sum(parts.values())
    if need > have:
        shown = ", ".join(f"{name} {_gib(size)}" for name, size in parts.items())
        raise ValueError(
            f"{config.num_envs} environments x {config.num_steps} steps x {seeds} seed(s){what} need at least "
            f"{_gib(need)} ({shown}), more than the {_gib(have)} of {where}: lower {_flag_to_lower(config, seeds)}."
        )


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` is XLA failing to allocate device memory (RESOURCE_EXHAUSTED, "Out of memory")."""
    text = str(error)
    return isinstance(error, jax.errors.JaxRuntimeError) and ("RESOURCE_EXHAUSTED" in text or "Out of memory" in text)


def enable_compilation_cache(path: str) -> None:
    """JAX's persistent cache: a second run of the same program loads it instead of compiling it. Programs that
    compile in under 0.5 s are not stored (the environment variable JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS,
    when set, gives another threshold)."""
    jax.config.update("jax_compilation_cache_dir", path)
    if "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS" not in os.environ:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    cache_events()


# JAX's monitoring events (`jax.monitoring`) of the persistent compilation cache: a program loaded from it, and a
# program compiled and written to it. A program too quick to compile to be stored records neither.
CACHE_EVENTS = {"/jax/compilation_cache/cache_hits": "hits", "/jax/compilation_cache/cache_misses": "misses"}
_cache_counts = {"hits": 0, "misses": 0}
_cache_lock = threading.Lock()
_cache_listening = []  # [True] once the listener is registered


def _count_cache_event(event: str, **_) -> None:
    what = CACHE_EVENTS.get(event)
    if what is not None:
        with _cache_lock:
            _cache_counts[what] += 1


def cache_events() -> dict[str, int]:
    """How many programs this process has loaded from JAX's persistent compilation cache ("hits") and compiled
    and written to it ("misses") since the first call (which starts counting, through a `jax.monitoring`
    listener); compiles on any thread count. Two calls around a compile tell where its programs came from
    (`cache_note`)."""
    with _cache_lock:
        if not _cache_listening:
            jax.monitoring.register_event_listener(_count_cache_event)
            _cache_listening.append(True)
        return dict(_cache_counts)


def cache_note(before: dict[str, int], after: dict[str, int]) -> str:
    """ " (compilation cache hit)", " (compilation cache miss)" or " (compilation cache: 1 hit, 2 misses)" for the
    programs compiled between two `cache_events()`; "" when the cache took no part (off, or every program too
    quick to compile to be stored)."""
    hits, misses = (after[k] - before[k] for k in ("hits", "misses"))
    if not hits and not misses:
        return ""
    if not hits or not misses:
        return f" (compilation cache {'miss' if misses else 'hit'})"
    return f" (compilation cache: {hits} hit{'s' * (hits > 1)}, {misses} miss{'es' * (misses > 1)})"
