"""The chunked runner (jaxrl.run: compile, loop, report) and the command line."""

import csv
import dataclasses
import json

import jax
import numpy as np
import pytest
from test_logging import read_tensorboard

from conftest import assert_trees_close
from jaxrl import cli
from jaxrl.algos import ALGORITHMS, base, dqn, ppo
from jaxrl.run import checkpoint, loop, report
from jaxrl.run import compile as run_compile

CONFIG = ppo.Config(num_envs=4, num_steps=16, total_timesteps=4 * 16 * 7, update_epochs=2, num_minibatches=2)


def test_chunk_sizes_cover_the_run():
    for n, chunks in [(195, 20), (97, 20), (1, 20), (7, 3), (244, 20), (2**31 - 1, 20), (2**31, 20)]:
        sizes = run_compile.chunk_sizes(n, chunks)
        assert sum(sizes) == n and len(set(sizes)) <= 2 and all(s > 0 for s in sizes)


@pytest.fixture(scope="module")
def chunked(tmp_path_factory):
    """2 seeds in 3 chunks (3 + 3 + 1 iterations), with a run folder; shared by the tests below."""
    run_dir = tmp_path_factory.mktemp("chunked")
    return loop.run(ppo, CONFIG, seeds=2, seed=3, num_chunks=3, run_dir=run_dir, progress=False), run_dir


@pytest.mark.slow
def test_chunked_run_equals_one_train_call(chunked):
    result, tmp_path = chunked
    assert len(run_compile.chunk_sizes(CONFIG.num_iterations, 3)) > 1  # really chunked: 7 iterations as 3+3+1
    keys = jax.random.split(jax.random.key(3), 2)
    state, metrics = jax.jit(jax.vmap(ppo.make_train(CONFIG)))(keys)
    # XLA fuses init into the first update when both share a program, so agreement is to float32 rounding, grown
    # over 7 updates (up to 4e-6 on parameters of 0.01-0.5)
    assert_trees_close(result.state, state, rtol=1e-5, atol=1e-5)
    assert_trees_close(result.metrics, dict(metrics), rtol=1e-4, atol=1e-5)
    one_chunk = loop.run(ppo, CONFIG, seeds=2, seed=3, num_chunks=1, progress=False)
    assert_trees_close(result.state, one_chunk.state, rtol=0, atol=0)  # chunking itself changes nothing

    rows = list(csv.DictReader(open(tmp_path / "metrics.csv")))
    assert len(rows) == 2 * CONFIG.num_iterations
    last = [r for r in rows if r["seed"] == "1" and r["iteration"] == str(CONFIG.num_iterations - 1)][0]
    assert int(last["env_steps"]) == CONFIG.total_timesteps
    assert float(last["value_loss"]) == pytest.approx(float(metrics["value_loss"][1, -1]), rel=1e-5)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["config"]["num_envs"] == 4 and saved["seeds"] == 2


@pytest.mark.slow
def test_evaluation_in_chunks_is_logged_and_changes_no_training_number(chunked, tmp_path):
    """eval_every=2 over chunks of 3, 3, 1 iterations: evaluations after iterations 6 (2nd chunk) and 7 (the
    last), inside the compiled chunks, on their own keys: every training metric and the final state are
    exactly those of the run without evaluation."""
    plain, _ = chunked
    result = loop.run(
        ppo,
        CONFIG,
        seeds=2,
        seed=3,
        num_chunks=3,
        run_dir=tmp_path,
        progress=False,
        eval_every=2,
        eval_episodes=4,
        tensorboard=True,
    )
    for name in plain.metrics:
        np.testing.assert_array_equal(result.metrics[name], plain.metrics[name], err_msg=name)
    assert_trees_close(result.state, plain.state, rtol=0, atol=0)
    evaluated = np.isfinite(result.metrics["eval_finished"])
    np.testing.assert_array_equal(evaluated.any(0), [False] * 5 + [True, True])
    assert evaluated[:, 5:].all()
    returns = result.metrics["eval_return"][:, 5:]
    assert np.isfinite(returns).all() and (returns >= 1).all()  # CartPole pays 1 per step
    np.testing.assert_array_equal(result.metrics["eval_finished"][:, 5:], 1.0)  # untrained: ends in < 500 steps
    # the seeds' evaluations differ (their own policies and keys), and so do successive ones
    assert not np.array_equal(result.metrics["eval_length"][0, 5:], result.metrics["eval_length"][1, 5:])

    rows = list(csv.DictReader(open(tmp_path / "metrics.csv")))
    assert len(rows) == 2 * CONFIG.num_iterations
    last = [r for r in rows if r["seed"] == "0" and r["iteration"] == "6"][0]
    assert float(last["eval_return"]) == pytest.approx(float(returns[0, 1]), rel=1e-5)
    assert all(r["eval_return"] == "nan" for r in rows if r["iteration"] in "01234")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["eval_iteration"] == 7 and summary["eval_return_mean"] == pytest.approx(returns[:, 1].mean())
    assert "eval return" in report.format_summary(summary)
    tensorboard = read_tensorboard(tmp_path / "tensorboard")
    assert [step for step, _ in tensorboard["eval_return"]] == [6 * 64, 7 * 64]
    assert json.loads((tmp_path / "config.json").read_text())["eval"] == {"every": 2, "episodes": 4}


