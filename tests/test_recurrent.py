"""Recurrent policies: hidden-state resets in the rollout, the learner's re-run of the core, sequence minibatches,
the identity core against the MLP, shapes, evaluation and checkpoints with memory, and the memory task."""

import dataclasses
import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_trees_close, index
from jaxrl import envs, presets
from jaxrl.algos import ALGORITHMS, base, impala, ppo, pqn
from jaxrl.algos.families import actor_critic as ac
from jaxrl.algos.families import actor_critic_recurrent as acr
from jaxrl.algos.families import q_learning, q_learning_recurrent
from jaxrl.minibatch import sequence_minibatch_epochs
from jaxrl.networks import ActorCritic, MLPTorso, QNetwork
from jaxrl.networks.recurrent import (
    IdentityCore,
    RecurrentActorCritic,
    RecurrentQNetwork,
    initial_hidden,
    initial_state,
    make_core,
)
from jaxrl.rollout import initial_memory, recurrent_rollout, reset
from jaxrl.run import checkpoint
from jaxrl.run.evaluate import evaluate

TINY = ppo.Config(
    core="gru", core_size=8, num_envs=4, num_steps=16, total_timesteps=4 * 16 * 3, update_epochs=2, num_minibatches=2
)


def counting_policy(num_actions: int):
    """A 'core' whose state counts the steps since the episode start: h' = (0 if start else h) + 1. Its value
    is h' (so V of a step is its index in the episode, from 1) and one critic step from h is h + 1."""

    def step(h, obs, start, key):
        h = jnp.where(start, 0.0, h) + 1.0
        action = jax.random.randint(key, start.shape, 0, num_actions)
        return h, action, jnp.zeros(start.shape), h

    def value(h, obs, start):
        return jnp.where(start, 0.0, h) + 1.0

    return step, value


@pytest.mark.slow
def test_rollout_resets_state_exactly_at_episode_starts():
    env = envs.make("CartPole-v1", 6, max_steps_in_episode=12)  # random play: terminations and truncations
    step, value = counting_policy(env.spec.action_dim)
    carry = reset(env, jax.random.key(0))
    memory = initial_memory(jnp.zeros(6))
    num_steps = 40
    run = jax.jit(lambda c, m, k: recurrent_rollout(env, step, value, c, m, k, num_steps))
    carry, memory, traj, seqs = run(carry, memory, jax.random.key(1))
    carry, memory, traj2, seqs2 = run(carry, memory, jax.random.key(2))  # a second window: memory carried over
    done = np.concatenate([traj.done, traj2.done])
    values = np.concatenate([traj.values, traj2.values])
    starts = np.concatenate([seqs.starts, seqs2.starts])
    assert np.any(np.asarray(traj.terminated)) and np.any(np.asarray(traj.truncated & ~traj.terminated))

    # the plain Python loop over steps: the state is zeroed where done at t - 1 (and at t = 0 after reset)
    expected = np.zeros_like(values)
    start = np.ones(6, bool)
    h = np.zeros(6)
    for t in range(2 * num_steps):
        np.testing.assert_array_equal(starts[t], start, err_msg=f"start flags at step {t}")
        h = np.where(start, 0.0, h) + 1.0
        expected[t] = h
        start = done[t]
    np.testing.assert_array_equal(values, expected)
    # the counter is the env's own episode length where an episode ends
    np.testing.assert_array_equal(values[done], np.concatenate([traj.episode_length, traj2.episode_length])[done])
    # the second window's sequences start from the state the first one left, not from zeros
    np.testing.assert_array_equal(seqs2.initial_hidden, traj.values[-1])
    # next values: 0 at terminations, one more critic step from h'_t at truncations, V_{t+1} elsewhere
    v, nv = np.asarray(traj.values), np.asarray(traj.next_values)
    term, trunc = np.asarray(traj.terminated), np.asarray(traj.truncated & ~traj.terminated)
    np.testing.assert_array_equal(nv[term], 0.0)
    np.testing.assert_array_equal(nv[trunc], v[trunc] + 1.0)
    inside = ~(term | trunc)
    np.testing.assert_array_equal(nv[:-1][inside[:-1]], v[1:][inside[:-1]])


RECURRENT_CORES = ["gru", "lstm", "lru", "gtrxl"]


