"""Orthogonal initialisation, one layer at a time or a whole network from one Gaussian draw.

`orthogonal(gain)` (Saxe et al. 2014, "Exact solutions to the nonlinear dynamics of learning in deep linear neural
networks"): `gain` times the Q of a Gaussian matrix, with the signs of R's diagonal moved into Q so that Q is
uniformly (Haar) distributed over the matrices with orthonormal columns. Called with a key, as flax calls every
initialiser, it is bit for bit `jax.nn.initializers.orthogonal`.

`init_params(module, key, *args)` is `module.init(key, *args)` with every orthogonal kernel of the network drawn
together: the kernels' shapes are read first (`jax.eval_shape`, nothing computed), their Gaussian matrices come
from one `jax.random.normal` per group of kernels with the same row count rounded up to a power of two (each matrix
zero below its own rows, padded to the group's largest), and each group's QRs run as one loop. Every kernel keeps
its distribution (gain times a Haar-distributed frame, independent of every other kernel's), and the compiled
program holds one draw and one QR per group instead of a key derivation, a draw and a QR per layer. In exact
arithmetic the first n columns of the QR of [A, B] are the QR of A, and zero rows below A leave it unchanged.

An ensemble built with `nn.vmap` (`heads.Critics`) initialises each member from its own key: its layers are
called once for all members, so they draw per key inside `per_key_draws()`.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np


class _Recording:
    """The first pass: each orthogonal kernel's tall shape (rows >= columns), in the order the layers ask."""

    def __init__(self) -> None:
        self.shapes: list[tuple[int, int]] = []

    def frame(self, tall: tuple[int, int]) -> jax.Array:
        self.shapes.append(tall)
        return jnp.zeros(tall, jnp.float32)


class _Replay:
    """The second pass: hands each layer its frame, in the order the first pass recorded."""

    def __init__(self, frames: list[jax.Array]) -> None:
        self.frames, self.used = frames, 0

    def frame(self, tall: tuple[int, int]) -> jax.Array:
        if self.used == len(self.frames) or self.frames[self.used].shape != tall:
            raise RuntimeError(
                f"init_params: orthogonal kernel {self.used} of shape {tall} was not asked for by the first pass; "
                "the network must ask for the same kernels, in the same order, on every call"
            )
        self.used += 1
        return self.frames[self.used - 1]


_DRAWS: contextvars.ContextVar[_Recording | _Replay | None] = contextvars.ContextVar("orthogonal_draws", default=None)


@contextlib.contextmanager
def _drawing(draws: _Recording | _Replay | None) -> Iterator[None]:
    token = _DRAWS.set(draws)
    try:
        yield
    finally:
        _DRAWS.reset(token)


def per_key_draws() -> contextlib.AbstractContextManager[None]:
    """Inside it every orthogonal initialiser draws from its own key, even during `init_params`."""
    return _drawing(None)


def orthogonal(gain: float = 1.0):
    """Orthogonal initialiser with `gain` (see the module docstring); kernels of any rank are initialised as the
    [prod(shape[:-1]), shape[-1]] matrix.

    Under `jax.vmap` the QR runs once per batch member in a loop (`orthonormal_columns`), never as one batched
    LAPACK call: on CPU, jaxlib's batched geqrf fans out over XLA's intra-op thread pool from a worker of that same
    pool and waits for it, which inside a vmapped training program on 2 cores deadlocked at 0% CPU (jaxlib 0.10.2).
    """

    def init(key, shape, dtype=jnp.float32):
        rows, cols = int(np.prod(shape[:-1])), shape[-1]
        tall = (max(rows, cols), min(rows, cols))
        draws = _DRAWS.get()
        if draws is None:
            q = orthonormal_columns(jax.random.normal(key, tall, jnp.float32))
        else:
            q = draws.frame(tall)
        q = q if rows >= cols else q.T
        return (gain * q).reshape(shape).astype(dtype)

    return init


@jax.custom_batching.sequential_vmap
def orthonormal_columns(a: jax.Array) -> jax.Array:
    """[m, n] (m >= n) -> Q [m, n] of a = QR with R's diagonal positive. Batched by a loop of unbatched QRs."""
    q, r = jnp.linalg.qr(a)
    return q * jnp.sign(jnp.diagonal(r))


def orthonormal_frames(key: jax.Array, shapes: list[tuple[int, int]]) -> list[jax.Array]:
    """One Haar-distributed [m, n] frame per tall shape (m >= n), all from `key`: per group of shapes whose m
    rounds up to the same power of two, one Gaussian draw [members, M, N] (M, N the group's largest m and n; rows
    below each member's m set to zero) and one loop of QRs; member i's frame is Q_i[:m_i, :n_i]."""
    groups: dict[int, list[int]] = {}
    for i, (rows, _) in enumerate(shapes):
        groups.setdefault(1 << (rows - 1).bit_length(), []).append(i)
    keys = [key] if len(groups) == 1 else list(jax.random.split(key, len(groups)))
    frames: list[jax.Array] = [None] * len(shapes)  # type: ignore[list-item]
    for group_key, members in zip(keys, groups.values(), strict=True):
        rows = np.array([shapes[i][0] for i in members])
        size = (len(members), int(rows.max()), max(shapes[i][1] for i in members))
        below = np.arange(size[1])[None, :, None] < rows[:, None, None]
        q = jax.vmap(orthonormal_columns)(jnp.where(below, jax.random.normal(group_key, size, jnp.float32), 0.0))
        for j, i in enumerate(members):
            frames[i] = q[j, : shapes[i][0], : shapes[i][1]]
    return frames


def init_params(module, key: jax.Array, *args, **kwargs):
    """`module.init` with every orthogonal kernel from one draw per group (see the module docstring). The rest of
    the parameters come from flax's per-parameter keys, as `module.init` gives them, from a key split off `key`."""
    draw_key, module_key = jax.random.split(key)
    recording = _Recording()
    with _drawing(recording):
        jax.eval_shape(lambda k: module.init(k, *args, **kwargs), module_key)
    if not recording.shapes:
        return module.init(module_key, *args, **kwargs)
    replay = _Replay(orthonormal_frames(draw_key, recording.shapes))
    with _drawing(replay):
        params = module.init(module_key, *args, **kwargs)
    if replay.used != len(replay.frames):
        raise RuntimeError(f"init_params: {len(replay.frames) - replay.used} orthogonal kernels were never asked for")
    return params
