"""Tests for jaxrl.networks: output types and shapes, initialisation, observation flattening."""

import re

import distrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.networks import ActorCritic, Critics, DeterministicActor, GaussianActor, MLPTorso, QNetwork, TorsoHead

B = 5


@pytest.fixture(scope="module")
def discrete():
    net = ActorCritic(action_dim=3, discrete=True)
    params = jax.jit(net.init)(jax.random.key(0), jnp.zeros((1, 4)))
    return net, params


@pytest.fixture(scope="module")
def continuous():
    net = ActorCritic(action_dim=2, discrete=False)
    params = jax.jit(net.init)(jax.random.key(1), jnp.zeros((1, 3)))
    return net, params


def obs_batch(shape, seed=0):
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape).astype(np.float32))


@pytest.mark.slow
def test_discrete_outputs(discrete):
    net, params = discrete
    obs = obs_batch((B, 4))
    dist, value = net.apply(params, obs)
    assert isinstance(dist, distrax.Categorical)
    assert dist.logits.shape == (B, 3)
    assert value.shape == (B,)
    np.testing.assert_allclose(net.apply(params, obs, method=ActorCritic.value), value, rtol=1e-6)
    np.testing.assert_allclose(dist.probs.sum(-1), 1.0, rtol=1e-6)
    # Different observations give different outputs (the network is not constant).
    assert np.unique(np.asarray(value).round(6)).size == B
    # Tiny actor output layer: the initial policy is close to uniform.
    np.testing.assert_allclose(dist.probs, 1 / 3, atol=0.05)
    sample = dist.sample(seed=jax.random.key(2))
    assert sample.shape == (B,) and sample.dtype == jnp.int32


@pytest.mark.slow
def test_continuous_outputs(continuous):
    net, params = continuous
    obs = obs_batch((B, 3))
    dist, value = net.apply(params, obs)
    assert isinstance(dist, distrax.MultivariateNormalDiag)
    assert dist.event_shape == (2,)
    assert dist.batch_shape == (B,)
    assert value.shape == (B,)
    np.testing.assert_array_equal(params["params"]["log_std"], np.zeros(2))
    np.testing.assert_allclose(dist.stddev(), np.ones((B, 2)), rtol=1e-6)
    # std follows exp(log_std).
    shifted = jax.tree.map(lambda x: x, params)
    shifted["params"]["log_std"] = jnp.array([np.log(0.5), np.log(3.0)], jnp.float32)
    dist2, _ = net.apply(shifted, obs)
    np.testing.assert_allclose(dist2.stddev(), np.broadcast_to([0.5, 3.0], (B, 2)), rtol=1e-5)
    np.testing.assert_allclose(dist2.mean(), dist.mean(), rtol=1e-6)
    a, lp = dist.sample_and_log_prob(seed=jax.random.key(3))
    assert a.shape == (B, 2) and lp.shape == (B,)
    np.testing.assert_allclose(dist.log_prob(a), lp, rtol=1e-5)
    # log N(a; m, I) in two dimensions.
    m = np.asarray(dist.mean(), np.float64)
    ref = -0.5 * ((np.asarray(a) - m) ** 2).sum(-1) - np.log(2 * np.pi)
    np.testing.assert_allclose(lp, ref, rtol=1e-5, atol=1e-5)
    assert not np.allclose(dist.mean()[0], dist.mean()[1])


def test_discrete_has_no_log_std(discrete):
    _, params = discrete
    assert "log_std" not in params["params"]


def _layers(params, name):
    p = params["params"][name]
    return [p[f"Dense_{i}"] for i in range(len(p))]


