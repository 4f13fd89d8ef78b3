"""Recurrent cores and the recurrent actor-critic: torso -> core -> head, over time-major sequences [T, B, ...].

A core (`Core`) maps (h, features [T, B, F], starts [T, B]) -> (h_T, outputs [T, B, F']), its state h a pytree of
[B, ...] float32 leaves (one [B, H] array for the GRU; `initial_state` gives its zeros). `starts[t]` marks
the first step of an episode: the state is zeroed *before* step t consumes its input, i.e. an episode that ended
at step t - 1 (done_{t-1}) never leaks its memory into step t. A one-step call is the T = 1 case, so the rollout
and the learner run the very same function.

- `GRUCore`: a GRU (Cho et al. 2014, "Learning Phrase Representations using RNN Encoder-Decoder", eq. 5-8; flax
  `nn.GRUCell`) scanned over time with `nn.scan`, as PureJaxRL's `ScannedRNN`. Its recurrent kernel uses the
  `orthogonal` initialiser (one unbatched QR per seed under vmap, see `initialisation.orthogonal`).
- `LSTMCore`: an LSTM (Hochreiter & Schmidhuber 1997, with the forget gate of Gers et al. 2000; flax
  `nn.LSTMCell`'s parameters): c_t = f_t * c_{t-1} + i_t * g_t, h_t = o_t * tanh(c_t), gates i, f, o = sigmoid(W x_t
  + U h_{t-1} + b), g = tanh(...), the forget gate's bias initialised to 1 (Jozefowicz et al. 2015, "An Empirical
  Exploration of Recurrent Network Architectures"). Its state is the pair (c, h), each [B, size], zeroed at a start.
- `LRUCore` (`networks.lru`): the Linear Recurrent Unit (Orvieto et al. 2023), a diagonal complex linear
  recurrence h_t = lambda * h_{t-1} + gamma B x_t, y_t = GELU(Re(C h_t) + D x_t), run by a parallel (associative)
  scan with the resets inside it: O(log T) depth over a learner's sequence. Its state is (Re h, Im h).
- `GTrXLCore` (`networks.gtrxl`): a gated transformer (GTrXL, Parisotto et al. 2020) attending over a window of
  the last steps of the episode, their layer inputs carried as the state (memory, valid) and masked at starts.
- `IdentityCore`: passes features through and carries its state unchanged: the recurrent machinery around a
  feedforward network (the reference a recurrent learner is tested against: same parameters as `ActorCritic`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Protocol

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl.networks.gtrxl import GTrXLCore
from jaxrl.networks.heads import mask_actions, q_values
from jaxrl.networks.initialisation import orthogonal
from jaxrl.networks.lru import LRUCore
from jaxrl.networks.torsos import MLPTorso, dense

if TYPE_CHECKING:
    import distrax

CORES = ("none", "gru", "lstm", "lru", "gtrxl")


class Core(Protocol):
    """What a core is: `size` units, `initial_state(batch)` (a pytree of [batch, ...] float32 zeros, the state
    after a reset) and `__call__(h, x [T, B, F], starts [T, B]) -> (h_T, y [T, B, F'])`, called inside a flax
    module's compact context (its parameters live under `core/`)."""

    size: int

    def initial_state(self, batch: int) -> Any: ...

    def __call__(self, h: Any, x: jax.Array, starts: jax.Array) -> tuple[Any, jax.Array]: ...


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

    def initial_state(self, batch: int) -> jax.Array:
        return jnp.zeros((batch, self.size), jnp.float32)


