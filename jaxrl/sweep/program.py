"""The compiled sweep: every (config, seed) pair of a Sweep in ONE program, `jax.vmap(base.train)` over a
flattened batch axis sharded over a 1-D device mesh, and its `Results`.

The (config x seed) pairs are flattened into one batch axis B = C * S (config-major: b = c * S + s), padded up
to a multiple of the device count with copies of the first pair. The runs never talk to each other, so sharding
changes no result; the padding is dropped afterwards. Under several processes each computes the rows of its own
devices, and `jaxrl.sweep.gather` brings every row to every process.
"""

from __future__ import annotations

import csv
import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxrl.algos import base
from jaxrl.algos.base import Algorithm
from jaxrl.device_rules import check_local_count
from jaxrl.run.compile import compiler_options
from jaxrl.run.report import FINAL_FRACTION, final_return
from jaxrl.sweep.devices import AXIS, batch_mesh
from jaxrl.sweep.gather import to_host
from jaxrl.sweep.space import Sweep, from_points


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

    def final(self, metric: str = "episode_return", fraction: float = FINAL_FRACTION) -> np.ndarray:
        """[C, S] each run's final value of `metric`: `jaxrl.run.report.final_return`, the NaN-mean over the
        last 10% of iterations (NaN where it never was finite)."""
        return final_return(self.metrics[metric], fraction)

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


def make_program(mesh: Mesh, method: str, impl):
    """`vmap(base.train)` over the batch axis, sharded over `mesh`; returns (jitted program, batch sharding).
    The program takes the keys as raw key data (uint32), wrapped back into typed keys of `impl` inside, so that
    every input is a plain array that each process can build its own shards of."""
    sharding = NamedSharding(mesh, P(AXIS))

    def batched(configs, key_data):
        return jax.vmap(base.train)(configs, jax.random.wrap_key_data(key_data, impl=impl))

    if method == "jit":
        return jax.jit(batched, in_shardings=(sharding, sharding), out_shardings=sharding), sharding
    if method == "shard_map":
        # check_vma=False: the runs never communicate, and algorithm code need not annotate scan carries that
        # start device-invariant (e.g. zeros) and become device-varying
        local = jax.shard_map(batched, mesh=mesh, in_specs=(P(AXIS), P(AXIS)), out_specs=P(AXIS), check_vma=False)
        return jax.jit(local), sharding
    raise ValueError(f"method={method!r}: use 'jit' (sharding annotations) or 'shard_map'.")


def _algorithm(config, algo: Algorithm | None) -> Algorithm:
    """The registered algorithm of `config` (the one `base.train` runs); `algo`, when given, must be it."""
    found = base.algorithm_of(config)
    if algo is not None and algo is not found:
        raise ValueError(
            f"algo={algo!r}: the sweep's Config is {base.name_of(found)}'s ({type(config).__qualname__}); "
            "pass that algorithm, or none (it is found from the Config)."
        )
    return found


def _place(x: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """`x` (the same on every process) as a global array sharded by `sharding` over its batch axis."""
    return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])