def test_orthogonal_init(discrete):
    _, params = discrete
    for name in ("actor", "critic"):
        layers = _layers(params, name)
        assert len(layers) == 3
        for layer in layers:
            np.testing.assert_array_equal(layer["bias"], 0.0)
        # First hidden layer (4 x 64): orthonormal rows scaled by sqrt(2).
        w0 = np.asarray(layers[0]["kernel"], np.float64)
        assert w0.shape == (4, 64)
        np.testing.assert_allclose(w0 @ w0.T, 2 * np.eye(4), atol=1e-5)
        # Square hidden layer (64 x 64): W^T W = 2 I.
        w1 = np.asarray(layers[1]["kernel"], np.float64)
        assert w1.shape == (64, 64)
        np.testing.assert_allclose(w1.T @ w1, 2 * np.eye(64), atol=1e-5)
    # Output layers: the actor's columns have norm 0.01 and are orthogonal, the critic's has norm 1.
    wa = np.asarray(_layers(params, "actor")[2]["kernel"], np.float64)
    assert wa.shape == (64, 3)
    np.testing.assert_allclose(wa.T @ wa, 1e-4 * np.eye(3), atol=1e-9)
    wc = np.asarray(_layers(params, "critic")[2]["kernel"], np.float64)
    assert wc.shape == (64, 1)
    np.testing.assert_allclose(np.linalg.norm(wc[:, 0]), 1.0, rtol=1e-5)


def test_actor_and_critic_are_separate(discrete):
    _, params = discrete
    a0 = np.asarray(params["params"]["actor"]["Dense_0"]["kernel"])
    c0 = np.asarray(params["params"]["critic"]["Dense_0"]["kernel"])
    assert not np.allclose(a0, c0)


@pytest.mark.slow
def test_hidden_sizes_and_activation():
    net = ActorCritic(action_dim=2, discrete=True, torso=MLPTorso((8, 16, 32), "relu"))
    params = net.init(jax.random.key(0), jnp.zeros((1, 5)))
    shapes = [layer["kernel"].shape for layer in _layers(params, "actor")]
    assert shapes == [(5, 8), (8, 16), (16, 32), (32, 2)]
    # relu: the critic's value is piecewise linear, so scaling a (generic) observation scales the value.
    obs = obs_batch((B, 5), seed=3)
    v1 = net.apply(params, obs, method=ActorCritic.value)
    v2 = net.apply(params, 2.0 * obs, method=ActorCritic.value)
    np.testing.assert_allclose(v2, 2.0 * v1, rtol=1e-5, atol=1e-6)