class _ResetLSTMCell(nn.Module):
    """One LSTM step with flax `nn.LSTMCell`'s parameters (input kernels ii, if, ig, io; recurrent kernels and
    biases hi, hf, hg, ho) but the forget gate's bias initialised to `forget_bias`."""

    size: int
    forget_bias: float = 1.0

    @nn.compact
    def __call__(self, carry, inputs):
        x, start = inputs
        c, h = (reset_where(start, a) for a in carry)

        def gate(name, bias=0.0):
            w = nn.Dense(self.size, use_bias=False, kernel_init=orthogonal(1.0), name="i" + name)
            u = nn.Dense(
                self.size, kernel_init=orthogonal(1.0), bias_init=nn.initializers.constant(bias), name="h" + name
            )
            return w(x) + u(h)

        i, f = nn.sigmoid(gate("i")), nn.sigmoid(gate("f", self.forget_bias))
        g, o = jnp.tanh(gate("g")), nn.sigmoid(gate("o"))
        c = f * c + i * g
        h = o * jnp.tanh(c)
        return (c, h), h


@dataclasses.dataclass(frozen=True)
class LSTMCore:
    """An LSTM of `size` units over a sequence, reset where `starts`: ((c, h), x [T, B, F], starts [T, B]) ->
    ((c_T, h_T), h [T, B, size]); the output at each step is h_t."""

    size: int = 128

    def __call__(self, carry, x: jax.Array, starts: jax.Array):
        scan = nn.scan(_ResetLSTMCell, variable_broadcast="params", split_rngs={"params": False}, in_axes=0, out_axes=0)
        return scan(self.size, name="core")(carry, (x, starts))

    def initial_state(self, batch: int) -> tuple[jax.Array, jax.Array]:
        """(c, h), each [batch, size] zeros."""
        zeros = jnp.zeros((batch, self.size), jnp.float32)
        return zeros, zeros


@dataclasses.dataclass(frozen=True)
class IdentityCore:
    """No memory: y = x, and the state (of `size` units, never read) is carried unchanged."""

    size: int = 1

    def __call__(self, h: jax.Array, x: jax.Array, starts: jax.Array) -> tuple[jax.Array, jax.Array]:
        return h, x

    def initial_state(self, batch: int) -> jax.Array:
        return jnp.zeros((batch, self.size), jnp.float32)


def make_core(kind: str, size: int) -> Core:
    """The core a Config names, of `size` units: "gru" (`GRUCore`), "lstm" (`LSTMCore`), "lru" (`LRUCore`,
    `size` complex units), "gtrxl" (`GTrXLCore`, width `size`, 2 layers of 4 heads over 32 past steps) or "none"
    (`IdentityCore`)."""
    if kind == "gru":
        return GRUCore(size)
    if kind == "lstm":
        return LSTMCore(size)
    if kind == "lru":
        return LRUCore(size)
    if kind == "gtrxl":
        return GTrXLCore(size)
    if kind == "none":
        return IdentityCore(size)
    raise ValueError(f"core {kind!r} is not one of {', '.join(CORES)}.")


class RecurrentHead(nn.Module):
    """torso -> core -> linear(`out_features`, orthogonal(`out_gain`)) over [T, B, ...]. With `IdentityCore` its
    parameters are exactly `heads.TorsoHead`'s (Dense_0 .. Dense_k): the core adds only its own `core/`."""

    torso: MLPTorso
    core: Core
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
    core: Core = GRUCore()
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
        import distrax  # on first use, as in jaxrl.networks.heads

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
    core: Core = GRUCore()
    dueling: bool = False
    action_mask: bool = False

    @nn.compact
    def __call__(self, h, obs, starts):
        x = self.torso(obs)
        h, x = self.core(h, x, starts)
        q = q_values(x, self.action_dim, self.dueling)
        return h, mask_actions(q, obs) if self.action_mask else q


def initial_state(core: Core, batch: int) -> Any:
    """The zero state of one core (`core.initial_state`): [batch, core.size] float32 for the GRU, a pytree of
    [batch, ...] float32 leaves in general."""
    return core.initial_state(batch)


def initial_hidden(core: Core, batch: int) -> tuple[Any, Any]:
    """The zero state (h_actor, h_critic) of `RecurrentActorCritic`, one `initial_state(core, batch)` each."""
    zeros = initial_state(core, batch)
    return zeros, zeros
