"""The matrix-product floor of a step: the `dot_general`s its program must do, run alone.

`dots(fn, *args)` traces `fn` to its jaxpr and lists every `dot_general` in it, nested jaxprs included (jit, custom
derivatives, the transposed products of a gradient), with its operand shapes, dtypes and dimension numbers, as the
compiled program runs it (`as_run`: a product without batch axes has its free axes merged). A product
inside a `lax.scan` counts `length` times; of a `lax.cond`'s branches the one with the most FLOPs counts; a
`lax.while_loop` (no static trip count) is refused.

`distinct(dots)` merges products of the same shapes, dtypes and dimension numbers (their counts add up).
`products_only(dots, iterations)` is a program that does exactly those products, one after another, `iterations`
times in a `lax.scan`, and nothing else but what keeps XLA from hoisting them out of the loop or running them at
once: one element of each left operand (carried by the loop, so updated in place) moves by 1e-30 times the first
element of the product before it, which joins a running total (two one-element operations per product). A
product whose [..., m, n] output the program transposes to [..., n, m] (JAX's reverse mode writes x^T g as
(g^T x)^T where the axes come in that order, vmapped or not) is run with that transpose, as the program runs it:
XLA then writes the output as [..., n, m] directly. Without it, DQN's first layer's weight gradient,
[128, 120]^T x [128, 4], wrote 4-column rows and took 2.4x the time.

A step's floor here is the sum over its distinct products of each one's time alone (`products_only([dot])`), times
its count: what the step's arithmetic costs on this machine, each product run as fast as the machine runs it alone.
A step's time over the floor is what its other operations (elementwise, gathers, random bits, the optimiser) and
their dispatch cost. (All of a step's products in one program do not time reliably: XLA's CPU runtime may run
independent ones at once on several cores, by as much as it happens to between compiles.)

FLOPs of one product: 2 x (the number of output elements) x (the contracted size), as XLA's cost analysis counts a
dot (tests/test_benchmark_products.py checks one against the other).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp


class Dot(NamedTuple):
    """One `lax.dot_general` of a traced program, and how many times one call of the program runs it."""

    lhs_shape: tuple[int, ...]
    rhs_shape: tuple[int, ...]
    lhs_dtype: jnp.dtype
    rhs_dtype: jnp.dtype
    dimension_numbers: tuple
    preferred_element_type: jnp.dtype | None
    count: int = 1
    transposed: bool = False  # the program swaps its output's last two axes, so XLA may write them swapped

    @property
    def flops(self) -> int:
        """2 x output elements x contracted size, for one run of the product."""
        (_, rhs_contract), (_, rhs_batch) = self.dimension_numbers
        rhs_free = [d for i, d in enumerate(self.rhs_shape) if i not in rhs_contract and i not in rhs_batch]
        return 2 * math.prod(self.lhs_shape) * math.prod(rhs_free)


def _sub_jaxprs(params: dict) -> list:
    """The jaxprs an equation's parameters hold (a closed jaxpr's inner jaxpr; a cond's branches)."""
    found = []
    for value in params.values():
        for item in value if isinstance(value, tuple | list) else (value,):
            if hasattr(item, "eqns"):
                found.append(item)
            elif hasattr(getattr(item, "jaxpr", None), "eqns"):
                found.append(item.jaxpr)
    return found


