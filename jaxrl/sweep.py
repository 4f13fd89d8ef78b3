"""Hyperparameter sweeps x seeds as ONE compiled program, sharded over all devices (CPU cores included).

```python
from jaxrl import ppo, sweep

sweep.use_cpu_cores(reset=True)          # optional, first: one XLA CPU device per core (see its docstring)
config = ppo.Config(num_envs=16, total_timesteps=200_000)
points = sweep.grid(config, learning_rate=[1e-4, 3e-4, 1e-3], clip_eps=[0.1, 0.2])   # 6 configs
results = sweep.run(points, seeds=8)     # 6 x 8 runs: jit(vmap(ppo.train)) sharded over jax.devices()
results.to_csv("sweep.csv")              # one row per config x seed x iteration
```

How: only pytree-leaf fields of a Config (numeric hyperparameters) may vary, so every point shares one
program. The (config x seed) pairs are flattened into one batch axis B = C * S (config-major: b = c * S + s),
padded up to a multiple of the device count with copies of the first pair, and `jax.vmap(algo.train)` runs
over it under `jax.jit`, the batch axis sharded over a 1-D mesh ("batch") of the devices. The runs never talk
to each other, so sharding changes no result; the padding is dropped afterwards.

Several processes (hosts, or processes on one machine) run one sweep together: each calls
`sweep.initialize_distributed(coordinator, num_processes, process_id)` first (before any JAX operation), then
the same `sweep.run`. The mesh spans `jax.devices()` of all processes, each process computes the rows of the
(config x seed) batch on its own devices (the runs never communicate), and the metrics are gathered so that
every process returns the whole Results, equal to a single-process run. `jaxrl sweep ... --coordinator
HOST:PORT --num-processes N --process-id I` (or `python -m jaxrl.cli sweep ...`) does this from the command line.

Seeds: seed j of every config uses the key `jax.random.split(jax.random.key(seed), seeds)[j]`, the key
`jaxrl train --seeds S --seed seed` gives its seed j. The same key for every config means common random
numbers: configs are compared on the same environment resets and action-sampling noise streams. (With JAX's
default `jax_threefry_partitionable`, that key does not depend on S: adding seeds leaves the first ones alone.)
"""

from __future__ import annotations

import csv
import dataclasses
import itertools
import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxrl.configs import is_static

__all__ = [
    "Results",
    "Sweep",
    "backend_initialized",
    "batch_inputs",
    "from_points",
    "grid",
    "initialize_distributed",
    "random",
    "run",
    "unbatch",
    "use_cpu_cores",
]

AXIS = "batch"


# ---------------------------------------------------------------------------------------------------------
# Sweep definitions
# ---------------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Sweep:
    """A list of hyperparameter points over a base config.

    base: the config every point starts from; points: one {field: value} dict per config (the varied fields
    only, plain Python numbers); configs: the C point configs stacked, every leaf a [C] array.
    """

    base: Any
    points: list[dict[str, Any]]
    configs: Any

    def __len__(self) -> int:
        return len(self.points)

    @property
    def names(self) -> list[str]:
        """The varied fields, in the order they were given."""
        return list(self.points[0]) if self.points else []

    def config(self, i: int):
        """The i-th point as an ordinary (unstacked) Config with Python-number hyperparameters."""
        return self.base.replace(**self.points[i])


def _fields(config) -> dict[str, dataclasses.Field]:
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"expected a Config instance (a flax.struct dataclass), got {type(config).__name__}")
    return {f.name: f for f in dataclasses.fields(config)}


def _check_names(config, names) -> None:
    fields = _fields(config)
    sweepable = [n for n, f in fields.items() if not is_static(f)]
    cls = type(config).__name__
    for name in names:
        if name not in fields:
            raise ValueError(
                f"Config.{name}: unknown field, {type(config).__module__}.{cls} has no field {name!r}; "
                f"sweepable fields: {', '.join(sweepable)}."
            )
        if is_static(fields[name]):
            raise ValueError(
                f"Config.{name}: a static field (it fixes shapes or control flow and is compiled into the program), "
                f"so it cannot vary inside one compiled sweep; sweepable fields: {', '.join(sweepable)}. "
                f"Run one sweep per value of {name} instead."
            )