def sweep_devices(config, num_points: int, seeds: int, devices: int | None = None) -> list:
    """The devices of a sweep of `num_points` configs over `config` x `seeds` seeds (the first `devices` of
    `jax.devices()`, None: all), checked before anything compiles: the device count, the seed count, and the
    rough memory estimate of each device's runs (`jaxrl.run.compile.check_memory`)."""
    from jaxrl.run.compile import check_memory

    chosen = jax.devices()
    if devices is not None:
        check_local_count(devices, len(chosen), "this run")
        chosen = chosen[:devices]
    if seeds < 1:
        raise ValueError(f"--seeds {seeds}: need at least one seed.")
    runs_per_device = -(-num_points * seeds // len(chosen))
    check_memory(config, runs_per_device, f" (runs of {num_points} config(s) per device)")
    return chosen


def compile_program(
    sweep, seeds: int, seed: int, algo: Algorithm | None, devices, method: str, device_independent: bool = False
):
    """Validates, batches, places and compiles; returns (compiled, (configs_B, key_data_B), sweep, algo, devices,
    compile_s). Used by `run` and by the benchmarks (which call the compiled program repeatedly).
    `device_independent`: compile with `DEVICE_INDEPENDENT_OPTIONS` too (`compile.compiler_options`)."""
    if not isinstance(sweep, Sweep):
        sweep = from_points(sweep, [{}])
    algo = _algorithm(sweep.base, algo)
    if not isinstance(seeds, int) or seeds < 1:
        raise ValueError(f"seeds={seeds!r}: need at least one seed.")
    for i in range(len(sweep)):
        try:
            algo.validate(sweep.config(i))
        except ValueError as error:
            raise ValueError(f"sweep point {i} {sweep.points[i]}: {error}") from error
    mesh, devices = batch_mesh(devices)
    keys = jax.random.split(jax.random.key(seed), seeds)
    configs_b, keys_b, _ = batch_inputs(sweep.configs, keys, len(sweep), seeds, len(devices))
    program, sharding = make_program(mesh, method, jax.random.key_impl(keys))
    # every process computed the same full inputs; each places only the shards of its own devices
    args = jax.tree.map(lambda x: _place(np.asarray(x), sharding), (configs_b, jax.random.key_data(keys_b)))
    start = time.perf_counter()
    compiled = program.lower(*args).compile(compiler_options(device_independent))
    return compiled, args, sweep, algo, devices, time.perf_counter() - start


def run(
    sweep,
    seeds: int = 1,
    seed: int = 0,
    algo: Algorithm | None = None,
    devices: Sequence[jax.Device] | None = None,
    method: str = "jit",
    keep_state: bool = True,
    device_independent: bool = False,
) -> Results:
    """Trains every (config, seed) pair of `sweep` (a Sweep, or one Config) in one compiled program, the pairs
    sharded over `devices` (default: all of `jax.devices()`).

    Seed s of every config uses `jax.random.split(jax.random.key(seed), seeds)[s]`. algo: the algorithm
    (default and only choice: the registered algorithm of the sweep's Config, `base.algorithm_of`). method:
    "jit" (`jax.jit` with NamedSharding in/out shardings; XLA's SPMD partitioner splits the batch axis) or
    "shard_map" (each device runs `vmap(base.train)` on its block). Every point is validated (`algo.validate`)
    before compiling. keep_state=False drops the final training states. device_independent=True compiles without
    XLA's algebraic simplifier (`DEVICE_INDEPENDENT_OPTIONS`): every row is then bit-identical on any device
    count, though not to a default-compiled run, and slower.

    Under `initialize_distributed` (several processes), every process calls `run` with the same arguments;
    `devices` defaults to the devices of all processes, each process runs its own block of the (config x seed)
    rows, and every process gets the whole Results (metrics, and with keep_state the final states as NumPy
    arrays, gathered from all processes through jax.distributed's key-value store).
    """
    compiled, args, sweep, algo, devices, compile_s = compile_program(
        sweep, seeds, seed, algo, devices, method, device_independent
    )
    start = time.perf_counter()
    state, metrics = jax.block_until_ready(compiled(*args))
    run_s = time.perf_counter() - start

    num_configs = len(sweep)
    sharding = jax.tree.leaves(metrics)[0].sharding
    used = len(sharding.device_set)  # the devices the program really ran on
    processes = len({d.process_index for d in sharding.device_set})
    if processes > 1:
        state, metrics = to_host((state if keep_state else None, dict(metrics)))
    metrics = {k: np.asarray(v) for k, v in unbatch(dict(metrics), num_configs, seeds).items()}
    state = unbatch(state, num_configs, seeds) if keep_state else None
    iterations = next(iter(metrics.values())).shape[-1]
    env_steps = (np.arange(iterations) + 1) * sweep.base.env_steps_per_iteration
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
