"""Gradients of large minibatches in chunks: the same mean gradient and statistics, and PPO's update the same."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_trees_close
from jaxrl import minibatch
from jaxrl.algos import ppo


def _regression_grad(params, batch):
    """The gradient of a mean squared error over samples, with its mean prediction as a statistic."""

    def loss(params):
        prediction = jnp.tanh(batch["x"] @ params["w"]) @ params["v"]
        return jnp.mean((prediction - batch["y"]) ** 2), {"prediction": prediction.mean()}

    return jax.grad(loss, has_aux=True)(params)


@pytest.mark.parametrize("size, rows", [(96, 32), (100, 32), (20, 32)])
def test_gradient_in_chunks_is_the_mean_over_the_whole_minibatch(size, rows):
    """Chunks of `rows` samples (and a shorter one for the rest, or none at all under `rows`) give the whole
    minibatch's mean gradient and mean statistic, to float32 rounding, with one scan over the full chunks."""
    keys = jax.random.split(jax.random.key(0), 4)
    params = {"w": jax.random.normal(keys[0], (3, 8)), "v": jax.random.normal(keys[1], (8,))}
    batch = {"x": jax.random.normal(keys[2], (size, 3)), "y": jax.random.normal(keys[3], (size,))}
    chunked = minibatch.gradient_in_chunks(_regression_grad, rows)
    assert_trees_close(jax.jit(chunked)(params, batch), jax.jit(_regression_grad)(params, batch), rtol=1e-5, atol=1e-6)
    scans = [e for e in jax.make_jaxpr(chunked)(params, batch).jaxpr.eqns if e.primitive.name == "scan"]
    assert [e.params["length"] for e in scans] == ([size // rows] if size >= rows else [])


@pytest.mark.slow
def test_ppo_takes_a_large_minibatch_gradient_in_chunks_with_the_advantages_normalised_over_it(monkeypatch):
    """PPO's update with its minibatches of 128 samples taken in chunks of 48 (and one of 32) trains to the
    parameters of the update without chunks, to float32 rounding: the advantages are normalised over the whole
    minibatch before it is cut (per chunk they would move every gradient). Minibatches of at most
    GRADIENT_CHUNKS_FROM samples take no chunks: the same program."""
    config = ppo.Config(num_envs=16, num_steps=16, total_timesteps=16 * 16 * 2, update_epochs=2, num_minibatches=2)
    setup = ppo.setup(config)
    state = jax.jit(lambda key: ppo.init(setup, config, key))(jax.random.key(3))

    def updated():
        return jax.jit(lambda s: ppo.update(setup, config, s))(state)

    def scans_of_length(length):
        from jax.extend.core import jaxprs_in_params

        def visit(jaxpr):
            for eqn in jaxpr.eqns:
                if eqn.primitive.name == "scan" and eqn.params["length"] == length:
                    yield eqn
                for sub in jaxprs_in_params(eqn.params):
                    yield from visit(sub)

        return list(visit(jax.make_jaxpr(lambda s: ppo.update(setup, config, s))(state).jaxpr))

    whole, whole_metrics = updated()
    monkeypatch.setattr(minibatch, "GRADIENT_CHUNKS_FROM", 64)
    monkeypatch.setattr(minibatch, "GRADIENT_CHUNK_ROWS", 48)
    chunked, chunked_metrics = updated()
    assert scans_of_length(128 // 48)  # the chunks' scan is in the program
    assert_trees_close(chunked.params, whole.params, rtol=1e-4, atol=1e-6)
    for name in ("policy_loss", "value_loss", "entropy", "approx_kl"):
        np.testing.assert_allclose(chunked_metrics[name], whole_metrics[name], rtol=1e-4, atol=1e-6)
    moved = jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), whole.params, state.params)
    assert max(jax.tree.leaves(moved)) > 1e-3  # the update moved the parameters by far more than the tolerance

    monkeypatch.setattr(minibatch, "GRADIENT_CHUNKS_FROM", 128)
    again, _ = updated()
    assert_trees_close(again.params, whole.params, rtol=0, atol=0)