def _leaf_dtype(default):
    if isinstance(default, (bool, np.bool_)):
        return jnp.bool_
    if isinstance(default, (int, np.integer)):
        return jnp.int32
    return jnp.float32


def _stack(base, points: list[dict[str, Any]]):
    """The configs of `points` stacked: every pytree leaf a [C] array (float32 for float hyperparameters)."""
    fields = _fields(base)
    leaves = {}
    for name, field in fields.items():
        if is_static(field):
            continue
        default = getattr(base, name)
        dtype = _leaf_dtype(default)
        leaves[name] = jnp.asarray(np.array([p.get(name, default) for p in points]), dtype)
    return base.replace(**leaves)


def from_points(config, points: Sequence[Mapping[str, Any]]) -> Sweep:
    """A sweep over an explicit list of points, e.g. `[{"learning_rate": 1e-3}, {"learning_rate": 3e-4}]`.
    Every point must set the same fields."""
    points = [dict(p) for p in points]
    if not points:
        raise ValueError("a sweep needs at least one point.")
    names = list(points[0])
    for p in points:
        if set(p) != set(names):
            raise ValueError(f"every point must set the same fields: {sorted(p)} != {sorted(names)}.")
    _check_names(config, names)
    points = [{n: _plain(p[n]) for n in names} for p in points]
    return Sweep(config, points, _stack(config, points))


def _plain(value):
    """A Python number (floats stay floats, so that `config.replace(**point)` validates on the host)."""
    if isinstance(value, (np.ndarray, jax.Array)) and np.ndim(value) == 0:
        value = value.item()
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, (int, float, bool)):
        raise ValueError(f"sweep values must be numbers, got {value!r} ({type(value).__name__}).")
    return value


def grid(config, **values: Sequence[Any]) -> Sweep:
    """The cartesian product of the given values, the first field varying slowest:
    `grid(cfg, learning_rate=[1e-4, 3e-4], clip_eps=[0.1, 0.2])` is 4 configs."""
    _check_names(config, values)
    for name, vals in values.items():
        if isinstance(vals, (str, bytes)) or not isinstance(vals, Sequence | np.ndarray) or len(vals) == 0:
            raise ValueError(f"Config.{name}: grid() needs a non-empty list of values, got {vals!r}.")
    names = list(values)
    points = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values.values())]
    return from_points(config, points)


DISTRIBUTIONS = ("uniform", "log_uniform", "int_uniform")


def random(config, num: int, seed: int = 0, **distributions) -> Sweep:
    """`num` points drawn independently (NumPy, reproducible from `seed`). Each distribution is
    `("uniform", low, high)`, `("log_uniform", low, high)` (uniform in log space, low > 0),
    `("int_uniform", low, high)` (integers, both ends included) or a list of values to choose from uniformly.
    Fields are drawn in the order given; one field's draws do not depend on the others' distributions."""
    _check_names(config, distributions)
    if num < 1:
        raise ValueError(f"random(): num={num}, need at least one point.")
    columns = {}
    for i, (name, dist) in enumerate(distributions.items()):
        # one stream per field: changing one field's distribution leaves the others' draws unchanged
        rng = np.random.default_rng([seed, i])
        if isinstance(dist, tuple) and len(dist) == 3 and isinstance(dist[0], str):
            kind, low, high = dist
            if kind not in DISTRIBUTIONS:
                known = ", ".join(DISTRIBUTIONS)
                raise ValueError(f"Config.{name}: unknown distribution {kind!r}; use one of {known}.")
            if not low <= high:
                raise ValueError(f"Config.{name}: ({kind!r}, {low}, {high}) needs low <= high.")
            if kind == "uniform":
                draws = rng.uniform(low, high, num)
            elif kind == "log_uniform":
                if low <= 0:
                    raise ValueError(f"Config.{name}: log_uniform needs low > 0, got {low}.")
                draws = np.exp(rng.uniform(np.log(low), np.log(high), num))
            else:
                draws = rng.integers(low, high, num, endpoint=True)
        elif isinstance(dist, Sequence | np.ndarray) and not isinstance(dist, (str, bytes)) and len(dist) > 0:
            draws = [dist[j] for j in rng.integers(0, len(dist), num)]
        else:
            raise ValueError(
                f"Config.{name}: expected ('uniform'|'log_uniform'|'int_uniform', low, high) or a non-empty list "
                f"of values, got {dist!r}."
            )
        columns[name] = [_plain(x) for x in draws]
    points = [{n: columns[n][j] for n in columns} for j in range(num)]
    return from_points(config, points)


