"""Population-based training: ranking, exploit/explore on hand-made populations, the compiled program against
vmapped independent runs, determinism, lineage and validation."""

import csv
import dataclasses
import json
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import struct

from conftest import _host, runner_jit
from jaxrl import envs, pbt
from jaxrl.algos import base, ppo
from jaxrl.run.compile import compiler_options

CONFIG = ppo.Config(
    num_envs=4, num_steps=16, total_timesteps=4 * 16 * 5, update_epochs=1, num_minibatches=2, hidden_sizes=(8, 8)
)
EXPLORE = {"learning_rate": "loguniform:1e-4:1e-2", "ent_coef": "uniform:0:0.05"}
PBT = pbt.PBTConfig(population=4, ready=2, truncation=0.25, explore=EXPLORE, resample_probability=0.5)
EPISODES = 4  # evaluation episodes: each member's at every iteration in EVAL_PBT, the best member's at the end
# every member evaluated after every iteration, ranked at a ready step by the evaluation return
EVAL_PBT = dataclasses.replace(PBT, eval_every=1, eval_episodes=EPISODES, fitness="eval")


def assert_trees_equal(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(_host(x), _host(y)), a, b)


def take(tree, i):
    return jax.tree.map(lambda x: x[i], tree)


@struct.dataclass
class FakeState:
    """A TrainState's shape: parameters, optimiser state, an env batch, a key, a counter."""

    params: dict
    opt_state: optax.OptState
    env: jax.Array
    key: jax.Array
    iteration: jax.Array


def population(size=8, seed=0):
    """`size` members with distinct parameters, Adam states that have taken one step, env batches and keys."""
    optimizer = optax.adam(1e-3)

    def member(key):
        k_w, k_g, k_env, k_own = jax.random.split(key, 4)
        params = {"w": jax.random.normal(k_w, (3, 2)), "b": jnp.zeros(2)}
        opt_state = optimizer.init(params)
        grads = jax.tree.map(lambda p: jax.random.normal(k_g, p.shape), params)
        _, opt_state = optimizer.update(grads, opt_state, params)
        return FakeState(params, opt_state, jax.random.normal(k_env, (4,)), k_own, jnp.int32(7))

    return jax.vmap(member)(jax.random.split(jax.random.key(seed), size))


# ---------------------------------------------------------------------------------------------------------
# Ranking and fitness
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ranks_ties_and_nan_are_deterministic():
    fitness = jnp.array([3.0, np.nan, 5.0, 3.0, 5.0, np.nan, -1.0, 3.0])
    # 5 (members 2, 4), then 3 (0, 3, 7), then -1 (6), then no episode (1, 5): ties by member index
    np.testing.assert_array_equal(pbt.ranks(fitness), [2, 6, 0, 3, 1, 7, 5, 4])
    np.testing.assert_array_equal(pbt.ranks(jnp.zeros(4)), [0, 1, 2, 3])
    np.testing.assert_array_equal(pbt.ranks(jnp.array([0.0, -0.0])), [0, 1])  # -0 == 0: a tie


def test_fitness_ignores_iterations_without_episodes():
    returns = jnp.array([[100.0, 1.0, np.nan], [np.nan, 3.0, np.nan], [2.0, np.nan, np.nan], [4.0, 5.0, np.nan]])
    fitness = np.asarray(pbt.fitness_of(returns, window=3))
    np.testing.assert_allclose(fitness[:2], [3.0, 4.0])  # row 0 is outside the window
    assert np.isnan(fitness[2])


def test_the_fitness_source_is_the_training_return_or_the_evaluation_and_must_be_a_metric():
    """fitness "return" ranks by episode_return, which the algorithm's metrics must hold (one line otherwise);
    fitness "eval" by eval_return, which the program's own evaluation adds."""
    from jaxrl.pbt.population import fitness_source

    assert fitness_source(PBT, {"episode_return", "value_loss"}) == "episode_return"
    assert fitness_source(EVAL_PBT, {"value_loss"}) == "eval_return"
    with pytest.raises(ValueError, match=r"^PBT ranks members by the 'episode_return' metric, which this algorithm"):
        fitness_source(PBT, {"value_loss"})


@pytest.mark.slow
def test_eval_fitness_ranks_by_the_evaluation_return_where_the_window_ranks_otherwise():
    """A block whose training returns rank member 0 first and member 3 last while its evaluation ranks them the
    other way: fitness "return" replaces member 3 by member 0, fitness "eval" member 0 by member 3."""
    metrics = {
        "episode_return": jnp.array([[90.0, 50.0, 40.0, 10.0], [110.0, 60.0, np.nan, 20.0]]),
        "eval_return": jnp.array([[np.nan] * 4, [12.0, 30.0, 45.0, 200.0]]),  # evaluated after the last iteration
    }
    priors = pbt.validate(CONFIG, EVAL_PBT)
    states = population(4)
    configs = pbt.initial_population(CONFIG, EVAL_PBT, jax.random.key(1), priors)
    window = dataclasses.replace(EVAL_PBT, fitness="return")
    np.testing.assert_allclose(pbt.block_fitness(metrics, window), [100.0, 55.0, 40.0, 15.0])
    np.testing.assert_array_equal(pbt.block_fitness(metrics, EVAL_PBT), [12.0, 30.0, 45.0, 200.0])
    for settings, worst, best in ((window, 3, 0), (EVAL_PBT, 0, 3)):
        fitness = pbt.block_fitness(metrics, settings)
        step = pbt.ready_step(states, configs, fitness, jax.random.key(0), settings, priors)
        new, _, (rank, parent, exploited) = step
        assert int(rank[best]) == 0 and int(rank[worst]) == 3
        np.testing.assert_array_equal(exploited, np.arange(4) == worst)
        assert int(parent[worst]) == best
        assert_trees_equal(take(new.params, worst), take(states.params, best))