@pytest.mark.slow
def test_a_run_and_its_resume_inside_a_chunk_run_one_chunk_program(chunked, tmp_path, monkeypatch):
    """Every chunk of a run is one compiled program, as long as the run's longest chunk: 7 iterations in chunks
    of 3, 3 and 1 compile one program of 3. A resume from iteration 5 (a checkpoint of --chunks 7) with --chunks 3
    runs its last two chunks of 1 in the program of its whole plan, of 3 (the one a run with --chunks 3 compiles,
    not one of 1), and trains to the uninterrupted run's numbers, bit for bit."""
    capacities = []
    program = run_compile.make_chunk_program

    def spy(algo, config, capacity, *args, **kwargs):
        capacities.append(capacity)
        return program(algo, config, capacity, *args, **kwargs)

    class StopAfterFiveIterations:  # a Ctrl-C once iteration 5's metrics are written: the run checkpoints there
        def write(self, metrics, first_iteration, *args):
            if first_iteration + next(iter(metrics.values())).shape[1] == 5:
                raise KeyboardInterrupt

        def close(self):
            pass

    monkeypatch.setattr(run_compile, "make_chunk_program", spy)
    with pytest.raises(loop.Interrupted):
        loop.run(ppo, CONFIG, seeds=2, seed=3, num_chunks=7, run_dir=tmp_path, progress=False,
                 sinks=[StopAfterFiveIterations()])  # fmt: skip
    assert checkpoint.latest_iteration(tmp_path / "checkpoints") == 5
    resumed = loop.run(ppo, CONFIG, seeds=2, seed=3, num_chunks=3, run_dir=tmp_path, resume=True, progress=False)
    assert capacities == [1, 3]  # the first run's chunks of 1; the resume's plan 3 + 3 + 1, of which 1 + 1 are left
    uninterrupted, _ = chunked
    assert_trees_close(resumed.state, uninterrupted.state, rtol=0, atol=0)
    for name, values in uninterrupted.metrics.items():
        np.testing.assert_array_equal(resumed.metrics[name], values, err_msg=name)


def test_eval_keys_are_their_own_stream():
    train_keys = jax.random.key_data(jax.random.split(jax.random.key(3), 4))
    eval_keys = jax.random.key_data(run_compile.eval_keys(3, 4))
    assert not set(map(tuple, np.asarray(train_keys))) & set(map(tuple, np.asarray(eval_keys)))
    np.testing.assert_array_equal(eval_keys[:2], jax.random.key_data(run_compile.eval_keys(3, 2)))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_evaluating_chunk_traces_for_every_algorithm(name):
    """The chunk + evaluation program stays jittable (traced, not compiled, here) for every registered
    algorithm (each has an evaluation_policy by the protocol)."""
    module = ALGORITHMS[name]
    config = module.Config()  # the algorithm's default env (continuous algorithms need a continuous one)
    keys = jax.random.split(jax.random.key(0), 2)
    state = jax.eval_shape(jax.vmap(lambda k: base.initial_state(config, k, algo=module)), keys)
    program = jax.vmap(run_compile.make_chunk(module, config, 2, eval_episodes=3), in_axes=(0, 0, None, None, None))
    eval_args = (run_compile.eval_keys(0, 2), np.int32(2), np.bool_(True))
    _, metrics, scores = jax.eval_shape(program, state, *eval_args, np.int32(2))
    assert {k: v.shape for k, v in scores.items()} == {k: (2,) for k in run_compile.EVAL_METRICS}
    assert all(v.shape[:2] == (2, 2) for v in jax.tree.leaves(metrics))


