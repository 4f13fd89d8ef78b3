"""Epochs of shuffled minibatch gradient steps over one rollout, as a `lax.scan` inside the jit.

`minibatch_epochs` shuffles single steps (feedforward learners); `sequence_minibatch_epochs` shuffles whole
environment sequences, keeping each in time order with the state it started from (recurrent learners).
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from jaxrl import parallel
from jaxrl.shuffle import permutation


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
