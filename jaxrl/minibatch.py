"""Epochs of shuffled minibatch gradient steps over one rollout, as a `lax.scan` inside the jit."""

from collections.abc import Callable

import jax
import optax

from jaxrl import parallel


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

    def minibatch_step(train, minibatch):
        params, opt_state = train
        grads, stats = grad_fn(params, minibatch)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), opt_state), stats

    def epoch(train, epoch_key):
        order = jax.random.permutation(parallel.device_key(epoch_key), size)
        minibatches = jax.tree.map(lambda x: x[order].reshape((num_minibatches, -1) + x.shape[1:]), batch)
        return jax.lax.scan(minibatch_step, train, minibatches)

    (params, opt_state), stats = jax.lax.scan(epoch, (params, opt_state), jax.random.split(key, num_epochs))
    return params, opt_state, stats