# ---------------------------------------------------------------------------------------------------------
# One exploit/explore step on a hand-made population
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_ready_step_copies_bottom_from_top_and_leaves_the_rest():
    size = 8
    config = dataclasses.replace(PBT, population=size)
    priors = pbt.validate(CONFIG, config)
    states = population(size)
    configs = pbt.initial_population(CONFIG, config, jax.random.key(1), priors)
    fitness = jnp.array([3.0, np.nan, 5.0, 3.0, 5.0, np.nan, -1.0, 3.0])  # bottom two: 1 and 5; top two: 2 and 4
    for seed in range(6):
        new_states, new_configs, (rank, parent, exploited) = pbt.ready_step(
            states, configs, fitness, jax.random.key(seed), config, priors
        )
        np.testing.assert_array_equal(exploited, [i in (1, 5) for i in range(size)])
        for i in range(size):
            new, old = take(new_states, i), take(states, i)
            assert_trees_equal(new.env, old.env)  # each member keeps its own env batch and key
            assert_trees_equal(new.key, old.key)
            if i in (1, 5):
                assert int(parent[i]) in (2, 4)
                source = take(states, int(parent[i]))
                assert_trees_equal(new.params, source.params)
                assert_trees_equal(new.opt_state, source.opt_state)
                for name in EXPLORE:  # perturbed or resampled from the parent's value, within the bounds
                    value = float(getattr(new_configs, name)[i])
                    parent_value = float(getattr(configs, name)[int(parent[i])])
                    prior = priors[name]
                    assert np.float32(prior.low) <= value <= np.float32(prior.high)
                    clipped = [
                        np.clip(np.float32(parent_value) * np.float32(f), np.float32(prior.low), np.float32(prior.high))
                        for f in config.perturb_factors
                    ]
                    assert value != parent_value or parent_value in clipped
            else:
                assert int(parent[i]) == i
                assert_trees_equal(new, old)
                assert_trees_equal(take(new_configs, i), take(configs, i))
        # the hyperparameters nobody explores are copied too (equal across members here)
        np.testing.assert_array_equal(new_configs.gamma, configs.gamma)


@pytest.mark.extended  # the default suite's ready-step checks: a population of arrays, and the PBT program
def test_ready_step_on_ppo_train_states():
    """The same on PPO's own TrainState: params and Adam state from the parent, env batch and key kept."""
    priors = pbt.validate(CONFIG, PBT)
    configs = pbt.initial_population(CONFIG, PBT, jax.random.key(0), priors)
    algo = base.algorithm_of(CONFIG)
    setup = base.make_setup(CONFIG, algo)
    keys = jax.random.split(jax.random.key(1), 4)
    states = jax.vmap(lambda c, k: base.initial_state(c, k, setup, algo))(configs, keys)
    new, _, (_, parent, exploited) = pbt.ready_step(
        states, configs, jnp.array([1.0, 4.0, 3.0, 2.0]), jax.random.key(2), PBT, priors
    )
    np.testing.assert_array_equal(exploited, [True, False, False, False])
    assert int(parent[0]) == 1
    assert_trees_equal(take(new.params, 0), take(states.params, 1))
    assert_trees_equal(take(new.opt_state, 0), take(states.opt_state, 1))
    assert_trees_equal(new.env, states.env)
    assert_trees_equal(new.key, states.key)
    assert_trees_equal(take(new, slice(1, None)), take(states, slice(1, None)))


@pytest.mark.slow
def test_optimiser_state_holds_no_hyperparameter():
    """A copied Adam state carries nothing of the parent's learning rate: the rate is read from the member's
    Config at every update, so the member continues at its own (explored) rate."""
    key = jax.random.key(0)
    slow = base.initial_state(CONFIG.replace(learning_rate=1e-4), key)
    fast = base.initial_state(CONFIG.replace(learning_rate=1e-2), key)
    assert_trees_equal(slow.opt_state, fast.opt_state)


def test_normalisation_statistics_follow_the_parent():
    """The running observation / reward statistics inside a member's env state go with the copied parameters;
    the env states and observations themselves stay the member's."""
    states = population(4)
    k = jax.random.split(jax.random.key(5), 3)
    stats = envs.RunningMeanStd(
        jax.random.normal(k[0], (4, 3)), jnp.exp(jax.random.normal(k[1], (4, 3))), jnp.arange(4.0)
    )
    states = states.replace(env={"obs": jax.random.normal(k[2], (4, 5)), "stats": stats})
    parent = jnp.array([0, 0, 2, 2])
    copied, _ = pbt.exploit(states, pbt.initial_population(CONFIG, PBT, jax.random.key(0)), parent)
    assert_trees_equal(copied.env["obs"], states.env["obs"])
    assert_trees_equal(copied.env["stats"], take(states.env["stats"], parent))
    assert_trees_equal(copied.params, take(states.params, parent))


def test_ready_step_that_does_not_fire_changes_nothing():
    priors = pbt.validate(CONFIG, PBT)
    states = population(4)
    configs = pbt.initial_population(CONFIG, PBT, jax.random.key(1), priors)
    new_states, new_configs, (_, parent, exploited) = pbt.ready_step(
        states, configs, jnp.arange(4.0), jax.random.key(0), PBT, priors, fire=False
    )
    assert not np.asarray(exploited).any()
    np.testing.assert_array_equal(parent, np.arange(4))
    assert_trees_equal(new_states, states)
    assert_trees_equal(new_configs, configs)


@pytest.mark.slow
def test_perturbations_stay_within_bounds_over_many_steps():
    config = pbt.PBTConfig(
        population=8,
        ready=2,
        truncation=0.5,
        explore={"learning_rate": "uniform:1e-3:3e-3"},
        perturb_factors=(0.5, 2.0),
        resample_probability=0.1,
    )
    priors = pbt.validate(CONFIG, config)
    configs = pbt.initial_population(CONFIG, config, jax.random.key(0), priors)
    states = population(8)
    step = jax.jit(lambda s, c, f, k: pbt.ready_step(s, c, f, k, config, priors)[:2])
    for k in jax.random.split(jax.random.key(3), 20):
        states, configs = step(states, configs, jax.random.normal(k, (8,)), k)
        lr = np.asarray(configs.learning_rate)
        assert (lr >= np.float32(1e-3)).all() and (lr <= np.float32(3e-3)).all()


def test_priors_parse_sample_and_clip():
    assert pbt.parse_prior("x", "loguniform:1e-5:1e-2") == pbt.Prior("log_uniform", 1e-5, 1e-2)
    assert pbt.parse_prior("x", ("uniform", 0, 1)) == pbt.Prior("uniform", 0.0, 1.0)
    ints = pbt.parse_prior("x", "int:2:5")
    drawn = np.asarray(ints.sample(jax.random.key(0), (200,), jnp.int32))
    assert set(drawn.tolist()) == {2, 3, 4, 5}
    np.testing.assert_array_equal(ints.clip(jnp.array([1.2, 2.6, 4.4, 9.0])), [2.0, 3.0, 4.0, 5.0])
    logs = np.asarray(pbt.parse_prior("x", "loguniform:1e-4:1e-2").sample(jax.random.key(1), (2000,), jnp.float32))
    assert (logs >= np.float32(1e-4)).all() and (logs <= np.float32(1e-2)).all()
    assert 0.4 < np.mean(logs < 1e-3) < 0.6  # uniform in log space: half the draws below the geometric mean


