"""Recurrent cores and the recurrent actor-critic: torso -> core -> head, over time-major sequences [T, B, ...].

A core maps (h [B, H], features [T, B, F], starts [T, B]) -> (h_T [B, H], outputs [T, B, F']). `starts[t]` marks
the first step of an episode: the state is zeroed *before* step t consumes its input, i.e. an episode that ended
at step t - 1 (done_{t-1}) never leaks its memory into step t. A one-step call is the T = 1 case, so the rollout
and the learner run the very same function.

- `GRUCore`: a GRU (Cho et al. 2014, "Learning Phrase Representations using RNN Encoder-Decoder", eq. 5-8; flax
  `nn.GRUCell`) scanned over time with `nn.scan`, as PureJaxRL's `ScannedRNN`. Its recurrent kernel uses the
  matmul-only `orthogonal` initialiser (jaxlib's QR deadlocks under vmap on CPU, see `torsos.orthogonal`).
- `IdentityCore`: passes features through and carries its state unchanged: the recurrent machinery around a
  feedforward network (the reference a recurrent learner is tested against: same parameters as `ActorCritic`).
"""

from __future__ import annotations

import dataclasses

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl.networks.heads import mask_actions
from jaxrl.networks.torsos import MLPTorso, dense, orthogonal

CORES = ("none", "gru")


def reset_where(starts: jax.Array, h: jax.Array) -> jax.Array:
    """h [B, H] with the rows where `starts` [B] zeroed."""
    return jnp.where(starts[:, None], jnp.zeros_like(h), h)


class _ResetGRUCell(nn.Module):
    size: int

    @nn.compact
    def __call__(self, h, inputs):
        x, start = inputs
        h = reset_where(start, h)
        cell = nn.GRUCell(self.size, kernel_init=orthogonal(1.0), recurrent_kernel_init=orthogonal(1.0))
        h, y = cell(h, x)
        return h, y


@dataclasses.dataclass(frozen=True)
class GRUCore:
    """A GRU of `size` units over a sequence, reset where `starts`: (h, x [T, B, F], starts [T, B]) -> (h_T, y)."""

    size: int = 128

    def __call__(self, h: jax.Array, x: jax.Array, starts: jax.Array) -> tuple[jax.Array, jax.Array]:
        scan = nn.scan(_ResetGRUCell, variable_broadcast="params", split_rngs={"params": False}, in_axes=0, out_axes=0)
        return scan(self.size, name="core")(h, (x, starts))


@dataclasses.dataclass(frozen=True)
class IdentityCore:
    """No memory: y = x, and the state (of `size` units, never read) is carried unchanged."""

    size: int = 1

    def __call__(self, h: jax.Array, x: jax.Array, starts: jax.Array) -> tuple[jax.Array, jax.Array]:
        return h, x


def make_core(kind: str, size: int) -> GRUCore | IdentityCore:
    """The core a Config names: "gru" (`GRUCore(size)`) or "none" (`IdentityCore`)."""
    if kind == "gru":
        return GRUCore(size)
    if kind == "none":
        return IdentityCore(size)
    raise ValueError(f"core {kind!r} is not one of {', '.join(CORES)}.")


class RecurrentHead(nn.Module):
    """torso -> core -> linear(`out_features`, orthogonal(`out_gain`)) over [T, B, ...]. With `IdentityCore` its
    parameters are exactly `heads.TorsoHead`'s (Dense_0 .. Dense_k): the core adds only its own `core/`."""

    torso: MLPTorso
    core: GRUCore | IdentityCore
    out_features: int
    out_gain: float

    @nn.compact
    def __call__(self, h, x, starts):
        x = self.torso(x)
        h, x = self.core(h, x, starts)
        return h, dense(self.out_features, self.out_gain)(x)


class RecurrentActorCritic(nn.Module):
    """Separate actor and critic, each torso -> core -> head, with its own hidden state: the state is the pair
    `(h_actor, h_critic)`, each [B, core.size]. `__call__(hidden, obs [T, B, ...], starts [T, B]) -> (hidden_T,
    distribution [T, B], value [T, B])`; the rollout calls it with T = 1. `action_mask` masks the logits
    (`heads.mask_actions`)."""

    action_dim: int
    discrete: bool
    torso: MLPTorso = MLPTorso()
    core: GRUCore | IdentityCore = GRUCore()
    action_mask: bool = False

    def setup(self):
        self.actor = RecurrentHead(self.torso, self.core, self.action_dim, 0.01)
        self.critic = RecurrentHead(self.torso, self.core, 1, 1.0)
        if not self.discrete:
            self.log_std = self.param("log_std", nn.initializers.zeros, (self.action_dim,))

    def __call__(self, hidden, obs, starts):
        h_actor, dist = self.policy(hidden[0], obs, starts)
        h_critic, value = self.value(hidden[1], obs, starts)
        return (h_actor, h_critic), dist, value

    def policy(self, h, obs, starts) -> tuple[jax.Array, distrax.Distribution]:
        h, out = self.actor(h, obs, starts)
        if self.discrete:
            return h, distrax.Categorical(logits=mask_actions(out, obs) if self.action_mask else out)
        return h, distrax.MultivariateNormalDiag(out, jnp.exp(self.log_std))

    def value(self, h, obs, starts) -> tuple[jax.Array, jax.Array]:
        h, out = self.critic(h, obs, starts)
        return h, out[..., 0]


class RecurrentQNetwork(nn.Module):
    """Action values over sequences: torso -> core -> Q head (`heads.QNetwork`'s output, dueling optional).
    `__call__(h [B, H], obs [T, B, ...], starts [T, B]) -> (h_T, Q [T, B, action_dim])`; with `IdentityCore` its
    parameters are exactly `QNetwork`'s (PQN-RNN, as purejaxql's: one core, one state). `action_mask` sets
    masked actions' values to `heads.MASKED`."""

    action_dim: int
    torso: MLPTorso = MLPTorso((128, 128), "relu")
    core: GRUCore | IdentityCore = GRUCore()
    dueling: bool = False
    action_mask: bool = False

    @nn.compact
    def __call__(self, h, obs, starts):
        x = self.torso(obs)
        h, x = self.core(h, x, starts)
        if not self.dueling:
            q = dense(self.action_dim, 1.0)(x)
        else:
            value = dense(1, 1.0)(x)
            advantage = dense(self.action_dim, 1.0)(x)
            q = value + advantage - advantage.mean(-1, keepdims=True)
        return h, mask_actions(q, obs) if self.action_mask else q


def initial_state(core: GRUCore | IdentityCore, batch: int) -> jax.Array:
    """The zero state of one core, [batch, core.size] float32."""
    return jnp.zeros((batch, core.size), jnp.float32)


def initial_hidden(core: GRUCore | IdentityCore, batch: int) -> tuple[jax.Array, jax.Array]:
    """The zero state (h_actor, h_critic) of `RecurrentActorCritic`, each [batch, core.size] float32."""
    zeros = initial_state(core, batch)
    return zeros, zeros
