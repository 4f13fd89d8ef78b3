"""Epochs of shuffled minibatch gradient steps over one rollout, as a `lax.scan` inside the jit.

`minibatch_epochs` shuffles single steps (feedforward learners); `sequence_minibatch_epochs` shuffles whole
environment sequences, keeping each in time order with the state it started from (recurrent learners).
`mean_in_chunks` takes a mean over a large batch's samples (a gradient, a Fisher-vector product) over chunks of it;
`chunked_gradient` takes a gradient so after the statistics across the whole minibatch are taken.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from jaxrl import parallel
from jaxrl.shuffle import permutation

GRADIENT_CHUNK_ROWS = 4096
"""Samples per chunk of `gradient_in_chunks`."""

GRADIENT_CHUNKS_FROM = 16384
"""Minibatches of more samples than this take their gradient in chunks, where a learner allows it
(`actor_critic.minibatch_updates`; sequence minibatches: `sequence_chunks_pay`)."""

GRADIENT_SEQUENCE_CHUNK_SAMPLES = 16384
"""Samples (whole sequences x their length) per chunk of a sequence minibatch's gradient: a recurrent core's
sequential steps want more rows a step than a feedforward chunk has."""


def sequence_chunks_pay(samples: int) -> bool:
    """Whether a sequence minibatch of `samples` samples takes its gradient in chunks of whole sequences: beyond
    GRADIENT_CHUNKS_FROM samples, and only in a data-parallel program (`parallel.active`), whose devices each run
    on about one core. On one device XLA's thread pool splits each recurrent step's products over the cores, and
    a chunk's fewer sequences leave too few rows a step to split: there the whole minibatch runs faster."""
    return parallel.active() and samples > GRADIENT_CHUNKS_FROM


def gradient_in_chunks(grad_fn: Callable, rows: int = GRADIENT_CHUNK_ROWS, axes=0) -> Callable:
    """`grad_fn(params, minibatch) -> (grads, stats)` of a loss and stats that are means over the minibatch's
    samples, taken over chunks of `rows` samples (`mean_in_chunks`)."""
    return mean_in_chunks(grad_fn, rows, axes)


def mean_in_chunks(fn: Callable, rows: int = GRADIENT_CHUNK_ROWS, axes=0) -> Callable:
    """`fn(params, minibatch) -> pytree` of means over the minibatch's samples (no statistic across samples, such
    as an advantage normalisation, inside: a gradient and its statistics, a Fisher-vector product), taken over
    chunks of `rows` samples in a `lax.scan`, one shorter chunk for the rest (a minibatch under `rows`: whole).
    The chunks' results are averaged with weights m_c / M: the whole minibatch's mean up to float32
    rounding. Each chunk's forward and backward activations stay in the CPU's caches, where a whole minibatch of
    tens of thousands of samples waits on memory.

    `axes`: the samples' axis of each leaf, as a prefix of the minibatch's structure (default 0, every leaf's
    leading axis). A sequence minibatch `(steps [T, B, ...], initial [B, ...])` is cut into whole sequences
    with `axes=(1, 0)` and `rows` sequences a chunk.

    The chunks are for the CPU only (`jax.lax.platform_dependent`): a program lowered for a GPU or TPU takes
    the whole minibatch at once, where wide products are what those run best."""

    def on_axis(leaf_fn, tree):  # leaf_fn(axis, leaf) over the leaves of `tree`
        return jax.tree.map(lambda axis, sub: jax.tree.map(lambda x: leaf_fn(axis, x), sub), axes, tree)

    def on_cpu(params, minibatch):
        size = jax.tree.leaves(on_axis(lambda axis, x: x.shape[axis], minibatch))[0]
        whole, rest = divmod(size, rows)
        if whole == 0:
            return fn(params, minibatch)

        def cut(axis, x):  # the full chunks, stacked on a new leading axis
            x = jax.lax.slice_in_dim(x, 0, whole * rows, axis=axis)
            return jnp.moveaxis(x.reshape(x.shape[:axis] + (whole, rows) + x.shape[axis + 1 :]), axis, 0)

        head = on_axis(cut, minibatch)
        zeros = jax.tree.map(
            lambda s: jnp.zeros(s.shape, s.dtype),
            jax.eval_shape(fn, params, jax.tree.map(lambda x: x[0], head)),
        )

        def add(total, chunk):
            return jax.tree.map(jnp.add, total, fn(params, chunk)), None

        total = jax.tree.map(lambda t: t * (rows / size), jax.lax.scan(add, zeros, head)[0])
        if rest:
            tail = fn(
                params, on_axis(lambda axis, x: jax.lax.slice_in_dim(x, whole * rows, size, axis=axis), minibatch)
            )
            total = jax.tree.map(lambda t, x: t + x * (rest / size), total, tail)
        return total

    def chunked(params, minibatch):
        return jax.lax.platform_dependent(params, minibatch, cpu=on_cpu, default=fn)

    return chunked


