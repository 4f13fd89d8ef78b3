"""The Linear Recurrent Unit (Orvieto et al. 2023, "Resurrecting Recurrent Neural Networks for Long Sequences")
as a core, with episode resets inside a parallel scan.

The recurrence is diagonal, complex and linear in its state h_t in C^N:

    h_t = lambda * h_{t-1} + gamma * (B x_t),        y_t = Re(C h_t) + D * x_t,        out_t = GELU(y_t)

with the stable exponential parameterisation lambda = exp(-exp(nu_log) + i exp(theta_log)) (|lambda| < 1 for any
nu_log), the normalisation gamma = exp(gamma_log), gamma_log initialised to log sqrt(1 - |lambda|^2), and the
paper's initialisation (its appendix: |lambda| uniform on the ring [r_min, r_max], phase uniform on [0,
max_phase], B ~ N(0, 1 / 2F) + i N(0, 1 / 2F), C ~ N(0, 1 / N) + i N(0, 1 / N), D ~ N(0, 1)). The nonlinearity
comes after the linear recurrence, as in the paper's block.

Resets. A start at step t zeroes the state before step t consumes x_t: h_t = gamma * B x_t. Each step is the affine
map h -> a_t h + b_t with a_t = lambda * (1 - start_t) and b_t = gamma * B x_t, so a start is a_t = 0 and needs no
separate flag: the composition of step 1 then step 2,

    (a_1, b_1) . (a_2, b_2) = (a_2 a_1, a_2 b_1 + b_2),

is associative, and `jax.lax.associative_scan` gives every prefix (A_t, B_t) = (prod_{s<=t} a_s, sum_{s<=t}
(prod_{s<r<=t} a_r) b_s) in O(log T) depth. A start at s zeroes A_t for all t >= s and cuts every b before s out
of B_t. The state carried in from the previous rollout enters as h_t = A_t h_0 + B_t.

The state is stored as (Re h, Im h), each [B, N] float32, so it is a float pytree like the other cores' states.
"""

from __future__ import annotations

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp


def compose(first: tuple[jax.Array, jax.Array], second: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
    """The affine map h -> a h + b of `first` then `second`: (a_1, b_1) . (a_2, b_2) = (a_2 a_1, a_2 b_1 + b_2)."""
    a1, b1 = first
    a2, b2 = second
    return a2 * a1, a2 * b1 + b2


def linear_recurrence(h0: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
    """All states h_t = a_t h_{t-1} + b_t, t = 0..T-1, from h_{-1} = `h0` [B, N], by a parallel scan over the time
    axis of a, b [T, B, N] (complex or real): h_t = A_t h0 + B_t with (A_t, B_t) the prefix compositions."""
    prefix_a, prefix_b = jax.lax.associative_scan(compose, (a, b), axis=0)
    return prefix_a * h0[None] + prefix_b


def _ring_init(r_min: float, r_max: float):
    def init(key, shape):  # |lambda| = exp(-exp(nu_log)) uniform in area on the ring r_min <= |lambda| <= r_max
        u = jax.random.uniform(key, shape)
        return jnp.log(-0.5 * jnp.log(u * (r_max**2 - r_min**2) + r_min**2))

    return init


def _phase_init(max_phase: float):
    def init(key, shape):
        return jnp.log(max_phase * jax.random.uniform(key, shape))

    return init


def _normal(std: float):
    def init(key, shape):
        return std * jax.random.normal(key, shape)

    return init


class LRU(nn.Module):
    """One LRU layer of `size` complex units over [T, B, F] with resets (see the module docstring)."""

    size: int
    r_min: float = 0.0
    r_max: float = 1.0
    max_phase: float = 6.28

    @nn.compact
    def __call__(self, h, x, starts):
        n, f = self.size, x.shape[-1]
        nu_log = self.param("nu_log", _ring_init(self.r_min, self.r_max), (n,))
        theta_log = self.param("theta_log", _phase_init(self.max_phase), (n,))
        gamma_log = self.param("gamma_log", lambda _, nu: jnp.log(jnp.sqrt(1.0 - jnp.exp(-2.0 * jnp.exp(nu)))), nu_log)
        b_re = self.param("B_re", _normal((2.0 * f) ** -0.5), (f, n))
        b_im = self.param("B_im", _normal((2.0 * f) ** -0.5), (f, n))
        c_re = self.param("C_re", _normal(n**-0.5), (n, f))
        c_im = self.param("C_im", _normal(n**-0.5), (n, f))
        d = self.param("D", _normal(1.0), (f,))

        lam = jnp.exp(-jnp.exp(nu_log) + 1j * jnp.exp(theta_log))  # [N] complex, |lambda| < 1
        gamma = jnp.exp(gamma_log)
        bx = jax.lax.complex(x @ b_re, x @ b_im) * gamma  # [T, B, N]
        a = jnp.where(starts[..., None], 0.0, lam).astype(bx.dtype)  # a start zeroes the carried state
        states = linear_recurrence(jax.lax.complex(h[0], h[1]), jnp.broadcast_to(a, bx.shape), bx)
        y = states.real @ c_re - states.imag @ c_im + d * x  # Re(C h_t) + D x_t
        return (states[-1].real, states[-1].imag), nn.gelu(y)


@dataclasses.dataclass(frozen=True)
class LRUCore:
    """An LRU of `size` complex state units over a sequence, reset where `starts`: ((Re h, Im h), x [T, B, F],
    starts [T, B]) -> ((Re h_T, Im h_T), GELU(Re(C h_t) + D x_t) [T, B, F]); the output keeps the input width F."""

    size: int = 128
    r_min: float = 0.0
    r_max: float = 1.0

    def __call__(self, h, x: jax.Array, starts: jax.Array):
        return LRU(self.size, self.r_min, self.r_max, name="core")(h, x, starts)

    def initial_state(self, batch: int) -> tuple[jax.Array, jax.Array]:
        """(Re h, Im h), each [batch, size] zeros."""
        zeros = jnp.zeros((batch, self.size), jnp.float32)
        return zeros, zeros