def test_bad_eval_settings_raise():
    with pytest.raises(ValueError, match="eval_every"):
        loop.run(ppo, CONFIG, eval_every=-1, progress=False)
    with pytest.raises(ValueError, match="eval_episodes"):
        loop.run(ppo, CONFIG, eval_every=1, eval_episodes=0, progress=False)


@pytest.mark.slow
def test_cli_trains_and_writes_a_run_folder(tmp_path, capsys):
    argv = (
        "train ppo --num-envs 4 --num-steps 16 --total-timesteps 4.48e2 --update-epochs 1 --num-minibatches 2"
        " --no-anneal-lr --hidden-sizes 32,32 --seeds 2 --no-progress --target-return 20"
        " --eval-every 2 --eval-episodes 3"
    )
    code = cli.main([*argv.split(), "--run-dir", str(tmp_path / "run")])
    assert code == 0
    out = capsys.readouterr().out
    assert "final return" in out and "compile" in out and "eval return" in out
    saved = json.loads((tmp_path / "run" / "config.json").read_text())["config"]
    assert saved["total_timesteps"] == 448 and saved["anneal_lr"] is False and saved["hidden_sizes"] == [32, 32]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["seeds"] == 2 and len(summary["seconds_to_target_per_seed"]) == 2


def test_cli_bad_config_is_a_clear_error(tmp_path, capsys):
    code = cli.main(["train", "ppo", "--num-minibatches", "3", "--run-dir", str(tmp_path / "run")])
    assert code == 2
    assert "num_minibatches" in capsys.readouterr().err


def test_every_config_field_is_a_flag():
    help_text = cli.build_parser()._subparsers._group_actions[0].choices["train"]
    sub = help_text._subparsers._group_actions[0].choices["ppo"].format_help()
    for field in dataclasses.fields(ppo.Config):
        assert "--" + field.name.replace("_", "-") in sub
        assert field.metadata["help"].split()[0] in sub


def test_time_to_return_uses_first_crossing():
    metrics = {"episode_return": np.array([[10.0, np.nan, 480.0, 300.0], [10.0, 20.0, 30.0, 40.0]])}
    result = report.RunResult(
        CONFIG, None, metrics, np.arange(1, 5) * 64, np.array([1.0, 2.0, 3.0, 4.0]), 1.0, 3.0, None
    )
    times = result.time_to_return(475)
    assert times[0] == 3.0 and np.isnan(times[1])


@pytest.mark.parametrize(
    ("returns", "lines"),
    [
        ([[10.0, 20.0, 30.0, 40.0]], ["time to return 475: not reached in 256 steps"]),
        ([[10.0, 480.0, 30.0, 40.0]], ["time to return 475: 2.50 s at 128 steps (1.50 s compile + 1.00 s run)"]),
        (
            [[10.0, np.nan, 480.0, 300.0], [10.0, 20.0, 30.0, 40.0]],
            [
                "time to return 475: reached by 1 of 2 seeds",
                "  seed 0            3.50 s at 192 steps (1.50 s compile + 2.00 s run)",
                "  seed 1            not reached in 256 steps",
            ],
        ),
    ],
    ids=["never", "one seed", "two seeds"],
)
def test_time_to_return_in_the_summary_cannot_be_misread(returns, lines):
    """Not "never, 54.01 s (compile + run)": each seed says whether it reached the target, at how many env
    steps, and the compile time apart from the training time."""
    metrics = {"episode_return": np.array(returns)}
    wall = np.array([2.0, 2.5, 3.5, 4.5])
    result = report.RunResult(CONFIG, None, metrics, np.arange(1, 5) * 64, wall, 1.5, 3.0, None)
    text = report.format_summary(report.summary(result, 475.0))
    assert text.splitlines()[-len(lines) :] == lines, text
    assert "never" not in text and "nan" not in text


