"""Devices and meshes of a sweep: CPU cores as XLA devices (`use_cpu_cores`), several processes joined with
`jax.distributed` (`initialize_distributed`), and the 1-D mesh ("batch") the (config x seed) rows are sharded
over. The device count and the distributed runtime can only be set before JAX creates its backends."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import Mesh

from jaxrl import _compat
from jaxrl.device_rules import DEVICE_COUNT_FLAG, cpu_data_parallel_pays, rollout_samples, usable_cores

AXIS = "batch"


def backend_initialized() -> bool:
    """True once JAX has created its backends (any array op or `jax.devices()` does)."""
    return _compat.backends_are_initialized()


def batch_mesh(devices: Sequence[jax.Device] | None = None) -> tuple[Mesh, list[jax.Device]]:
    """The 1-D mesh (axis "batch") over `devices` (default: `jax.devices()`, every process's), and the devices."""
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("devices: need at least one device.")
    return Mesh(np.array(devices), (AXIS,)), devices


def use_cpu_cores(n: int | None = None, *, reset: bool = False) -> int:
    """Makes XLA's CPU backend expose `n` devices (default: the cores this process may run on), so that `run`
    shards over the cores; otherwise the process has one XLA CPU device, whose programs run on the intra-op thread
    pool over every core but at less work per CPU second (PPO at 2048 envs: 1.47 of 2 cores busy, 1.43x the
    env steps/s with 2 devices; README "Many devices"). Sets
    `--xla_force_host_platform_device_count=n` in XLA_FLAGS (replacing an earlier value, keeping the other flags)
    and `jax_num_cpu_devices`. Returns n.

    The device count is fixed when JAX initialises its backend (the first array op or `jax.devices()`). After
    that this raises a RuntimeError, unless the backend already has exactly `n` CPU devices or `reset=True`:
    then the initialised backends are dropped (`jax.extend.backend.clear_backends()`) and rebuilt with `n`
    devices on next use; arrays created before stay valid on the old device and are copied when mixed in.
    """
    if n is None:
        n = usable_cores()
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
                f"gymnax, which creates arrays). Start Python with XLA_FLAGS={DEVICE_COUNT_FLAG}={n}, or call "
                f"use_cpu_cores({n}, reset=True) before creating arrays you keep."
            )
        from jax.extend.backend import clear_backends

        clear_backends()
    flags = re.sub(rf"{DEVICE_COUNT_FLAG}=\S*", "", os.environ.get("XLA_FLAGS", "")).split()
    os.environ["XLA_FLAGS"] = " ".join([*flags, f"{DEVICE_COUNT_FLAG}={n}"])
    jax.config.update("jax_num_cpu_devices", n)
    return n


def use_cpu_threads(n: int, start=None) -> int:
    """Starts JAX's CPU backend with an intra-op thread pool of `n` threads (at most the cores this process may
    use: XLA sizes the pool from the cores the starting thread may run on, and keeps that size), then lets every
    thread of the process run on all those cores again. Small programs (DQN at 10 envs and batches of 128: a
    few hundred small operations an iteration) run faster on one thread than handed between two; large
    batches want every core. Call it before any JAX operation, after `use_cpu_cores` if both; RuntimeError
    once the backend is up. `start()` starts the backend (default `jax.devices`; the commands pass
    `jaxrl.run.hosts.check_backend`, which words an unavailable backend in one line). Returns n.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"use_cpu_threads: n={n!r}, need a positive integer.")
    if not hasattr(os, "sched_setaffinity"):
        raise RuntimeError(f"use_cpu_threads({n}): needs os.sched_setaffinity (Linux).")
    if backend_initialized():
        raise RuntimeError(
            f"use_cpu_threads({n}): JAX's backend is already initialised, and its CPU thread pool is sized when it "
            "starts; call use_cpu_threads before the first JAX operation."
        )
    everything = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(sorted(everything)[:n]))
    try:
        (start or jax.devices)()  # the backend starts here, sizing its pools from the affinity above
    finally:
        for thread in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(thread), everything)
            except OSError:  # a thread that ended meanwhile
                pass
    return n


SMALL_RUN_ENVS = 32  # seeds x num_envs of a run small enough for one CPU thread
SMALL_RUN_UNITS = 128  # the widest MLP layer of such a run


def auto_cpu_threads(config, seeds: int, cores: int | None = None, time_limit: int | None = None) -> int | None:
    """The CPU thread pool `jaxrl train` starts a run with: 1 for a small run (an MLP torso without a memory
    core, at most `SMALL_RUN_UNITS` units a layer, at most `SMALL_RUN_ENVS` envs over all seeds), which hands its
    small operations between threads at a loss (`use_cpu_threads`); None, XLA's default of one thread per core,
    for any other (image torsos, cores, larger batches), and for a run whose update over each iteration's rollout
    is large enough to go data-parallel over the `cores` CPU devices (default: the cores this process may use;
    `device_rules.cpu_data_parallel_pays`; `time_limit`: the env's, for a grouped learner's whole episodes). It
    starts nothing of JAX."""
    small = (
        getattr(config, "torso", "mlp") == "mlp"
        and getattr(config, "core", "none") in (None, "none")
        and max(getattr(config, "hidden_sizes", ()) or (0,)) <= SMALL_RUN_UNITS
        and seeds * config.num_envs <= SMALL_RUN_ENVS
    )
    cores = usable_cores() if cores is None else cores
    parallel = cores > 1 and cpu_data_parallel_pays(config, seeds, cores, rollout_samples(config, time_limit))
    return 1 if small and not parallel else None


def initialize_distributed(
    coordinator: str, num_processes: int, process_id: int, cpu_cores: int | None = None, timeout_s: int = 300
) -> None:
    """Joins this process to a multi-process JAX run (`jax.distributed.initialize`), so that `jax.devices()`
    lists the devices of every process: `run` shards one sweep over all of them, and `jaxrl.run.loop.run(...,
    devices="all")` (`jaxrl train --coordinator ...`) trains one policy over all of them.

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


def default_cpu_cores() -> int | None:
    """The cores this process may run on, as the CPU device count a command makes by default; None when the
    device count is already chosen (XLA_FLAGS sets it, or JAX's backend is up) or only one core is there."""
    if DEVICE_COUNT_FLAG in os.environ.get("XLA_FLAGS", "") or backend_initialized():
        return None
    cores = usable_cores()
    return cores if cores > 1 else None


def start_processes(
    coordinator: str | None, num_processes: int, process_id: int | None, cpu_cores: int | None, what: str
) -> None:
    """Joins the processes of a multi-process command (`initialize_distributed`; a `coordinator` or more than one
    process), or makes `cpu_cores` CPU devices; before JAX initialises its backend. ValueError (naming the
    flags of `jaxrl train` and `jaxrl sweep`) when the coordinator or the process id is missing."""
    if coordinator is not None or num_processes > 1:
        if coordinator is None or process_id is None:
            raise ValueError(f"a multi-process {what} needs --coordinator HOST:PORT and --process-id.")
        initialize_distributed(coordinator, num_processes, process_id, cpu_cores)
    elif cpu_cores is not None:
        use_cpu_cores(cpu_cores)