# the default suite checks the gru's rollout; the other cores' (the transformer's compiles for longest) run in the
# extended tier, and every core equals its step-by-step reference in tests/test_cores.py
@pytest.fixture(
    scope="module", params=[c if c == "gru" else pytest.param(c, marks=pytest.mark.extended) for c in RECURRENT_CORES]
)
def core_rollout(request):
    """The TINY PPO of a core: its initial state (key 0) and one rollout from it (key 1), one compiled program.
    The tests of the core share it: the learner's re-run, the shapes, the checkpoint."""
    config = dataclasses.replace(TINY, core=request.param)
    setup = ppo.setup(config)

    @jax.jit
    def init_and_collect(init_key, rollout_key):
        state = ppo.init(setup, config, init_key)
        return state, setup.collect(config, state, rollout_key)

    state, rollout = init_and_collect(jax.random.key(0), jax.random.key(1))
    out = (rollout.env, rollout.memory, rollout.traj, rollout.sequences)
    return setup.network, state, out


@pytest.mark.slow  # the fixture compiles a recurrent rollout (~10 s on a shared 2-core machine)
def test_learner_rerun_of_the_core_gives_the_rollout_policy_and_values(core_rollout):
    network, state, (_, memory, traj, seqs) = core_rollout
    assert np.any(np.asarray(seqs.starts[1:])), "no episode ended inside the window: the test would not test resets"
    rerun = jax.jit(network.apply)  # one program for both re-runs (with and without the resets)
    hidden, dist, values = rerun(state.params, seqs.initial_hidden, traj.obs, seqs.starts)
    np.testing.assert_allclose(values, traj.values, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dist.log_prob(traj.actions), traj.log_probs, rtol=1e-5, atol=1e-5)
    assert_trees_close(hidden, memory.hidden, rtol=1e-5, atol=1e-5)
    # without the resets the re-run differs: the starts matter
    _, _, no_reset = rerun(state.params, seqs.initial_hidden, traj.obs, jnp.zeros_like(seqs.starts))
    assert not np.allclose(no_reset, traj.values, atol=1e-5)


@pytest.mark.slow  # the fixture compiles a recurrent rollout (~10 s on a shared 2-core machine)
def test_shapes_and_dtypes(core_rollout):
    network, state, (carry, memory, traj, seqs) = core_rollout
    n, t = TINY.num_envs, TINY.num_steps
    chex.assert_trees_all_equal_shapes(state.memory.hidden, initial_hidden(network.core, n))
    chex.assert_trees_all_equal_shapes(memory.hidden, initial_hidden(network.core, n))
    chex.assert_shape(jax.tree.leaves(state.memory.hidden), (n, ...))
    chex.assert_type(jax.tree.leaves(state.memory.hidden), jnp.float32)
    chex.assert_shape([state.memory.start, memory.start], (n,))
    chex.assert_type([state.memory.start, memory.start, seqs.starts], bool)
    assert bool(state.memory.start.all()), "every env starts an episode after reset"
    chex.assert_shape([traj.rewards, traj.values, traj.next_values, traj.log_probs, seqs.starts], (t, n))
    chex.assert_shape(traj.obs, (t, n, 4))
    chex.assert_trees_all_equal(seqs.initial_hidden, state.memory.hidden)
    np.testing.assert_array_equal(seqs.starts[0], state.memory.start)
    np.testing.assert_array_equal(seqs.starts[1:], traj.done[:-1])


def ppo_batch(key, t=8, b=4, obs_dim=4, actions=2):
    k = jax.random.split(key, 6)
    return {
        "obs": jax.random.normal(k[0], (t, b, obs_dim)),
        "actions": jax.random.randint(k[1], (t, b), 0, actions),
        "log_probs": jnp.log(jax.random.uniform(k[2], (t, b), minval=0.3, maxval=0.7)),
        "values": jax.random.normal(k[3], (t, b)),
        "advantages": jax.random.normal(k[4], (t, b)),
        "targets": jax.random.normal(k[5], (t, b)),
        "starts": jax.random.bernoulli(k[5], 0.2, (t, b)),
    }