def test_the_summary_says_how_many_devices_a_run_trained_on_and_how():
    metrics = {"episode_return": np.array([[10.0, 20.0, 30.0, 40.0]])}
    wall = np.array([2.0, 2.5, 3.5, 4.5])
    lines = {}
    for devices in (1, 2):
        result = report.RunResult(CONFIG, None, metrics, np.arange(1, 5) * 64, wall, 1.5, 3.0, None, devices=devices)
        info = report.summary(result)
        assert info["devices"] == devices
        lines[devices] = next(x for x in report.format_summary(info).splitlines() if x.startswith("run "))
    assert lines[1].endswith("all seeds)") and lines[2].endswith("all seeds, on 2 devices)"), lines
    for seeds, each in ((4, "2"), (3, "up to 2")):  # whole seeds on each device; a copy of seed 0 pads 3 to 4
        metrics = {"episode_return": np.full((seeds, 4), 10.0)}
        result = report.RunResult(CONFIG, None, metrics, np.arange(1, 5) * 64, wall, 1.5, 3.0, None, seed_devices=2)
        info = report.summary(result)
        assert info["seed_devices"] == 2 and info["devices"] == 1
        line = next(x for x in report.format_summary(info).splitlines() if x.startswith("run "))
        assert line.endswith(f"all seeds, on 2 devices, {each} seed(s) each)"), line


def test_jaxrl_run_is_the_package_and_run_its_function():
    import types

    import jaxrl
    import jaxrl.run

    assert isinstance(jaxrl.run, types.ModuleType) and jaxrl.run.loop is loop and jaxrl.run.run is loop.run
    with pytest.raises(ValueError, match="eval_every"):
        jaxrl.run.run(ppo, CONFIG, eval_every=-1, progress=False)


def test_unregistered_algorithm_needs_a_name():
    import types

    algo = types.SimpleNamespace(validate=ppo.validate, setup=ppo.setup, init=ppo.init, update=ppo.update)
    with pytest.raises(ValueError, match="not a registered algorithm"):
        loop.run(algo, CONFIG, progress=False)


def test_final_return_is_the_last_tenth_of_iterations(tmp_path):
    """RunResult.final_returns and summary.json use report.final_return: 20 iterations -> the last 2."""
    returns = np.stack([np.arange(20.0), np.r_[np.arange(19.0), np.nan]])
    result = report.RunResult(
        CONFIG, None, {"episode_return": returns}, np.arange(1, 21) * 64, np.arange(20.0), 1.0, 2.0, tmp_path
    )
    np.testing.assert_array_equal(result.final_returns(), [18.5, 18.0])  # NaN iterations do not count
    info = report.write_summary(result)
    assert info == json.loads((tmp_path / "summary.json").read_text())
    assert info["final_window"] == 2 and info["final_return_per_seed"] == [18.5, 18.0]
    assert "last 2 iteration(s)" in report.format_summary(info)


def test_a_seed_without_a_final_episode_is_null_in_valid_json_and_named_in_the_headline(tmp_path):
    """A seed whose final window ended no episode: null in summary.json (which stays valid JSON, no bare NaN),
    "none ended" in its per-seed line, and the headline says over how many seeds its mean is."""
    returns = np.stack([np.arange(20.0), np.r_[np.arange(18.0), np.nan, np.nan]])
    result = report.RunResult(
        CONFIG, None, {"episode_return": returns}, np.arange(1, 21) * 64, np.arange(20.0), 1.0, 2.0, tmp_path
    )
    info = report.write_summary(result)
    text = (tmp_path / "summary.json").read_text()
    assert "NaN" not in text and json.loads(text)["final_return_per_seed"] == [18.5, None]
    assert info["final_return_seeds"] == 1 and info["final_return_mean"] == 18.5
    printed = report.format_summary(info)
    assert "over the 1 of 2 seeds that ended an episode" in printed and "18.5, none ended" in printed


def test_validate_run_returns_the_plan_that_run_executes():
    """Validation happens once: `validate_run` checks everything and returns the Plan `loop.execute` runs."""
    plan = loop.validate_run(ppo, CONFIG, seeds=2, num_chunks=3)
    assert plan.name == "ppo" and plan.mesh is None and (plan.options.seeds, plan.options.num_chunks) == (2, 3)
    assert plan.with_options(run_dir="x").options.run_dir == "x" and plan.options.run_dir is None
    with pytest.raises(ValueError, match="resume=True needs the run_dir"):
        loop.validate_run(ppo, CONFIG, loop.RunOptions(resume=True))


