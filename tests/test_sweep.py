"""Sweeps: grid/random points, one compiled program over (config x seed), sharding over forced CPU devices."""

import csv
import os
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_trees_close, index
from jaxrl import sweep
from jaxrl.algos import ppo

CONFIG = ppo.Config(
    num_envs=4, num_steps=16, total_timesteps=4 * 16 * 5, update_epochs=2, num_minibatches=2, hidden_sizes=(16, 16)
)
GRID = {"learning_rate": [1e-3, 5e-3], "clip_eps": [0.1, 0.3]}
SEEDS, SEED = 2, 7
SUBPROCESS_TIMEOUT_S = 240

# Runs in a fresh interpreter with 2 forced CPU devices: 3 points x 1 seed, so B = 3 is padded to 4 and split
# 2 + 2 over the devices, with both sharding methods. Saves the metrics and final parameters, compared in
# test_sharded_equals_unsharded.
SHARDED_SCRIPT = textwrap.dedent(
    """
    import faulthandler, sys
    faulthandler.dump_traceback_later({timeout}, exit=True)  # a hang prints Python stacks instead of nothing
    import jax, numpy as np
    from jaxrl import sweep
    from jaxrl.algos import ppo
    assert len(jax.devices()) == 2, jax.devices()
    assert sweep.use_cpu_cores(2) == 2  # already 2 devices: a no-op, not an error
    config = ppo.Config(**{config})
    points = sweep.grid(config, **{grid}).points[:3]
    saved = {{}}
    for method in ("jit", "shard_map"):
        results = sweep.run(sweep.from_points(config, points), seeds=1, seed={seed}, method=method)
        assert results.num_devices == 2, results.num_devices
        saved.update({{f"{{method}}/{{k}}": v for k, v in results.metrics.items()}})
        for i, x in enumerate(jax.tree.leaves(results.state.params)):
            saved[f"{{method}}/param_{{i}}"] = np.asarray(x)
    np.savez(sys.argv[1], **saved)
    """
)


def _config_kwargs():
    return {
        "num_envs": CONFIG.num_envs,
        "num_steps": CONFIG.num_steps,
        "total_timesteps": CONFIG.total_timesteps,
        "update_epochs": CONFIG.update_epochs,
        "num_minibatches": CONFIG.num_minibatches,
        "hidden_sizes": CONFIG.hidden_sizes,
    }


@pytest.fixture(scope="module")
def sharded_process(tmp_path_factory):
    """Started before `programs` so that it compiles while the main process does."""
    path = tmp_path_factory.mktemp("sharded") / "sharded.npz"
    script = SHARDED_SCRIPT.format(timeout=SUBPROCESS_TIMEOUT_S - 20, config=_config_kwargs(), grid=GRID, seed=SEED)
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    yield proc, path
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


@pytest.fixture(scope="module")
def programs(sharded_process):
    """The unsharded sweep, and `jax.jit(ppo.train)` compiled once (hyperparameters are traced arguments, so
    every grid point reuses it), compiled side by side: XLA compiles outside the GIL."""
    key = jax.random.key(0)
    with ThreadPoolExecutor(max_workers=2) as pool:
        swept = pool.submit(sweep.run, sweep.grid(CONFIG, **GRID), seeds=SEEDS, seed=SEED)
        single = pool.submit(lambda: jax.jit(ppo.train).lower(CONFIG, key).compile())
        return swept.result(), single.result()


@pytest.fixture(scope="module")
def results(programs):
    return programs[0]


@pytest.fixture(scope="module")
def single(programs):
    return programs[1]


def test_grid_points_and_stacked_configs():
    g = sweep.grid(CONFIG, **GRID)
    assert g.points == [
        {"learning_rate": 1e-3, "clip_eps": 0.1},
        {"learning_rate": 1e-3, "clip_eps": 0.3},
        {"learning_rate": 5e-3, "clip_eps": 0.1},
        {"learning_rate": 5e-3, "clip_eps": 0.3},
    ]
    assert len(g) == 4 and g.names == ["learning_rate", "clip_eps"]
    for leaf in jax.tree.leaves(g.configs):
        assert leaf.shape == (4,) and leaf.dtype == jnp.float32
    np.testing.assert_array_equal(g.configs.clip_eps, np.float32([0.1, 0.3, 0.1, 0.3]))
    np.testing.assert_array_equal(g.configs.gamma, np.float32([CONFIG.gamma] * 4))  # unvaried leaves broadcast
    assert g.configs.num_envs == CONFIG.num_envs  # static fields stay static
    assert g.config(3) == CONFIG.replace(learning_rate=5e-3, clip_eps=0.3)


