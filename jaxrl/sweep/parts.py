"""A sweep run in parts: its points split into groups of at most `points_per_program`, each group one compiled
program (`jaxrl.sweep.program.run`), the results of the points finished so far handed on after every part, so
that an interruption or a failure in a later part keeps them. Parts of one size compile the same program (JAX's
compilation cache loads it again when it is on). A point's runs are the same pure function of (config, key) in
any part, its numbers equal to a one-program sweep's up to XLA's batch-size-dependent rounding.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np

from jaxrl.sweep import program
from jaxrl.sweep.program import Results
from jaxrl.sweep.space import Sweep, from_points


def concatenate(parts: list[Results]) -> Results:
    """The Results of consecutive parts of one sweep as one: points, metrics and states in part order, the
    compile and run seconds added up."""
    first = parts[0]
    states = [p.state for p in parts]
    state = None if any(s is None for s in states) else jax.tree.map(lambda *x: np.concatenate(x), *states)
    return Results(
        points=[point for p in parts for point in p.points],
        seeds=first.seeds,
        seed=first.seed,
        metrics={k: np.concatenate([p.metrics[k] for p in parts]) for k in first.metrics},
        env_steps=first.env_steps,
        compile_s=sum(p.compile_s for p in parts),
        run_s=sum(p.run_s for p in parts),
        num_devices=max(p.num_devices for p in parts),
        num_processes=max(p.num_processes for p in parts),
        state=state,
        config=first.config,
    )


def run(sweep: Sweep, points_per_program: int, on_part: Callable[[Results], None] | None = None, **options) -> Results:
    """`program.run(part, **options)` on each part of `sweep` of at most `points_per_program` points, in order;
    after every part `on_part(results of every point finished so far)`. Returns the whole sweep's Results."""
    if not isinstance(points_per_program, int) or points_per_program < 1:
        raise ValueError(f"points_per_program={points_per_program!r}: a number of points, >= 1.")
    done: list[Results] = []
    for start in range(0, len(sweep), points_per_program):
        part = from_points(sweep.base, sweep.points[start : start + points_per_program])
        done.append(program.run(part, **options))
        if on_part is not None:
            on_part(concatenate(done))
    return concatenate(done)