@pytest.mark.slow
def test_a_one_device_run_traces_its_init_once(monkeypatch):
    """The memory check's `jax.eval_shape` of the init and the compile share one trace: a one-device run calls
    `base.initial_state` once (the memory check's estimate from the plan's init is the one it makes alone)."""
    traced = []
    initial_state = base.initial_state
    monkeypatch.setattr(base, "initial_state", lambda *a, **k: traced.append(1) or initial_state(*a, **k))
    config = dataclasses.replace(CONFIG, total_timesteps=4 * 16 * 2)
    plan = loop.validate_run(ppo, config, seeds=2)
    assert plan.init is not None and len(traced) == 1
    assert run_compile.memory_parts(config, 2, plan.init) == run_compile.memory_parts(config, 2)
    traced.clear()
    result = loop.execute(plan)
    assert len(traced) == 0 and result.metrics["episode_return"].shape[:2] == (2, 2)


def test_one_divergence_rule_for_runs_and_sweeps():
    """`report.diverged` (a sweep's diverged runs) and `report.first_divergence` (what stops a run) agree."""
    metrics = {"value_loss": np.array([[1.0, np.nan], [1.0, 2.0]]), "episode_return": np.full((2, 2), np.nan)}
    np.testing.assert_array_equal(report.diverged(metrics), [True, False])
    assert report.first_divergence(metrics) == "value_loss is nan (seed index 0, chunk iteration 1)"
    assert report.first_divergence({"value_loss": np.ones((2, 2))}) is None
    assert not report.diverged({"episode_return": np.full((2, 2), np.nan)}).any()  # no loss: nothing diverged


@pytest.mark.parametrize(
    ("chunks", "text"),
    [
        ([[[np.nan, np.nan]]], "no episode finished yet"),
        ([[[np.nan, 20.0]], [[np.nan, np.nan]], [[np.nan, np.nan]]], "ret 20.0 (2 chunks ago)"),
        ([[[np.nan, 20.0]], [[30.0, np.nan]], [[np.nan, np.nan]]], "ret 30.0 (1 chunk ago)"),
        ([[[10.0, 20.0], [np.nan, 40.0]]], "ret 30.0"),  # NaN seeds left out of the mean, not the whole iteration
        ([[[10.0, np.nan], [30.0, np.nan]]], "ret 20.0"),
    ],
    ids=["none", "2 chunks old", "1 chunk old", "this chunk", "last finite iteration"],
)
def test_progress_bar_shows_the_last_finite_return_with_its_age(chunks, text):
    last = None
    for index, returns in enumerate(chunks):
        value = report.last_finite_return(np.array(returns))
        last = last if value is None else (value, index)
    assert report.progress_text(last, len(chunks) - 1) == text


@pytest.mark.parametrize(
    ("iterations", "chunks", "every", "done"),
    [(100, 20, 3, 60), (100, 20, 3, 61), (97, 20, 2, 10), (6, 3, 1, 2), (7, 3, 2, 7), (7, 3, 2, 0), (90, 7, 3, 44)],
)
def test_a_resumed_run_keeps_the_runs_chunk_plan(iterations, chunks, every, done):
    """The chunk plan is a pure function of the run's settings: after a resume at `done` the chunks end, and
    evaluate, at the same iterations as the uninterrupted run's (a `done` inside a chunk cuts that chunk)."""
    whole = run_compile.chunk_plan(iterations, chunks, every)

    def ends(plan, start):
        points = start + np.cumsum([size for size, _ in plan]) if plan else np.array([], int)
        return list(points), [int(p) for p, (_, evaluated) in zip(points, plan, strict=True) if evaluated]

    first, rest = run_compile.rest_of_plan(whole, done)
    all_ends, all_evals = ends(whole, 0)
    rest_ends, rest_evals = ends(rest, done)
    assert rest_ends == [e for e in all_ends if e > done]
    assert rest_evals == [e for e in all_evals if e > done]
    assert first == sum(e <= done for e in all_ends)


def _bytes(tree) -> int:
    """The bytes of `tree`'s arrays, a typed key array's as its key data."""
    return sum(x.nbytes for x in jax.tree.leaves(checkpoint.unwrap_keys(tree)))


