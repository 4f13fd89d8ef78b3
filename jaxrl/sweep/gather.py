"""The cross-process gather: a sweep's (or a population's) outputs, global arrays whose rows live on the devices
of several processes, as NumPy arrays holding every row, in every process; and `from_lead`, process 0's host
arrays (a checkpoint it read) in every process.

Each process publishes the blocks of its own devices through `jax.distributed`'s key-value store (the
coordination service) and reads the others'. No compiled collective runs: gathering with one
(`multihost_utils.process_allgather`, gloo on CPU) failed with "Gloo context initialization failed: Connect
timeout" when the gather programs came from JAX's persistent compilation cache.
"""

from __future__ import annotations

import io
import itertools

import jax
import numpy as np

from jaxrl import _compat

_GATHERS = itertools.count()
GATHER_TIMEOUT_MS = 24 * 3600 * 1000  # a process may finish its rows long after another


def to_host(tree):
    """Global arrays as NumPy arrays holding every process's shards (exchanged between processes when there
    are several); typed PRNG keys travel as key data and are re-wrapped on the host."""
    leaves, treedef = jax.tree.flatten(tree)
    impls = [jax.random.key_impl(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else None for x in leaves]
    data = [jax.random.key_data(x) if impl is not None else x for x, impl in zip(leaves, impls, strict=True)]
    if any(not x.is_fully_addressable for x in data):
        host = gather_processes(data)
    else:
        host = [np.asarray(x) for x in data]
    out = [x if impl is None else jax.random.wrap_key_data(x, impl=impl) for x, impl in zip(host, impls, strict=True)]
    return jax.tree.unflatten(treedef, out)


def _client():
    client = _compat.distributed_client()
    if client is None:
        raise RuntimeError("arrays span several processes but jax.distributed is not initialised.")
    return client


def _pack(blocks: dict[str, np.ndarray]) -> bytes:
    """Named NumPy arrays as the bytes of one .npz file."""
    buffer = io.BytesIO()
    np.savez(buffer, **blocks)
    return buffer.getvalue()


def _unpack(payload: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(payload)) as received:
        return {name: received[name] for name in received.files}


def _exchange(blocks: dict[str, np.ndarray], senders: range) -> list[dict[str, np.ndarray]]:
    """Publishes this process's `blocks` (when it is one of `senders`) and returns every sender's, in process
    order; returns once every process has read them (a barrier), so that the next exchange starts afresh."""
    client, me = _client(), jax.process_index()
    tag = f"jaxrl_sweep/gather{next(_GATHERS)}"
    payload = _pack(blocks) if me in senders else b""
    if me in senders:
        client.key_value_set_bytes(f"{tag}/{me}", payload)
    read = lambda process: client.blocking_key_value_get_bytes(f"{tag}/{process}", GATHER_TIMEOUT_MS)  # noqa: E731
    received = [_unpack(payload if process == me else read(process)) for process in senders]
    client.wait_at_barrier(f"{tag}/read", GATHER_TIMEOUT_MS)  # everyone has read every block
    if me in senders:
        client.key_value_delete(f"{tag}/{me}")
    return received


def gather_processes(arrays: list[jax.Array]) -> list[np.ndarray]:
    """The full value of each global array (sharded over its leading batch axis) in every process."""
    blocks = {}
    for i, x in enumerate(arrays):
        for shard in x.addressable_shards:
            start = (shard.index[0].start or 0) if shard.index else 0
            blocks[f"{i}_{start}"] = np.asarray(shard.data)
    out = [np.empty(x.shape, np.dtype(x.dtype)) for x in arrays]
    for received in _exchange(blocks, range(jax.process_count())):
        for name, block in received.items():
            i, start = map(int, name.split("_"))
            if out[i].ndim == 0:
                out[i][...] = block
            else:
                out[i][start : start + block.shape[0]] = block
    return out


def from_lead(arrays: dict[str, np.ndarray] | None) -> dict[str, np.ndarray]:
    """Process 0's named NumPy `arrays` in every process (the others pass None; with one process, `arrays`).
    Every process must call it at the same point."""
    if jax.process_count() == 1:
        return dict(arrays)
    return _exchange(dict(arrays or {}), range(1))[0]
