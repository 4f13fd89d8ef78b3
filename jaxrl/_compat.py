"""Every use of JAX's private API (`jax._src`) in jaxrl, in one place, each behind a small function.

JAX may move or rename these between releases without notice; `tests/test_compat.py` fails loudly, naming the
missing piece, when the installed JAX no longer has one. Nothing else in jaxrl imports `jax._src`.

- `backends_are_initialized`: whether JAX has created its backends (the CPU device count and
  `jax.distributed.initialize` can only be set before). No public API tells.
- `distributed_client`: the coordination service client of `jax.distributed`, whose key-value store the
  multi-process sweep gathers its results through. The public `jax.distributed` exposes only `initialize`,
  `is_initialized` and `shutdown`.
- `unroll_threefry_on_cpu`: how XLA's CPU programs compute JAX's default random bits (the Threefry-2x32 hash of
  `jax.random`), with `threefry2x32_straight_line` emitting the hash's StableHLO through JAX's lowering helpers
  (`jax._src.interpreters.mlir`, the `hlo` dialect). JAX has no public setting for it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

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


# Draws of at least this many uint32 words get the straight-line hash on CPU, fewer (key splits) JAX's loop: chosen
# against 2, 3, 4 and 16 words and against unrolling every draw (benchmarks/results/notes/cpu_threads.md, "Threefry
# on CPU").
THREEFRY_UNROLLED_FROM = 8


THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
THREEFRY_PARITY = 0x1BD11BDA


def threefry2x32_straight_line(ctx, key1, key2, count1, count2) -> tuple:
    """The MLIR lowering of Threefry-2x32 (Salmon et al. 2011, 20 rounds) as straight-line StableHLO, emitted op
    by op: the operations of JAX's own unrolled lowering, without tracing a Python function into a jaxpr and
    lowering that at every draw's shape (most of what lowering a draw cost)."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir.dialects import hlo

    aval = ctx.avals_out[0]
    k1, k2, x0, x1 = mlir.multi_broadcast_in_dim(
        ctx, (key1, key2, count1, count2), ctx.avals_in, aval.shape, aval.sharding
    )
    constants = {}

    def constant(value: int):
        if value not in constants:
            scalar = mlir.ir_constant(np.uint32(value))
            constants[value] = mlir.broadcast_in_dim(ctx, scalar, aval, broadcast_dimensions=())
        return constants[value]

    keys = (k1, k2, hlo.xor(hlo.xor(k1, k2), constant(THREEFRY_PARITY)))
    x0, x1 = hlo.add(x0, keys[0]), hlo.add(x1, keys[1])
    for group in range(5):
        for rotation in THREEFRY_ROTATIONS[group % 2]:
            x0 = hlo.add(x0, x1)
            rotated = hlo.or_(
                hlo.shift_left(x1, constant(rotation)), hlo.shift_right_logical(x1, constant(32 - rotation))
            )
            x1 = hlo.xor(x0, rotated)
        x0 = hlo.add(x0, keys[(group + 1) % 3])
        x1 = hlo.add(hlo.add(x1, keys[(group + 2) % 3]), constant(group + 1))
    return x0, x1


def unroll_threefry_on_cpu(min_words: int = THREEFRY_UNROLLED_FROM) -> None:
    """Lowers JAX's Threefry-2x32 hash (Salmon et al. 2011, 20 rounds; every `jax.random` draw on the default PRNG)
    on CPU as straight-line code where it hashes at least `min_words` words (`threefry2x32_straight_line`),
    instead of JAX's CPU default, a `while` loop over its 5 groups of 4 rounds.

    The bits are the same; only the compiled program differs. XLA fuses the straight-line hash into one vectorised
    kernel, where the loop costs a few kernel launches per group: most of jaxrl's programs compile in fewer
    seconds, and those that draw much per step (action noise, minibatch permutations, replay samples, env resets)
    run faster. Below `min_words` (key splits) the loop stays: there the straight-line hash was slower. GPU and TPU
    lowerings are JAX's own. Calling it again replaces the rule (`min_words=math.inf`: JAX's loop everywhere)."""
    from jax._src.interpreters import mlir
    from jax._src.random import threefry2x32

    rolled = threefry2x32._threefry2x32_cpu_lowering_rule

    def lowering(ctx, *args):
        shape = ctx.avals_out[0].shape  # symbolic dimensions (jax.export) keep JAX's loop
        known = all(isinstance(size, int) for size in shape)
        return (threefry2x32_straight_line if known and math.prod(shape) >= min_words else rolled)(ctx, *args)

    mlir.register_lowering(threefry2x32.threefry2x32_p, lowering, platform="cpu")
