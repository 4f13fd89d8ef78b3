"""Torsos: the observation encoders every head is built on.

A torso is a small frozen spec (hashable, so a flax Module can hold it) whose `__call__(x)` is called inside a
head's `nn.compact` method: its layers become the head's own layers, so the same torso serves an actor, a critic,
a Q-network or a twin-critic ensemble, and a head never depends on which torso it got. `MLPTorso` is the one MLP;
an image (CNN) torso or a recurrent core is another spec with the same call.

Orthogonal initialisation as in the PPO literature (Engstrom et al. 2020, "Implementation Matters";
Andrychowicz et al. 2021; `initialisation.orthogonal`): gain sqrt(2) for hidden layers; the heads choose their
output gains.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.networks import weight_gradient
from jaxrl.networks.initialisation import orthogonal

ACTIVATIONS = {"tanh": nn.tanh, "relu": nn.relu, "gelu": nn.gelu, "silu": nn.silu}


def dense(features: int, gain: float) -> nn.Dense:
    """A Dense layer with orthogonal(gain) kernel and zero bias; on a CPU a narrow one takes all its products and a
    wide one its weight gradient in the faster forms of `weight_gradient.dense_dot_general`."""
    dot_general = weight_gradient.dense_dot_general if weight_gradient.takes_fast_form(features) else None
    return nn.Dense(features, kernel_init=orthogonal(gain), bias_init=nn.initializers.zeros, dot_general=dot_general)


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


@dataclasses.dataclass(frozen=True)
class CNNTorso:
    """Image observations [..., H, W, C] -> [..., H'] features: per entry of `channels` a `kernel_size` x
    `kernel_size` convolution (stride 1, VALID padding, orthogonal gain sqrt 2) and the activation, then the
    flattened feature map through Dense layers of `hidden_sizes` (MLPTorso's layers, LayerNorm optional).

    The default is the MinAtar network (Young & Tian 2019, "MinAtar: An Atari-Inspired Testbed for Thorough and
    Reproducible Reinforcement Learning Experiments", Sec. 4): one 3x3 convolution with 16 channels, then a dense
    layer of 128 units. `CNN_TORSOS["cnn_large"]` is a larger option (32 and 64 channels, 256 units).
    """

    channels: Sequence[int] = (16,)
    kernel_size: int = 3
    hidden_sizes: Sequence[int] = (128,)
    activation: str = "relu"
    layer_norm: bool = False

    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.activation]
        for i, features in enumerate(self.channels):
            x = act(PatchConv(features, self.kernel_size, name=f"Conv_{i}")(x))
        return MLPTorso(self.hidden_sizes, self.activation, self.layer_norm, obs_ndim=3)(x)


class PatchConv(nn.Module):
    """A stride-1 VALID convolution [..., H, W, C] -> [..., H - k + 1, W - k + 1, F] computed as one matmul of the
    k x k patches (im2col) with the kernel, with `nn.Conv`'s parameters (kernel [k, k, C, F] orthogonal(sqrt 2),
    bias [F] zeros) and result up to float rounding.

    Why not `nn.Conv`: XLA:CPU runs a convolution's gradient about 20x slower inside a while loop (every training
    program is a `lax.scan`) than at the top level, and a matmul does not suffer that: one 1024-sample gradient step
    of the MinAtar torso inside nested scans took 196 ms as a convolution and 9 ms as patches @ kernel (jaxlib
    0.10.2, 2 shared cores; `benchmarks/results/torsos.md`).
    """

    features: int
    kernel_size: int

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        k = self.kernel_size
        kernel = self.param("kernel", orthogonal(np.sqrt(2)), (k, k, x.shape[-1], self.features))
        bias = self.param("bias", nn.initializers.zeros, (self.features,))
        h, w = x.shape[-3] - k + 1, x.shape[-2] - k + 1
        patches = jnp.concatenate([x[..., i : i + h, j : j + w, :] for i in range(k) for j in range(k)], axis=-1)
        return patches @ kernel.reshape(-1, self.features) + bias


CNN_TORSOS = {
    "cnn": CNNTorso(),
    "cnn_large": CNNTorso(channels=(32, 64), hidden_sizes=(256,)),
}
TORSOS = ("mlp", *CNN_TORSOS)


def make_torso(kind: str, hidden_sizes, activation: str, layer_norm: bool, obs_shape) -> MLPTorso | CNNTorso:
    """The torso a Config names: "mlp" (hidden_sizes, activation, over the flattened observation) or an image
    torso of `CNN_TORSOS` (with the Config's activation and layer_norm) for [H, W, C] observations."""
    if kind == "mlp":
        return MLPTorso(tuple(hidden_sizes), activation, layer_norm, len(obs_shape))
    if kind not in CNN_TORSOS:
        raise ValueError(f"torso {kind!r} is not one of {', '.join(TORSOS)}.")
    if len(obs_shape) != 3:
        raise ValueError(f"torso {kind!r} needs image observations [H, W, C]; these have shape {tuple(obs_shape)}.")
    return dataclasses.replace(CNN_TORSOS[kind], activation=activation, layer_norm=layer_norm)


class Torso(nn.Module):
    """A torso spec as a submodule of its own (its layers under `Torso_<i>/`), for heads that keep the encoder's
    parameters apart from their output layers (the continuous-control actors and critics)."""

    torso: MLPTorso

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        return self.torso(x)
