"""Optimisers and the learning-rate schedule every algorithm uses, and trust-region helpers (TRPO, natural
policy gradient).

The schedule: `learning_rate_schedule(lr, anneal, updates_per_iteration, num_iterations)` is the constant lr, or
with `anneal` the linear decay lr (1 - i / num_iterations) held through iteration i (i = the optimiser's step
count // updates_per_iteration), as PureJaxRL and CleanRL anneal PPO. Every Config's `anneal_lr` means this.

Trust-region helpers (TRPO, natural policy gradient): conjugate gradient with a function operator, Fisher-vector
products of a KL divergence that never materialise the Fisher matrix, and a backtracking line search. All are pure
and traceable: they run inside `jax.jit`, `lax.scan` and `jax.vmap`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax

from jaxrl import parallel

OPTIMIZERS = ("adam", "rmsprop", "radam")


def learning_rate_schedule(learning_rate, anneal: bool, updates_per_iteration: int, num_iterations: int):
    """The optax schedule `count -> lr` (or the constant `learning_rate` without `anneal`): during iteration
    i = count // updates_per_iteration, lr (1 - i / num_iterations), so the last iteration trains at
    lr / num_iterations and every gradient step of one iteration uses the same rate."""
    if not anneal:
        return learning_rate

    def schedule(count):
        done = (count // updates_per_iteration) / num_iterations
        return learning_rate * (1.0 - done)

    return schedule


def gradient_clipping(max_grad_norm) -> optax.GradientTransformation:
    """Global-norm clipping, g <- g min(1, max_grad_norm / ||g||_2) (optax.clip_by_global_norm), or, for a
    `max_grad_norm` of inf given as a number (not traced), no clipping at all: nothing of it enters the compiled
    program. Both keep the same (empty) optimiser state, so the two are interchangeable in a saved state. A traced
    inf (a sweep over `max_grad_norm`) still clips, which at inf changes nothing."""
    if isinstance(max_grad_norm, int | float) and math.isinf(max_grad_norm):
        return optax.identity()
    return optax.clip_by_global_norm(max_grad_norm)


def clipped_optimizer(name: str, learning_rate, max_grad_norm, eps: float = 1e-5) -> optax.GradientTransformation:
    """Global-norm gradient clipping at `max_grad_norm` (`gradient_clipping`; inf: none), then Adam (`eps`),
    RMSprop (decay 0.99, `eps`, as A2C in Stable-Baselines3) or RAdam (Liu et al. 2020; optax's defaults), at
    `learning_rate` (a number or a schedule). Under data parallelism the gradients are first averaged over the
    devices (`parallel.average_gradients`).

    All of it runs on the parameters raveled into one vector (`optax.flatten`): the same arithmetic per element, but
    a handful of operations per step instead of a handful per parameter array, and one all-reduce under data
    parallelism. The optimiser state holds that vector's moments."""
    if name == "adam":
        scale = optax.adam(learning_rate, eps=eps)
    elif name == "rmsprop":
        scale = optax.rmsprop(learning_rate, decay=0.99, eps=eps)
    elif name == "radam":
        scale = optax.radam(learning_rate)
    else:
        raise ValueError(f"optimizer {name!r} is not one of {', '.join(OPTIMIZERS)}.")
    return optax.flatten(parallel.average_gradients(optax.chain(gradient_clipping(max_grad_norm), scale)))


def tree_vdot(a, b) -> jax.Array:
    """sum_i <a_i, b_i> over the leaves of two pytrees of the same structure."""
    return sum(jnp.vdot(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


def conjugate_gradient(matvec: Callable, b, iters: int, tol=1e-10):
    """Solves A x = b for a symmetric positive-definite A given only as `matvec(v) = A v` (Hestenes & Stiefel 1952;
    Nocedal & Wright 2006, Algorithm 5.2), from x0 = 0, for at most `iters` iterations or until the residual
    ||b - A x|| <= tol ||b||. `b` and x may be any pytree of arrays; `tol` may be traced, `iters` is static.

    A `lax.while_loop`, so it compiles once for any stopping point and runs under jit and vmap (batched members
    run until the slowest stops; the stopped ones are frozen by the loop's batching rule).

    Why not `jax.scipy.sparse.linalg.cg`: it is the same algorithm and accepts a function operator under jit and
    vmap, and it matches this one on plain operators (tests/test_trpo.py). But with the operator of
    `fisher_vector_product` (a `jax.linearize`d gradient) inside its `lax.custom_linear_solve`, TRPO's vmapped
    training program solved wrongly (relative residuals 1e9 or NaN, the policy never moving) whenever another
    training program had been compiled earlier in the same process (jax 0.10.2, CPU), and correctly otherwise.
    The plain loop has no such dependence, needs no differentiable solve, and keeps `jax.linearize`'s cheaper
    products.
    """
    rs0 = tree_vdot(b, b)
    threshold = jnp.square(jnp.asarray(tol, jnp.float32)) * rs0

    def cond(carry):
        k, _, _, _, rs = carry
        return (k < iters) & (rs > threshold)

    def body(carry):
        k, x, r, p, rs = carry
        ap = matvec(p)
        alpha = rs / tree_vdot(p, ap)
        x = jax.tree.map(lambda x, p: x + alpha * p, x, p)
        r = jax.tree.map(lambda r, ap: r - alpha * ap, r, ap)
        rs_new = tree_vdot(r, r)
        p = jax.tree.map(lambda r, p: r + (rs_new / rs) * p, r, p)
        return k + 1, x, r, p, rs_new

    x0 = jax.tree.map(jnp.zeros_like, b)
    return jax.lax.while_loop(cond, body, (jnp.zeros((), jnp.int32), x0, b, b, rs0))[1]


def fisher_vector_product(kl: Callable, params, damping=0.0) -> Callable:
    """v -> (F + damping I) v, with F the Hessian at `params` of `kl(p) = E_s KL(pi_old(.|s) || pi_p(.|s))` for a
    fixed pi_old = pi_params. At p = params the KL and its gradient vanish and its Hessian is the Fisher
    information matrix E_s E_a[grad log pi grad log pi^T] (Schulman et al. 2015, Appendix C.1; Martens 2014).

    Forward-over-reverse: `jax.linearize` of `jax.grad(kl)` at `params` runs the forward and backward passes once;
    each product is then one evaluation of the linearised gradient (a JVP of the VJP), never a matrix. `damping`
    (Tikhonov, as TRPO's cg_damping) may be traced.
    """
    _, hvp = jax.linearize(jax.grad(kl), params)
    return lambda v: jax.tree.map(lambda fv, x: fv + damping * x, hvp(v), v)


def backtracking_line_search(accept: Callable, params, full_step, max_backtracks: int, shrink=0.5):
    """Tries params + shrink^i full_step for i = 0, 1, ... max_backtracks - 1 in a `lax.while_loop`, stopping at
    the first candidate `accept(candidate) -> (ok, stats)` accepts (Nocedal & Wright 2006, Algorithm 3.1; TRPO's
    line search on the KL constraint and the surrogate, Schulman et al. 2015, Appendix C).

    `params` and `full_step` are arrays (or pytrees of them). Returns (new_params, accepted, fraction, stats):
    the accepted candidate and its step fraction shrink^i with its stats, or, when none is accepted, `params`,
    fraction 0 and the stats of the last candidate tried.
    """

    def candidate(fraction):
        return jax.tree.map(lambda p, s: p + fraction * s, params, full_step)

    stats_shape = jax.eval_shape(lambda: accept(params)[1])
    zero_stats = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), stats_shape)

    def cond(carry):
        i, ok, _, _ = carry
        return (~ok) & (i < max_backtracks)

    def body(carry):
        i, _, _, _ = carry
        fraction = jnp.asarray(shrink, jnp.float32) ** i
        ok, stats = accept(candidate(fraction))
        return i + 1, ok, fraction, stats

    init = (jnp.zeros((), jnp.int32), jnp.zeros((), bool), jnp.zeros((), jnp.float32), zero_stats)
    _, accepted, fraction, stats = jax.lax.while_loop(cond, body, init)
    new_params = jax.tree.map(lambda p, s: jnp.where(accepted, p + fraction * s, p), params, full_step)
    return new_params, accepted, jnp.where(accepted, fraction, 0.0), stats
