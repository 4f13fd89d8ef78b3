"""A behaviour policy that lags the learner by K updates: the actor-learner split of IMPALA (Espeholt et al.
2018, arXiv 1802.01561) inside one compiled program.

In a distributed actor-learner system the actors act with parameters a few updates old. Here the learner keeps
its last K parameter snapshots in a ring and acts with the oldest, so the data of iteration i comes from the
parameters of iteration i - K (the initial ones for i < K), deterministically, and off-policy corrections
(V-trace, truncated importance weights) see a controlled staleness. The behaviour log-probabilities stored in
the trajectory are those of the lagged parameters.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class ParamsLag:
    snapshots: Any  # leaves [K, ...]: the learner's parameters of the last K iterations
    oldest: jax.Array  # int32 index of the oldest snapshot in the ring


def init(params, lag: int) -> ParamsLag | None:
    """A ring of `lag` copies of the initial `params`; None for `lag` = 0 (act with the learner's params)."""
    if not isinstance(lag, int) or lag < 0:
        raise ValueError(f"lag must be an integer >= 0, got {lag!r}.")
    if lag == 0:
        return None
    return ParamsLag(jax.tree.map(lambda x: jnp.repeat(x[None], lag, axis=0), params), jnp.zeros((), jnp.int32))


def behaviour_params(ring: ParamsLag | None, params):
    """The parameters to act with: the learner's `params` K updates ago (the learner's own when K = 0)."""
    if ring is None:
        return params
    return jax.tree.map(lambda x: x[ring.oldest], ring.snapshots)


def push(ring: ParamsLag | None, params) -> ParamsLag | None:
    """Records the learner's `params` of this iteration (before its update) in place of the oldest snapshot."""
    if ring is None:
        return None
    snapshots = jax.tree.map(lambda ring_x, x: ring_x.at[ring.oldest].set(x), ring.snapshots, params)
    lag = jax.tree.leaves(ring.snapshots)[0].shape[0]
    return ParamsLag(snapshots, (ring.oldest + 1) % lag)
