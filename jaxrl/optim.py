"""Trust-region helpers (TRPO, natural policy gradient): conjugate gradient with a function operator, Fisher-vector
products of a KL divergence that never materialise the Fisher matrix, and a backtracking line search. All are pure
and traceable: they run inside `jax.jit`, `lax.scan` and `jax.vmap`.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp


def conjugate_gradient(matvec: Callable, b, iters: int, tol=1e-10):
    """Solves A x = b for a symmetric positive-definite A given only as `matvec(v) = A v` (Hestenes & Stiefel 1952;
    Nocedal & Wright 2006, Algorithm 5.2), from x0 = 0, for at most `iters` iterations or until the residual
    ||b - A x|| <= tol ||b||. `b` and x may be any pytree of arrays.

    This is `jax.scipy.sparse.linalg.cg`: it accepts a function operator, its loop is a `lax.while_loop` (so it
    compiles once for any stopping point and runs under jit; under vmap the members run until the slowest stops
    and the stopped ones are frozen by the loop's batching rule, so each gets its own solution), and
    `lax.custom_linear_solve` makes the solve differentiable. `tol` may be traced; `iters` is static.
    """
    x, _ = jax.scipy.sparse.linalg.cg(matvec, b, tol=tol, maxiter=iters)
    return x


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