# ---------------------------------------------------------------------------------------------------------
# CPU cores as devices
# ---------------------------------------------------------------------------------------------------------

_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def backend_initialized() -> bool:
    """True once JAX has created its backends (any array op or `jax.devices()` does)."""
    from jax._src import xla_bridge

    check = getattr(xla_bridge, "backends_are_initialized", None)
    if check is not None:
        return bool(check())
    return bool(getattr(xla_bridge, "_backends", {}))


def use_cpu_cores(n: int | None = None, *, reset: bool = False) -> int:
    """Makes XLA's CPU backend expose `n` devices (default: the cores this process may run on), so that `run`
    shards over the cores; otherwise one XLA CPU program runs on one core. Sets
    `--xla_force_host_platform_device_count=n` in XLA_FLAGS (replacing an earlier value, keeping the other flags)
    and `jax_num_cpu_devices`. Returns n.

    The device count is fixed when JAX initialises its backend (the first array op or `jax.devices()`). After
    that this raises a RuntimeError, unless the backend already has exactly `n` CPU devices or `reset=True`:
    then the initialised backends are dropped (`jax.extend.backend.clear_backends()`) and rebuilt with `n`
    devices on next use; arrays created before stay valid on the old device and are copied when mixed in.
    """
    if n is None:
        n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"use_cpu_cores: n={n!r}, need a positive integer.")
    if backend_initialized():
        have = len(jax.devices("cpu"))
        if have == n:
            return n
        if not reset:
            raise RuntimeError(
                f"use_cpu_cores({n}): JAX's backend is already initialised, with {have} CPU device(s), and the "
                f"device count can only be set before the first JAX operation (building an environment imports "
                f"gymnax, which creates arrays). Start Python with XLA_FLAGS={_DEVICE_COUNT_FLAG}={n}, or call "
                f"use_cpu_cores({n}, reset=True) before creating arrays you keep."
            )
        from jax.extend.backend import clear_backends

        clear_backends()
    flags = re.sub(rf"{_DEVICE_COUNT_FLAG}=\S*", "", os.environ.get("XLA_FLAGS", "")).split()
    os.environ["XLA_FLAGS"] = " ".join([*flags, f"{_DEVICE_COUNT_FLAG}={n}"])
    jax.config.update("jax_num_cpu_devices", n)
    return n


def initialize_distributed(
    coordinator: str, num_processes: int, process_id: int, cpu_cores: int | None = None, timeout_s: int = 300
) -> None:
    """Joins this process to a multi-process JAX run (`jax.distributed.initialize`), so that `jax.devices()`
    lists the devices of every process and `run` shards one sweep over all of them.

    Call it first, before any JAX operation, in each of the `num_processes` processes with the same
    `coordinator` ("HOST:PORT" of process 0, which listens there) and its own `process_id` (0 .. N-1).
    `cpu_cores`: XLA CPU devices of this process (`use_cpu_cores`). The sweep program itself has no
    cross-process collective; results are exchanged through the coordination service's key-value store. gloo
    (`jax_cpu_collectives_implementation`, jax's CPU default) is switched on here if off, for user collectives.
    """
    if not 0 <= process_id < num_processes:
        raise ValueError(f"process_id={process_id}: need 0 <= process_id < num_processes={num_processes}.")
    if backend_initialized():
        raise RuntimeError(
            "initialize_distributed: JAX's backend is already initialised in this process; call it before any "
            "JAX operation (before building an environment or creating an array)."
        )
    if cpu_cores is not None:
        use_cpu_cores(cpu_cores)
    if jax.config.jax_cpu_collectives_implementation in (None, "", "none"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator,
        num_processes=num_processes,
        process_id=process_id,
        initialization_timeout=timeout_s,
    )