def test_initial_population_draws_from_priors_and_keeps_member_zero():
    configs = pbt.initial_population(CONFIG, PBT, jax.random.key(0))
    lr, ent = np.asarray(configs.learning_rate), np.asarray(configs.ent_coef)
    assert lr.shape == (4,) and lr.dtype == np.float32
    assert lr[0] == np.float32(CONFIG.learning_rate) and ent[0] == np.float32(CONFIG.ent_coef)
    assert ((lr >= 1e-4) & (lr <= 1e-2)).all() and ((ent >= 0) & (ent <= 0.05)).all()
    assert len(set(lr.tolist())) == 4
    np.testing.assert_array_equal(configs.gamma, np.full(4, CONFIG.gamma, np.float32))
    drawn = pbt.initial_population(CONFIG, dataclasses.replace(PBT, keep_base=False), jax.random.key(0))
    assert float(drawn.learning_rate[0]) != np.float32(CONFIG.learning_rate)


# ---------------------------------------------------------------------------------------------------------
# The compiled program (PPO on CartPole, tiny)
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.extended  # two programs compiled without the algebraic simplifier
def test_population_without_exploit_equals_independent_runs():
    """ready = num_iterations: the only ready step would follow the last iteration, so it is skipped, and the
    program is `jax.vmap(base.train)` of the same configs and keys, bit for bit. Both compile with the runner's
    options without XLA's algebraic simplifier (`compiler_options(device_independent=True)`), which otherwise
    rewrites two differently nested programs differently, 1 ulp apart."""
    config = pbt.PBTConfig(population=4, ready=CONFIG.num_iterations, explore=EXPLORE)
    configs = pbt.initial_population(CONFIG, config, jax.random.key(0))
    keys = jax.random.split(jax.random.key(1), 4)

    def compiled(fn, *args):
        return jax.jit(fn).lower(*args).compile(compiler_options(device_independent=True))(*args)

    states, metrics, lineage = compiled(pbt.make_program(CONFIG, config), configs, keys, jax.random.key(2))
    expected_states, expected_metrics = compiled(jax.vmap(base.train), configs, keys)
    assert not np.asarray(lineage.exploited).any()
    assert_trees_equal(metrics, expected_metrics)
    assert_trees_equal(states, expected_states)


@pytest.fixture(scope="module")
def pbt_run():
    """One compiled PBT program run twice with one key and once with another: 4 members, 5 iterations, ready
    steps after iterations 2 and 4, then 1 more iteration."""
    run = runner_jit(pbt.make_pbt(CONFIG, PBT))
    return run(jax.random.key(0)), run(jax.random.key(0)), run(jax.random.key(1))


@pytest.mark.slow
def test_program_is_deterministic_under_a_key(pbt_run):
    first, again, other = pbt_run
    assert_trees_equal(first, again)
    assert not np.array_equal(first[1]["episode_return"], other[1]["episode_return"], equal_nan=True)


@pytest.mark.slow
def test_program_shapes_and_lineage(pbt_run, tmp_path):
    states, metrics, lineage = pbt_run[0]
    assert metrics["episode_return"].shape == (4, CONFIG.num_iterations)
    np.testing.assert_array_equal(lineage.iteration, [2, 4])
    exploited = np.asarray(lineage.exploited)
    np.testing.assert_array_equal(exploited.sum(1), [1, 1])  # floor(0.25 * 4) = 1 member replaced at each step
    for k in range(2):  # the lineage's fitness is the mean return of each member's last 2 iterations
        returns = np.asarray(metrics["episode_return"])[:, 2 * k : 2 * k + 2]
        with warnings.catch_warnings():  # a member with no finished episode: NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            expected = np.nanmean(returns, 1)
        np.testing.assert_allclose(lineage.fitness[k], expected, rtol=1e-6)
        np.testing.assert_array_equal(np.sort(lineage.rank[k]), np.arange(4))
    rank, parent = np.asarray(lineage.rank), np.asarray(lineage.parent)
    for k, m in zip(*np.nonzero(exploited), strict=True):  # the worst member took the best one's place
        assert rank[k, m] == 3 and rank[k, parent[k, m]] == 0
    np.testing.assert_array_equal(parent[~exploited], np.broadcast_to(np.arange(4), parent.shape)[~exploited])
    for name, prior in pbt.validate(CONFIG, PBT).items():
        kept = ~exploited
        np.testing.assert_array_equal(lineage.next_hyperparameters[name][kept], lineage.hyperparameters[name][kept])
        values = np.asarray(lineage.next_hyperparameters[name])
        assert (values >= np.float32(prior.low)).all() and (values <= np.float32(prior.high)).all()
        np.testing.assert_array_equal(lineage.hyperparameters[name][1], values[0])  # block 2 trains with step 1's
    path = pbt.write_lineage_csv(lineage, tmp_path / "lineage.csv")
    with open(path, newline="") as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == 4 * 2
    assert {"ready_step", "member", "fitness", "rank", "parent", "learning_rate", "next_learning_rate"} <= set(rows[0])
    for row in rows:  # the float32 values round-trip through the CSV
        k, m = int(row["ready_step"]), int(row["member"])
        assert np.float32(row["next_learning_rate"]) == lineage.next_hyperparameters["learning_rate"][k, m]
        assert int(row["parent"]) == lineage.parent[k, m]
    assert pbt.plot_lineage(lineage, tmp_path / "lineage.png").read_bytes().startswith(b"\x89PNG")


@pytest.fixture(scope="module")
def eval_run():
    """The program of `pbt_run` with EVAL_PBT under key 0: every member evaluated after every iteration, ranked by
    the evaluation return."""
    return runner_jit(pbt.make_pbt(CONFIG, EVAL_PBT))(jax.random.key(0))


@pytest.mark.slow
def test_program_evaluates_members_and_ranks_them_by_evaluation_returns(eval_run, pbt_run):
    """Each iteration's evaluation is `run.compile.evaluation_scores` of the member (deterministic policy,
    EPISODES fresh episodes keyed by `fold_in(eval_stream(key, P)[m], iteration)`); the ready steps rank by it;
    the evaluation takes nothing from training: before the first exploit the training numbers are `pbt_run`'s."""
    from jaxrl.run.compile import EVAL_METRICS, evaluation_scores

    states, metrics, lineage = eval_run
    for name in EVAL_METRICS:
        assert metrics[name].shape == (4, CONFIG.num_iterations)
    evaluated = np.asarray(metrics["eval_return"])
    assert np.isfinite(evaluated).all() and (np.asarray(metrics["eval_finished"]) > 0).all()
    np.testing.assert_array_equal(lineage.eval_return, evaluated[:, [1, 3]].T)  # after iterations 2 and 4
    np.testing.assert_array_equal(lineage.fitness, lineage.eval_return)
    for k in range(2):
        np.testing.assert_array_equal(lineage.rank[k], pbt.ranks(jnp.asarray(evaluated[:, 2 * k + 1])))
        for m in np.flatnonzero(lineage.exploited[k]):
            assert lineage.rank[k, m] == 3 and lineage.rank[k, lineage.parent[k, m]] == 0
    algo = base.algorithm_of(CONFIG)
    configs = CONFIG.replace(**{n: v[-1] for n, v in lineage.next_hyperparameters.items()})
    keys = pbt.eval_stream(jax.random.key(0), 4)
    separate = []
    for m in range(4):  # the evaluation after the last iteration, member by member
        member = CONFIG.replace(**{n: getattr(configs, n)[m] for n in EXPLORE})
        scores = evaluation_scores(algo, member, take(states, m), keys[m], CONFIG.num_iterations, EPISODES)
        separate.append(float(scores["eval_return"]))
    # The program evaluates the members vmapped, this test one at a time: other last bits in the policy's products.
    # After 5 iterations the actor's logits still nearly tie (its output layer starts at gain 0.01), so a greedy
    # action can flip and an episode end a few steps apart: the returns agree to 5%, each nearest its own member's.
    np.testing.assert_allclose(separate, evaluated[:, -1], rtol=0.05)
    nearest = np.abs(np.subtract.outer(separate, evaluated[:, -1])).argmin(axis=1)
    np.testing.assert_array_equal(nearest, np.arange(4))
    _, plain_metrics, _ = pbt_run[0]
    for name, values in plain_metrics.items():
        assert_trees_equal(metrics[name][:, :2], values[:, :2])