@pytest.mark.slow
@pytest.mark.parametrize("evaluated", [False, True])
def test_a_chunk_writes_the_new_state_over_the_old(evaluated):
    """A chunk program consumes its state (donated): XLA aliases every byte of it to the new state, so a run holds
    one training state, replay buffer included, and copies none at a chunk's start. Its numbers are those of the
    same chunk jitted without donation, bit for bit."""
    config = dqn.Config(num_envs=4, num_steps=4, buffer_size=800, learning_starts=16, replay_batch_size=8,
                        hidden_sizes=(16,), total_timesteps=4 * 4 * 4)  # fmt: skip
    keys = jax.random.split(jax.random.key(0), 2)
    init = run_compile.make_init(dqn, config)
    state = init(keys)
    eval_args = (run_compile.eval_keys(0, 2), np.int32(2), np.bool_(True)) if evaluated else ()
    program = run_compile.make_chunk_program(dqn, config, 2, eval_episodes=2 if evaluated else 0)
    compiled = program.lower(jax.eval_shape(init, keys), *eval_args, np.int32(2)).compile()
    memory = compiled.memory_analysis()
    assert memory.alias_size_in_bytes == _bytes(state) > 800 * 2 * 4 * 4 * 2  # the buffer's two observations
    if evaluated:
        return
    plain = jax.jit(jax.vmap(run_compile.make_chunk(dqn, config, 2), in_axes=(0, None)))(state, 2)
    consumed = compiled(state, np.int32(2))
    assert all(x.is_deleted() for x in jax.tree.leaves(state))
    assert_trees_close(consumed, plain, rtol=0, atol=0)


@pytest.mark.parametrize("wide", [False, True])
def test_runner_compiles_at_cpu_level_2_unless_xla_flags_choose(monkeypatch, wide):
    """On a CPU the runner's options hold XLA's optimisation level 2, and 512-bit vectors where `wide_vectors()`;
    a level or a width that XLA_FLAGS names when the options are asked for (as this suite sets) wins, and the
    device-independent options join either way."""
    monkeypatch.setattr(run_compile, "wide_vectors", lambda: wide)
    width = run_compile.WIDE_VECTOR_OPTIONS if wide else {}
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    assert run_compile.compiler_options() == {"xla_backend_optimization_level": 2, **width}
    assert run_compile.compiler_options(device_independent=True) == {
        "xla_backend_optimization_level": 2,
        **width,
        **run_compile.DEVICE_INDEPENDENT_OPTIONS,
    }
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_fusion_emitters=false --xla_backend_optimization_level=1")
    assert run_compile.compiler_options() == {"xla_backend_optimization_level": 1, **width}
    assert run_compile.compiler_options(device_independent=True) == {
        "xla_backend_optimization_level": 1,
        **width,
        **run_compile.DEVICE_INDEPENDENT_OPTIONS,
    }
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_prefer_vector_width=256")
    assert run_compile.compiler_options() == {"xla_backend_optimization_level": 2}
    # the options compile a program (XLA knows the flags)
    run_compile.jax.jit(lambda x: x + 1).lower(1.0).compile(
        {**run_compile.CPU_COMPILE_OPTIONS, **run_compile.WIDE_VECTOR_OPTIONS}
    )


CPUINFO = """processor\t: 0
vendor_id\t: {vendor}
cpu family\t: 26
flags\t\t: fpu vme sse2 avx avx2 {extra}

processor\t: 1
vendor_id\t: {vendor}
flags\t\t: fpu vme sse2 avx avx2 avx512f
"""


@pytest.mark.parametrize(
    "vendor, extra, wide",
    [
        ("AuthenticAMD", "avx512f avx512bw", True),
        ("AuthenticAMD", "fma", False),
        ("GenuineIntel", "avx512f avx512bw", False),
        ("AuthenticAMD", "avx512_bf16", False),
    ],
)
def test_wide_vectors_on_amd_cpus_with_avx512_only(vendor, extra, wide):
    """512-bit vectors on an AMD CPU with AVX-512 (its first processor's vendor and flags), on no other CPU."""
    fields = run_compile.cpu_fields(CPUINFO.format(vendor=vendor, extra=extra))
    assert fields["cpu family"] == "26" and fields["vendor_id"] == vendor
    assert run_compile.amd_avx512(fields) is wide
    assert run_compile.amd_avx512(run_compile.cpu_fields("")) is False
