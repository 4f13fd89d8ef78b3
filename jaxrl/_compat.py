"""Every use of JAX's private API (`jax._src`) in jaxrl, in one place, each behind a small function.

JAX may move or rename these between releases without notice; `tests/test_compat.py` fails loudly, naming the
missing piece, when the installed JAX no longer has one. Nothing else in jaxrl imports `jax._src`.

- `backends_are_initialized`: whether JAX has created its backends (the CPU device count and
  `jax.distributed.initialize` can only be set before). No public API tells.
- `distributed_client`: the coordination service client of `jax.distributed`, whose key-value store the
  multi-process sweep gathers its results through. The public `jax.distributed` exposes only `initialize`,
  `is_initialized` and `shutdown`.
"""

from __future__ import annotations

from typing import Any

# the client methods jaxrl.sweep.gather calls
CLIENT_METHODS = ("key_value_set_bytes", "blocking_key_value_get_bytes", "wait_at_barrier", "key_value_delete")


def backends_are_initialized() -> bool:
    """True once JAX has created its backends (any array op or `jax.devices()` does)."""
    from jax._src import xla_bridge

    return bool(xla_bridge.backends_are_initialized())


def distributed_client() -> Any | None:
    """The `jax.distributed` coordination client of this process, None before `jax.distributed.initialize`."""
    from jax._src import distributed

    return distributed.global_state.client