# ---------------------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Results:
    """Metrics of C configs x S seeds, each [C, S, iterations]; `state`: final train states, leaves [C, S, ...].

    Seed s of every config used `jax.random.split(jax.random.key(seed), seeds)[s]`."""

    points: list[dict[str, Any]]
    seeds: int
    seed: int
    metrics: dict[str, np.ndarray]
    env_steps: np.ndarray  # [iterations] env steps per run at the end of each iteration
    compile_s: float
    run_s: float
    num_devices: int  # devices the batch was sharded over
    num_processes: int = 1  # processes those devices belonged to
    state: Any = None
    config: Any = None  # the base config

    @property
    def num_configs(self) -> int:
        return len(self.points)

    @property
    def names(self) -> list[str]:
        return list(self.points[0]) if self.points else []

    @property
    def steps_per_second(self) -> float:
        """Aggregate env steps per second over all configs and seeds, compile time excluded."""
        return float(self.env_steps[-1] * self.num_configs * self.seeds / self.run_s)

    def final(self, metric: str = "episode_return", last: int = 5) -> np.ndarray:
        """[C, S] NaN-mean of `metric` over the last `last` iterations (NaN where it never was finite)."""
        values = self.metrics[metric][..., -last:]
        finite = np.isfinite(values)
        total = np.where(finite, values, 0.0).sum(-1)
        count = finite.sum(-1)
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)

    def columns(self) -> list[str]:
        return ["config", *self.names, "seed", "iteration", "env_steps", *sorted(self.metrics)]

    def rows(self) -> list[dict[str, Any]]:
        """The tidy table: one dict per config x seed x iteration, in that nesting order."""
        names = sorted(self.metrics)
        iterations = len(self.env_steps)
        out = []
        for c, point in enumerate(self.points):
            for s in range(self.seeds):
                for i in range(iterations):
                    row = {"config": c, **point, "seed": s, "iteration": i, "env_steps": int(self.env_steps[i])}
                    for n in names:
                        row[n] = self.metrics[n][c, s, i].item()
                    out.append(row)
        return out

    def to_csv(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as file:
            writer = csv.DictWriter(file, fieldnames=self.columns())
            writer.writeheader()
            writer.writerows(self.rows())
        return path

    def to_dataframe(self):
        """The tidy table as a pandas DataFrame (pandas is optional: `pip install pandas`)."""
        try:
            import pandas as pd
        except ImportError as error:  # pragma: no cover - pandas is not a dependency
            raise ImportError("Results.to_dataframe needs pandas; use rows() or to_csv() without it.") from error
        return pd.DataFrame(self.rows(), columns=self.columns())


def _algo_of(config) -> ModuleType:
    module = sys.modules.get(type(config).__module__)
    if module is None or not hasattr(module, "train"):
        raise ValueError(f"cannot find the algorithm of {type(config).__qualname__}; pass algo=the module.")
    return module


def batch_inputs(configs, keys, num_configs: int, num_seeds: int, num_devices: int):
    """Flattens (config x seed) into one axis, config-major (b = c * S + s), padded with copies of pair 0 up
    to a multiple of `num_devices`. Returns (configs_B, keys_B, B) with B the unpadded size."""
    size = num_configs * num_seeds
    padded = -(-size // num_devices) * num_devices
    index = np.concatenate([np.arange(size), np.zeros(padded - size, int)])
    config_index, seed_index = index // num_seeds, index % num_seeds
    return jax.tree.map(lambda x: x[config_index], configs), keys[seed_index], size


def unbatch(tree, num_configs: int, num_seeds: int):
    """Drops the padding and splits the batch axis back into [C, S]."""
    size = num_configs * num_seeds
    return jax.tree.map(lambda x: x[:size].reshape((num_configs, num_seeds) + x.shape[1:]), tree)


def _program(algo: ModuleType, mesh: Mesh, method: str, impl):
    """The compiled sweep takes the keys as raw key data (uint32), wrapped back into typed keys of `impl`
    inside, so that every input is a plain array that each process can build its own shards of."""
    sharding = NamedSharding(mesh, P(AXIS))

    def batched(configs, key_data):
        return jax.vmap(algo.train)(configs, jax.random.wrap_key_data(key_data, impl=impl))

    if method == "jit":
        return jax.jit(batched, in_shardings=(sharding, sharding), out_shardings=sharding), sharding
    if method == "shard_map":
        # check_vma=False: the runs never communicate, and algorithm code need not annotate scan carries that
        # start device-invariant (e.g. zeros) and become device-varying
        local = jax.shard_map(batched, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS), check_vma=False)
        return jax.jit(local), sharding
    raise ValueError(f"method={method!r}: use 'jit' (sharding annotations) or 'shard_map'.")


def _compile(sweep, seeds, seed, algo, devices, method):
    """Validates, batches, places and compiles; returns (compiled, (configs_B, keys_B), sweep, algo, devices,
    compile_s). Shared by `run` and the benchmarks (which call the compiled program repeatedly)."""
    if not isinstance(sweep, Sweep):
        sweep = from_points(sweep, [{}])
    algo = algo or _algo_of(sweep.base)
    if not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"seeds={seeds!r}: need at least one seed.")
    for i in range(len(sweep)):
        try:
            algo.validate(sweep.config(i))
        except ValueError as error:
            raise ValueError(f"sweep point {i} {sweep.points[i]}: {error}") from error
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("devices: need at least one device.")
    mesh = Mesh(np.array(devices), (AXIS,))
    keys = jax.random.split(jax.random.key(seed), seeds)
    configs_b, keys_b, _ = batch_inputs(sweep.configs, keys, len(sweep), seeds, len(devices))
    program, sharding = _program(algo, mesh, method, jax.random.key_impl(keys))
    # every process computed the same full inputs; each places only the shards of its own devices
    args = jax.tree.map(lambda x: _place(np.asarray(x), sharding), (configs_b, jax.random.key_data(keys_b)))
    start = time.perf_counter()
    compiled = program.lower(*args).compile()
    return compiled, args, sweep, algo, devices, time.perf_counter() - start


