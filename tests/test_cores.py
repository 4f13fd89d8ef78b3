"""Recurrent cores against plain step-by-step references: a Python loop over t, the state zeroed where starts[t]
before step t consumes its input, on sequences with episode starts in the middle and a state carried in from a
previous rollout."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.networks.gtrxl import GTrXLCore
from jaxrl.networks.lru import linear_recurrence
from jaxrl.networks.recurrent import CORES, initial_state, make_core

T, B, F, H = 12, 3, 5, 8


class Wrap(nn.Module):
    """A core alone in a module, as `RecurrentHead` calls it (its parameters under `core/`)."""

    core: object

    @nn.compact
    def __call__(self, h, x, starts):
        return self.core(h, x, starts)


# Test data comes from numpy's generator: eager jax.random calls compile one program per shape (seconds here).


def normal(rng, shape, scale=1.0):
    return jnp.asarray(scale * rng.standard_normal(shape), jnp.float32)


def sequence(seed, t=T, b=B, f=F):
    """Inputs [t, b, f] and starts [t, b]: the first row False (the state carried in is used), starts inside."""
    rng = np.random.default_rng(seed)
    starts = rng.random((t, b)) < 0.25
    starts[0] = [False, True, False][:b]
    starts[5, 0] = True  # at least one start in the middle
    return normal(rng, (t, b, f)), jnp.asarray(starts)


def random_state(core, seed, b=B):
    """A nonzero state of `core`'s shape: the memory a previous rollout left."""
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda leaf: normal(rng, leaf.shape), initial_state(core, b))


def random_params(module, seed, *args, scale=0.5):
    """Parameters of `module` drawn N(0, scale^2) leaf by leaf (shapes from `jax.eval_shape`, no compiled init):
    every parameter nonzero, e.g. GTrXL's distance bias, which initialises to zeros."""
    rng = np.random.default_rng(seed)
    shapes = jax.eval_shape(module.init, jax.random.key(seed), *args)
    return jax.tree.map(lambda a: normal(rng, a.shape, scale), shapes)


def sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def lstm_reference(params, carry, x, starts):
    """The LSTM equations step by step in numpy (float64) from the flax parameters (`nn.LSTMCell`'s names)."""
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params["core"])
    c, h = (np.asarray(a, np.float64) for a in carry)
    x, starts = np.asarray(x, np.float64), np.asarray(starts)
    ys = []
    for t in range(x.shape[0]):
        c = np.where(starts[t][:, None], 0.0, c)
        h = np.where(starts[t][:, None], 0.0, h)

        z = {g: x[t] @ p["i" + g]["kernel"] + h @ p["h" + g]["kernel"] + p["h" + g]["bias"] for g in "ifgo"}
        i, f, g, o = sigmoid(z["i"]), sigmoid(z["f"]), np.tanh(z["g"]), sigmoid(z["o"])
        c = f * c + i * g
        h = o * np.tanh(c)
        ys.append(h)
    return (c, h), np.stack(ys)


def lru_reference(params, h, x, starts):
    """The LRU recurrence step by step in numpy (complex128): h_t = lambda (0 if start_t else h_{t-1}) + gamma B x_t,
    y_t = GELU(Re(C h_t) + D x_t), GELU in its tanh form (flax's default)."""
    p = {k: np.asarray(v, np.float64) for k, v in params["core"].items()}
    lam = np.exp(-np.exp(p["nu_log"]) + 1j * np.exp(p["theta_log"]))
    b = (p["B_re"] + 1j * p["B_im"]) * np.exp(p["gamma_log"])
    c = p["C_re"] + 1j * p["C_im"]
    h = np.asarray(h[0], np.float64) + 1j * np.asarray(h[1], np.float64)
    x, starts = np.asarray(x, np.float64), np.asarray(starts)
    ys = []
    for t in range(x.shape[0]):
        h = lam * np.where(starts[t][:, None], 0.0, h) + x[t] @ b
        y = (h @ c).real + p["D"] * x[t]
        ys.append(0.5 * y * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (y + 0.044715 * y**3))))
    return (h.real, h.imag), np.stack(ys)


def layer_norm(x, p, eps=1e-6):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * p["scale"] + p["bias"]


def linear(x, p):
    return x @ p["kernel"] + p.get("bias", 0.0)


def gate_reference(p, x, y, b_g=2.0):
    r = sigmoid(linear(y, p["W_r"]) + linear(x, p["U_r"]))
    z = sigmoid(linear(y, p["W_z"]) + linear(x, p["U_z"]) - b_g)
    return (1 - z) * x + z * np.tanh(linear(y, p["W_g"]) + linear(r * x, p["U_g"]))


