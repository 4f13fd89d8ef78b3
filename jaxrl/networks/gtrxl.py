"""A GTrXL-style transformer core (Parisotto et al. 2020, "Stabilizing Transformers for Reinforcement Learning"):
attention over a fixed window of past steps, their layer inputs carried as the hidden state and masked across
episode starts.

Each of `num_layers` layers, on the layer input x_t and the window M_t = (x_{t-W}, ..., x_t) of its inputs at the
last W steps and this one (Transformer-XL's memory, Dai et al. 2019), is the identity-map-reordered, gated block:

    y_t = MHA(LN(x_t), LN(M_t)),   x'_t = g(x_t, ReLU(y_t)),   e_t = MLP(LN(x'_t)),   out_t = g(x'_t, ReLU(e_t))

with the GRU-type gate g(x, y) = (1 - z) * x + z * tanh(W_g y + U_g (r * x)), r = sigmoid(W_r y + U_r x),
z = sigmoid(W_z y + U_z x - b_g), b_g = 2 (the paper's eq. 4, its best gate; z near 0 at initialisation, so every
block starts close to the identity). Attention logits get a learned per-head bias on the distance t - s in 0..W
(in place of Transformer-XL's sinusoidal relative encoding: relative, so a rollout's one-step calls and a learner's
sequence call see the same positions). Step t attends to step s iff t - W <= s <= t and s is in t's episode: a
start at t masks every earlier step.

The state is (memory [B, num_layers, W, D], valid [B, W]): each layer's inputs at the last W steps, oldest first,
and 1.0 where that step is in the episode in progress (0 where it is not, or no step yet: the zero state).
The input features [T, B, F] are first embedded to D = `size` by a linear layer.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp


def window_mask(valid: jax.Array, starts: jax.Array, window: int) -> tuple[jax.Array, jax.Array]:
    """Which keys each query may attend to, over the W memory steps then the T new ones.

    valid [B, W] (the memory's steps in the episode in progress), starts [T, B] -> (mask [B, T, W + T] bool,
    distance [T, W + T] int): key s (memory first) is visible from query t iff 0 <= distance = (W + t) - s <= W
    and both are in the same episode, an episode being the run of steps between starts (the memory's valid steps
    belong to the one in progress before step 0)."""
    t = starts.shape[0]
    episode_memory = jnp.where(valid > 0, 0, -1)  # -1: never equal to a new step's episode (>= 0)
    episode_new = jnp.cumsum(starts.astype(jnp.int32), axis=0).T  # [B, T]: 0 until the first start
    episode = jnp.concatenate([episode_memory, episode_new], axis=1)  # [B, W + T]
    distance = (window + jnp.arange(t))[:, None] - jnp.arange(window + t)[None, :]
    in_window = (distance >= 0) & (distance <= window)
    return (episode_new[:, :, None] == episode[:, None, :]) & in_window[None], distance


def next_valid(valid: jax.Array, starts: jax.Array, window: int) -> jax.Array:
    """The `valid` [B, W] of the last W steps (memory then new), 1.0 where in the episode of the last step."""
    episode_memory = jnp.where(valid > 0, 0, -1)
    episode_new = jnp.cumsum(starts.astype(jnp.int32), axis=0).T
    episode = jnp.concatenate([episode_memory, episode_new], axis=1)[:, -window:]
    return (episode == episode_new[:, -1:]).astype(jnp.float32)


class Gate(nn.Module):
    """GTrXL's GRU-type gate g(x, y) (module docstring), of x's width."""

    bias: float = 2.0

    @nn.compact
    def __call__(self, x, y):
        d = x.shape[-1]
        r = nn.sigmoid(nn.Dense(d, use_bias=False, name="W_r")(y) + nn.Dense(d, use_bias=False, name="U_r")(x))
        z = nn.sigmoid(
            nn.Dense(d, use_bias=False, name="W_z")(y) + nn.Dense(d, use_bias=False, name="U_z")(x) - self.bias
        )
        h = jnp.tanh(nn.Dense(d, use_bias=False, name="W_g")(y) + nn.Dense(d, use_bias=False, name="U_g")(r * x))
        return (1.0 - z) * x + z * h


class Block(nn.Module):
    """One gated, identity-map-reordered transformer layer: x [B, T, D] attending to context [B, W + T, D]."""

    num_heads: int
    window: int

    @nn.compact
    def __call__(self, x, context, mask, distance):
        b, t, d = x.shape
        heads, head_dim = self.num_heads, d // self.num_heads
        norm = nn.LayerNorm(name="norm_attention")
        q = nn.Dense(d, name="query")(norm(x)).reshape(b, t, heads, head_dim)
        k = nn.Dense(d, name="key")(norm(context)).reshape(b, -1, heads, head_dim)
        v = nn.Dense(d, name="value")(norm(context)).reshape(b, -1, heads, head_dim)
        bias = self.param("distance_bias", nn.initializers.zeros, (heads, self.window + 1))
        logits = jnp.einsum("bthd,bshd->bhts", q, k) / jnp.sqrt(head_dim)
        logits = logits + bias[:, jnp.clip(distance, 0, self.window)][None]
        logits = jnp.where(mask[:, None], logits, -1e30)
        y = jnp.einsum("bhts,bshd->bthd", jax.nn.softmax(logits, axis=-1), v).reshape(b, t, d)
        x = Gate(name="gate_attention")(x, nn.relu(nn.Dense(d, name="attention_out")(y)))
        e = nn.Dense(d, name="mlp_out")(nn.relu(nn.Dense(d, name="mlp_in")(nn.LayerNorm(name="norm_mlp")(x))))
        return Gate(name="gate_mlp")(x, nn.relu(e))


class GTrXL(nn.Module):
    """The transformer core's module: (state, x [T, B, F], starts [T, B]) -> (state', out [T, B, size])."""

    size: int
    num_layers: int = 2
    num_heads: int = 4
    window: int = 32

    @nn.compact
    def __call__(self, state, x, starts):
        memory, valid = state  # [B, L, W, D], [B, W]
        mask, distance = window_mask(valid, starts, self.window)
        h = jnp.swapaxes(nn.Dense(self.size, name="embed")(x), 0, 1)  # [B, T, D]
        new_memory = []
        for layer in range(self.num_layers):
            context = jnp.concatenate([memory[:, layer], h], axis=1)  # [B, W + T, D]
            new_memory.append(context[:, -self.window :])
            h = Block(self.num_heads, self.window, name=f"layer_{layer}")(h, context, mask, distance)
        state = (jnp.stack(new_memory, axis=1), next_valid(valid, starts, self.window))
        return state, jnp.swapaxes(h, 0, 1)


@dataclasses.dataclass(frozen=True)
class GTrXLCore:
    """A GTrXL of width `size` (divisible by `num_heads`), `num_layers` layers over a window of `window` past
    steps, reset where `starts`: ((memory, valid), x [T, B, F], starts [T, B]) -> ((memory', valid'), out [T, B,
    size])."""

    size: int = 128
    num_layers: int = 2
    num_heads: int = 4
    window: int = 32

    def __call__(self, state, x: jax.Array, starts: jax.Array):
        return GTrXL(self.size, self.num_layers, self.num_heads, self.window, name="core")(state, x, starts)

    def initial_state(self, batch: int) -> tuple[jax.Array, jax.Array]:
        """(memory [batch, num_layers, window, size], valid [batch, window]) zeros: no past step."""
        memory = jnp.zeros((batch, self.num_layers, self.window, self.size), jnp.float32)
        return memory, jnp.zeros((batch, self.window), jnp.float32)
