"""Torsos: the observation encoders every head is built on, and the initialisers they share.

A torso is a small frozen spec (hashable, so a flax Module can hold it) whose `__call__(x)` is called inside a
head's `nn.compact` method: its layers become the head's own layers, so the same torso serves an actor, a critic,
a Q-network or a twin-critic ensemble, and a head never depends on which torso it got. `MLPTorso` is the one MLP;
an image (CNN) torso or a recurrent core is another spec with the same call.

Orthogonal initialisation as in the PPO literature (Engstrom et al. 2020, "Implementation Matters";
Andrychowicz et al. 2021): gain sqrt(2) for hidden layers; the heads choose their output gains.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}


def orthogonal(gain: float = 1.0):
    """Orthogonal initialiser (Saxe et al. 2014) built from matmuls only.

    Same distribution as `jax.nn.initializers.orthogonal` (the Q of a Gaussian matrix with R's diagonal made
    positive), but Q comes from Gram-Schmidt applied twice ("twice is enough", Giraud et al. 2005) instead of
    LAPACK's geqrf. Under `jax.vmap` on CPU, jaxlib's batched geqrf fans out over the XLA intra-op thread pool
    and blocks a worker of that same pool waiting for it; inside a vmapped training program on 2 cores this
    deadlocked at 0% CPU (seen with jaxlib 0.10.2). Matmuls cannot.
    """

    def init(key, shape, dtype=jnp.float32):
        rows, cols = int(np.prod(shape[:-1])), shape[-1]
        tall = (max(rows, cols), min(rows, cols))
        a = jax.random.normal(key, tall, jnp.float32)

        def column(q, j):
            v = a[:, j]
            v = v - q @ (q.T @ v)  # unfilled columns of q are zero and project nothing
            v = v - q @ (q.T @ v)
            return q.at[:, j].set(v / jnp.linalg.norm(v)), None

        q, _ = jax.lax.scan(column, jnp.zeros(tall, jnp.float32), jnp.arange(tall[1]))
        q = q if rows >= cols else q.T
        return (gain * q).reshape(shape).astype(dtype)

    return init


def dense(features: int, gain: float) -> nn.Dense:
    """A Dense layer with orthogonal(gain) kernel and zero bias."""
    return nn.Dense(features, kernel_init=orthogonal(gain), bias_init=nn.initializers.zeros)


def flatten_observation(obs: jax.Array, obs_ndim: int) -> jax.Array:
    """[..., *obs_shape] -> [..., prod(obs_shape)]: the trailing `obs_ndim` dims flattened."""
    return obs.reshape(obs.shape[: obs.ndim - obs_ndim] + (-1,))


@dataclasses.dataclass(frozen=True)
class MLPTorso:
    """Flattens the trailing `obs_ndim` dims, then per hidden size: Dense (orthogonal, gain sqrt 2), an optional
    LayerNorm (Ba et al. 2016; PQN's stabiliser, Gallici et al. 2024), the activation. [..., *obs] -> [..., H]."""

    hidden_sizes: Sequence[int] = (64, 64)
    activation: str = "tanh"
    layer_norm: bool = False
    obs_ndim: int = 1

    def __call__(self, x: jax.Array) -> jax.Array:
        x = flatten_observation(x, self.obs_ndim)
        act = ACTIVATIONS[self.activation]
        for size in self.hidden_sizes:
            x = dense(size, np.sqrt(2))(x)
            if self.layer_norm:
                x = nn.LayerNorm()(x)
            x = act(x)
        return x


class Torso(nn.Module):
    """A torso spec as a submodule of its own (its layers under `Torso_<i>/`), for heads that keep the encoder's
    parameters apart from their output layers (the continuous-control actors and critics)."""

    torso: MLPTorso

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.torso(x)