def block_reference(p, x, history, heads):
    """One GTrXL layer on one step x [D] attending to `history` [S, D] (oldest first, ending with x), naively."""
    d = x.shape[-1]
    q = linear(layer_norm(x, p["norm_attention"]), p["query"]).reshape(heads, -1)
    k = linear(layer_norm(history, p["norm_attention"]), p["key"]).reshape(len(history), heads, -1)
    v = linear(layer_norm(history, p["norm_attention"]), p["value"]).reshape(len(history), heads, -1)
    distance = np.arange(len(history))[::-1]
    logits = np.einsum("hd,shd->hs", q, k) / np.sqrt(d // heads) + p["distance_bias"][:, distance]
    w = np.exp(logits - logits.max(-1, keepdims=True))
    y = np.einsum("hs,shd->hd", w / w.sum(-1, keepdims=True), v).reshape(d)
    x = gate_reference(p["gate_attention"], x, np.maximum(linear(y, p["attention_out"]), 0))
    e = linear(np.maximum(linear(layer_norm(x, p["norm_mlp"]), p["mlp_in"]), 0), p["mlp_out"])
    return gate_reference(p["gate_mlp"], x, np.maximum(e, 0))


def gtrxl_reference(core):
    """GTrXL step by step in numpy: per env, per layer, the list of the layer's inputs in the episode so far (the
    valid memory first), cut to the last `window` + 1, attended to naively; the state compared on valid slots."""

    def reference(params, state, x, starts):
        p = jax.tree.map(lambda a: np.asarray(a, np.float64), params["core"])
        memory, valid = (np.asarray(a, np.float64) for a in state)
        x, starts = np.asarray(x, np.float64), np.asarray(starts)
        out = np.zeros(x.shape[:2] + (core.size,))
        memory_out, valid_out = np.zeros_like(memory), np.zeros_like(valid)
        for b in range(x.shape[1]):
            history = [[m for m, ok in zip(memory[b, layer], valid[b], strict=True) if ok] for layer in range(2)]
            for t in range(x.shape[0]):
                if starts[t, b]:
                    history = [[], []]
                h = linear(x[t, b], p["embed"])
                for layer in range(core.num_layers):
                    history[layer] = (history[layer] + [h])[-(core.window + 1) :]
                    h = block_reference(p[f"layer_{layer}"], h, np.stack(history[layer]), core.num_heads)
                out[t, b] = h
            kept = min(len(history[0]), core.window)
            valid_out[b, core.window - kept :] = 1.0
            for layer in range(core.num_layers):
                memory_out[b, layer, core.window - kept :] = np.stack(history[layer][-kept:])
        return (memory_out, valid_out), out

    return reference


REFERENCES = {"lstm": lstm_reference, "lru": lru_reference}


def gtrxl_state(core, seed, b=B):
    """A state a previous rollout could leave: random memory, the last k steps valid (k = 0, 2, W per env)."""
    memory = normal(np.random.default_rng(seed), (b, core.num_layers, core.window, core.size))
    valid = np.zeros((b, core.window), np.float32)
    for j, k in enumerate([0, 2, core.window][:b]):
        valid[j, core.window - k :] = 1.0
    return memory, jnp.asarray(valid)


@pytest.mark.slow
@pytest.mark.parametrize("window", [4, 32])
def test_gtrxl_matches_naive_masked_attention_over_history(window):
    """GTrXL with a window shorter (4) and longer (32) than the sequence against `gtrxl_reference`: outputs
    everywhere, the state on its valid slots (invalid slots are never read)."""
    core = GTrXLCore(H, num_layers=2, num_heads=2, window=window)
    x, starts = sequence(8)
    starts = starts.at[:, 2].set(False)  # env 2 runs the whole sequence on its full, valid memory
    state = gtrxl_state(core, 9)
    params = random_params(Wrap(core), 10, state, x, starts)
    apply = jax.jit(Wrap(core).apply)
    (memory, valid), y = apply(params, state, x, starts)
    (memory_ref, valid_ref), y_ref = gtrxl_reference(core)(params["params"], state, x, starts)
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(valid, valid_ref)
    np.testing.assert_allclose(np.asarray(memory) * valid_ref[:, None, :, None], memory_ref, rtol=1e-5, atol=1e-5)
    # the memory matters where valid and only there
    _, y_zero = apply(params, core.initial_state(B), x, starts)
    assert not np.allclose(y_zero[:, 2], y_ref[:, 2], atol=1e-4)
    np.testing.assert_allclose(y_zero[:, 0], y_ref[:, 0], rtol=1e-5, atol=1e-5)  # env 0: no valid memory


def test_parallel_linear_recurrence_matches_the_loop():
    """`lru.linear_recurrence` (associative scan) against h_t = a_t h_{t-1} + b_t in a loop, with a_t = 0 (resets)
    at some steps, from a nonzero h0, over a long sequence (T = 257, not a power of two)."""
    t, b, n = 257, 3, 4
    rng = np.random.default_rng(7)
    lam = rng.uniform(0.5, 0.999, n) * np.exp(1j * rng.uniform(0, 6.28, n))
    reset = rng.random((t, b)) < 0.05
    a = jnp.asarray(np.where(reset[..., None], 0.0, lam), jnp.complex64)
    bx = jnp.asarray(rng.standard_normal((t, b, n)) + 1j * rng.standard_normal((t, b, n)), jnp.complex64)
    h0 = jnp.asarray(rng.standard_normal((b, n)) + 1j, jnp.complex64)
    states = np.asarray(jax.jit(linear_recurrence)(h0, a, bx))
    h, expected = np.asarray(h0, np.complex128), []
    for i in range(t):
        h = np.asarray(a[i], np.complex128) * h + np.asarray(bx[i], np.complex128)
        expected.append(h)
    np.testing.assert_allclose(states, np.stack(expected), rtol=1e-5, atol=1e-5)
    assert reset[1:].any(axis=0).all() and not reset[0].all(), "resets inside, h0 read"


@pytest.mark.slow
def test_lstm_has_the_flax_cell_parameters_and_a_forget_bias_of_one():
    core = make_core("lstm", H)
    x, starts = sequence(0)
    params = jax.jit(Wrap(core).init)(jax.random.key(2), initial_state(core, B), x, starts)["params"]["core"]
    flax_cell = jax.eval_shape(nn.LSTMCell(H).init, jax.random.key(0), initial_state(core, B), x[0])["params"]
    assert jax.tree.map(lambda a: a.shape, params) == jax.tree.map(lambda a: a.shape, flax_cell)
    np.testing.assert_array_equal(params["hf"]["bias"], 1.0)
    for gate in "igo":
        np.testing.assert_array_equal(params["h" + gate]["bias"], 0.0)


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(REFERENCES))
def test_core_matches_the_step_by_step_reference(kind):
    core = make_core(kind, H)
    x, starts = sequence(0)
    h0 = random_state(core, 1)
    params = jax.jit(Wrap(core).init)(jax.random.key(2), h0, x, starts)
    apply = jax.jit(Wrap(core).apply)
    h_T, y = apply(params, h0, x, starts)
    h_ref, y_ref = REFERENCES[kind](params["params"], h0, x, starts)
    np.testing.assert_allclose(y, y_ref, rtol=1e-5, atol=1e-5)
    jax.tree.map(lambda a, e: np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5), h_T, h_ref)
    # the starts and the carried-in state matter: without either the outputs differ
    _, y_no_reset = apply(params, h0, x, jnp.zeros_like(starts))
    assert not np.allclose(y_no_reset, y_ref, atol=1e-4)
    _, y_zero = apply(params, initial_state(core, B), x, starts)
    assert not np.allclose(y_zero[:, 0], y_ref[:, 0], atol=1e-4), "env 0 has no start at t = 0: h0 is read"
    np.testing.assert_allclose(y_zero[:, 1], y_ref[:, 1], rtol=1e-5, atol=1e-5)  # env 1 starts at t = 0


@pytest.mark.slow
@pytest.mark.parametrize("kind", [k for k in CORES if k != "none"])
def test_one_step_calls_chain_to_the_sequence_call(kind):
    """The rollout's T = 1 calls, chained, give the learner's sequence call: the same function."""
    core = make_core(kind, H)
    x, starts = sequence(3)
    h = random_state(core, 4)
    params = random_params(Wrap(core), 5, h, x, starts)
    h_T, y = jax.jit(Wrap(core).apply)(params, h, x, starts)
    step = jax.jit(Wrap(core).apply)
    ys = []
    for t in range(T):
        h, y_t = step(params, h, x[t : t + 1], starts[t : t + 1])
        ys.append(y_t[0])
    np.testing.assert_allclose(np.stack(ys), y, rtol=1e-5, atol=1e-5)
    jax.tree.map(lambda a, e: np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-5), h, h_T)


@pytest.mark.parametrize("kind", CORES)
def test_initial_state_is_float32_zeros_batched(kind):
    state = initial_state(make_core(kind, H), 4)
    for leaf in jax.tree.leaves(state):
        assert leaf.shape[0] == 4 and leaf.dtype == jnp.float32 and not np.any(np.asarray(leaf))
