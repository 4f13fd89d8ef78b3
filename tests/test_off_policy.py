"""DDPG, TD3 and SAC (the family module `jaxrl.algos.families.off_policy` and its networks): config validation, metrics,
determinism, vmap over seeds and hyperparameters, Polyak targets, TD3's policy delay, SAC's temperature, the
squashed-Gaussian log-probability and action scaling, and learning Pendulum with the defaults."""

import functools
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_trees_close, index, runner_jit
from jaxrl import envs, replay
from jaxrl.algos import ALGORITHMS, ddpg, sac, td3
from jaxrl.networks import squashed_gaussian

ALGOS = {"ddpg": ddpg, "td3": td3, "sac": sac}
# 10 iterations of 2 envs x 25 steps; learning starts in iteration 2 (100 env steps); 3 gradient steps per
# iteration (so TD3's delay of 2 straddles iterations); Pendulum's first episodes end in iteration 8
TINY = dict(
    num_envs=2,
    num_steps=25,
    total_timesteps=2 * 25 * 10,
    buffer_size=200,
    replay_batch_size=16,
    updates_per_iteration=3,
    learning_starts=100,
    hidden_sizes=(16, 16),
)
KEYS = jax.random.split(jax.random.key(0), 2)
STEPS = 6  # gradient steps of the step-level tests (one compile per algorithm and static config)


def tiny(name, **overrides):
    return ALGOS[name].Config(**{**TINY, **overrides})


def runs(name):
    """(config, key) of two runs that share one compiled program (learning rates and tau are traced leaves)."""
    other = tiny(name, actor_learning_rate=3e-3, critic_learning_rate=2e-3, tau=0.05)
    return [(tiny(name), KEYS[0]), (other, KEYS[1])]


class Trained:
    """The runs of `runs(name)`, compiled and run on first use: `train` (the single-run program, compiled once),
    `separate` (each run by it) and `batched` (the two runs as one vmapped program), so a test that needs only
    a trained state compiles one program, not two."""

    def __init__(self, name):
        self.name = name

    @functools.cached_property
    def train(self):
        (config, key), _ = runs(self.name)
        return jax.jit(ALGOS[self.name].train).lower(config, key).compile()

    @functools.cached_property
    def separate(self):
        """[(state, metrics)] of each run."""
        return [self.train(config, key) for config, key in runs(self.name)]

    @functools.cached_property
    def batched(self):
        configs, keys = zip(*runs(self.name), strict=True)
        stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *configs), jnp.stack(keys)
        return jax.jit(jax.vmap(ALGOS[self.name].train))(*stacked)


# the quick tier trains SAC here; DDPG and TD3 (sharing the family step) run in the extended tier
ONLY_SAC_BY_DEFAULT = [pytest.param(n, marks=[] if n == "sac" else pytest.mark.extended) for n in ALGOS]


@pytest.fixture(scope="module", params=ONLY_SAC_BY_DEFAULT)
def algo(request):
    return Trained(request.param)


@functools.partial(jax.jit, static_argnums=(0, 4))
def gradient_steps(name, config, state, key, count):
    """`count` (static) gradient steps of `name` on batches sampled from `state.buffer`; returns the learner states
    [initial, after step 1, ..., after step count] stacked, and the stats of each step."""
    module = ALGOS[name]
    networks = module.setup(config).networks
    buffer = state.buffer

    def step(learner, key):
        sample_key, step_key = jax.random.split(key)
        batch = jax.tree.map(lambda x: x[0], replay.sample(buffer, sample_key, config.replay_batch_size))
        learner, stats = module.gradient_step(config, networks, learner, batch, step_key)
        return learner, (learner, stats)

    learner = state.replace(buffer=None)
    _, (after, stats) = jax.lax.scan(step, learner, jax.random.split(key, count))
    return jax.tree.map(lambda first, rest: jnp.concatenate([first[None], rest]), learner, after), stats