@pytest.mark.extended
def test_evaluations_less_often_than_ready_steps_fall_on_multiples_of_eval_every(pbt_run):
    """eval_every = 2 x ready (fitness by training return): the members are evaluated after iteration 4 only, with
    the numbers an evaluation after every ready step (eval_every = ready) gives there, and NaN elsewhere; the
    evaluation takes nothing from training: states, metrics and lineage are those of the run without one."""
    sparse = dataclasses.replace(PBT, eval_every=2 * PBT.ready, eval_episodes=EPISODES)
    dense = dataclasses.replace(sparse, eval_every=PBT.ready)
    (states, metrics, lineage), (_, every_ready, _) = (
        runner_jit(pbt.make_pbt(CONFIG, settings))(jax.random.key(0)) for settings in (sparse, dense)
    )
    evaluated = np.asarray(metrics["eval_return"])  # [P, iterations 1..5]
    assert np.isfinite(evaluated[:, 3]).all() and np.isnan(np.delete(evaluated, 3, axis=1)).all()
    np.testing.assert_array_equal(evaluated[:, 3], np.asarray(every_ready["eval_return"])[:, 3])
    assert np.isnan(lineage.eval_return[0]).all()
    np.testing.assert_array_equal(lineage.eval_return[1], evaluated[:, 3])  # ready steps after iterations 2 and 4
    plain_states, plain_metrics, plain_lineage = pbt_run[0]
    assert_trees_equal(states, plain_states)
    assert_trees_equal({n: metrics[n] for n in plain_metrics}, plain_metrics)
    np.testing.assert_array_equal(lineage.parent, plain_lineage.parent)
    np.testing.assert_array_equal(lineage.fitness, plain_lineage.fitness)


@pytest.mark.slow
def test_evaluation_keys_never_meet_training_keys(eval_run):
    """The members' evaluation keys (and every `fold_in` of them a run plays) against the training keys the run
    derives: the population, member and exploit/explore keys, each ready step's and each member's key before and
    after training. The stream is `jaxrl train`'s (`run.compile.eval_keys`)."""
    from jaxrl.run.compile import eval_keys

    key = jax.random.key(0)
    stream = pbt.eval_stream(key, 4)
    assert_trees_equal(jax.random.key_data(stream), jax.random.key_data(eval_keys(0, 4)))
    played = [jax.random.fold_in(k, i) for k in stream for i in range(1, CONFIG.num_iterations + 1)]
    k_population, k_members, k_pbt = jax.random.split(key, 3)
    start, _ = pbt.make_start(CONFIG, EVAL_PBT)(key)
    training = [key, k_population, k_members, k_pbt, *jax.random.split(k_members, 4)]
    training += [*pbt.step_keys(CONFIG, EVAL_PBT, key), *start.key, *eval_run[0].key]
    as_set = lambda keys: {tuple(np.asarray(jax.random.key_data(k)).tolist()) for k in keys}  # noqa: E731
    assert len(as_set([*stream, *played])) == 4 + len(played)
    assert not as_set([*stream, *played]) & as_set(training)


@pytest.mark.slow
def test_population_folder_reads_as_a_run_folder(pbt_run, tmp_path):
    """write_folder: metrics.csv has one seed per member with the program's metrics, so plot and report read it;
    the summary ranks members by their last fitness."""
    from jaxrl import plot, report

    _, metrics, lineage = pbt_run[0]
    summary = pbt.write_folder(tmp_path, "ppo", CONFIG, PBT, metrics, lineage, {"compile_s": 1.0, "run_s": 2.0})
    data = plot.read_metrics(tmp_path)
    np.testing.assert_allclose(data["episode_return"], metrics["episode_return"], rtol=1e-5)
    (entry,) = report.read_entries(tmp_path)
    assert (entry.label, entry.env_id, entry.final.shape) == ("ppo pbt", "CartPole-v1", (4,))
    fitness = np.nan_to_num(np.asarray(lineage.fitness)[-1], nan=-np.inf)
    members = [int(line.split()[0]) for line in summary.splitlines()[1:5]]
    assert members == list(np.argsort(-fitness, kind="stable"))
    assert (tmp_path / "lineage.csv").is_file() and (tmp_path / "lineage.png").read_bytes().startswith(b"\x89PNG")
    info = json.loads((tmp_path / "config.json").read_text())
    assert info["pbt"]["population"] == 4 and info["pbt"]["explore"] == EXPLORE


# ---------------------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, match",
    [
        ({"explore": {"no_such_field": "uniform:0:1"}}, r"explore\['no_such_field'\]: .* has no field"),
        ({"explore": {"num_envs": "int:1:8"}}, r"explore\['num_envs'\]: a static field"),
        ({"explore": {"learning_rate": "loguniform:1e-2:1e-1"}}, r"exclude the starting value"),
        ({"explore": {"learning_rate": "gaussian:0:1"}}, r"unknown distribution"),
        ({"explore": {"learning_rate": "loguniform:0:1"}}, r"LOW > 0"),
        ({"explore": {}}, r"explore: empty"),
        ({"population": 1}, r"population: .* at least 2"),
        ({"truncation": 0.2}, r"truncation: .* = 0 members"),
        ({"truncation": 0.75}, r"truncation: .* half"),
        ({"ready": 0}, r"ready: got 0"),
        ({"ready": CONFIG.num_iterations + 1}, r"ready: got 6, must be 1 to num_iterations = 5"),
        ({"fitness_window": 3}, r"fitness_window: got 3"),
        ({"perturb_factors": ()}, r"perturb_factors"),
        ({"resample_probability": 1.5}, r"resample_probability"),
        ({"eval_every": 3, "ready": 4}, r"eval_every: got 3, must divide ready = 4 or be a multiple of it"),
        ({"eval_every": -1}, r"eval_every: got -1"),
        ({"eval_every": 2, "eval_episodes": 0}, r"eval_episodes: got 0"),
        ({"fitness": "eval"}, r"fitness: 'eval' ranks members by their evaluation return at every ready step"),
        ({"fitness": "eval", "eval_every": 4}, r"needs eval_every to divide ready = 2 .* got eval_every = 4"),
        ({"fitness": "best"}, r"fitness: got 'best'"),
        ({"fitness": "eval", "eval_every": 2, "fitness_window": 1}, r"fitness_window: .* leave it None"),
    ],
)
def test_validation_errors(changes, match):
    config = dataclasses.replace(PBT, **changes)
    with pytest.raises(ValueError, match=match) as error:
        pbt.make_pbt(CONFIG, config)
    assert "\n" not in str(error.value)