def _place(x: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """`x` (the same on every process) as a global array sharded by `sharding` over its batch axis."""
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


def _to_host(tree):
    """Global arrays as NumPy arrays holding every process's shards (exchanged between processes when there
    are several); typed PRNG keys travel as key data and are re-wrapped on the host."""
    leaves, treedef = jax.tree.flatten(tree)
    impls = [jax.random.key_impl(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else None for x in leaves]
    data = [jax.random.key_data(x) if impl is not None else x for x, impl in zip(leaves, impls, strict=True)]
    if any(not x.is_fully_addressable for x in data):
        host = _gather_processes(data)
    else:
        host = [np.asarray(x) for x in data]
    out = [x if impl is None else jax.random.wrap_key_data(x, impl=impl) for x, impl in zip(host, impls, strict=True)]
    return jax.tree.unflatten(treedef, out)


_GATHERS = itertools.count()
GATHER_TIMEOUT_MS = 24 * 3600 * 1000  # a process may finish its rows long after another


def _gather_processes(arrays: list[jax.Array]) -> list[np.ndarray]:
    """The full value of each global array (sharded over its leading batch axis) in every process.

    Each process publishes the blocks of its own devices through `jax.distributed`'s key-value store (the
    coordination service) and reads the others'. No compiled collective runs: gathering with one
    (`multihost_utils.process_allgather`, gloo on CPU) failed with "Gloo context initialization failed:
    Connect timeout" when the gather programs came from JAX's persistent compilation cache.
    """
    import io

    from jax._src import distributed

    client = distributed.global_state.client
    if client is None:
        raise RuntimeError("arrays span several processes but jax.distributed is not initialised.")
    tag = f"jaxrl_sweep/gather{next(_GATHERS)}"
    me = jax.process_index()
    blocks = {}
    for i, x in enumerate(arrays):
        for shard in x.addressable_shards:
            start = (shard.index[0].start or 0) if shard.index else 0
            blocks[f"{i}_{start}"] = np.asarray(shard.data)
    buffer = io.BytesIO()
    np.savez(buffer, **blocks)
    client.key_value_set_bytes(f"{tag}/{me}", buffer.getvalue())
    out = [np.empty(x.shape, np.dtype(x.dtype)) for x in arrays]
    for process in range(jax.process_count()):
        if process == me:
            payload = buffer.getvalue()
        else:
            payload = client.blocking_key_value_get_bytes(f"{tag}/{process}", GATHER_TIMEOUT_MS)
        with np.load(io.BytesIO(payload)) as received:
            for name in received.files:
                i, start = map(int, name.split("_"))
                block = received[name]
                if out[i].ndim == 0:
                    out[i][...] = block
                else:
                    out[i][start : start + block.shape[0]] = block
    client.wait_at_barrier(f"{tag}/read", GATHER_TIMEOUT_MS)  # everyone has read every block
    client.key_value_delete(f"{tag}/{me}")
    return out


def run(
    sweep,
    seeds: int = 1,
    seed: int = 0,
    algo: ModuleType | None = None,
    devices: Sequence[jax.Device] | None = None,
    method: str = "jit",
    keep_state: bool = True,
) -> Results:
    """Trains every (config, seed) pair of `sweep` (a Sweep, or one Config) in one compiled program, the pairs
    sharded over `devices` (default: all of `jax.devices()`).

    Seed s of every config uses `jax.random.split(jax.random.key(seed), seeds)[s]`. algo: the algorithm module
    (default: the module `sweep`'s Config class is defined in). method: "jit" (`jax.jit` with NamedSharding
    in/out shardings; XLA's SPMD partitioner splits the batch axis) or "shard_map" (each device runs
    `vmap(algo.train)` on its block). Every point is validated (`algo.validate`) before compiling.
    keep_state=False drops the final training states.

    Under `initialize_distributed` (several processes), every process calls `run` with the same arguments;
    `devices` defaults to the devices of all processes, each process runs its own block of the (config x seed)
    rows, and every process gets the whole Results (metrics, and with keep_state the final states as NumPy
    arrays, gathered from all processes through jax.distributed's key-value store).
    """
    compiled, args, sweep, algo, devices, compile_s = _compile(sweep, seeds, seed, algo, devices, method)
    start = time.perf_counter()
    state, metrics = jax.block_until_ready(compiled(*args))
    run_s = time.perf_counter() - start

    num_configs = len(sweep)
    sharding = jax.tree.leaves(metrics)[0].sharding
    used = len(sharding.device_set)  # the devices the program really ran on
    processes = len({d.process_index for d in sharding.device_set})
    if processes > 1:
        state, metrics = _to_host((state if keep_state else None, dict(metrics)))
    metrics = {k: np.asarray(v) for k, v in unbatch(dict(metrics), num_configs, seeds).items()}
    state = unbatch(state, num_configs, seeds) if keep_state else None
    steps_per_iteration = sweep.base.num_envs * sweep.base.num_steps
    iterations = next(iter(metrics.values())).shape[-1]
    env_steps = (np.arange(iterations) + 1) * steps_per_iteration
    return Results(
        points=sweep.points,
        seeds=seeds,
        seed=seed,
        metrics=metrics,
        env_steps=env_steps,
        compile_s=compile_s,
        run_s=run_s,
        num_devices=used,
        num_processes=processes,
        state=state,
        config=sweep.base,
    )
