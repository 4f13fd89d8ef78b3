"""The host side of ONE run over several processes (`jax.distributed`, `sweep.initialize_distributed`).

Every process runs the same chunk loop over the global mesh; process 0 alone writes (the run folder, its
lock, metrics, checkpoints, summary, progress bar). What a process needs of an array it cannot address
(the replicated metrics, the device-stacked state for a checkpoint) comes through JAX's own
`jax.experimental.multihost_utils`. Every function here is a collective when there are several processes:
all of them must call it at the same point. On one process each is the identity or plain NumPy.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import jax
import numpy as np
from jax.experimental import multihost_utils


class LeadFailed(RuntimeError):
    """Process 0 failed in a step only it takes (see `on_lead`); its own error is in its output."""


def lead() -> bool:
    """Whether this is process 0, the one that writes."""
    return jax.process_index() == 0


def to_host(tree):
    """Every leaf as a NumPy array of its global value; a leaf that spans other processes' devices is gathered
    (`process_allgather`, tiled: its global shape). No PRNG keys (unwrap them first)."""

    def one(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(x)

    return jax.tree.map(one, tree)


def any_process(flag: bool) -> bool:
    """True in every process when `flag` is True in any of them (e.g. a Ctrl-C seen by one process only)."""
    if jax.process_count() == 1:
        return bool(flag)
    return bool(np.any(multihost_utils.process_allgather(np.asarray(flag, bool))))


def from_lead(tree, like=None):
    """Process 0's values of `tree` in every process (`broadcast_one_to_all`); the other processes pass None
    and `like` (arrays or ShapeDtypeStructs: process 0's shapes and dtypes). No PRNG keys."""
    if jax.process_count() == 1:
        return tree
    if not lead():
        tree = jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), like)
    return multihost_utils.broadcast_one_to_all(tree)


def on_lead(fn: Callable, what: str):
    """`fn()` on process 0 (its result; None in the others), after which every process learns whether it
    raised: then the others raise too, `LeadFailed` naming `what`, instead of waiting for process 0 in the next
    collective."""
    if jax.process_count() == 1:
        return fn()
    result, error = None, None
    if lead():
        try:
            result = fn()
        except BaseException as caught:  # re-raised below, once the others know
            error = caught
    if any_process(error is not None):
        if error is not None:
            raise error
        raise LeadFailed(f"process 0 could not {what}; see its error.")
    return result


def check_backend() -> None:
    """Initialises JAX's backend now, so that an unavailable one (JAX_PLATFORMS=cuda without a GPU) is one
    clear line (ValueError) instead of a traceback later."""
    try:
        jax.devices()
    except Exception as error:  # RuntimeError, or (jax 0.10, a platform without its plugin) a bare AssertionError
        first = str(error).strip().splitlines()[0] if str(error).strip() else "no such backend is installed"
        platforms = os.environ.get("JAX_PLATFORMS")
        hint = f" (JAX_PLATFORMS={platforms}; unset it or install that backend)" if platforms else ""
        raise ValueError(f"JAX backend unavailable{hint}: {first}") from error