TINY = "--total-timesteps 320 --num-envs 4 --num-steps 16 --update-epochs 1 --num-minibatches 2 --hidden-sizes 8,8"
TINY += " --ready 2"


@pytest.mark.extended
def test_cli_trains_a_population_and_refuses_a_bad_prior_in_one_line(tmp_path):
    import subprocess
    import sys

    def jaxrl(*flags):
        command = [sys.executable, "-m", "jaxrl.cli", "pbt", "ppo", *TINY.split()]
        return subprocess.run([*command, *flags], capture_output=True, text=True, timeout=900)

    out = tmp_path / "population"
    explore = ("--explore", "learning_rate=loguniform:1e-4:1e-2")
    evaluated = ("--eval-every", "2", "--fitness", "eval", "--eval-episodes", "2")
    ok = jaxrl("--population", "4", *explore, *evaluated, "--out", str(out), "--tensorboard")
    assert ok.returncode == 0, ok.stderr
    assert "compiling" in ok.stdout and str(out / "lineage.csv") in ok.stdout
    assert "2 evaluation episodes every 2" in ok.stdout and "ranked by the fitness (evaluation return)" in ok.stdout
    settings = json.loads((out / "config.json").read_text())["pbt"]
    assert (settings["eval_every"], settings["eval_episodes"], settings["fitness"]) == (2, 2, "eval")
    evaluation = json.loads((out / "summary.json").read_text())["best_member_eval"]
    assert evaluation["episodes"] == 2 and pbt.evaluate.evaluation_text(evaluation) in ok.stdout
    assert {p.name for p in (out / "tensorboard").iterdir()} == {"member_0", "member_1", "member_2", "member_3",
                                                                 "population"}  # fmt: skip
    with open(out / "lineage.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == 4 * 2 and {int(r["member"]) for r in rows} == {0, 1, 2, 3}
    assert all(r["fitness"] == r["eval_return"] for r in rows)
    with open(out / "metrics.csv", newline="") as file:
        evaluated = [float(r["eval_return"]) for r in csv.DictReader(file)]
    assert np.isfinite(evaluated).sum() == 4 * 2  # after iterations 2 and 4
    lineage = (out / "lineage.csv").read_text()
    again = jaxrl("--resume", str(out), "--quiet")  # finished: nothing left to train, the same lineage
    assert again.returncode == 0, again.stderr
    assert "compiling" not in again.stdout and str(out / "lineage.csv") in again.stdout  # the summary alone
    assert (out / "lineage.csv").read_text() == lineage
    assert pbt.evaluate.evaluation_text(evaluation) in again.stdout  # kept from the finished run's summary.json
    changed = jaxrl("--resume", str(out), "--population", "8", "--fitness", "return", "--eval-episodes", "2")
    assert changed.returncode == 2 and len(changed.stderr.strip().splitlines()) == 1, changed.stderr
    assert "--population, --fitness differ" in changed.stderr
    taken = jaxrl("--population", "4", "--explore", "learning_rate=loguniform:1e-4:1e-2", "--out", str(out))
    assert taken.returncode == 2 and len(taken.stderr.strip().splitlines()) == 1, taken.stderr
    assert f"--resume {out}" in taken.stderr and "choose a new --out" in taken.stderr
    bad = jaxrl("--explore", "learning_rate=lognormal:1:2", "--out", str(tmp_path / "bad"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "learning_rate" in bad.stderr and not (tmp_path / "bad").exists()


def test_cli_evaluation_flags_make_the_pbt_config():
    """--eval-every, --eval-episodes and --fitness become the PBTConfig's; --eval-episodes without --eval-every
    is the final evaluation's alone; --fitness eval without --eval-every is refused in one line."""
    from jaxrl import cli, commands
    from jaxrl.algos import ALGORITHMS

    def settings(*flags):
        args = cli.build_parser("pbt").parse_args(["pbt", "ppo", "--explore", "learning_rate=loguniform:1e-4:1e-2",
                                                   "--total-timesteps", "320", *flags])  # fmt: skip
        return commands._pbt_settings(args, ALGORITHMS["ppo"])[1]

    made = settings("--ready", "4", "--eval-every", "2", "--eval-episodes", "8", "--fitness", "eval")
    assert (made.eval_every, made.eval_episodes, made.fitness) == (2, 8, "eval")
    plain = settings("--eval-episodes", "8")
    assert (plain.eval_every, plain.eval_episodes, plain.fitness) == (0, 16, "return")
    with pytest.raises(ValueError, match="fitness: 'eval' .* needs eval_every") as error:
        pbt.validate(CONFIG, settings("--ready", "2", "--fitness", "eval"))
    assert "\n" not in str(error.value)


# ---------------------------------------------------------------------------------------------------------
# Chunked runs: checkpoints, exact resume, several devices
# ---------------------------------------------------------------------------------------------------------


def test_chunk_plan_cuts_whole_ready_blocks():
    # 5 iterations, ready 2: blocks after iterations 2 and 4, the fifth iteration ends the last chunk
    assert pbt.runner.chunk_plan(CONFIG, PBT, 2) == [(0, 1, 0), (1, 1, 1)]
    assert pbt.runner.chunk_plan(CONFIG, PBT, 10) == [(0, 1, 0), (1, 1, 1)]
    assert pbt.runner.chunk_plan(CONFIG, PBT, 1) == [(0, 2, 1)]


@pytest.fixture(scope="module")
def chunked(tmp_path_factory):
    """An uninterrupted run of EVAL_PBT (every member evaluated after every iteration, ranked by the evaluation)
    in 2 chunks with its folder, TensorBoard files and the best member's evaluation; and, seen as the run starts,
    the bytes of the population its chunks are given and the bytes the compiled chunk aliases to its outputs."""
    from jaxrl.run import checkpoint

    start, seen = pbt.runner._Session.start, {}

    def start_and_look(self, resume):
        start(self, resume)
        population = checkpoint.unwrap_keys((self.states, self.configs))
        seen["bytes"] = sum(x.nbytes for x in jax.tree.leaves(population))
        seen["aliased"] = self.compiled.memory_analysis().alias_size_in_bytes

    out = tmp_path_factory.mktemp("pbt") / "full"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pbt.runner._Session, "start", start_and_look)
        result = pbt.run(CONFIG, EVAL_PBT, out, num_chunks=2, progress=False, tensorboard=True, eval_episodes=EPISODES)
    return result, out, seen


@pytest.mark.slow
def test_a_chunk_writes_the_new_population_over_the_old(chunked):
    """A PBT chunk consumes the population it is given (donated), states and hyperparameters: XLA aliases every
    byte of them to the new population, so the run holds one population and copies none at a chunk's start. The
    run's two chunks (one ready block, then one block and the last iteration) are one compiled program."""
    seen = chunked[2]
    assert seen["bytes"] > 4 * 4 * 4 * 4  # the members' env observations at least
    assert seen["aliased"] == seen["bytes"]


def read_board(directory):
    """{tag: [(step, value)]} of the event files of `directory` in the order written, as TensorBoard shows them:
    a file's purge step (a resume's) drops the steps from there on that earlier files hold."""
    import struct as bytes_struct

    from tensorboardX.proto import event_pb2

    scalars = {}
    for path in sorted(directory.glob("events.out.tfevents.*")):
        data, offset = path.read_bytes(), 0
        while offset < len(data):
            (length,) = bytes_struct.unpack("<Q", data[offset : offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12 : offset + 12 + length])
            offset += 12 + length + 4
            if event.session_log.status == event.session_log.START and event.step:
                scalars = {tag: [(s, v) for s, v in pairs if s < event.step] for tag, pairs in scalars.items()}
            for value in event.summary.value:
                scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
    return scalars


def read_csv(path):
    with open(path, newline="") as file:
        return list(csv.DictReader(file))


@pytest.mark.slow
def test_chunked_run_follows_the_whole_program(chunked, eval_run):
    """The chunks run the schedule of `make_pbt` under the same key (seed 0), bit for bit: the same parents,
    hyperparameters, numbers and final population, evaluations included (the chunks and the whole program are
    one loop over the iterations, run in two pieces or in one)."""
    result, out, _ = chunked
    states, metrics, lineage = eval_run
    np.testing.assert_array_equal(result.lineage.parent, lineage.parent)
    np.testing.assert_array_equal(result.lineage.iteration, lineage.iteration)
    assert_trees_equal(result.metrics, metrics)
    assert_trees_equal(result.lineage, lineage)
    assert_trees_equal(result.states, states)
    files = {"config.json", "metrics.csv", "lineage.csv", "lineage.png", "summary.json", "checkpoints", "tensorboard"}
    assert files <= {p.name for p in out.iterdir()}
    assert not (out / "run.lock").exists()


@pytest.mark.slow
def test_tensorboard_holds_each_members_metrics_lineage_and_hyperparameters(chunked):
    """One TensorBoard run per member: every iteration's metrics at x = env steps as metrics.csv holds them,
    every ready step's fitness, rank, parent and hyperparameters as lineage.csv holds them (step 0: the initial
    hyperparameters); the population's run: best and median fitness, and the best member's evaluation."""
    result, out, _ = chunked
    steps = CONFIG.env_steps_per_iteration
    board = out / "tensorboard"
    assert sorted(p.name for p in board.iterdir()) == ["member_0", "member_1", "member_2", "member_3", "population"]
    metrics, lineage = read_csv(out / "metrics.csv"), read_csv(out / "lineage.csv")
    for m in range(PBT.population):
        scalars = read_board(board / f"member_{m}")
        rows = [r for r in metrics if int(r["seed"]) == m]
        assert [s for s, _ in scalars["value_loss"]] == [(int(r["iteration"]) + 1) * steps for r in rows]
        np.testing.assert_allclose([v for _, v in scalars["value_loss"]], [float(r["value_loss"]) for r in rows],
                                   rtol=1e-5)  # fmt: skip
        finite = [((int(r["iteration"]) + 1) * steps, float(r["episode_return"])) for r in rows]
        finite = [(s, v) for s, v in finite if np.isfinite(v)]
        assert [s for s, _ in scalars["episode_return"]] == [s for s, _ in finite]  # NaN iterations left out
        mine = [r for r in lineage if int(r["member"]) == m]
        ready_steps = [int(r["iteration"]) * steps for r in mine]
        for tag, column in (("pbt/fitness", "fitness"), ("pbt/rank", "rank"), ("pbt/parent", "parent")):
            assert [s for s, _ in scalars[tag]] == ready_steps
            np.testing.assert_allclose([v for _, v in scalars[tag]], [float(r[column]) for r in mine], rtol=1e-6)
        assert [v for _, v in scalars["pbt/exploited"]] == [float(r["exploited"] == "True") for r in mine]
        for name in EXPLORE:
            schedule = scalars[f"hyperparameters/{name}"]
            assert [s for s, _ in schedule] == [0, *ready_steps]
            expected = [float(mine[0][name]), *(float(r[f"next_{name}"]) for r in mine)]
            np.testing.assert_allclose([v for _, v in schedule], expected, rtol=1e-6)
        assert [s for s, _ in scalars["eval_return"]] == [(int(r["iteration"]) + 1) * steps for r in rows]  # all
        np.testing.assert_allclose([v for _, v in scalars["eval_return"]], [float(r["eval_return"]) for r in rows],
                                   rtol=1e-6)  # fmt: skip
    population = read_board(board / "population")
    evaluated = np.asarray(result.metrics["eval_return"])
    assert [s for s, _ in population["pbt/best_eval_return"]] == [(i + 1) * steps for i in range(evaluated.shape[1])]
    np.testing.assert_allclose([v for _, v in population["pbt/best_eval_return"]], evaluated.max(0), rtol=1e-6)
    fitness = np.asarray(result.lineage.fitness)
    np.testing.assert_allclose([v for _, v in population["pbt/best_fitness"]], np.nanmax(fitness, 1), rtol=1e-6)
    evaluation = json.loads((out / "summary.json").read_text())["best_member_eval"]
    assert population["eval/member"] == [(CONFIG.num_iterations * steps, evaluation["member"])]
    assert population["eval/deterministic_return"][0][1] == pytest.approx(evaluation["deterministic_return"])


@pytest.mark.slow
def test_best_member_is_evaluated_on_the_evaluation_stream(chunked):
    """summary.json's best_member_eval: the member ranked first at the last ready step, with the hyperparameters
    it ended with, played on EPISODES episodes per mode keyed by the run's evaluation stream (never the training
    keys) folded with the last iteration; the deterministic and stochastic returns are reported apart."""
    from jaxrl.run.compile import eval_keys

    result, out, _ = chunked
    summary = json.loads((out / "summary.json").read_text())
    evaluation = summary["best_member_eval"]
    assert evaluation == result.evaluation
    last = [r for r in read_csv(out / "lineage.csv") if int(r["ready_step"]) == len(result.lineage.iteration) - 1]
    (best,) = [int(r["member"]) for r in last if r["rank"] == "0"]
    assert evaluation["member"] == best and evaluation["iteration"] == CONFIG.num_iterations
    assert evaluation["episodes"] == EPISODES and {"compile_s", "run_s"} <= set(summary)
    assert evaluation["hyperparameters"] == {n: float(last[best][f"next_{n}"]) for n in EXPLORE}
    take = lambda tree: jax.tree.map(lambda x: x[best : best + 1], tree)  # noqa: E731
    key = jax.random.fold_in(eval_keys(0, PBT.population)[best], CONFIG.num_iterations)
    scores = pbt.evaluate.play(CONFIG, take(result.states), take(result.configs), key, EPISODES)
    for mode in ("deterministic", "stochastic"):
        assert 1 <= evaluation[f"{mode}_finished"] <= EPISODES
        assert evaluation[f"{mode}_return"] == pytest.approx(float(scores[mode][0][0]), abs=1e-4)
    assert evaluation["deterministic_return"] > 0 and evaluation["stochastic_return"] > 0
    # the in-program evaluation after the last iteration played the same episodes with the same policy
    assert evaluation["deterministic_return"] == pytest.approx(float(result.metrics["eval_return"][best, -1]), abs=1e-4)
    text = pbt.evaluate.evaluation_text(evaluation)
    assert f"best member {best} on {EPISODES} fresh episodes after iteration 5: deterministic return" in text


@pytest.mark.extended
def test_jaxrl_eval_plays_every_member_of_a_population_and_names_the_best(chunked, capsys):
    from jaxrl import cli

    result, out, _ = chunked
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    assert cli.main(["eval", str(out), "--episodes", "2"]) == 0
    heading, *lines = capsys.readouterr().out.strip().splitlines()
    best = int(np.argmin(np.asarray(result.lineage.rank)[-1]))
    assert "population of 4" in heading and "2 episodes per member" in heading
    assert f"best member {best} (rank 0 at the last ready step)" in heading
    assert [line.split()[0] for line in lines] == ["deterministic", "stochastic"]
    for line in lines:
        members = [float(v) for v in line.split("per member")[1].split(",")]
        assert len(members) == 4 and float(line.split()[2]) == pytest.approx(members[best], abs=0.01)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == before  # read only
    from jaxrl.run.evaluate import restore_latest  # what reads a run of seeds says what to do instead

    with pytest.raises(ValueError, match=f"is a population .* jaxrl eval {out} plays its members") as error:
        restore_latest(out)
    assert "\n" not in str(error.value)


@pytest.mark.slow
def test_evaluating_a_population_reads_no_replay_buffer(tmp_path, monkeypatch, capsys):
    """`jaxrl eval` on a population of DQN members restores them without their replay buffers and optimiser
    states, which no policy reads: the restored members' `buffer` and `opt_state` are None and every other leaf
    equals the whole checkpoint's, bit for bit."""
    from conftest import assert_trees_close
    from jaxrl import cli
    from jaxrl.algos import dqn
    from jaxrl.run import checkpoint, folder

    config = dqn.Config(num_envs=4, total_timesteps=400, buffer_size=4000, learning_starts=64, hidden_sizes=(16,),
                        replay_batch_size=16)  # fmt: skip
    settings = pbt.PBTConfig(population=2, ready=50, truncation=0.5, explore={"learning_rate": "loguniform:1e-4:1e-2"})
    out = tmp_path / "population"
    pbt.run(config, settings, out, progress=False)
    restored = []
    whole_restore = checkpoint.restore
    monkeypatch.setattr(checkpoint, "restore", lambda *a, **k: restored.append(whole_restore(*a, **k)) or restored[-1])
    assert cli.main(["eval", str(out), "--episodes", "2"]) == 0
    assert "population of 2" in capsys.readouterr().out
    ((iteration, read, _),) = restored
    assert read["states"].buffer is None and read["states"].opt_state is None and iteration == config.num_iterations
    like = pbt.runner.checkpoint_like(config, settings, seed=0)
    _, whole, _ = whole_restore(out / "checkpoints", like, folder.read_run_folder(out))
    assert jax.tree.leaves(whole["states"].buffer)  # what the run saved
    whole = {**whole, "states": whole["states"].replace(buffer=None, opt_state=None)}
    assert_trees_close(checkpoint.unwrap_keys(read), checkpoint.unwrap_keys(whole), 0, 0)


@pytest.mark.extended
def test_exact_resume_after_ctrl_c(chunked, tmp_path, monkeypatch):
    """Ctrl-C after chunk 1 of 2 (raised when its lineage.csv is written) checkpoints there; the resumed run
    equals the uninterrupted one bit for bit: TrainStates, hyperparameters, metrics (the evaluations' included),
    lineage, metrics.csv and lineage.csv. Its evaluation settings are part of the run: a resume without them is
    refused."""
    from jaxrl.pbt import lineage as lineages
    from jaxrl.run import checkpoint, loop

    write = lineages.write_lineage_csv

    def interrupt(*args):
        write(*args)
        raise KeyboardInterrupt

    monkeypatch.setattr(lineages, "write_lineage_csv", interrupt)
    out = tmp_path / "run"
    with pytest.raises(loop.Interrupted) as stop:
        pbt.run(CONFIG, EVAL_PBT, out, num_chunks=2, progress=False, tensorboard=True, eval_episodes=EPISODES)
    assert stop.value.iteration == 2 and not stop.value.compiling and not (out / "run.lock").exists()
    assert "jaxrl pbt ppo --resume" in stop.value.explain("ppo", False, command="pbt")
    monkeypatch.setattr(lineages, "write_lineage_csv", write)
    with pytest.raises(checkpoint.CheckpointError, match="different run: chunks: saved 2, now 1"):
        pbt.run(CONFIG, EVAL_PBT, out, num_chunks=1, resume=True, progress=False)
    with pytest.raises(checkpoint.CheckpointError, match="different run: pbt"):
        pbt.run(CONFIG, PBT, out, num_chunks=2, resume=True, progress=False)
    resumed = pbt.run(CONFIG, EVAL_PBT, out, num_chunks=2, resume=True, progress=False, tensorboard=True,
                      eval_episodes=EPISODES)  # fmt: skip
    full, full_out, _ = chunked
    assert resumed.iterations_run == 3
    assert_trees_equal(resumed.states, full.states)
    assert_trees_equal(resumed.configs, full.configs)
    assert_trees_equal(resumed.metrics, full.metrics)
    assert_trees_equal(resumed.lineage, full.lineage)
    assert "eval_return" in resumed.metrics and resumed.lineage.eval_return is not None
    for name in ("metrics.csv", "lineage.csv"):
        assert (out / name).read_text() == (full_out / name).read_text()
    assert resumed.evaluation == full.evaluation  # the same member on the same episodes
    for run in ("member_0", "member_3", "population"):  # every step once, with the uninterrupted run's values
        assert read_board(out / "tensorboard" / run) == read_board(full_out / "tensorboard" / run)


def test_population_must_split_over_the_devices():
    with pytest.raises(ValueError, match=r"population: 3 members do not split evenly over 2 devices") as error:
        pbt.runner.population_mesh(dataclasses.replace(PBT, population=3), [jax.devices()[0]] * 2)
    assert "\n" not in str(error.value)


def test_by_default_the_members_use_as_many_devices_as_split_them_evenly(monkeypatch):
    """No --devices (every core is a device by default): a population of 3 on 2 devices runs on 1, not refused."""
    device = jax.devices()[0]
    monkeypatch.setattr(pbt.runner.jax, "local_devices", lambda: [device, device])
    assert pbt.runner.population_mesh(dataclasses.replace(PBT, population=3)).size == 1


def test_over_several_processes_the_members_use_every_process_devices(monkeypatch):
    """Over 2 processes (faked: 1 device each) the members are sharded over both processes' devices; another
    --devices count, or a population that does not split over them, is refused in one line."""
    device = jax.devices()[0]
    monkeypatch.setattr(pbt.runner.jax, "process_count", lambda: 2)
    monkeypatch.setattr(pbt.runner.jax, "devices", lambda: [device, device])
    assert pbt.runner.process_devices() == pbt.runner.process_devices(2) == [device, device]
    with pytest.raises(ValueError, match=r"--devices 1: a population over 2 processes .* leave --devices out"):
        pbt.runner.population_mesh(PBT, 1)
    odd = dataclasses.replace(PBT, population=3)
    with pytest.raises(ValueError, match=r"3 members do not split evenly over 2 devices; .* 2 processes") as error:
        pbt.runner.population_mesh(odd)
    assert "\n" not in str(error.value)


TWO_DEVICES = """
import dataclasses, jax, numpy as np
from jaxrl import pbt
from jaxrl.algos import ppo
config = ppo.Config(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 5, update_epochs=1, num_minibatches=2,
                    hidden_sizes=(8, 8))
settings = pbt.PBTConfig(population=4, ready=2, explore={"learning_rate": "loguniform:1e-4:1e-2",
                         "ent_coef": "uniform:0:0.05"}, resample_probability=0.5)
one = pbt.run(config, settings, devices=1, device_independent=True, num_chunks=2, progress=False)
two = pbt.run(config, settings, devices=2, device_independent=True, num_chunks=2, progress=False)
assert len(jax.tree.leaves(two.states.params)[0].sharding.device_set) == 2
for a, b in zip(jax.tree.leaves((one.states, one.metrics, one.lineage)),
                jax.tree.leaves((two.states, two.metrics, two.lineage)), strict=True):
    a, b = (jax.random.key_data(x) if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) else x for x in (a, b))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
print("ok")
"""


@pytest.mark.extended  # a fresh process with 2 CPU devices compiles six programs without the algebraic simplifier
def test_population_on_two_devices_equals_one_device():
    """4 members sharded over 2 CPU devices (exploit copies members across them) give the 1-device run's bits
    when both compile with `device_independent=True`, at the suite's XLA CPU optimisation level 1 and with AVX2
    code (with AVX-512 code, as at the default level 2, LLVM vectorises a device's share of the members
    differently: the losses round 1 ulp apart, see `jaxrl.pbt.runner`)."""
    import os
    import platform
    import subprocess
    import sys

    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=2"
    flags += " --xla_cpu_max_isa=AVX2" if platform.machine() in ("x86_64", "AMD64") else ""
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "-c", TWO_DEVICES], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-4000:]