@pytest.mark.slow
def test_grid_equals_separate_runs(results, single):
    """Config c, seed j of the sweep == jit(ppo.train)(config_c, split(key(SEED), SEEDS)[j]) for every c:
    the documented keys, the same for every config (common random numbers)."""
    g = sweep.grid(CONFIG, **GRID)
    keys = jax.random.split(jax.random.key(SEED), SEEDS)
    assert results.metrics["value_loss"].shape == (4, SEEDS, CONFIG.num_iterations)
    for c in range(len(g)):
        for j in range(SEEDS):
            state, metrics = single(g.config(c), keys[j])
            assert_trees_close({k: results.metrics[k][c, j] for k in metrics}, dict(metrics), rtol=1e-5, atol=1e-6)
            # the vmapped programs round otherwise in the last bits, which the updates carry on (up to 2e-6)
            assert_trees_close(index(index(results.state.params, c), j), state.params, rtol=1e-5, atol=1e-5)
    # not vacuous: configs and seeds really differ
    loss = results.metrics["value_loss"]
    assert not np.allclose(loss[0], loss[3]) and not np.allclose(loss[:, 0], loss[:, 1])


@pytest.mark.parametrize("make", [lambda **kw: sweep.grid(CONFIG, **kw), lambda **kw: sweep.random(CONFIG, 3, **kw)])
def test_static_and_unknown_fields_raise(make):
    with pytest.raises(ValueError, match=r"Config\.num_envs: a static field.*cannot vary"):
        make(num_envs=[4, 8])
    with pytest.raises(ValueError, match=r"Config\.hidden_sizes: a static field"):
        make(hidden_sizes=[(8,), (16,)])
    with pytest.raises(ValueError, match=r"Config\.learning_rat: unknown field.*sweepable fields: .*learning_rate"):
        make(learning_rat=[1e-3])


def test_bad_values_raise():
    with pytest.raises(ValueError, match="learning_rate.*non-empty list"):
        sweep.grid(CONFIG, learning_rate=[])
    with pytest.raises(ValueError, match="learning_rate.*non-empty list"):
        sweep.grid(CONFIG, learning_rate=1e-3)
    with pytest.raises(ValueError, match="log_uniform needs low > 0"):
        sweep.random(CONFIG, 2, learning_rate=("log_uniform", 0.0, 1.0))
    with pytest.raises(ValueError, match="unknown distribution 'normal'"):
        sweep.random(CONFIG, 2, learning_rate=("normal", 0.0, 1.0))


def test_invalid_point_is_rejected_before_compiling():
    with pytest.raises(ValueError, match=r"sweep point 1 \{'gamma': 1.5\}: Config.gamma: got 1.5"):
        sweep.run(sweep.grid(CONFIG, gamma=[0.9, 1.5]))
    with pytest.raises(ValueError, match=r"sweep point 0 \{\}: Config.num_minibatches: 3 does not divide"):
        sweep.run(CONFIG.replace(num_minibatches=3))  # a plain Config is a sweep of one point


def test_random_search():
    dists = {
        "learning_rate": ("log_uniform", 1e-4, 1e-2),
        "clip_eps": ("uniform", 0.1, 0.3),
        "ent_coef": [0.0, 0.01, 0.1],
    }
    r = sweep.random(CONFIG, 400, seed=3, **dists)
    lr = np.array([p["learning_rate"] for p in r.points])
    clip = np.array([p["clip_eps"] for p in r.points])
    ent = [p["ent_coef"] for p in r.points]
    assert len(r) == 400 and r.names == ["learning_rate", "clip_eps", "ent_coef"]
    assert lr.min() >= 1e-4 and lr.max() <= 1e-2 and clip.min() >= 0.1 and clip.max() <= 0.3
    assert set(ent) == {0.0, 0.01, 0.1}
    # uniform in log space: half below the geometric midpoint 1e-3 (uniform in linear space would put ~9% there)
    assert 0.4 < np.mean(lr < 1e-3) < 0.6
    assert abs(np.mean(np.log10(lr)) + 3) < 0.15 and abs(np.mean(clip) - 0.2) < 0.015
    np.testing.assert_allclose(r.configs.learning_rate, lr.astype(np.float32))
    assert sweep.random(CONFIG, 400, seed=3, **dists).points == r.points  # reproducible from its seed
    assert sweep.random(CONFIG, 400, seed=4, **dists).points != r.points
    # one stream per field: changing another field's distribution leaves a field's draws unchanged
    other = sweep.random(CONFIG, 400, seed=3, learning_rate=dists["learning_rate"], clip_eps=("uniform", 0.2, 0.25))
    assert [p["learning_rate"] for p in other.points] == lr.tolist()


