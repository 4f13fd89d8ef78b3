"""Gradients of large minibatches in chunks: the same mean gradient and statistics, and PPO's update the same."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_trees_close, eqns_named, index
from jaxrl import minibatch, parallel
from jaxrl.algos import ALGORITHMS, ppo
from jaxrl.run.compile import compiler_options


def _regression_grad(params, batch):
    """The gradient of a mean squared error over samples, with its mean prediction as a statistic."""

    def loss(params):
        prediction = jnp.tanh(batch["x"] @ params["w"]) @ params["v"]
        return jnp.mean((prediction - batch["y"]) ** 2), {"prediction": prediction.mean()}

    return jax.grad(loss, has_aux=True)(params)


def _traced_afresh(fn, options=None):
    """`call(*args)`: `jax.jit(fn)(*args)` traced afresh on every call (jit and make_jaxpr cache a function's
    trace, and the chunk sizes are read when it is traced), compiled with XLA `options`; `call.jaxpr` is the program
    its last call ran."""

    def call(*args):
        traced = jax.jit(lambda *a: fn(*a)).trace(*args)
        call.jaxpr = traced.jaxpr
        return traced.lower().compile(options)(*args)

    call.fn = fn
    return call


def _init_and_update(algo, config, seed: int, options=None):
    """(setup, the state `algo.init` makes under key `seed`, update(state) -> (state, metrics), traced afresh on
    every call and compiled with XLA `options`, with `update.jaxpr` the program of its last call)."""
    setup = algo.setup(config)
    state = jax.jit(lambda key: algo.init(setup, config, key))(jax.random.key(seed))
    return setup, state, _traced_afresh(lambda s: algo.update(setup, config, s), options)


def _chunks(monkeypatch, above: int, rows: int) -> None:
    """Gradients in chunks of `rows` samples for batches of more than `above` samples."""
    monkeypatch.setattr(minibatch, "GRADIENT_CHUNKS_FROM", above)
    monkeypatch.setattr(minibatch, "GRADIENT_CHUNK_ROWS", rows)


def _largest_move(new, old) -> float:
    """The largest change of any parameter between two parameter trees."""
    return max(jax.tree.leaves(jax.tree.map(lambda a, b: float(jnp.max(jnp.abs(a - b))), new, old)))


@pytest.mark.parametrize("size, rows", [(96, 32), (100, 32), (20, 32)])
def test_gradient_in_chunks_is_the_mean_over_the_whole_minibatch(size, rows):
    """Chunks of `rows` samples (and a shorter one for the rest, or none at all under `rows`) give the whole
    minibatch's mean gradient and mean statistic, to float32 rounding, with one scan over the full chunks; lowered
    for a GPU, the whole minibatch at once."""
    keys = jax.random.split(jax.random.key(0), 4)
    params = {"w": jax.random.normal(keys[0], (3, 8)), "v": jax.random.normal(keys[1], (8,))}
    batch = {"x": jax.random.normal(keys[2], (size, 3)), "y": jax.random.normal(keys[3], (size,))}
    chunked = minibatch.gradient_in_chunks(_regression_grad, rows)
    assert_trees_close(jax.jit(chunked)(params, batch), jax.jit(_regression_grad)(params, batch), rtol=1e-5, atol=1e-6)
    scans = eqns_named(jax.make_jaxpr(chunked)(params, batch).jaxpr, "scan")
    assert [e.params["length"] for e in scans] == ([size // rows] if size >= rows else [])
    assert _while_loops_lowered_for("cpu", chunked, params, batch) == len(scans)
    assert _while_loops_lowered_for("cuda", chunked, params, batch) == 0


@pytest.mark.slow
@pytest.mark.parametrize(  # PPO's case covers the shared epochs; IMPALA's own two functions: extended tier
    "name", ["ppo", pytest.param("impala", marks=pytest.mark.extended)]
)
def test_a_large_minibatch_gradient_in_chunks_with_the_advantages_normalised_over_it(name, monkeypatch):
    """PPO's and IMPALA's updates with their minibatches of 128 samples taken in chunks of 48 (and one of 32) train
    to the parameters of the updates without chunks, to float32 rounding: the advantages are normalised over the
    whole minibatch before it is cut (per chunk they would move every gradient). Minibatches of at most
    GRADIENT_CHUNKS_FROM samples take no chunks: the same program."""
    algo = ALGORITHMS[name]
    config = algo.Config(num_envs=16, num_steps=16, total_timesteps=16 * 16 * 2, update_epochs=2, num_minibatches=2)
    if name == "impala":
        config = config.replace(normalize_advantages=True)
    _, state, update = _init_and_update(algo, config, 3)
    whole, whole_metrics = update(state)
    whole_program = update.jaxpr
    _chunks(monkeypatch, 64, 48)
    chunked, chunked_metrics = update(state)
    assert _scans_in(update.jaxpr, 128 // 48)  # the chunks' scan
    assert_trees_close(chunked.params, whole.params, rtol=1e-4, atol=1e-6)
    for stat in ("policy_loss", "value_loss", "entropy"):
        np.testing.assert_allclose(chunked_metrics[stat], whole_metrics[stat], rtol=1e-4, atol=1e-6)
    assert _largest_move(whole.params, state.params) > 1e-3  # by far more than the tolerance

    monkeypatch.setattr(minibatch, "GRADIENT_CHUNKS_FROM", 128)
    assert _same_program(update.fn, whole_program, state)


def test_gradient_in_chunks_cuts_sequence_minibatches_into_whole_sequences():
    """With `axes=(1, 0)` a sequence minibatch (steps [T, B, ...], initial [B, ...]) is cut along B: each chunk
    holds whole sequences with their own initial states, and the chunks' mean is the whole minibatch's gradient
    (a chunk that paired a sequence with another's initial state would differ)."""
    T, B, rows = 5, 7, 3
    keys = jax.random.split(jax.random.key(1), 4)
    params = {"w": jax.random.normal(keys[0], (2, 4)), "u": jax.random.normal(keys[1], (4, 4))}
    steps = {"x": jax.random.normal(keys[2], (T, B, 2))}
    initial = jax.random.normal(keys[3], (B, 4))

    def grad_fn(params, sequence_minibatch):
        steps, initial = sequence_minibatch

        def loss(params):
            def step(h, x):
                h = jnp.tanh(x @ params["w"] + h @ params["u"])
                return h, h.sum(-1)

            _, outputs = jax.lax.scan(step, initial, steps["x"])
            return jnp.mean(outputs**2), {"last": outputs[-1].mean()}

        return jax.grad(loss, has_aux=True)(params)

    chunked = minibatch.gradient_in_chunks(grad_fn, rows, axes=(1, 0))
    assert_trees_close(
        jax.jit(chunked)(params, (steps, initial)), jax.jit(grad_fn)(params, (steps, initial)), rtol=1e-5, atol=1e-6
    )
    assert _scans_of_length(chunked, B // rows, params, (steps, initial))  # 2 chunks of 3 sequences, 1 of 1


def _scans_of_length(fn, length, *args):
    """The scans of `length` steps in the program of `fn(*args)`, traced afresh (make_jaxpr caches by function)."""
    return _scans_in(jax.make_jaxpr(lambda *a: fn(*a))(*args), length)


def _scans_in(jaxpr, length):
    """The scans of `length` steps in a program (a closed jaxpr)."""
    return [e for e in eqns_named(jaxpr.jaxpr, "scan") if e.params["length"] == length]


def _same_program(fn, jaxpr, *args) -> bool:
    """Whether `fn(*args)`, traced afresh, is the program `jaxpr`: then it computes the same bits."""
    return str(jax.make_jaxpr(lambda *a: fn(*a))(*args)) == str(jaxpr)


def _while_loops_lowered_for(platform: str, fn, *args) -> int:
    return jax.export.export(jax.jit(fn), platforms=(platform,))(*args).mlir_module().count("stablehlo.while")


@pytest.mark.slow
def test_recurrent_ppo_takes_a_large_minibatch_gradient_in_chunks_of_whole_sequences_when_data_parallel(monkeypatch):
    """Recurrent PPO (GRU) on 2 emulated devices, each with minibatches of 10 sequences x 8 steps taken in chunks of
    3 sequences (and one of 1), trains to the parameters of the update without chunks, to float32 rounding, the
    advantages normalised over the whole minibatch of both devices. On one device, or at most
    GRADIENT_CHUNKS_FROM samples, the same program as without chunks."""
    config = ppo.Config(
        num_envs=40,
        num_steps=8,
        total_timesteps=40 * 8 * 2,
        update_epochs=2,
        num_minibatches=2,
        core="gru",
        core_size=8,
    )
    local = parallel.local_config(config, 2)
    setup = ppo.setup(local)
    state = jax.jit(jax.vmap(lambda key: ppo.init(setup, local, key)))(jax.random.split(jax.random.key(4), 2))

    update = _traced_afresh(parallel.emulate(lambda s: ppo.update(setup, local, s), 2, in_axes=0, out_axes=0))

    def one_device(s):
        return ppo.update(setup, local, s)

    whole, whole_metrics = update(state)
    whole_program = update.jaxpr
    assert not _scans_in(whole_program, 3)
    monkeypatch.setattr(minibatch, "GRADIENT_CHUNKS_FROM", 32)
    monkeypatch.setattr(minibatch, "GRADIENT_SEQUENCE_CHUNK_SAMPLES", 3 * 8)
    chunked, chunked_metrics = update(state)
    assert _scans_in(update.jaxpr, 10 // 3)  # the chunks' scan is in the program
    assert not _scans_of_length(one_device, 10 // 3, index(state, 0))  # one device: the whole minibatch
    assert_trees_close(chunked.params, whole.params, rtol=1e-4, atol=1e-6)
    for name in ("policy_loss", "value_loss", "entropy", "approx_kl"):
        np.testing.assert_allclose(chunked_metrics[name], whole_metrics[name], rtol=1e-4, atol=1e-6)
    assert _largest_move(whole.params, state.params) > 1e-3

    monkeypatch.setattr(minibatch, "GRADIENT_CHUNKS_FROM", 80)
    assert _same_program(update.fn, whole_program, state)


@pytest.mark.slow
def test_reinforce_takes_a_large_masked_batch_gradient_in_chunks_weighted_by_its_mask(monkeypatch):
    """REINFORCE learning from whole episodes masks out the steps after each env's first episode; its batch of
    8 envs x 64 steps taken in chunks of 100 samples (and one of 12) trains to the parameters of the whole
    batch's masked mean, to float32 rounding: each sample weighted by mask * n / sum(mask). Unweighted chunks
    (a plain mean over all samples) would count the masked steps; so would per-chunk normalisation."""
    from jaxrl.algos import reinforce

    config = reinforce.Config(num_envs=8, num_steps=64, total_timesteps=8 * 64, whole_episodes=True)
    _, state, update = _init_and_update(reinforce, config, 5)
    whole, whole_metrics = update(state)
    assert not _scans_in(update.jaxpr, 512 // 100)
    assert 0.05 < float(whole_metrics["valid_fraction"]) < 0.95  # some steps are masked out, some are not
    _chunks(monkeypatch, 256, 100)
    chunked, chunked_metrics = update(state)
    assert _scans_in(update.jaxpr, 512 // 100)
    assert_trees_close(chunked.params, whole.params, rtol=1e-4, atol=1e-6)
    for name in ("policy_loss", "value_loss", "entropy", "kl"):
        np.testing.assert_allclose(chunked_metrics[name], whole_metrics[name], rtol=1e-4, atol=1e-6)
    assert _largest_move(whole.params, state.params) > 1e-3


@pytest.mark.slow
def test_grpo_takes_a_large_minibatch_gradient_in_chunks_weighted_by_its_mask(monkeypatch):
    """GRPO's minibatches of grouped steps (steps after a member's episode ended are masked out) with a KL
    reference, taken in chunks of 50 samples, train to the parameters of the whole minibatches' masked means,
    to float32 rounding."""
    from jaxrl.algos import grpo

    config = grpo.Config(kl_reference="initial", update_epochs=2, num_minibatches=2)
    setup, state, update = _init_and_update(grpo, config, 6)
    batch = jax.eval_shape(lambda s, k: grpo.collect(setup, config, s, k)[0], state, jax.random.key(0))
    samples = math.prod(batch["mask"].shape) // config.num_minibatches
    whole, whole_metrics = update(state)
    assert not _scans_in(update.jaxpr, samples // 50)
    _chunks(monkeypatch, samples - 1, 50)
    chunked, chunked_metrics = update(state)
    assert _scans_in(update.jaxpr, samples // 50)
    mask = jax.jit(lambda s: grpo.collect(setup, config, s, jax.random.split(s.key, 4)[1])[0]["mask"])(state)
    assert 0.01 < float(mask.mean()) < 0.95  # some steps are masked out, some are not
    assert_trees_close(chunked.params, whole.params, rtol=1e-4, atol=1e-6)
    for name in ("policy_loss", "entropy", "approx_kl", "kl_ref"):
        np.testing.assert_allclose(chunked_metrics[name], whole_metrics[name], rtol=1e-4, atol=1e-6)
    assert _largest_move(whole.params, state.params) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize(  # one device on CartPole is the two devices' case less the devices: extended tier
    "env, devices", [pytest.param("CartPole-v1", 1, marks=pytest.mark.extended), ("Pendulum-v1", 1), ("CartPole-v1", 2)]
)
def test_vmpo_takes_a_large_minibatch_gradient_in_chunks_after_its_e_step_over_the_whole_minibatch(
    env, devices, monkeypatch
):
    """V-MPO's minibatches of 128 samples taken in chunks of 30 (and one of 8) train the network and the duals
    (eta, alpha, or alpha_mu and alpha_sigma) to the parameters of the update without chunks, to float32
    rounding: the top half, psi and L_eta are the whole minibatch's (per chunk, each chunk's own top half and
    weights would move every gradient). On 2 emulated devices, each with its half of every minibatch, the E-step
    is that of both halves together."""
    from jaxrl.algos import vmpo

    config = vmpo.Config(
        env=env, num_envs=16 * devices, num_steps=16, total_timesteps=16 * 16 * 2, update_epochs=2, num_minibatches=2
    )
    if devices == 1:
        setup = vmpo.setup(config)
        state = jax.jit(lambda key: vmpo.init(setup, config, key))(jax.random.key(7))
    else:
        config = parallel.local_config(config, devices)
        setup = vmpo.setup(config)
        keys = jax.random.split(jax.random.key(7), devices)
        state = jax.jit(jax.vmap(lambda key: vmpo.init(setup, config, key)))(keys)

    def one_update(s):
        return vmpo.update(setup, config, s)

    update = _traced_afresh(
        one_update if devices == 1 else parallel.emulate(one_update, devices, in_axes=0, out_axes=0)
    )

    whole, whole_metrics = update(state)
    assert not _scans_in(update.jaxpr, 128 // 30)
    _chunks(monkeypatch, 64, 30)
    chunked, chunked_metrics = update(state)
    assert _scans_in(update.jaxpr, 128 // 30)
    assert_trees_close(chunked.params, whole.params, rtol=1e-4, atol=1e-6)
    assert set(chunked_metrics) == set(whole_metrics)
    for name in ("policy_loss", "temperature_loss", "alpha_loss", "value_loss", "entropy", "kl", "temperature"):
        np.testing.assert_allclose(chunked_metrics[name], whole_metrics[name], rtol=1e-4, atol=1e-6)
    for part in ("params", "duals"):
        assert _largest_move(whole.params[part], state.params[part]) > 1e-3  # both moved by far more than the tolerance


@pytest.mark.slow
@pytest.mark.parametrize("env", [pytest.param("CartPole-v1", marks=pytest.mark.extended), "Pendulum-v1"])
def test_trpo_takes_its_policy_step_and_value_regression_over_chunks_of_a_large_batch(env, monkeypatch):
    """TRPO's batch of 256 samples taken in chunks of 30 (and one of 16) for the surrogate's gradient, every
    Fisher-vector product of the conjugate gradient and the line search's KL and surrogate, and its value
    minibatches of 128 samples in chunks of 30 (and one of 8), train to the parameters of the whole batch, to
    float32 rounding, through the same accepted step. Compiled with the runner's options: at XLA's level 0 a few
    parameters near zero differed by more than the tolerance."""
    from jaxrl.algos import trpo

    config = trpo.Config(env=env, num_envs=16, num_steps=16, total_timesteps=16 * 16 * 2, vf_minibatches=2)
    _, state, update = _init_and_update(trpo, config, 8, compiler_options())
    whole, whole_metrics = update(state)
    assert not _scans_in(update.jaxpr, 256 // 30)
    _chunks(monkeypatch, 100, 30)
    chunked, chunked_metrics = update(state)
    assert _scans_in(update.jaxpr, 256 // 30)  # the policy step's
    assert _scans_in(update.jaxpr, 128 // 30)  # the value regression's
    assert float(whole_metrics["accepted"]) == 1.0
    assert_trees_close(chunked.params, whole.params, rtol=1e-3, atol=1e-6)
    for name in ("kl", "step_fraction", "surrogate_improvement", "expected_improvement", "entropy", "value_loss"):
        np.testing.assert_allclose(chunked_metrics[name], whole_metrics[name], rtol=1e-3, atol=1e-6)
    for new, old in zip(trpo.split_params(whole.params), trpo.split_params(state.params), strict=True):
        assert _largest_move(new, old) > 1e-3  # the actor and the critic moved by far more than the tolerance


@pytest.mark.slow
def test_dpo_takes_a_large_batch_gradient_in_two_passes_over_chunks(monkeypatch):
    """DPO's batch of 32 members x 32 steps (first episodes only, the rest masked out) taken in two passes over
    chunks, log pi(y) of every member in chunks of 3 time steps and the gradient through the pairs' loss in chunks
    of 100 steps (and one of 24), trains to the parameters of the whole batch's gradient, to float32 rounding. The
    entropy bonus is large (ent_coef 1) so that its masked mean shows in the parameters."""
    from jaxrl.algos import dpo

    config = dpo.Config(horizon=32, total_timesteps=32 * 32, update_epochs=2, ent_coef=1.0)
    _, state, update = _init_and_update(dpo, config, 9)
    whole, whole_metrics = update(state)
    assert not _scans_in(update.jaxpr, 1024 // 100)
    assert 0.0 < float(whole_metrics["pair_fraction"]) and 0.0 < float(whole_metrics["dpo_loss"])
    _chunks(monkeypatch, 500, 100)
    chunked, chunked_metrics = update(state)
    assert _scans_in(update.jaxpr, 1024 // 100)  # the gradient's chunks
    assert _scans_in(update.jaxpr, 32 // 3)  # log pi(y)'s chunks of 3 time steps
    assert_trees_close(chunked.params, whole.params, rtol=1e-4, atol=1e-6)
    assert set(chunked_metrics) == set(whole_metrics)
    for name in ("dpo_loss", "reward_accuracy", "reward_margin", "log_ratio", "entropy"):
        np.testing.assert_allclose(chunked_metrics[name], whole_metrics[name], rtol=1e-4, atol=1e-6)
    assert _largest_move(whole.params, state.params) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("chunks", [False, True])
def test_dpo_margins_are_exactly_zero_while_the_policy_is_its_reference(monkeypatch, chunks):
    """At the first update the moving reference is the policy itself, so every implicit reward margin
    h = beta (log pi(y_w)/pi_ref(y_w) - log pi(y_l)/pi_ref(y_l)) is exactly 0, none counts as ranked right, and
    the reported accuracy is 0, not the sign of rounding noise: the chunked update computes log pi_ref(y) as it
    computes log pi(y)."""
    from jaxrl.algos import dpo

    if chunks:
        _chunks(monkeypatch, 500, 100)
    config = dpo.Config(horizon=32, total_timesteps=32 * 32, update_epochs=1)
    _, state, update = _init_and_update(dpo, config, 9)
    assert dpo.takes_chunks((32, 32)) == chunks
    state, metrics = update(state)
    assert float(metrics["pair_fraction"]) > 0.0
    assert float(metrics["reward_margin"]) == 0.0 and float(metrics["log_ratio"]) == 0.0
    assert float(metrics["reward_accuracy"]) == 0.0
    assert float(metrics["dpo_loss"]) == pytest.approx(np.log(2.0), rel=1e-6)  # -log sigmoid(0)