@pytest.mark.slow
def test_identity_core_gives_the_mlp_gradients():
    """The recurrent path (torso -> core -> head over [T, B] sequences, `recurrent_loss_fn`) with a core that
    ignores its state has the MLP ActorCritic's parameters and gives the same PPO gradients as `loss_fn` on the
    same steps flattened; the same check on misaligned steps (obs of t - 1 against the action of t) fails."""
    torso = MLPTorso((16, 16), "tanh")
    mlp = ActorCritic(2, True, torso)
    rnn = RecurrentActorCritic(2, True, torso, IdentityCore(3))
    batch = ppo_batch(jax.random.key(0))
    params = jax.jit(mlp.init)(jax.random.key(1), batch["obs"][0])
    rnn_params = jax.eval_shape(rnn.init, jax.random.key(1), initial_hidden(rnn.core, 4), batch["obs"], batch["starts"])
    assert jax.tree.structure(rnn_params) == jax.tree.structure(params)
    config = ppo.Config()

    def flat(tree):
        return jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), tree)

    @jax.jit
    def mlp_grads(b):
        return jax.grad(lambda p: ppo.loss_fn(p, ac.Setup(None, mlp), config, flat(b))[0])(params)

    @functools.partial(jax.jit, static_argnums=0)
    def rnn_grads(net, p, b):
        return jax.grad(lambda p: ppo.loss_fn(p, acr.Setup(None, net), config, (b, initial_hidden(net.core, 4)))[0])(p)

    expected = mlp_grads(batch)
    assert max(float(jnp.abs(g).max()) for g in jax.tree.leaves(expected)) > 1e-3, "degenerate: zero gradients"
    assert_trees_close(rnn_grads(rnn, params, batch), expected, rtol=1e-5, atol=1e-7)

    shifted = {**batch, "obs": jnp.roll(batch["obs"], 1, axis=0)}  # obs of step t - 1 against action t
    with pytest.raises(AssertionError):
        assert_trees_close(rnn_grads(rnn, params, shifted), expected, rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_identity_core_gives_the_q_network_gradients():
    """PQN's recurrent regression (`q_learning_recurrent.regression_loss` over [T, B] sequences) with a
    state-ignoring core has QNetwork's parameters and gradients; misaligned steps do not."""
    torso = MLPTorso((16, 16), "relu", layer_norm=True)
    qnet = QNetwork(2, torso)
    rnn = RecurrentQNetwork(2, torso, IdentityCore(3))
    batch = ppo_batch(jax.random.key(0))
    params = jax.jit(qnet.init)(jax.random.key(1), batch["obs"][0])
    rnn_params = jax.eval_shape(rnn.init, jax.random.key(1), initial_state(rnn.core, 4), batch["obs"], batch["starts"])
    assert jax.tree.structure(rnn_params) == jax.tree.structure(params)

    @jax.jit
    def grads(b):
        flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), b)
        expected = jax.grad(lambda p: q_learning.regression_loss(p, flat, qnet)[0])(params)
        minibatch = (b, initial_state(rnn.core, 4))
        actual = jax.grad(lambda p: q_learning_recurrent.regression_loss(p, minibatch, rnn)[0])(params)
        return expected, actual

    expected, actual = grads(batch)
    assert max(float(jnp.abs(g).max()) for g in jax.tree.leaves(expected)) > 1e-3, "degenerate: zero gradients"
    assert_trees_close(actual, expected, rtol=1e-5, atol=1e-7)
    _, shifted = grads({**batch, "obs": jnp.roll(batch["obs"], 1, axis=0)})
    with pytest.raises(AssertionError):
        assert_trees_close(shifted, expected, rtol=1e-5, atol=1e-7)