def test_mlp_against_numpy():
    mlp = TorsoHead(MLPTorso(hidden_sizes=(6,), activation="tanh"), out_features=2, out_gain=1.0)
    x = obs_batch((B, 3), seed=4)
    params = mlp.init(jax.random.key(5), x)
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params["params"])
    h = np.tanh(np.asarray(x, np.float64) @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"])
    ref = h @ p["Dense_1"]["kernel"] + p["Dense_1"]["bias"]
    np.testing.assert_allclose(mlp.apply(params, x), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_minatar_obs_flattened():
    net = ActorCritic(action_dim=3, discrete=True, torso=MLPTorso(obs_ndim=3))
    obs = (obs_batch((B, 10, 10, 4), seed=6) > 0.5).astype(jnp.float32)
    params = jax.jit(net.init)(jax.random.key(0), obs[:1])
    assert params["params"]["actor"]["Dense_0"]["kernel"].shape == (400, 64)
    dist, value = net.apply(params, obs)
    assert dist.logits.shape == (B, 3) and value.shape == (B,)
    # Flattening is the row-major reshape: an MLP on obs.reshape(B, 400) with the same parameters agrees.
    flat_net = ActorCritic(action_dim=3, discrete=True, torso=MLPTorso(obs_ndim=1))
    flat_dist, flat_value = flat_net.apply(params, obs.reshape(B, 400))
    np.testing.assert_allclose(dist.logits, flat_dist.logits, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(value, flat_value, rtol=1e-5, atol=1e-6)
    # Extra leading dims ([T, B, 10, 10, 4]) are kept.
    dist_tb, value_tb = net.apply(params, jnp.stack([obs, obs]))
    assert dist_tb.logits.shape == (2, B, 3) and value_tb.shape == (2, B)
    np.testing.assert_allclose(value_tb[1], value, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(64, 64), (4, 64), (64, 2), (10, 10, 3)])
def test_orthogonal_is_jax_orthogonal_bit_for_bit(shape):
    """The same Gaussian matrix, the same LAPACK QR and sign fix: the very same kernel as JAX's initialiser."""
    from jaxrl.networks import orthogonal

    key = jax.random.key(3)
    ours = orthogonal(1.7)(key, shape)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(jax.nn.initializers.orthogonal(1.7)(key, shape)))
    q = np.asarray(ours).reshape(-1, shape[-1]) / 1.7
    small = min(q.shape)
    np.testing.assert_allclose(q.T @ q if q.shape[0] >= q.shape[1] else q @ q.T, np.eye(small), atol=1e-5)


def _geqrf_operand_ranks(lowered_text: str) -> list[int]:
    """The rank of each LAPACK geqrf call's operand in a lowered program: 2 unbatched, 3 and more batched."""
    calls = [line for line in lowered_text.splitlines() if "custom_call @lapack_sgeqrf" in line]
    return [re.search(r": \(tensor<([0-9x]+)xf32>\)", line).group(1).count("x") + 1 for line in calls]


def test_orthogonal_under_vmap_loops_over_unbatched_qrs():
    """Under one or two vmaps every member gets exactly the kernel it gets alone, and the program holds only
    unbatched geqrf calls (a batched one can deadlock XLA:CPU's thread pool; see `initialisation.orthogonal`)."""
    from jaxrl.networks import orthogonal

    init = orthogonal(np.sqrt(2))
    keys = jax.random.split(jax.random.key(0), 6).reshape(2, 3)
    one = jax.jit(jax.vmap(lambda k: init(k, (4, 64))))
    two = jax.jit(jax.vmap(jax.vmap(lambda k: init(k, (64, 8)))))
    alone = lambda k, shape: np.asarray(init(k, shape))  # noqa: E731
    np.testing.assert_array_equal(np.asarray(one(keys[0])), np.stack([alone(k, (4, 64)) for k in keys[0]]))
    np.testing.assert_array_equal(
        np.asarray(two(keys)), np.stack([np.stack([alone(k, (64, 8)) for k in row]) for row in keys])
    )
    # A whole actor-critic initialised for 8 vmapped seeds, as a sweep does.
    net = ActorCritic(action_dim=2, discrete=True, torso=MLPTorso((64, 64)))
    seeds = jax.jit(jax.vmap(lambda k: net.init(k, jnp.zeros((1, 4)))))
    for lowered in (one.lower(keys[0]), two.lower(keys), seeds.lower(jax.random.split(jax.random.key(1), 8))):
        ranks = _geqrf_operand_ranks(lowered.as_text())
        assert ranks and set(ranks) == {2}, ranks
    batched = jax.jit(jax.vmap(lambda k: jax.nn.initializers.orthogonal()(k, (64, 8)))).lower(keys[0])
    assert _geqrf_operand_ranks(batched.as_text()) == [3]  # what a plain vmap of JAX's initialiser gives


def _numpy_frame(gaussian: np.ndarray) -> np.ndarray:
    """The sign-fixed Q of a tall Gaussian matrix, by NumPy's QR (float64)."""
    q, r = np.linalg.qr(gaussian.astype(np.float64))
    return q * np.sign(np.diag(r))


@pytest.mark.parametrize("shapes", [[(64, 4), (64, 64), (64, 2), (64, 1)], [(120, 4), (120, 84), (84, 2), (300, 64)]])
def test_orthonormal_frames_are_the_qr_of_each_members_own_gaussian_block(shapes):
    """Each frame is the sign-fixed Q of its own m x n Gaussian block, though the QR ran on the group's padded
    matrix: rows below m zero, columns beyond n another member's width (a NumPy oracle; groups by row count rounded
    up to a power of two, one key each, here 1 and 2 groups)."""
    from jaxrl.networks.initialisation import orthonormal_frames

    key = jax.random.key(7)
    frames = jax.jit(lambda k: orthonormal_frames(k, shapes))(key)
    groups = {}
    for i, (m, _) in enumerate(shapes):
        groups.setdefault(1 << (m - 1).bit_length(), []).append(i)
    keys = [key] if len(groups) == 1 else list(jax.random.split(key, len(groups)))
    for group_key, members in zip(keys, groups.values(), strict=True):
        size = (len(members), max(shapes[i][0] for i in members), max(shapes[i][1] for i in members))
        gaussian = np.asarray(jax.random.normal(group_key, size))
        for j, i in enumerate(members):
            m, n = shapes[i]
            assert frames[i].shape == (m, n)
            np.testing.assert_allclose(np.asarray(frames[i]), _numpy_frame(gaussian[j, :m, :n]), atol=2e-5)


def _kernels(params) -> list[np.ndarray]:
    return [np.asarray(leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(params) if "kernel" in str(path)]


def test_init_params_draws_every_kernel_once_from_one_set_of_frames():
    """`init_params`: the tree `module.init` gives, biases zero, and every kernel gain x one of the frames
    `orthonormal_frames` draws from the key's first half (each frame used once); so the kernels of one network are
    distinct, orthonormal up to their gain, and differ between keys."""
    from jaxrl.networks import init_params
    from jaxrl.networks.initialisation import orthonormal_frames

    net = ActorCritic(action_dim=2, discrete=True, torso=MLPTorso((120, 84), "relu"))
    obs = jnp.zeros((1, 4))
    params = jax.jit(lambda k: init_params(net, k, obs))(jax.random.key(0))
    plain = net.init(jax.random.key(0), obs)
    assert jax.tree.structure(params) == jax.tree.structure(plain)
    assert jax.tree.leaves(jax.tree.map(lambda a, b: a.shape == b.shape, params, plain)) == [True] * 12
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        if "bias" in str(path):
            np.testing.assert_array_equal(leaf, 0.0)
    shapes = [(120, 4), (120, 84), (84, 2), (120, 4), (120, 84), (84, 1)]
    frames = [np.asarray(f) for f in orthonormal_frames(jax.random.split(jax.random.key(0))[0], shapes)]
    unused = list(range(len(frames)))
    for kernel in _kernels(params):
        tall = kernel if kernel.shape[0] >= kernel.shape[1] else kernel.T
        gain = np.linalg.norm(tall[:, 0])
        match = [i for i in unused if frames[i].shape == tall.shape and np.allclose(tall / gain, frames[i], atol=1e-6)]
        assert len(match) == 1, (kernel.shape, gain)
        unused.remove(match[0])
        assert np.isclose(gain, np.sqrt(2)) or np.isclose(gain, 0.01) or np.isclose(gain, 1.0)
    assert unused == []
    other = jax.jit(lambda k: init_params(net, k, obs))(jax.random.key(1))
    assert all(np.abs(a - b).max() > 1e-3 for a, b in zip(_kernels(params), _kernels(other), strict=True))


def test_init_params_gives_each_critic_of_an_ensemble_its_own_draw():
    """`nn.vmap`'s critics ask for each layer once for all members; under `init_params` they still start apart,
    each orthonormal, as `module.init` starts them."""
    from jaxrl.networks import init_params

    critics = Critics(num_critics=2, torso=MLPTorso((16, 16), "relu"))
    params = jax.jit(lambda k: init_params(critics, k, jnp.zeros((1, 3)), jnp.zeros((1, 2))))(jax.random.key(0))
    for kernel in _kernels(params):
        assert kernel.shape[0] == 2
        assert np.abs(kernel[0] - kernel[1]).max() > 1e-3
        for member in kernel:
            tall = member if member.shape[0] >= member.shape[1] else member.T
            gram = tall.T @ tall
            np.testing.assert_allclose(gram, gram[0, 0] * np.eye(gram.shape[0]), atol=1e-5)


def test_init_params_under_vmap_is_each_seed_alone_with_unbatched_qrs():
    """8 vmapped seeds initialise as each seed alone, bit for bit, and the program's QRs stay unbatched."""
    from jaxrl.networks import init_params

    net = ActorCritic(action_dim=2, discrete=True, torso=MLPTorso((64, 64)))
    init = lambda k: init_params(net, k, jnp.zeros((1, 4)))  # noqa: E731
    keys = jax.random.split(jax.random.key(2), 8)
    seeds = jax.jit(jax.vmap(init))
    batched = seeds(keys)
    for i in (0, 5):
        for b, a in zip(jax.tree.leaves(batched), jax.tree.leaves(jax.jit(init)(keys[i])), strict=True):
            np.testing.assert_array_equal(np.asarray(b[i]), np.asarray(a))
    ranks = _geqrf_operand_ranks(seeds.lower(keys).as_text())
    assert ranks and set(ranks) == {2}, ranks


@pytest.mark.extended
@pytest.mark.parametrize("layer_norm", [False, True])
def test_one_torso_serves_every_head(layer_norm):
    """The same MLPTorso spec builds the hidden layers of the actor-critic, the Q-network, the continuous actors
    and the twin critics: same hidden kernel shapes everywhere, LayerNorms exactly where it says."""
    torso = MLPTorso((8, 16), "relu", layer_norm, obs_ndim=3)
    obs, action = jnp.zeros((1, 2, 3, 4)), jnp.zeros((1, 2))
    heads = {
        "actor_critic": (ActorCritic(2, False, torso), (obs,)),
        "q": (QNetwork(3, torso, dueling=True), (obs,)),
        "deterministic": (DeterministicActor(2, torso), (obs,)),
        "gaussian": (GaussianActor(2, torso), (obs,)),
        "critics": (Critics(2, torso), (obs, action)),
    }
    for name, (head, args) in heads.items():
        params = head.init(jax.random.key(0), *args)
        kernels = [
            leaf.shape[-2:]
            for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]
            if jax.tree_util.keystr(path).endswith("['kernel']")
        ]
        first = 24 + (2 if name == "critics" else 0)  # the critics see [flatten(o), a]
        assert (first, 8) in kernels and (8, 16) in kernels, name
        paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
        norms = [p for p in paths if "LayerNorm" in p]
        assert bool(norms) == layer_norm, name


MINATAR = ("Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar", "SpaceInvaders-MinAtar")


@pytest.mark.parametrize(
    "env_id",
    [pytest.param(e, marks=pytest.mark.slow if e == "Breakout-MinAtar" else pytest.mark.extended) for e in MINATAR],
)
def test_cnn_torso_on_every_minatar_game(env_id):
    """The MinAtar network (one 3x3 conv of 16 channels, VALID, then 128 units) on each game's [10, 10, C]
    observations, under [T, N] leading dims, in an actor-critic and a Q-network."""
    from jaxrl import envs
    from jaxrl.networks import make_torso

    spec = envs.make(env_id, 2).spec
    torso = make_torso("cnn", (64, 64), "relu", False, spec.observation_shape)
    obs = jnp.ones((3, 2, *spec.observation_shape), jnp.float32)
    net = ActorCritic(spec.action_dim, True, torso)
    params = net.init(jax.random.key(0), obs[0])
    actor = params["params"]["actor"]
    assert actor["Conv_0"]["kernel"].shape == (3, 3, spec.observation_shape[-1], 16)
    assert actor["Dense_0"]["kernel"].shape == (8 * 8 * 16, 128)
    dist, value = net.apply(params, obs)
    assert dist.logits.shape == (3, 2, spec.action_dim) and value.shape == (3, 2)
    q = QNetwork(spec.action_dim, torso)
    assert q.apply(q.init(jax.random.key(1), obs[0]), obs).shape == (3, 2, spec.action_dim)


@pytest.mark.slow
def test_cnn_torso_is_a_convolution():
    """Against a direct NumPy 3x3 VALID convolution and dense layer with the torso's own parameters."""
    from jaxrl.networks import CNNTorso

    head = TorsoHead(CNNTorso(channels=(2,), hidden_sizes=(3,), activation="tanh"), out_features=1, out_gain=1.0)
    x = obs_batch((2, 5, 5, 2), seed=7)
    params = head.init(jax.random.key(2), x)
    p = jax.tree.map(lambda a: np.asarray(a, np.float64), params["params"])
    xn, k = np.asarray(x, np.float64), p["Conv_0"]["kernel"]
    conv = np.zeros((2, 3, 3, 2))
    for i in range(3):
        for j in range(3):
            conv[:, i, j, :] = np.einsum("bhwc,hwcf->bf", xn[:, i : i + 3, j : j + 3, :], k)
    h = np.tanh(conv + p["Conv_0"]["bias"]).reshape(2, -1)
    h = np.tanh(h @ p["Dense_0"]["kernel"] + p["Dense_0"]["bias"])
    ref = h @ p["Dense_1"]["kernel"] + p["Dense_1"]["bias"]
    np.testing.assert_allclose(head.apply(params, x), ref, rtol=1e-5, atol=1e-5)


def test_make_torso_refuses_an_image_torso_on_vector_observations():
    from jaxrl.networks import make_torso

    with pytest.raises(ValueError, match="needs image observations"):
        make_torso("cnn", (64,), "relu", False, (4,))
    with pytest.raises(ValueError, match="not one of"):
        make_torso("resnet", (64,), "relu", False, (10, 10, 4))


def test_a_gaussian_mean_outside_the_action_box_gets_no_gradient_back():
    """Why A2C and IMPALA lost seeds on Pendulum (their failing seeds' means sat at -9 to +20 against the box
    [-2, 2], a constant clipped torque): the env acts on clip(a), so once the mean m is several std outside the
    box every sample acts the same, the return no longer depends on the sample and the expected policy gradient
    E[R(clip(a)) d log N(a; m, s) / dm] = E[R(clip(a)) (a - m) / s^2] is 0: nothing pulls m back. Inside the box
    the same estimate is the true slope dE[R]/dm (here -2m for R(a) = -a^2)."""
    s, n = 0.2, 400_000
    noise = np.random.default_rng(0).normal(size=n)

    def gradient(m):
        a = m + s * noise
        return np.mean(-(np.clip(a, -2.0, 2.0) ** 2) * (a - m) / s**2)

    assert gradient(1.0) == pytest.approx(-2.0, abs=0.05)  # inside: pulled towards the best action 0
    assert abs(gradient(4.0)) < 0.01  # outside by 10 std: no signal (-2m would be -8)


@pytest.mark.slow
def test_bound_mean_keeps_the_gaussian_mean_in_the_action_box():
    """`mean_bounds=(low, high)`: mean = low + (tanh(x) + 1) (high - low) / 2, inside the box for any input and
    the box's centre at the zero-initialised output; without it the mean is the linear output."""
    bounded = ActorCritic(action_dim=2, discrete=False, mean_bounds=((-2.0, 0.0), (2.0, 1.0)))
    params = bounded.init(jax.random.key(0), jnp.zeros((1, 3)))
    loud = jax.tree.map(lambda x: 1e3 * x, params)  # outputs far beyond any box before the bound
    mean = bounded.apply(loud, 100.0 * obs_batch((B, 3)), method=ActorCritic.policy).mean()
    assert np.all(mean[:, 0] >= -2.0) and np.all(mean[:, 0] <= 2.0)
    assert np.all(mean[:, 1] >= 0.0) and np.all(mean[:, 1] <= 1.0) and float(np.abs(mean).max()) > 1.9
    zero = jax.tree.map(jnp.zeros_like, params)
    np.testing.assert_allclose(
        bounded.apply(zero, obs_batch((B, 3)), method=ActorCritic.policy).mean(), [[0.0, 0.5]] * B
    )