def test_ctrl_c_while_compiling_leaves_no_folder(tmp_path, monkeypatch):
    def interrupt(self, resume):
        raise KeyboardInterrupt

    monkeypatch.setattr(pbt.runner._Session, "start", interrupt)
    from jaxrl.run import loop

    with pytest.raises(loop.Interrupted) as stop:
        pbt.run(CONFIG, PBT, tmp_path / "new" / "run", progress=False)
    assert stop.value.compiling and not (tmp_path / "new").exists()


def test_progress_bar_shows_the_best_and_median_fitness():
    def step(fitness):
        return pbt.Lineage(*(np.zeros((1, 4)),) * 5, {}, {}).replace(fitness=np.array([fitness]))

    assert pbt.runner.progress_text(None) == "no ready step yet"
    assert pbt.runner.progress_text(step([1.0, np.nan, 5.0, 2.0])) == "best 5.0, median 2.0"
    assert pbt.runner.progress_text(step([np.nan] * 4)) == "fitness: no episode ended"
    evaluated = step([1.0, np.nan, 5.0, 2.0]).replace(eval_return=np.array([[7.0, 3.0, np.nan, 1.0]]))
    assert pbt.runner.progress_text(evaluated) == "best 5.0, median 2.0; eval best 7.0"
    ranked = evaluated.replace(fitness=evaluated.eval_return)
    assert pbt.runner.progress_text(ranked, "eval") == "eval best 7.0, median 3.0"
    assert pbt.runner.progress_text(step([np.nan] * 4), "eval") == "eval no episode ended"