def chunked_gradient(prepare: Callable, sample_mean_loss: Callable, rows: int, axes=0) -> Callable:
    """`grad(params, minibatch) -> (grads, stats)` of `sample_mean_loss(params, prepare(minibatch))`, taken over
    chunks of `rows` samples (`gradient_in_chunks`): `prepare` takes the statistics across the whole minibatch
    (an advantage normalisation, validity weights) before it is cut."""
    in_chunks = gradient_in_chunks(jax.grad(sample_mean_loss, has_aux=True), rows, axes)

    def grad(params, minibatch):
        return in_chunks(params, prepare(minibatch))

    return grad


def minibatch_epochs(
    grad_fn: Callable,
    optimizer: optax.GradientTransformation,
    params,
    opt_state,
    batch,
    key: jax.Array,
    num_epochs: int,
    num_minibatches: int,
):
    """Trajectory [T, N, ...] leaves of `batch` are flattened to [T * N, ...]; each of `num_epochs` passes
    shuffles them and takes one optimizer step per minibatch of `T * N / num_minibatches` samples, with
    `grad_fn(params, minibatch) -> (grads, stats)`. Returns (params, opt_state, stats [epochs, minibatches])."""
    batch = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), batch)
    size = jax.tree.leaves(batch)[0].shape[0]

    def minibatches(epoch_key):
        order = permutation(parallel.device_key(epoch_key), size)
        return jax.tree.map(lambda x: x[order].reshape((num_minibatches, -1) + x.shape[1:]), batch)

    return _epochs(grad_fn, optimizer, params, opt_state, minibatches, key, num_epochs)


def sequence_minibatch_epochs(
    grad_fn: Callable,
    optimizer: optax.GradientTransformation,
    params,
    opt_state,
    steps,
    initial,
    key: jax.Array,
    num_epochs: int,
    num_minibatches: int,
):
    """Minibatches of whole environment sequences: each of `num_epochs` passes shuffles the N environments (not
    the steps) and cuts them into `num_minibatches` groups of B = N / num_minibatches. A minibatch is
    `(steps [T, B, ...], initial [B, ...])`: the sequences of its environments in time order and the state each
    started from, for `grad_fn(params, minibatch) -> (grads, stats)`. `steps` leaves are [T, N, ...], `initial`
    leaves [N, ...]. Returns (params, opt_state, stats [epochs, minibatches])."""
    num_envs = jax.tree.leaves(initial)[0].shape[0]

    def minibatches(epoch_key):
        order = permutation(parallel.device_key(epoch_key), num_envs)

        def cut_steps(x):  # [T, N, ...] -> [M, T, B, ...]
            x = x[:, order].reshape((x.shape[0], num_minibatches, -1) + x.shape[2:])
            return jnp.swapaxes(x, 0, 1)

        def cut_initial(x):  # [N, ...] -> [M, B, ...]
            return x[order].reshape((num_minibatches, -1) + x.shape[1:])

        return jax.tree.map(cut_steps, steps), jax.tree.map(cut_initial, initial)

    return _epochs(grad_fn, optimizer, params, opt_state, minibatches, key, num_epochs)


def _epochs(grad_fn, optimizer, params, opt_state, minibatches: Callable, key, num_epochs: int):
    """`num_epochs` passes; each takes one optimizer step per leading entry of `minibatches(epoch_key)`."""

    def minibatch_step(train, minibatch):
        params, opt_state = train
        grads, stats = grad_fn(params, minibatch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), stats

    def epoch(train, epoch_key):
        return jax.lax.scan(minibatch_step, train, minibatches(epoch_key))

    (params, opt_state), stats = jax.lax.scan(epoch, (params, opt_state), jax.random.split(key, num_epochs))
    return params, opt_state, stats