@pytest.mark.slow
def test_rows_and_csv(results, tmp_path):
    iterations = CONFIG.num_iterations
    rows = results.rows()
    assert len(rows) == 4 * SEEDS * iterations
    metric_names = sorted(results.metrics)
    assert list(rows[0]) == ["config", "learning_rate", "clip_eps", "seed", "iteration", "env_steps", *metric_names]
    for row in rows:
        point = results.points[row["config"]]
        assert row["learning_rate"] == point["learning_rate"] and row["clip_eps"] == point["clip_eps"]
        assert row["env_steps"] == (row["iteration"] + 1) * CONFIG.num_envs * CONFIG.num_steps
        expected = results.metrics["value_loss"][row["config"], row["seed"], row["iteration"]]
        assert row["value_loss"] == pytest.approx(float(expected), rel=1e-6)
    assert {(r["learning_rate"], r["clip_eps"]) for r in rows if r["config"] == 2} == {(5e-3, 0.1)}
    assert sorted({(r["seed"], r["iteration"]) for r in rows if r["config"] == 1}) == [
        (s, i) for s in range(SEEDS) for i in range(iterations)
    ]

    path = results.to_csv(tmp_path / "sweep.csv")
    table = list(csv.DictReader(open(path)))
    assert len(table) == len(rows)
    last = table[-1]
    assert float(last["learning_rate"]) == 5e-3 and float(last["clip_eps"]) == 0.3 and last["seed"] == str(SEEDS - 1)
    assert int(last["env_steps"]) == CONFIG.total_timesteps
    assert float(last["entropy"]) == pytest.approx(float(results.metrics["entropy"][3, SEEDS - 1, -1]), rel=1e-6)
    assert results.final("value_loss", fraction=0.4).shape == (4, SEEDS)


def test_use_cpu_cores_after_initialisation():
    before = os.environ.get("XLA_FLAGS")
    have = len(jax.devices("cpu"))
    assert sweep.backend_initialized()
    assert sweep.use_cpu_cores(have) == have  # nothing to change: not an error
    with pytest.raises(RuntimeError, match=r"already initialised.*XLA_FLAGS=--xla_force_host_platform_device_count"):
        sweep.use_cpu_cores(have + 1)
    assert os.environ.get("XLA_FLAGS") == before and len(jax.devices()) == have


@pytest.mark.slow
def test_use_cpu_cores_reset_in_fresh_process():
    script = textwrap.dedent(
        """
        import os, jax, jax.numpy as jnp
        from jaxrl import sweep
        x = jnp.arange(3.0)  # the backend is initialised (importing jaxrl already did it)
        assert len(jax.devices()) == 1
        assert sweep.use_cpu_cores(3, reset=True) == 3
        assert len(jax.devices()) == 3, jax.devices()
        assert os.environ["XLA_FLAGS"].split() == ["--xla_cpu_enable_fast_math=false",
                                                   "--xla_force_host_platform_device_count=3"]
        print(float((x + jnp.ones(3)).sum()))  # arrays made before still work
        """
    )
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=1",
        "JAX_PLATFORMS": "cpu",
    }
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "6.0"


@pytest.mark.extended
def test_sharded_equals_unsharded(sharded_process, single):
    """3 points x 1 seed over 2 forced CPU devices (padded to 4) == the unsharded single runs, to rtol 1e-5,
    sharded by jit's in/out shardings and by shard_map."""
    proc, path = sharded_process
    try:
        output, _ = proc.communicate(timeout=SUBPROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        output, _ = proc.communicate()
        pytest.fail(f"sharded subprocess hung; get a native backtrace with gdb -p PID. Output:\n{output[-3000:]}")
    assert proc.returncode == 0, output[-3000:]
    saved = np.load(path)
    g = sweep.grid(CONFIG, **GRID)
    key = jax.random.split(jax.random.key(SEED), 1)[0]
    for c in range(3):
        state, metrics = single(g.config(c), key)
        params = [np.asarray(x) for x in jax.tree.leaves(state.params)]
        for method in ("jit", "shard_map"):
            assert_trees_close({k: saved[f"{method}/{k}"][c, 0] for k in metrics}, dict(metrics), rtol=1e-5, atol=1e-6)
            sharded = [saved[f"{method}/param_{i}"][c, 0] for i in range(len(params))]
            assert_trees_close(sharded, params, rtol=1e-5, atol=1e-6)


def test_batching_pads_and_unbatches():
    configs = sweep.grid(CONFIG, learning_rate=[1.0, 2.0, 3.0]).configs
    keys = jax.random.split(jax.random.key(0), 3)
    configs_b, keys_b, size = sweep.batch_inputs(configs, keys, 3, 3, 4)  # 9 pairs over 4 devices -> 12
    assert size == 9 and configs_b.learning_rate.shape == (12,) and keys_b.shape == (12,)
    np.testing.assert_array_equal(configs_b.learning_rate, [1, 1, 1, 2, 2, 2, 3, 3, 3, 1, 1, 1])
    back = sweep.unbatch({"lr": configs_b.learning_rate, "k": jax.random.key_data(keys_b)}, 3, 3)
    np.testing.assert_array_equal(back["lr"], [[1, 1, 1], [2, 2, 2], [3, 3, 3]])
    for c in range(3):
        np.testing.assert_array_equal(back["k"][c], jax.random.key_data(keys))  # same keys for every config


def test_algorithm_comes_from_the_config():
    from jaxrl.algos import dqn

    with pytest.raises(ValueError, match="the sweep's Config is ppo's"):
        sweep.run(CONFIG, algo=dqn)