def differ(a, b) -> bool:
    return any(not np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


BAD = [
    (dict(env="CartPole-v1"), "env"),
    (dict(env="Pendulum-v2"), "Pendulum-v1"),
    (dict(buffer_size=201), "buffer_size"),
    (dict(buffer_size=20), "buffer_size"),
    (dict(learning_starts=10**6), "learning_starts"),
    (dict(total_timesteps=10), "total_timesteps"),
    (dict(activation="sigmoid"), "activation"),
    (dict(num_envs=0), "num_envs"),
    (dict(num_critics=0), "num_critics"),
    (dict(replay_batch_size=0), "replay_batch_size"),
    (dict(hidden_sizes=(16, 0)), "hidden_sizes"),
    (dict(gamma=1.5), "gamma"),
    (dict(tau=0.0), "tau"),
    (dict(actor_learning_rate=-1.0), "actor_learning_rate"),
    (dict(critic_learning_rate=0.0), "critic_learning_rate"),
]
OWN = [
    ("ddpg", dict(exploration_noise=-0.1), "exploration_noise"),
    ("td3", dict(exploration_noise=-0.1), "exploration_noise"),
    ("td3", dict(policy_delay=0), "policy_delay"),
    ("td3", dict(policy_noise=-0.2), "policy_noise"),
    ("td3", dict(noise_clip=-0.5), "noise_clip"),
    ("sac", dict(alpha=0.0), "alpha"),
    ("sac", dict(alpha_learning_rate=0.0), "alpha_learning_rate"),
    ("sac", dict(autotune=1), "autotune"),
]


@pytest.mark.parametrize("name", list(ALGOS))
@pytest.mark.parametrize("overrides, field", BAD)
def test_bad_config_raises_naming_the_field(name, overrides, field):
    with pytest.raises(ValueError, match=field):
        ALGOS[name].make_train(tiny(name, **overrides))


@pytest.mark.parametrize("name, overrides, field", OWN)
def test_bad_algorithm_field_raises_naming_it(name, overrides, field):
    with pytest.raises(ValueError, match=f"Config.{field}:"):
        ALGOS[name].make_train(tiny(name, **overrides))


@pytest.mark.parametrize("name", list(ALGOS))
def test_discrete_env_raises_a_clear_error(name):
    with pytest.raises(ValueError, match=r"Config\.env: CartPole-v1 has discrete actions; .* continuous"):
        ALGOS[name].validate(tiny(name, env="CartPole-v1"))


def test_registered():
    for name, module in ALGOS.items():
        assert ALGORITHMS[name] is module
        for attr in ("Config", "validate", "init", "update", "train", "make_train", "evaluation_policy"):
            assert hasattr(module, attr), (name, attr)


@pytest.mark.slow
def test_metrics_are_per_iteration_and_finite(algo):
    name = algo.name
    state, metrics = algo.separate[0]
    config = tiny(name)
    losses = ("critic_loss", "actor_loss", "q_mean") + (("alpha_loss", "entropy", "alpha") if name == "sac" else ())
    for key in ("episode_return", "episode_length", "episodes", *losses):
        assert metrics[key].shape == (config.num_iterations,), key
    for key in losses:
        assert np.isfinite(metrics[key]).all(), key
    critic_loss = np.asarray(metrics["critic_loss"])
    assert np.all(critic_loss[:1] == 0) and np.all(critic_loss[1:] > 0)  # learning starts at 100 env steps
    episodes = np.asarray(metrics["episodes"])
    np.testing.assert_array_equal(episodes, [0] * 7 + [2, 0, 0])  # 2 Pendulum episodes end at env step 200
    assert np.isfinite(metrics["episode_return"][7]) and metrics["episode_length"][7] == 200
    assert int(state.iteration) == config.num_iterations
    assert int(state.gradient_steps) == 9 * config.updates_per_iteration
    assert int(replay.size(state.buffer)) == config.buffer_size
    actions = np.asarray(state.buffer.experience["actions"])  # stored normalised
    assert actions.shape == (2, 100, 1) and np.all(np.abs(actions) <= 1)
    if name == "sac":
        assert np.all(np.asarray(metrics["alpha"]) > 0)


@pytest.mark.slow
def test_same_key_same_result_different_key_different(algo):
    config, key = runs(algo.name)[0]
    separate = algo.separate
    assert_trees_close(algo.train(config, key), separate[0], rtol=0, atol=0)
    other = algo.train(config, KEYS[1])
    assert differ(other[0].params, separate[0][0].params)


@pytest.mark.extended  # the default suite vmaps PPO, DQN and PQN; the extended tier every algorithm
def test_vmap_over_seeds_and_hyperparameters_equals_separate_runs(algo):
    """Two runs differing in key, learning rates and tau: one compiled program runs both (they are traced
    leaves), and vmapping them gives the separate runs."""
    separate, batched = algo.separate, algo.batched
    # a batched matmul rounds differently from an unbatched one (~1e-7); 27 gradient steps grow that to ~1e-5
    for i, out in enumerate(separate):
        assert_trees_close(index(batched, i), out, rtol=1e-3, atol=1e-4)
    assert differ(separate[0][0].params, separate[1][0].params)


@pytest.mark.slow
def test_target_networks_move_by_tau(algo):
    """target' = tau online' + (1 - tau) target after every gradient step (TD3: after every policy_delay-th, see
    below); SAC has no target actor."""
    name = algo.name
    state = algo.separate[0][0]
    learners, _ = gradient_steps(name, tiny(name, tau=0.1), state, jax.random.key(3), STEPS)
    moves = 0
    for k in range(1, STEPS + 1):
        old, new = index(learners, k - 1), index(learners, k)
        if differ(new.target_params, old.target_params):
            moves += 1
            for part, target in new.target_params.items():
                expected = jax.tree.map(lambda o, t: 0.1 * o + 0.9 * t, new.params[part], old.target_params[part])
                assert_trees_close(target, expected)
    assert moves == (STEPS // 2 if name == "td3" else STEPS)
    assert set(learners.target_params) == ({"critic"} if name == "sac" else {"actor", "critic"})


@pytest.mark.extended
@pytest.mark.parametrize("algo", ["td3"], indirect=True)
@pytest.mark.parametrize("delay", [2, 3])
def test_td3_actor_and_targets_update_only_every_policy_delay_steps(algo, delay):
    """The critics learn every step; the actor, its optimizer state and both targets only at the steps whose
    count (since the start of training) is a multiple of policy_delay, where the targets move by tau."""
    state = algo.separate[0][0]
    config = tiny("td3", policy_delay=delay, tau=0.2)
    learners, stats = gradient_steps("td3", config, state, jax.random.key(4), STEPS)
    start = int(state.gradient_steps)
    moved = []
    for k in range(1, STEPS + 1):
        old, new = index(learners, k - 1), index(learners, k)
        assert differ(new.params["critic"], old.params["critic"])
        actor_moved = differ(new.params["actor"], old.params["actor"])
        assert differ(new.target_params, old.target_params) == actor_moved
        assert differ(new.opt_state["actor"], old.opt_state["actor"]) == actor_moved
        if actor_moved:
            moved.append(start + k)
            for part, target in new.target_params.items():
                expected = jax.tree.map(lambda o, t: 0.2 * o + 0.8 * t, new.params[part], old.target_params[part])
                assert_trees_close(target, expected)
    assert moved == [s for s in range(start + 1, start + STEPS + 1) if s % delay == 0], (start, moved)
    assert np.isfinite(np.asarray(stats["actor_loss"])).all()


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["sac"], indirect=True)
def test_sac_temperature_moves_toward_the_target_entropy(algo):
    """grad log(alpha) = entropy - target: alpha falls when the policy's entropy is above the target (scale 5:
    target -5 nats) and rises when it is below (scale -5: target +5 nats > log 2, the most a squashed policy on
    [-1, 1] can have); without autotune it stays."""
    state = algo.separate[0][0]
    # a fresh Adam state: the trained one's momentum would carry log(alpha) on in its old direction for a while
    fresh = sac.optimizers(tiny("sac"))["log_alpha"].init(state.params["log_alpha"])
    state = state.replace(opt_state={**state.opt_state, "log_alpha": fresh})
    alphas = {}
    for scale in (5.0, -5.0):
        learners, stats = gradient_steps(
            "sac", tiny("sac", target_entropy_scale=scale), state, jax.random.key(5), STEPS
        )
        log_alpha = np.asarray(learners.params["log_alpha"])
        entropy = np.asarray(stats["entropy"])
        target = -scale * 1
        assert np.all(np.sign(np.diff(log_alpha)) == np.sign(target - entropy)), (scale, log_alpha, entropy)
        alphas[scale] = log_alpha
    assert alphas[5.0][-1] < alphas[5.0][0] and alphas[-5.0][-1] > alphas[-5.0][0]
    learners, _ = gradient_steps("sac", tiny("sac", autotune=False), state, jax.random.key(5), STEPS)
    assert np.all(np.asarray(learners.params["log_alpha"]) == np.asarray(state.params["log_alpha"]))


@pytest.mark.slow
def test_squashed_gaussian_log_prob_matches_change_of_variables():
    """log pi(a) of a = tanh(u), u ~ N(mean, std), against float64 NumPy: log N(atanh a) - sum log |dtanh/du|
    with the derivative taken by central finite differences; and in 1-D the density integrates to 1."""
    mean = jnp.array([[0.3, -1.2], [0.0, 1.5], [-0.5, 0.1]])
    log_std = jnp.array([[-0.5, -0.7], [0.0, -1.0], [0.2, -2.0]])
    dist = squashed_gaussian(mean, log_std)
    actions, log_prob = dist.sample_and_log_prob(seed=jax.random.key(0), sample_shape=64)  # [64, 3, 2], [64, 3]
    a = np.asarray(actions, np.float64)
    u = np.arctanh(a)
    m, s = np.asarray(mean, np.float64), np.exp(np.asarray(log_std, np.float64))
    log_normal = -0.5 * ((u - m) / s) ** 2 - np.log(s) - 0.5 * np.log(2 * np.pi)
    h = 1e-6
    jacobian = (np.tanh(u + h) - np.tanh(u - h)) / (2 * h)
    reference = (log_normal - np.log(jacobian)).sum(-1)
    np.testing.assert_allclose(log_prob, reference, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(dist.log_prob(actions), log_prob, rtol=1e-3, atol=1e-3)
    grid = np.linspace(-1 + 1e-6, 1 - 1e-6, 200_001)
    one_d = squashed_gaussian(jnp.array([[0.4]]), jnp.array([[-0.3]]))
    density = np.exp(np.asarray(one_d.log_prob(jnp.asarray(grid, jnp.float32)[:, None, None])))[:, 0]
    np.testing.assert_allclose(np.trapezoid(density, grid), 1.0, atol=1e-3)


@pytest.mark.slow
def test_actions_are_scaled_to_the_env_bounds():
    """Networks act in [-1, 1]; the env and evaluation see low + (u + 1) (high - low) / 2 (Pendulum: [-2, 2])."""
    spec = envs.make("Pendulum-v1").spec
    np.testing.assert_allclose(envs.scale_action(jnp.array([[-1.0], [0.0], [1.0]]), spec), [[-2], [0], [2]])
    obs = jax.random.normal(jax.random.key(1), (256, 3)) * 5.0
    for module in (td3, sac):
        config = module.Config(**TINY)
        setup = module.setup(config)
        actor = setup.networks.actor
        params = actor.init(jax.random.key(0), obs)
        # a large-weight actor saturates its tanh: the actions reach the bounds, not +-1
        params = jax.tree.map(lambda x: x * 50.0, params)
        state = types.SimpleNamespace(params={"actor": params}, env=types.SimpleNamespace(state=None))
        for deterministic in (True, False):
            act, _ = module.evaluation_policy(setup, config, state, deterministic)
            actions = np.asarray(jax.jit(act)(obs, jax.random.key(2)))
            assert actions.shape == (256, 1) and np.all(np.abs(actions) <= 2.0)
            assert np.abs(actions).max() > 1.9, (module.__name__, deterministic)
        if module is td3:
            u = actor.apply(params, obs)
            act, _ = module.evaluation_policy(setup, config, state, True)
            np.testing.assert_allclose(jax.jit(act)(obs, jax.random.key(2)), 2.0 * u, rtol=1e-6, atol=1e-6)


@pytest.mark.extended
@pytest.mark.parametrize("name", list(ALGOS))
def test_defaults_learn_pendulum(name):
    """The default Config (Pendulum-v1, 4 envs x 4 steps and 16 gradient steps of batch 128 per iteration, i.e. one
    gradient step per env step; 20k env steps per seed after 1k uniformly random ones; 64x64 networks) on 3 seeds
    vmapped: the mean over the seeds of each seed's mean return of the episodes in the last 10% of iterations is
    >= -250 (random play: about -1200; measured, benchmarks/results/spectrum_continuous.json: -142 DDPG, -146 TD3,
    -140 SAC)."""
    module = ALGOS[name]
    _, metrics = runner_jit(jax.vmap(module.make_train(module.Config())))(jax.random.split(jax.random.key(0), 3))
    returns = np.asarray(metrics["episode_return"])
    final = np.nanmean(returns[:, -returns.shape[1] // 10 :], axis=1)
    assert final.mean() >= -250, final