def test_sequence_minibatches_keep_time_order_and_shuffle_environments():
    t, n, m, epochs = 5, 8, 4, 3
    steps = {"code": jnp.arange(t)[:, None] * 100 + jnp.arange(n)[None]}  # 100 t + env
    initial = jnp.arange(n)
    params = jnp.zeros(())

    def grad_fn(params, minibatch):
        return jnp.zeros(()), minibatch

    class Nothing:
        @staticmethod
        def update(grads, opt_state, params):
            return grads, opt_state

    _, _, seen = sequence_minibatch_epochs(grad_fn, Nothing, params, (), steps, initial, jax.random.key(0), epochs, m)
    codes, starts = np.asarray(seen[0]["code"]), np.asarray(seen[1])
    assert codes.shape == (epochs, m, t, n // m) and starts.shape == (epochs, m, n // m)
    env_of = codes % 100
    np.testing.assert_array_equal(codes // 100, np.broadcast_to(np.arange(t)[:, None], codes.shape))  # time order
    np.testing.assert_array_equal(env_of, np.broadcast_to(starts[:, :, None], env_of.shape))  # one env per column
    for e in range(epochs):
        assert sorted(starts[e].reshape(-1)) == list(range(n)), "every env once per epoch"
    assert len({tuple(starts[e].reshape(-1)) for e in range(epochs)}) > 1, "environments are shuffled per epoch"


@pytest.mark.parametrize(
    "overrides, words",
    [
        (dict(num_envs=6, num_minibatches=4), ["num_minibatches", "num_envs = 6", "divisor"]),
        (dict(core="transformer"), ["core", "none, gru, lstm"]),
        (dict(core_size=0), ["core_size"]),
        (dict(core="gtrxl", core_size=10), ["core_size", "multiple of 4", "heads"]),
    ],
)
def test_bad_recurrent_config_raises_naming_the_field(overrides, words):
    with pytest.raises(ValueError) as error:
        ppo.validate(dataclasses.replace(TINY, **overrides))
    for word in words:
        assert word in str(error.value)


def test_recurrent_impala_needs_the_value_critic():
    with pytest.raises(ValueError) as error:
        impala.validate(impala.Config(core="gru", critic="q"))
    assert "Config.core" in str(error.value) and "critic='value'" in str(error.value)
    impala.validate(impala.Config(core="gru"))


@pytest.mark.slow  # the fixture compiles a recurrent rollout
def test_checkpoint_carries_the_hidden_state(tmp_path, core_rollout):
    _, state, _ = core_rollout  # the TINY PPO state of each core
    state = state.replace(memory=state.memory.replace(hidden=jax.tree.map(lambda h: h + 0.5, state.memory.hidden)))
    checkpoint.save(tmp_path, 3, state, {}, {"run": "recurrent"})
    _, restored, _ = checkpoint.restore(tmp_path, jax.eval_shape(lambda: state), {"run": "recurrent"})
    assert_trees_close(restored.memory, state.memory)


@pytest.mark.extended
@pytest.mark.parametrize("core", ["gru", "lstm", "lru"])  # gtrxl: the next test, over learning rates too
def test_tiny_recurrent_ppo_vmaps_over_seeds_and_evaluates(core):
    config = dataclasses.replace(TINY, core=core)
    keys = jax.random.split(jax.random.key(0), 2)
    separate = [jax.jit(ppo.train)(config, k) for k in keys]
    batched = jax.jit(jax.vmap(ppo.make_train(config)))(keys)
    for i, run in enumerate(separate):
        assert_trees_close(index(batched, i), run, rtol=1e-4, atol=1e-5)  # batched matmuls differ in the last bits
    state, metrics = separate[0]
    assert np.all(np.isfinite(metrics["value_loss"]))
    act, normalize = ppo.evaluation_policy(ppo.setup(config), config, state)
    out = jax.jit(lambda k: evaluate(config.env, act, k, 8, normalize=normalize))(jax.random.key(3))
    assert int(out["finished"]) == 8


@pytest.mark.extended
def test_tiny_gtrxl_ppo_vmaps_over_learning_rates_and_seeds():
    """PPO with the transformer core, vmapped over 2 learning rates x 2 seeds in one program, equals each of the
    4 runs compiled alone (the learning rate a traced leaf: one program for the 4 separate runs)."""
    config = dataclasses.replace(TINY, core="gtrxl")
    configs = [dataclasses.replace(config, learning_rate=lr) for lr in (3e-4, 3e-3)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *configs)
    keys = jax.random.split(jax.random.key(0), 2)
    batched = jax.jit(jax.vmap(jax.vmap(ppo.train, in_axes=(None, 0)), in_axes=(0, None)))(stacked, keys)
    train = jax.jit(ppo.train)
    compiled = []  # the jit cache's size after each run (the cache is shared by every jit of ppo.train)
    for i, one in enumerate(configs):
        for j, key in enumerate(keys):
            run = train(one, key)
            compiled.append(train._cache_size())
            assert_trees_close(index(index(batched, i), j), run, rtol=1e-4, atol=1e-5)
    assert len(set(compiled)) == 1, compiled  # the first run compiled; the other three reused its program
    state, metrics = index(index(batched, 1), 0)
    assert np.all(np.isfinite(metrics["value_loss"])) and np.all(np.isfinite(metrics["policy_loss"]))
    shapes = [x.shape for x in jax.tree.leaves(state.memory.hidden)]
    assert (4, 2, 32, 8) in shapes and all(shape[0] == 4 for shape in shapes), shapes  # 2 layers x 32 past steps
    slower = jax.tree.leaves(index(index(batched, 0), 0)[0].params)  # learning rate 3e-4, same seed
    assert any(not np.allclose(a, b) for a, b in zip(jax.tree.leaves(state.params), slower, strict=True))


# MemoryChain-bsuite (gymnax's bsuite memory_chain, memory length 5): the context bit is shown at the first steps
# only and must be reported at the last one, for +1 or -1; a memoryless policy scores 0 in expectation.
# The presets: 32 envs x 24 steps, 4 minibatches of 8 env sequences, lr 1e-3, GRU of 64 units.
MEMORY_BUDGET, MEMORY_SEEDS = 40_000, 4


def memory_chain_returns(algo: str, core: str) -> np.ndarray:
    """The greedy return on 64 fresh episodes of each of MEMORY_SEEDS runs of `algo` with `core` at the
    MemoryChain preset for MEMORY_BUDGET env steps."""
    module = ALGORITHMS[algo]
    config = presets.get(algo, "MemoryChain-bsuite", core=core, total_timesteps=MEMORY_BUDGET)
    module.validate(config)

    def run(key):
        state, _ = module.train(config, key)
        act, normalize = base.evaluation_policy(config, state, algo=module)
        return evaluate(config.env, act, jax.random.fold_in(key, 1), 64, normalize=normalize)["mean_return"]

    return np.asarray(jax.jit(jax.vmap(run))(jax.random.split(jax.random.key(0), MEMORY_SEEDS)))


@pytest.mark.extended
@pytest.mark.parametrize("algo", ["ppo", "pqn", "impala"])
def test_recurrent_learner_remembers_where_the_mlp_cannot(algo):
    """4 seeds x 4e4 env steps at the MemoryChain preset: the greedy GRU policy returns >= 0.9 on 64 fresh
    episodes on every seed; the same config with core="none" (an MLP) <= 0.5 on every seed (it can only guess the
    context bit: 0 in expectation)."""
    gru, mlp = memory_chain_returns(algo, "gru"), memory_chain_returns(algo, "none")
    print(f"{algo} MemoryChain-bsuite {MEMORY_BUDGET} steps: gru {gru.round(3).tolist()}, mlp {mlp.round(3).tolist()}")
    assert np.all(gru >= 0.9), gru
    assert np.all(mlp <= 0.5), mlp


@pytest.mark.extended
@pytest.mark.parametrize("core", ["lstm", "lru"])
def test_other_cores_remember_the_memory_chain(core):
    """The GRU test's bar for PPO with the other cores, at the same preset (64 units) and budget: >= 0.9 greedy
    on every seed (benchmarks/results/memory_cores.md: 1.0 on all 4, ~1 min each on 2 shared cores)."""
    returns = memory_chain_returns("ppo", core)
    print(f"ppo MemoryChain-bsuite {MEMORY_BUDGET} steps: {core} {returns.round(3).tolist()}")
    assert np.all(returns >= 0.9), returns


@pytest.mark.extended
@pytest.mark.parametrize("core", RECURRENT_CORES)
def test_tiny_recurrent_pqn_trains_vmapped_with_memory_in_its_state(core):
    config = pqn.Config(core=core, core_size=8, num_envs=4, num_steps=16, total_timesteps=4 * 16 * 3, num_minibatches=2)
    pqn.validate(config)
    with pytest.raises(ValueError, match="num_minibatches"):
        pqn.validate(dataclasses.replace(config, num_envs=6, num_minibatches=4))
    state, metrics = jax.jit(jax.vmap(pqn.make_train(config)))(jax.random.split(jax.random.key(0), 2))
    expected = jax.tree.map(lambda x: (2,) + x.shape, initial_state(make_core(core, 8), 4))
    assert jax.tree.map(lambda x: x.shape, state.memory.hidden) == expected
    chex.assert_shape(state.memory.start, (2, 4))
    assert np.all(np.isfinite(metrics["loss"]))
