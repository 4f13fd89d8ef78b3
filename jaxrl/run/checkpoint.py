"""Checkpoints of a run's whole training state (orbax), with the metrics recorded so far.

A checkpoint is written to a temporary folder and renamed when complete (orbax's atomic finalisation), so a
crash or kill during a save leaves the previous checkpoint loadable. PRNG keys are stored as their raw key
data and re-wrapped on restore.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, unreadable or does not match the run being restored."""


def _is_key(x) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def _unwrap_keys(tree):
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def _rewrap_keys(tree, like):
    """Wraps raw key data back into typed keys of the implementation `like` holds (arrays or eval_shape)."""

    def rewrap(x, ref):
        return jax.random.wrap_key_data(x, impl=ref.dtype._impl) if _is_key(ref) else x

    return jax.tree.map(rewrap, tree, like)


def _manager(directory: Path, max_to_keep: int = 2):
    import orbax.checkpoint as ocp

    options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True)
    return ocp.CheckpointManager(directory.absolute(), options=options)


def save(directory: str | Path, iteration: int, state, metrics: dict[str, np.ndarray], info: dict[str, Any]) -> None:
    """Saves `state` (any pytree) after `iteration` completed iterations, with the per-iteration `metrics`
    ({name: [seeds, iteration]}) and JSON-able `info` (the config) used to check a resume."""
    import orbax.checkpoint as ocp

    payload = {
        "info": info,
        "metrics": {k: [str(np.asarray(v).dtype), np.asarray(v).tolist()] for k, v in metrics.items()},
    }
    with _manager(Path(directory)) as manager:
        manager.save(
            iteration,
            args=ocp.args.Composite(state=ocp.args.StandardSave(_unwrap_keys(state)), meta=ocp.args.JsonSave(payload)),
        )
        manager.wait_until_finished()


def latest_iteration(directory: str | Path) -> int | None:
    directory = Path(directory)
    if not directory.exists():
        return None
    with _manager(directory) as manager:
        return manager.latest_step()


def restore(directory: str | Path, like_state, info: dict[str, Any]) -> tuple[int, Any, dict[str, np.ndarray]]:
    """Restores the latest checkpoint into the structure of `like_state` (a state or its `jax.eval_shape`).

    Raises CheckpointError when there is none, when it cannot be read, or when its `info` differs from `info`.
    """
    import orbax.checkpoint as ocp

    directory = Path(directory)
    iteration = latest_iteration(directory)
    if iteration is None:
        raise CheckpointError(f"no checkpoint in {directory}")
    abstract = jax.eval_shape(_unwrap_keys, like_state)
    try:
        with _manager(directory) as manager:
            meta = manager.restore(iteration, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
            if meta["info"] != info:
                changed = sorted(k for k in set(meta["info"]) | set(info) if meta["info"].get(k) != info.get(k))
                raise CheckpointError(
                    f"checkpoint {directory}/{iteration} was written by a different run: {', '.join(changed)} "
                    f"differ (saved {[meta['info'].get(k) for k in changed]}, now {[info.get(k) for k in changed]})"
                )
            restored = manager.restore(iteration, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract)))
    except CheckpointError:
        raise
    except Exception as error:  # orbax raises many types for truncated or corrupt files
        raise CheckpointError(f"checkpoint {directory}/{iteration} cannot be restored: {error}") from error
    state = _rewrap_keys(restored["state"], like_state)
    metrics = {k: np.asarray(values, dtype) for k, (dtype, values) in meta["metrics"].items()}
    return iteration, state, metrics
