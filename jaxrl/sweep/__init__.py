"""Hyperparameter sweeps x seeds as ONE compiled program, sharded over all devices (CPU cores included).

```python
from jaxrl import ppo, sweep

sweep.use_cpu_cores(reset=True)          # optional, first: one XLA CPU device per core (see its docstring)
config = ppo.Config(num_envs=16, total_timesteps=200_000)
points = sweep.grid(config, learning_rate=[1e-4, 3e-4, 1e-3], clip_eps=[0.1, 0.2])   # 6 configs
results = sweep.run(points, seeds=8)     # 6 x 8 runs: jit(vmap(base.train)) sharded over jax.devices()
results.to_csv("sweep.csv")              # one row per config x seed x iteration
```

How: only pytree-leaf fields of a Config (numeric hyperparameters) may vary, so every point shares one
program. The (config x seed) pairs are flattened into one batch axis B = C * S (config-major: b = c * S + s),
padded up to a multiple of the device count with copies of the first pair, and `jax.vmap(base.train)` runs
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

Modules: `space` (Sweep, grid, random, from_points), `devices` (CPU cores as devices, jax.distributed, the
mesh), `program` (batching, the compiled program, run, Results), `parts` (a sweep run in parts, the finished
points' results handed on after each), `gather` (the cross-process gather),
`summary` (per config: the final return over seeds with its bootstrap interval; the files of a sweep folder).
"""

from jaxrl.sweep.devices import (
    AXIS,
    backend_initialized,
    batch_mesh,
    initialize_distributed,
    use_cpu_cores,
    use_cpu_threads,
)
from jaxrl.sweep.program import Results, batch_inputs, compile_program, make_program, run, unbatch
from jaxrl.sweep.space import Sweep, from_points, grid, random

_compile = compile_program  # the name benchmarks/sweep_throughput.py calls

__all__ = [
    "AXIS",
    "Results",
    "Sweep",
    "backend_initialized",
    "batch_inputs",
    "batch_mesh",
    "compile_program",
    "from_points",
    "grid",
    "initialize_distributed",
    "make_program",
    "random",
    "run",
    "unbatch",
    "use_cpu_cores",
    "use_cpu_threads",
]