def test_jaxrl_pbt_device_independent_is_kept_by_a_resume(tmp_path, monkeypatch):
    """`jaxrl pbt --device-independent` compiles the population without XLA's algebraic simplifier; its
    config.json records it, and `--resume` compiles as the population did when the flag is not given again."""
    from jaxrl import cli
    from jaxrl.pbt import lineage

    asked = []

    def run_to_folder(out, algo, config, settings, seed, log=print, **options):
        asked.append(options["device_independent"])
        raise ValueError("stopped before compiling")

    monkeypatch.setattr(pbt, "run_to_folder", run_to_folder)
    argv = ["pbt", "ppo", "--explore", "learning_rate=loguniform:1e-4:1e-2", "--quiet"]
    assert cli.main([*argv, "--device-independent", "--out", str(tmp_path / "a")]) == 2
    assert cli.main([*argv, "--out", str(tmp_path / "b")]) == 2
    for name, independent in (("on", True), ("off", False)):
        (tmp_path / name).mkdir()
        settings = pbt.PBTConfig(explore={"learning_rate": ("loguniform", 1e-4, 1e-2)})
        info = lineage.folder_info("ppo", ppo.Config(), settings, 0, 10, independent)
        assert info.get("device_independent", False) is independent
        (tmp_path / name / "config.json").write_text(json.dumps(info))
        assert cli.main(["pbt", "ppo", "--quiet", "--resume", str(tmp_path / name)]) == 2
    assert asked == [True, False, True, False]
