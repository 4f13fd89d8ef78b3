"""Gradient clipping (`optim.gradient_clipping`): a finite `max_grad_norm` rescales a gradient to that global norm,
inf leaves it alone, given as a number (nothing compiled) or traced (a sweep), and a Config and the command line take
inf for `max_grad_norm` and no other field."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxrl import cli, optim
from jaxrl.algos import dqn, ppo

PARAMS = {"w": jnp.ones((3, 4)), "b": jnp.zeros(4)}
LARGE = {"w": jnp.full((3, 4), 100.0), "b": jnp.arange(4.0) - 50.0}  # global norm ~ 370


def global_norm(tree) -> float:
    return float(np.sqrt(sum(np.sum(np.asarray(x, np.float64) ** 2) for x in jax.tree.leaves(tree))))


def clipped(max_grad_norm, grads=LARGE):
    transform = optim.gradient_clipping(max_grad_norm)
    return transform.update(grads, transform.init(PARAMS), PARAMS)[0]


def test_a_finite_threshold_rescales_to_it_and_keeps_a_small_gradient():
    assert global_norm(clipped(0.5)) == pytest.approx(0.5, rel=1e-5)
    small = jax.tree.map(lambda g: g * 1e-3, LARGE)  # norm ~ 0.37 < 0.5
    jax.tree.map(np.testing.assert_array_equal, clipped(0.5, small), small)


@pytest.mark.parametrize("traced", [False, True], ids=["number", "traced"])
def test_inf_leaves_the_gradient_alone(traced):
    out = jax.jit(clipped)(math.inf) if traced else clipped(math.inf)
    jax.tree.map(np.testing.assert_array_equal, out, LARGE)


def test_inf_as_a_number_compiles_no_clipping_and_keeps_the_state_shape():
    def update(max_grad_norm):
        tx = optim.clipped_optimizer("adam", 1e-3, max_grad_norm)
        return tx.update(LARGE, tx.init(PARAMS), PARAMS)

    plain = optax.flatten(optax.adam(1e-3, eps=1e-5))  # clipped_optimizer runs on the raveled parameters
    plain_update = lambda: plain.update(LARGE, plain.init(PARAMS), PARAMS)[0]  # noqa: E731
    size = lambda fn: len(jax.make_jaxpr(fn)().eqns)  # noqa: E731
    assert size(lambda: update(math.inf)[0]) == size(plain_update) < size(lambda: update(0.5)[0])
    finite, unlimited = update(0.5), update(math.inf)
    assert jax.tree.structure(finite[1]) == jax.tree.structure(unlimited[1])  # a saved state fits either
    jax.tree.map(np.testing.assert_array_equal, unlimited[0], plain_update())


def test_a_config_takes_inf_for_max_grad_norm_and_nothing_else():
    dqn.validate(dqn.Config(max_grad_norm=math.inf))
    for field, value in (("max_grad_norm", -math.inf), ("max_grad_norm", math.nan), ("learning_rate", math.inf)):
        with pytest.raises(ValueError, match=f"{field}.*finite"):
            ppo.validate(dataclasses.replace(ppo.Config(), **{field: value}))


def test_the_command_line_takes_inf_for_max_grad_norm_and_nothing_else():
    args = cli.build_parser().parse_args(["train", "dqn", "--max-grad-norm", "inf"])
    assert cli.config_from_args(dqn.Config, args).max_grad_norm == math.inf
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["train", "dqn", "--learning-rate", "inf"])
