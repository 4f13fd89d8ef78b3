"""Tests for jaxrl.envs: make(), EnvSpec, the VecEnv and its wrappers, against NumPy recomputations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl import envs

N = 4


# ---------------------------------------------------------------------------
# A jitted scan driver: actions come from the step key (and the step index) only, so two envs fed the same
# key see the same actions whatever their observations are.
# ---------------------------------------------------------------------------


def random_discrete(n_actions):
    return lambda key, t, num_envs: jax.random.randint(key, (num_envs,), 0, n_actions)


def alternating(key, t, num_envs):
    del key
    return jnp.full((num_envs,), t % 2, jnp.int32)


def random_continuous(low, high, dim):
    return lambda key, t, num_envs: jax.random.uniform(key, (num_envs, dim), minval=low, maxval=high)


def make_runner(env, num_steps, action_fn):
    """jit(key) -> dict of [T, N, ...] stacks (obs_before, actions, obs, rewards, ..., info fields), obs0, state."""

    @jax.jit
    def run(key):
        reset_key, scan_key = jax.random.split(key)
        obs0, state0 = env.reset(reset_key)

        def step(carry, xs):
            state, obs_before = carry
            k, t = xs
            action_key, env_key = jax.random.split(k)
            action = action_fn(action_key, t, env.num_envs)
            obs, state, reward, terminated, truncated, info = env.step(env_key, state, action)
            out = dict(
                obs_before=obs_before,
                actions=action,
                obs=obs,
                rewards=reward,
                terminated=terminated,
                truncated=truncated,
                **info,
            )
            return (state, obs), out

        keys = jax.random.split(scan_key, num_steps)
        (state, _), out = jax.lax.scan(step, (state0, obs0), (keys, jnp.arange(num_steps)))
        return obs0, state, out

    return run


def to_np(tree):
    return jax.tree.map(np.asarray, tree)


# ---------------------------------------------------------------------------
# make(): ids, specs, parameter overrides
# ---------------------------------------------------------------------------


def test_make_misspelt_id_suggests_close_match():
    with pytest.raises(ValueError, match="CartPole-v1") as err:
        envs.make("CartPol-v1")
    assert "Did you mean" in str(err.value)


def test_make_nonsense_id_raises():
    with pytest.raises(ValueError, match="not a registered gymnax environment"):
        envs.make("zzqx-nothing-like-this-42")


def test_make_rejects_zero_envs():
    with pytest.raises(ValueError, match="num_envs"):
        envs.make("CartPole-v1", num_envs=0)


def test_spec_cartpole():
    env = envs.make("CartPole-v1", num_envs=3)
    spec = env.spec
    assert spec.env_id == "CartPole-v1"
    assert spec.discrete is True
    assert spec.action_dim == 2
    assert spec.observation_shape == (4,)
    assert env.num_envs == 3
    obs, _ = env.reset(jax.random.key(0))
    assert obs.shape == (3, 4) and obs.dtype == jnp.float32


def test_spec_pendulum():
    spec = envs.make("Pendulum-v1").spec
    assert spec.discrete is False
    assert spec.action_dim == 1
    assert spec.observation_shape == (3,)
    np.testing.assert_array_equal(np.asarray(spec.action_low), [-2.0])
    np.testing.assert_array_equal(np.asarray(spec.action_high), [2.0])


def test_spec_breakout_minatar():
    env = envs.make("Breakout-MinAtar", num_envs=2)
    assert env.spec.observation_shape == (10, 10, 4)
    assert env.spec.discrete is True
    obs, _ = env.reset(jax.random.key(0))
    assert obs.shape == (2, 10, 10, 4) and obs.dtype == jnp.float32  # bool grid cast to float


def test_env_params_override():
    env = envs.make("CartPole-v1", num_envs=2, max_steps_in_episode=20)
    assert env.params.max_steps_in_episode == 20
    assert envs.make("CartPole-v1").params.max_steps_in_episode == 500


@pytest.mark.slow
def test_max_steps_override_truncates_at_20():
    env = envs.make("CartPole-v1", num_envs=N, max_steps_in_episode=20)
    _, _, out = to_np(make_runner(env, 50, alternating)(jax.random.key(1)))
    done = out["terminated"] | out["truncated"]
    # The alternating policy keeps the pole up: every episode is cut by the time limit, at steps 19 and 39.
    assert not out["terminated"].any()
    expected_done = np.zeros((50, N), bool)
    expected_done[[19, 39]] = True
    np.testing.assert_array_equal(out["truncated"], expected_done)
    np.testing.assert_array_equal(out["episode_done"], done)
    np.testing.assert_array_equal(out["episode_length"][done], 20)
    np.testing.assert_array_equal(out["episode_return"][done], 20.0)
    # After the time-limit reset the next observation is a fresh start, not the successor.
    assert not np.allclose(out["obs"][19], out["final_observation"][19])


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "Breakout-MinAtar", "DeepSea-bsuite"])
def test_step_auto_resets_as_gymnax_does(env_id):
    """The vectorised step, which computes resets only on steps where some env is done, against gymnax's own
    `Environment.step` vmapped (a reset for every env on every step), from the same states and keys: the same
    dones and state leaves (to the last bits of float arithmetic, which fuse differently), resets where done.
    DeepSea overrides `step` (its metrics outlive a reset) and is stepped by its own."""
    from jaxrl.envs import gymnax as vec

    env = vec.make(env_id, num_envs=6, **({"max_steps_in_episode": 30} if env_id == "Pendulum-v1" else {}))
    assert vec._auto_resets_as_gymnax(env.env) == (env_id != "DeepSea-bsuite")
    gymnax_step = jax.vmap(env.env.step, in_axes=(0, 0, 0, None))

    def both(state, key):
        key_action, key_step = jax.random.split(key)
        if env.spec.discrete:
            action = jax.random.randint(key_action, (6,), 0, env.spec.action_dim)
        else:
            action = jax.random.uniform(key_action, (6, env.spec.action_dim), minval=-2.0, maxval=2.0)
        ours = env.step(key_step, state, action)
        theirs = gymnax_step(jax.random.split(key_step, 6), state, action, env.params)
        return theirs[1], (ours, theirs)

    _, state = env.reset(jax.random.key(3))
    _, (ours, theirs) = jax.jit(lambda s: jax.lax.scan(both, s, jax.random.split(jax.random.key(4), 200)))(state)
    obs, state, reward, terminated, truncated, info = ours
    obs_g, state_g, reward_g, term_g, trunc_g, info_g = theirs
    np.testing.assert_array_equal(terminated, term_g)
    np.testing.assert_array_equal(truncated, trunc_g)
    assert (terminated | truncated).sum() >= 6, "too few episodes ended to exercise the resets"
    close = dict(rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(reward, reward_g, **close)
    np.testing.assert_allclose(obs, np.asarray(obs_g, np.float32), **close)
    np.testing.assert_allclose(info["final_observation"], np.asarray(info_g["final_observation"], np.float32), **close)
    for leaf, leaf_g in zip(jax.tree.leaves(state), jax.tree.leaves(state_g), strict=True):
        np.testing.assert_allclose(np.asarray(leaf, np.float64), np.asarray(leaf_g, np.float64), **close)


# ---------------------------------------------------------------------------
# EpisodeStatistics and final_observation, on a 300-step CartPole run with random actions
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cartpole_random_runner():
    return make_runner(envs.make("CartPole-v1", num_envs=N), 300, random_discrete(2))


@pytest.fixture(scope="module")
def cartpole_run(cartpole_random_runner):
    return to_np(cartpole_random_runner(jax.random.key(7)))


def test_episode_statistics_match_numpy(cartpole_run):
    _, _, out = cartpole_run
    rewards, done = out["rewards"], out["terminated"] | out["truncated"]
    T = rewards.shape[0]
    exp_return = np.zeros((T, N), np.float64)
    exp_length = np.zeros((T, N), np.int64)
    episodes = 0
    for i in range(N):
        ret, length = 0.0, 0
        for t in range(T):
            ret += float(rewards[t, i])
            length += 1
            if done[t, i]:
                exp_return[t, i], exp_length[t, i] = ret, length
                ret, length = 0.0, 0
                episodes += 1
    assert episodes >= 20  # random CartPole episodes last ~20 steps: plenty complete in 300 steps
    np.testing.assert_array_equal(out["episode_done"], done)
    np.testing.assert_allclose(out["episode_return"], exp_return, rtol=0, atol=1e-4)
    np.testing.assert_array_equal(out["episode_length"], exp_length)
    # Zero wherever no episode ended.
    assert (out["episode_return"][~done] == 0).all()
    assert (out["episode_length"][~done] == 0).all()
    # CartPole pays 1 per step, so every return equals its length.
    np.testing.assert_allclose(out["episode_return"][done], out["episode_length"][done])
    assert out["episode_length"].dtype == np.int32
    assert out["episode_return"].dtype == np.float32


def test_final_observation(cartpole_run):
    _, _, out = cartpole_run
    done = out["terminated"] | out["truncated"]
    obs, final = out["obs"], out["final_observation"]
    assert done.any() and (~done).any()
    # Not done: the final observation is the next observation.
    np.testing.assert_array_equal(obs[~done], final[~done])
    # Done: the env auto-reset, so the observation is a fresh start, unlike the true successor.
    assert (np.abs(obs[done] - final[done]).max(axis=-1) > 0).all()
    # Terminated CartPole successors are out of bounds; fresh starts are within +-0.05.
    term = out["terminated"]
    f = final[term]
    assert ((np.abs(f[:, 0]) > 2.4) | (np.abs(f[:, 2]) > 12 * 2 * np.pi / 360)).all()
    assert (np.abs(obs[done]) <= 0.05).all()


def test_obs_chain(cartpole_run):
    # The observation each action is chosen from is the previous step's returned observation.
    obs0, _, out = cartpole_run
    np.testing.assert_array_equal(out["obs_before"][0], obs0)
    np.testing.assert_array_equal(out["obs_before"][1:], out["obs"][:-1])


def test_determinism(cartpole_random_runner, cartpole_run):
    again = to_np(cartpole_random_runner(jax.random.key(7)))
    jax.tree.map(np.testing.assert_array_equal, again, cartpole_run)
    other = to_np(cartpole_random_runner(jax.random.key(8)))
    assert not np.array_equal(other[2]["obs"], cartpole_run[2]["obs"])
    assert not np.array_equal(other[0], cartpole_run[0])
    assert not np.array_equal(other[2]["actions"], cartpole_run[2]["actions"])


def test_envs_in_batch_differ(cartpole_run):
    obs0, _, _ = cartpole_run
    assert len({tuple(o) for o in obs0.tolist()}) == N


# ---------------------------------------------------------------------------
# NormalizeObservation
# ---------------------------------------------------------------------------

PRIOR_COUNT = 1e-4  # RunningMeanStd.create: mean 0, var 1, count 1e-4


def combined_stats(data):
    """Mean/var of the prior pseudo-sample (mean 0, var 1, weight 1e-4) pooled with `data` [n, ...], float64."""
    data = np.asarray(data, np.float64)
    n = data.shape[0]
    m, v = data.mean(0), data.var(0)
    c = PRIOR_COUNT + n
    mean = n * m / c
    m2 = PRIOR_COUNT * 1.0 + n * v + m**2 * PRIOR_COUNT * n / c
    return mean, m2 / c


def normalize_ref(x, mean, var):
    return np.clip((x - mean) / np.sqrt(var + 1e-8), -10, 10)


@pytest.fixture(scope="module")
def normalize_runs():
    steps = 200
    key = jax.random.key(3)
    action_fn = random_discrete(2)
    raw = to_np(make_runner(envs.make("CartPole-v1", num_envs=N), steps, action_fn)(key))
    norm = to_np(make_runner(envs.make("CartPole-v1", num_envs=N, normalize_observations=True), steps, action_fn)(key))
    return raw, norm


@pytest.mark.slow
def test_normalize_same_trajectory(normalize_runs):
    (_, _, raw), (_, _, norm) = normalize_runs
    for k in ("actions", "rewards", "terminated", "truncated", "episode_return", "episode_length"):
        np.testing.assert_array_equal(norm[k], raw[k], err_msg=k)


def test_normalize_running_stats(normalize_runs):
    (raw_obs0, _, raw), (_, norm_state, _) = normalize_runs
    seen = np.concatenate([raw_obs0[None], raw["obs"]]).reshape(-1, 4)  # reset obs + every step's obs
    stats = norm_state.inner.stats
    assert float(stats.count) == pytest.approx(seen.shape[0] + PRIOR_COUNT, rel=1e-6)
    # Against plain NumPy statistics (the prior's weight 1e-4 is negligible after 804 observations).
    np.testing.assert_allclose(stats.mean, seen.mean(0), rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(stats.var, seen.var(0), rtol=1e-3, atol=1e-7)
    # And exactly (up to float32) against the pooled statistics including the prior.
    mean, var = combined_stats(seen)
    np.testing.assert_allclose(stats.mean, mean, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(stats.var, var, rtol=1e-4, atol=1e-8)


def test_normalized_observations_per_step(normalize_runs):
    (raw_obs0, _, raw), (norm_obs0, _, norm) = normalize_runs
    mean, var = combined_stats(raw_obs0)
    np.testing.assert_allclose(norm_obs0, normalize_ref(raw_obs0, mean, var), rtol=1e-4, atol=1e-4)
    seen = [raw_obs0]
    for t in range(raw["obs"].shape[0]):
        seen.append(raw["obs"][t])
        mean, var = combined_stats(np.concatenate(seen))  # stats after step t's update
        expected = normalize_ref(raw["obs"][t], mean, var)
        np.testing.assert_allclose(norm["obs"][t], expected, rtol=1e-3, atol=2e-3, err_msg=f"t={t}")
        np.testing.assert_allclose(
            norm["final_observation"][t],
            normalize_ref(raw["final_observation"][t], mean, var),
            rtol=1e-3,
            atol=2e-3,
            err_msg=f"final t={t}",
        )
    assert np.abs(norm["obs"]).max() <= 10.0
    # Normalised observations are roughly standardised over the run.
    late = norm["obs"][100:].reshape(-1, 4)
    assert np.all(np.abs(late.mean(0)) < 0.5) and np.all((late.std(0) > 0.5) & (late.std(0) < 2.0))


# ---------------------------------------------------------------------------
# ClipAction
# ---------------------------------------------------------------------------


def test_clip_action_pendulum_equivalent_to_bound():
    env = envs.make("Pendulum-v1", num_envs=N)
    assert isinstance(env.inner, envs.ClipAction)
    obs, state = env.reset(jax.random.key(0))
    step = jax.jit(env.step)
    key = jax.random.key(1)
    for big, bound in [(100.0, 2.0), (-100.0, -2.0)]:
        out_big = to_np(step(key, state, jnp.full((N, 1), big)))
        out_bound = to_np(step(key, state, jnp.full((N, 1), bound)))
        jax.tree.map(np.testing.assert_array_equal, out_big, out_bound)
        out_inside = to_np(step(key, state, jnp.full((N, 1), 0.5 * bound)))
        assert not np.array_equal(out_inside[0], out_bound[0])


class _EchoEnv:
    """A stand-in VecEnv whose step returns the action it received as its observation."""

    num_envs = 3
    spec = envs.EnvSpec("echo", (2,), False, 2, jnp.array([-1.0, 0.0]), jnp.array([1.0, 5.0]))

    def reset(self, key):
        return jnp.zeros((3, 2)), None

    def step(self, key, state, action):
        z = jnp.zeros(3)
        return action, state, z, z.astype(bool), z.astype(bool), {"final_observation": action}


def test_clip_action_clips_to_spec_bounds_per_dimension():
    env = envs.ClipAction(_EchoEnv())
    action = jnp.array([[-3.0, 7.0], [0.5, 2.5], [1.5, -0.1]])
    seen = np.asarray(env.step(jax.random.key(0), None, action)[0])
    np.testing.assert_array_equal(seen, [[-1.0, 5.0], [0.5, 2.5], [1.0, 0.0]])
    assert env.num_envs == 3  # attributes forward to the wrapped env


def test_clip_action_wrapping_choices():
    assert not isinstance(envs.make("Pendulum-v1", clip_actions=False).inner, envs.ClipAction)
    assert isinstance(envs.make("Pendulum-v1").inner, envs.ClipAction)
    assert isinstance(envs.make("CartPole-v1").inner, envs.GymnaxVecEnv)  # discrete: never clipped
    wrapped = envs.make("Pendulum-v1", normalize_observations=True)
    assert isinstance(wrapped, envs.EpisodeStatistics)
    assert isinstance(wrapped.inner, envs.NormalizeObservation)
    assert isinstance(wrapped.inner.inner, envs.ClipAction)


def test_pendulum_episode_statistics_continuous():
    env = envs.make("Pendulum-v1", num_envs=2, max_steps_in_episode=30)
    _, _, out = to_np(make_runner(env, 60, random_continuous(-2.0, 2.0, 1))(jax.random.key(5)))
    assert out["actions"].shape == (60, 2, 1)
    done = out["terminated"] | out["truncated"]
    assert not out["terminated"].any()
    np.testing.assert_array_equal(np.argwhere(done[:, 0]).ravel(), [29, 59])
    np.testing.assert_allclose(out["episode_return"][29], out["rewards"][:30].sum(0), rtol=1e-5)
    np.testing.assert_allclose(out["episode_return"][59], out["rewards"][30:].sum(0), rtol=1e-5)
    assert (out["rewards"] <= 0).all()


@pytest.mark.slow
def test_gymnax_loads_its_render_only_imports_when_a_render_uses_them():
    """Building a gymnax env imports none of seaborn, pandas, scipy.stats or matplotlib.pyplot (gymnax's modules
    import them for their render functions alone); Pong's render still draws through them, and an `import
    seaborn` afterwards gets the real module."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "import matplotlib\n"
        "matplotlib.use('Agg')\n"
        "import jax\n"
        "from jaxrl import envs\n"
        "env = envs.make('CartPole-v1', 2)\n"
        "render_only = ('seaborn', 'pandas', 'scipy.stats', 'matplotlib.pyplot')\n"
        "print(sorted(m for m in render_only if m in sys.modules))\n"
        "import gymnax\n"
        "pong, params = gymnax.make('Pong-misc')\n"
        "obs, state = pong.reset(jax.random.key(0), params)\n"
        "image = pong.render(state, params)\n"
        "print(type(image).__name__, image.get_array().shape)\n"
        "import seaborn\n"
        "print(type(seaborn).__name__, seaborn.__spec__ is not None)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "AxesImage (30, 40)", "module True"], done.stdout


GYMNAX_FROM_TWO_THREADS = """
import importlib.abc, sys, threading, time
started, release, asking = threading.Event(), threading.Event(), threading.Event()

class Slow(importlib.abc.MetaPathFinder):  # holds gymnax's import open, its module in sys.modules, until released
    def find_spec(self, name, path, target=None):
        if name != "gymnax":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec("gymnax")
        run = spec.loader.exec_module
        def exec_module(module):
            started.set()
            release.wait(120)
            run(module)
        spec.loader.exec_module = exec_module
        return spec

sys.meta_path.insert(0, Slow())
from jaxrl.envs import gymnax
errors = []
def ask():
    asking.set()
    try:
        assert "CartPole-v1" in gymnax.ids()
    except Exception as error:
        errors.append(repr(error))
first = threading.Thread(target=gymnax.import_gymnax)
first.start()
assert started.wait(120)
second = threading.Thread(target=ask)
second.start()
assert asking.wait(120)
time.sleep(0.5)  # time for the second thread to reach gymnax (a missed race passes; it cannot fail wrongly)
release.set()
first.join(120)
second.join(120)
print(errors)
"""


def test_gymnax_imported_from_two_threads_is_whole_in_both():
    """A sweep validates (making an env) in one thread while another compiles: the second thread to ask for gymnax
    waits until the first has finished importing it, never getting the half-initialised module."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", GYMNAX_FROM_TWO_THREADS], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.split("\n")[0] == "[]", done.stdout + done.stderr