def as_run(lhs_shape: tuple[int, ...], rhs_shape: tuple[int, ...], dimension_numbers: tuple):
    """(lhs_shape, rhs_shape, dimension_numbers) of the product XLA's CPU compiler runs for a traced one without
    batch axes: each operand's free axes merged into one and its contracting axes into one, in their order (where
    each group is contiguous). A network applied to [T, B, K] inputs traces a [T, B, K] x [K, N] product, and the
    compiled program runs [T B, K] x [K, N]. Timed alone in the traced form, DQN's three [1, 128, ...] products
    took 1.3x the seconds of the form it runs (AMD EPYC, one thread). The FLOPs are the same."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers

    def merged(shape, contract):
        free = [axis for axis in range(len(shape)) if axis not in contract]
        groups = (free, list(contract))
        if len(shape) <= 2 or not free or any(list(g) != list(range(g[0], g[0] + len(g))) for g in groups):
            return None
        sizes = (math.prod(shape[a] for a in free), math.prod(shape[a] for a in contract))
        return (sizes, (1,)) if free[0] < contract[0] else (sizes[::-1], (0,))

    if lhs_batch or rhs_batch:
        return lhs_shape, rhs_shape, dimension_numbers
    lhs, rhs = merged(lhs_shape, lhs_contract), merged(rhs_shape, rhs_contract)
    if lhs is None and rhs is None:
        return lhs_shape, rhs_shape, dimension_numbers
    lhs = lhs or (lhs_shape, lhs_contract)
    rhs = rhs or (rhs_shape, rhs_contract)
    if len(lhs[1]) != len(rhs[1]):  # one operand's contracting axes merged, the other's several: as traced
        return lhs_shape, rhs_shape, dimension_numbers
    return lhs[0], rhs[0], ((tuple(lhs[1]), tuple(rhs[1])), ((), ()))


def _swaps_last_two(permutation: tuple[int, ...]) -> bool:
    n = len(permutation)
    return n >= 2 and tuple(permutation) == (*range(n - 2), n - 1, n - 2)


def _transposed_matrices(jaxpr) -> set:
    """The variables of `jaxpr` that a `transpose` of their last two axes reads: JAX's transpose of a product
    whose contraction leaves the operands' free axes in the other order (x^T g computed as (g^T x)^T), batched or
    not."""
    return {
        eqn.invars[0]
        for eqn in jaxpr.eqns
        if eqn.primitive.name == "transpose" and _swaps_last_two(eqn.params["permutation"])
    }


def _dots_of(jaxpr, count: int) -> list[Dot]:
    found = []
    transposed = _transposed_matrices(jaxpr)
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name == "dot_general":
            lhs, rhs = (v.aval for v in eqn.invars)
            lhs_shape, rhs_shape, numbers = as_run(tuple(lhs.shape), tuple(rhs.shape), eqn.params["dimension_numbers"])
            preferred = eqn.params.get("preferred_element_type")
            flipped = eqn.outvars[0] in transposed
            found.append(Dot(lhs_shape, rhs_shape, lhs.dtype, rhs.dtype, numbers, preferred, count, flipped))
        elif name == "while":
            if any(_dots_of(sub, 1) for sub in _sub_jaxprs(eqn.params)):
                raise ValueError("a lax.while_loop runs products an unknown number of times: trace one step of it")
        elif name == "cond":
            branches = [_dots_of(sub, count) for sub in _sub_jaxprs(eqn.params)]
            found += max(branches, key=lambda ds: sum(d.flops * d.count for d in ds), default=[])
        else:
            times = count * eqn.params["length"] if name == "scan" else count
            for sub in _sub_jaxprs(eqn.params):
                found += _dots_of(sub, times)
    return found


def dots(fn: Callable, *args) -> list[Dot]:
    """Every matrix product one call of `fn(*args)` runs (see the module's docstring)."""
    return _dots_of(jax.make_jaxpr(fn)(*args).jaxpr, 1)


def flops(found: list[Dot]) -> int:
    """FLOPs of one call: every product's, times its count."""
    return sum(d.flops * d.count for d in found)


def _operand(key: jax.Array, shape: tuple[int, ...], dtype) -> jax.Array:
    if jnp.issubdtype(dtype, jnp.floating):
        return jax.random.normal(key, shape, dtype)
    return jnp.ones(shape, dtype)


def distinct(found: list[Dot]) -> list[Dot]:
    """`found` with the products of one shape, dtype and dimension numbers merged, their counts summed."""
    merged: dict[Dot, int] = {}
    for d in found:
        merged[d._replace(count=1)] = merged.get(d._replace(count=1), 0) + d.count
    return [d._replace(count=count) for d, count in merged.items()]


def products_only(found: list[Dot], iterations: int) -> Callable[[jax.Array], jax.Array]:
    """`program(key) -> scalar`: the products of `found` (each `count` times), one after another, in a scan of
    `iterations`."""
    runs = [d for d in found for _ in range(d.count)]

    def program(key):
        keys = jax.random.split(key, (len(runs), 2))
        lhss = [_operand(k[0], d.lhs_shape, d.lhs_dtype) for d, k in zip(runs, keys, strict=True)]
        rhss = [_operand(k[1], d.rhs_shape, d.rhs_dtype) for d, k in zip(runs, keys, strict=True)]

        def one(carry, _):
            last, lhss = carry
            total, moved = last, []
            for d, lhs, rhs in zip(runs, lhss, rhss, strict=True):
                lhs = lhs.at[(0,) * lhs.ndim].add((1e-30 * last).astype(lhs.dtype))  # in place: one element
                out = jax.lax.dot_general(
                    lhs, rhs, d.dimension_numbers, preferred_element_type=d.preferred_element_type
                )
                out = jnp.swapaxes(out, -1, -2) if d.transposed else out
                last = jax.lax.optimization_barrier(out).ravel()[0].astype(jnp.float32)  # all of it is computed
                total = total + last
                moved.append(lhs)
            return (total, moved), None

        return jax.lax.scan(one, (jnp.zeros((), jnp.float32), lhss), None, iterations)[0][0]

    return program
