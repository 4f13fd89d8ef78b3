"""Helpers shared by the peer workers; they import only the standard library (numpy and jax inside functions), so
a worker can run in a peer's own virtual environment (where jaxrl is not installed; the PyTorch one has no jax).

A worker is run as `python <worker>.py '<spec json>'` and prints one JSON object as its last stdout line. The JAX
workers time their programs with `benchmarks.common.measure` (importable without jaxrl): importing this module puts
the repository root on `sys.path` for it.
"""

from __future__ import annotations

import json
import platform
import sys
import traceback
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.append(ROOT)


def curve_summary(eval_returns, eval_every: int, threshold: float) -> dict:
    """`eval_returns` [seeds, evals]: the mean evaluation return of each seed at env steps eval_every * (i + 1).
    Returns the steps at which each seed first reached `threshold` (None where never) and the final returns."""
    import numpy as np

    returns = np.asarray(eval_returns, dtype=float)
    steps_to = []
    for seed_returns in returns:
        hit = np.flatnonzero(seed_returns >= threshold)
        steps_to.append(int((hit[0] + 1) * eval_every) if hit.size else None)
    final = returns[:, -1]
    return {
        "eval_steps": [int((i + 1) * eval_every) for i in range(returns.shape[1])],
        "eval_returns": returns.tolist(),
        "final_return_per_seed": final.tolist(),
        "final_return_mean": float(final.mean()),
        "final_return_min": float(final.min()),
        "steps_to_threshold": steps_to,
    }


def environment() -> dict:
    import jax

    return {"python": platform.python_version(), "jax": jax.__version__, "devices": [str(d) for d in jax.devices()]}


def use_prng(spec: dict) -> None:
    """`spec["prng"]`, when given, as JAX's default PRNG implementation (`jax_default_prng_impl`: "threefry2x32",
    "rbg" or "unsafe_rbg"), set before the worker makes its first key: `jax.random.key(0)` and `jax.random.PRNGKey(0)`
    then both make keys of that implementation, so every library in the run draws its random numbers the same way."""
    if spec.get("prng"):
        import jax

        jax.config.update("jax_default_prng_impl", spec["prng"])


def main(run) -> None:
    """Runs `run(spec) -> dict` on the spec JSON in argv[1] and prints the result (or the error) as JSON.
    `use_prng(spec)` first."""
    spec = json.loads(sys.argv[1])
    try:
        use_prng(spec)
        result = {"ok": True, **run(spec)}
    except Exception as error:  # reported to the orchestrator, which prints it and carries on
        result = {"ok": False, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
    print(json.dumps(result), flush=True)
