"""The reference TD errors (tests/td_reference.py) against NumPy references and rlax; jaxrl.losses' action_value,
Huber / L2."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import rlax
import td_reference

from jaxrl import losses

B, A, GAMMA = 64, 3, 0.9


@pytest.fixture(scope="module")
def inputs():
    """Random batch with terminal steps (about a quarter); q_t_online's argmax differs from q_t's on many rows."""
    rng = np.random.default_rng(0)
    q_tm1 = rng.normal(size=(B, A)).astype(np.float32)
    a_tm1 = rng.integers(0, A, B).astype(np.int32)
    r_t = rng.normal(size=B).astype(np.float32)
    terminated = rng.random(B) < 0.25
    q_t = rng.normal(size=(B, A)).astype(np.float32)
    q_t_online = rng.normal(size=(B, A)).astype(np.float32)
    a_t = rng.integers(0, A, B).astype(np.int32)
    probs_t = rng.dirichlet(np.ones(A), B).astype(np.float32)
    assert terminated.any() and not terminated.all()
    return dict(
        q_tm1=q_tm1,
        a_tm1=a_tm1,
        q_tm1_a=q_tm1[np.arange(B), a_tm1],
        r_t=r_t,
        terminated=terminated,
        q_t=q_t,
        q_t_online=q_t_online,
        a_t=a_t,
        probs_t=probs_t,
    )


def numpy_td(x, bootstrap):
    """Reference: r + gamma (1 - terminated) bootstrap - Q(s_tm1, a_tm1), row by row in float64."""
    out = np.empty(B)
    for i in range(B):
        target = x["r_t"][i] + (0.0 if x["terminated"][i] else GAMMA * bootstrap(i))
        out[i] = target - x["q_tm1_a"][i]
    return out


CASES = {
    "q_learning": (
        lambda x: td_reference.q_learning_td(x["q_tm1_a"], x["r_t"], x["terminated"], x["q_t"], GAMMA),
        lambda x: lambda i: np.max(x["q_t"][i]),
        lambda x, d: jax.vmap(rlax.q_learning)(x["q_tm1"], x["a_tm1"], x["r_t"], d, x["q_t"]),
    ),
    "double_q_learning": (
        lambda x: td_reference.double_q_learning_td(
            x["q_tm1_a"], x["r_t"], x["terminated"], x["q_t"], x["q_t_online"], GAMMA
        ),
        lambda x: lambda i: x["q_t"][i][np.argmax(x["q_t_online"][i])],
        lambda x, d: jax.vmap(rlax.double_q_learning)(x["q_tm1"], x["a_tm1"], x["r_t"], d, x["q_t"], x["q_t_online"]),
    ),
    "sarsa": (
        lambda x: td_reference.sarsa_td(x["q_tm1_a"], x["r_t"], x["terminated"], x["q_t"], x["a_t"], GAMMA),
        lambda x: lambda i: x["q_t"][i][x["a_t"][i]],
        lambda x, d: jax.vmap(rlax.sarsa)(x["q_tm1"], x["a_tm1"], x["r_t"], d, x["q_t"], x["a_t"]),
    ),
    "expected_sarsa": (
        lambda x: td_reference.expected_sarsa_td(
            x["q_tm1_a"], x["r_t"], x["terminated"], x["q_t"], x["probs_t"], GAMMA
        ),
        lambda x: lambda i: np.dot(np.float64(x["q_t"][i]), x["probs_t"][i]),
        lambda x, d: jax.vmap(rlax.expected_sarsa)(x["q_tm1"], x["a_tm1"], x["r_t"], d, x["q_t"], x["probs_t"]),
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_td_error_matches_numpy_and_rlax(inputs, name):
    ours, bootstrap, oracle = CASES[name]
    td = np.asarray(ours(inputs))
    np.testing.assert_allclose(td, numpy_td(inputs, bootstrap(inputs)), rtol=1e-5, atol=1e-5)
    discount_t = (GAMMA * (1.0 - inputs["terminated"])).astype(np.float32)
    np.testing.assert_allclose(td, np.asarray(oracle(inputs, discount_t)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", CASES)
def test_gradient_reaches_only_q_tm1(inputs, name):
    """Targets are under stop_gradient: d(td)/d(q_t) = 0 and d(td)/d(q_tm1_a) = -1."""
    ours = CASES[name][0]

    def total(q_tm1_a, q_t):
        return ours({**inputs, "q_tm1_a": q_tm1_a, "q_t": q_t}).sum()

    g_tm1, g_t = jax.grad(total, argnums=(0, 1))(jnp.asarray(inputs["q_tm1_a"]), jnp.asarray(inputs["q_t"]))
    np.testing.assert_array_equal(np.asarray(g_tm1), -np.ones(B))
    np.testing.assert_array_equal(np.asarray(g_t), np.zeros((B, A)))


def test_terminated_bootstraps_zero_truncated_bootstraps_from_q_t():
    q_t = jnp.array([[1.0, 5.0], [1.0, 5.0]])
    td = td_reference.q_learning_td(jnp.zeros(2), jnp.ones(2), jnp.array([True, False]), q_t, 0.5)
    np.testing.assert_allclose(td, [1.0, 1.0 + 0.5 * 5.0])


def test_any_leading_batch_shape():
    """[T, N] inputs give the same as the flattened batch."""
    rng = np.random.default_rng(1)
    q_tm1_a, r_t = rng.normal(size=(2, 5, 4)).astype(np.float32)
    terminated = rng.random((5, 4)) < 0.3
    q_t = rng.normal(size=(5, 4, A)).astype(np.float32)
    td = td_reference.q_learning_td(q_tm1_a, r_t, terminated, q_t, GAMMA)
    flat = td_reference.q_learning_td(
        q_tm1_a.reshape(-1), r_t.reshape(-1), terminated.reshape(-1), q_t.reshape(-1, A), GAMMA
    )
    chex.assert_shape(td, (5, 4))
    np.testing.assert_allclose(td.reshape(-1), flat)


def test_shape_mismatch_raises():
    with pytest.raises(AssertionError):
        td_reference.q_learning_td(jnp.zeros(4), jnp.zeros(3), jnp.zeros(4, bool), jnp.zeros((4, A)), GAMMA)
    with pytest.raises(AssertionError):  # q_t without the action axis
        td_reference.q_learning_td(jnp.zeros(4), jnp.zeros(4), jnp.zeros(4, bool), jnp.zeros(4), GAMMA)


def test_action_value():
    q = jnp.arange(12.0).reshape(2, 2, 3)
    np.testing.assert_array_equal(losses.action_value(q, jnp.array([[0, 2], [1, 1]])), [[0.0, 5.0], [7.0, 10.0]])


@pytest.mark.slow
def test_huber_and_l2():
    x = jnp.linspace(-4.0, 4.0, 81)
    for delta in (0.5, 1.0, 2.0):
        np.testing.assert_allclose(losses.huber(x, delta), optax.huber_loss(x, delta=delta), rtol=1e-6)
        ref = np.where(np.abs(x) <= delta, 0.5 * x**2, delta * (np.abs(x) - 0.5 * delta))
        np.testing.assert_allclose(losses.huber(x, delta), ref, rtol=1e-6)
        # the gradient is the error clipped to [-delta, delta]
        grad = jax.vmap(jax.grad(lambda e, d=delta: losses.huber(e, d)))(x)
        np.testing.assert_allclose(grad, np.clip(x, -delta, delta), atol=1e-6)
    np.testing.assert_allclose(losses.l2(x), 0.5 * x**2)
