"""The peers benchmark's workers and the accelerator benchmark's core, at tiny sizes."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import gpu, peers
from benchmarks.common import binned_curve, env_steps, mean_final_return, measure, write_json
from benchmarks.peer_workers import common, jaxrl_worker, rejax_worker

ROOT = Path(__file__).resolve().parent.parent
TINY_PPO = {
    **peers.PPO,
    "num_envs": 4,
    "num_steps": 8,
    "epochs": 1,
    "minibatches": 2,
    "total_timesteps": 64,
    "hidden": [8],
}
TINY_DQN = {
    **peers.DQN,
    "num_envs": 4,
    "total_timesteps": 64,
    "buffer_size": 64,
    "learning_starts": 16,
    "batch_size": 8,
    "updates_per_iteration": 1,
    "hidden": [64, 64],
}


def spec(algo, config, curve=False):
    return {
        "algo": algo,
        "config": config,
        "seed": 0,
        "calls": 1,
        "curve": curve,
        "seeds": 2,
        "eval_every": 32,
        "eval_episodes": 4,
        "threshold": 20.0,
    }


@pytest.mark.extended
def test_jaxrl_worker_throughput_fields():
    result = jaxrl_worker.run(spec("ppo", TINY_PPO))
    assert result["library"] == "jaxrl" and result["algo"] == "ppo"
    assert result["env_steps"] == 64
    assert result["compile_s"] > 0 and result["run_s"] > 0
    assert math.isclose(result["steps_per_s"], 64 / result["run_s"])
    assert result["devices"] and result["jax"]
    assert result["train_return_recent"] is None or result["train_return_recent"] > 0
    json.dumps(result)  # what the worker prints


def test_curve_summary_steps_to_threshold():
    summary = common.curve_summary([[10.0, 30.0, 25.0], [5.0, 6.0, 7.0]], eval_every=100, threshold=20.0)
    assert summary["eval_steps"] == [100, 200, 300]
    assert summary["steps_to_threshold"] == [200, None]
    assert summary["final_return_per_seed"] == [25.0, 7.0]
    assert summary["final_return_mean"] == 16.0 and summary["final_return_min"] == 7.0


def test_recent_return_skips_iterations_without_episodes():
    nan = float("nan")
    assert jaxrl_worker.recent_return([[nan] * 30 + [2.0, nan]]) == 2.0
    assert jaxrl_worker.recent_return([[1.0] + [nan] * 30]) is None


def test_configs_map_to_both_libraries():
    for algo, config in (("ppo", peers.PPO), ("dqn", peers.DQN)):
        ours, theirs = jaxrl_worker.jaxrl_config(algo, config), rejax_worker.rejax_config(algo, config)
        assert ours["num_envs"] == theirs["num_envs"] == config["num_envs"]
        assert ours["total_timesteps"] == theirs["total_timesteps"] == config["total_timesteps"]
        assert ours["learning_rate"] == theirs["learning_rate"]
        assert algo.upper() in peers.mapping_table(algo, config)
    # whole iterations and whole evaluation intervals in both libraries
    assert peers.PPO["total_timesteps"] % peers.EVAL_EVERY["ppo"] == 0
    assert peers.EVAL_EVERY["ppo"] % (peers.PPO["num_envs"] * peers.PPO["num_steps"]) == 0
    assert peers.DQN["total_timesteps"] % peers.EVAL_EVERY["dqn"] == 0


def test_summarize_ratios():
    rounds = [
        {
            "round": 0,
            "ppo": {
                "jaxrl": {"ok": True, "steps_per_s": 200.0, "compile_s": 2.0, "curve": {"steps_to_threshold": [400]}},
                "rejax": {"ok": True, "steps_per_s": 100.0, "compile_s": 4.0, "curve": {"steps_to_threshold": [400]}},
            },
        }
    ]
    for lib in ("jaxrl", "rejax"):
        rounds[0]["ppo"][lib]["curve"].update(
            final_return_mean=1.0, final_return_min=1.0, final_return_per_seed=[1.0], steps_per_s=1.0, compile_s=1.0
        )
    summary = peers.summarize(rounds, "ppo", "rejax")
    assert summary["median"] == {"throughput": 2.0, "compile": 0.5, "time_to_threshold": 0.5}
    assert "median" in peers.report([summary], rounds, 475)


@pytest.mark.skipif(peers.cpu_seconds(os.getpid()) is None, reason="no /proc: a worker's CPU time is not read here")
def test_a_worker_without_cpu_time_is_stopped_as_stalled_and_a_busy_one_runs_to_its_end():
    """A deadlocked worker (no CPU time) is stopped after `stall_s`, not after the whole timeout; a worker that keeps
    a core busy for longer than `stall_s` is not, and its output (more than a pipe holds) comes back whole."""
    started = peers.time.monotonic()
    code, out, why = peers.run_watched(
        [sys.executable, "-c", "import time; time.sleep(600)"], dict(os.environ), timeout_s=900, stall_s=1, poll_s=0.1
    )
    assert (code, out) == (None, "") and why.startswith("stalled: no CPU time for 1 s")
    assert peers.time.monotonic() - started < 300  # the sleep's 600 s, or the timeout's 900 s, were not waited out

    busy = (
        "import sys, time\n"
        "while time.process_time() < 3.0: pass\n"  # 3 s of CPU time, however long the machine takes to give them
        "sys.stderr.write('e' * 300_000); print('o' * 300_000); print('done')"
    )
    code, out, err = peers.run_watched([sys.executable, "-c", busy], dict(os.environ), timeout_s=900, stall_s=2)
    assert code == 0 and out.splitlines()[-1] == "done" and len(out) > 300_000 and err == "e" * 300_000

    code, out, why = peers.run_watched(
        [sys.executable, "-c", "import time; time.sleep(600)"], dict(os.environ), timeout_s=1, stall_s=900
    )
    assert code is None and why == "timed out after 1 s"


def test_measure_times_the_compile_and_returns_the_call():
    def fn(x):
        return jnp.cumsum(jnp.sin(x) * 2.0)

    x = jnp.arange(8.0)
    timing = measure(fn, x, repeats=2)
    assert timing.compile_s > 0 and 0 < timing.run_s < float("inf")
    np.testing.assert_array_equal(timing.out, jax.jit(fn)(x))
    compile_s, run_s, out = timing  # unpacks as (compile_s, run_s, output)
    assert (compile_s, run_s) == (timing.compile_s, timing.run_s)


def test_env_steps_final_return_and_compact_json(tmp_path):
    nan = float("nan")
    config = type("Config", (), {"num_iterations": 10, "env_steps_per_iteration": 64})()
    assert env_steps(config) == 640 and env_steps(config, seeds=3) == 1920
    # jaxrl.run.report.final_return: the last 10% of iterations (here 1), NaN-aware; then the mean over seeds
    assert mean_final_return([[1.0] * 9 + [4.0], [2.0] * 9 + [nan], [nan] * 9 + [6.0]]) == 5.0
    assert math.isnan(mean_final_return([[1.0, nan]]))
    steps, curve = binned_curve(np.arange(1000.0)[None], env_steps_per_iteration=4)
    assert len(steps) == len(curve[0]) == 200 and steps[-1] == 4000 and curve[0][0] == 2.0
    path = write_json(tmp_path / "r.json", {"steps": steps, "array": np.ones(2), "nan": nan})
    assert "\n" not in path.read_text().rstrip("\n") and " " not in path.read_text()
    assert json.loads(path.read_text())["array"] == [1.0, 1.0]


@pytest.mark.extended
def test_gpu_bench_tiny():
    row = gpu.bench(num_envs=4, seeds=2, num_steps=8, iterations=1, repeats=1)
    assert row["steps"] == 2 * 4 * 8
    assert row["steps_per_s"] > 0 and row["compile_s"] > 0
    assert gpu.device_slug("NVIDIA H200") == "nvidia_h200"
    assert gpu.device_info()["device_kind"]


@pytest.mark.extended
def test_rejax_worker_in_its_venv():
    python = ROOT / "benchmarks" / ".venv-rejax" / "bin" / "python"
    if not python.exists():
        pytest.skip("benchmarks/.venv-rejax is missing; `python -m benchmarks.peers --quick` builds it")
    for algo, config in (("ppo", TINY_PPO), ("dqn", TINY_DQN)):
        done = subprocess.run(
            [
                str(python),
                str(ROOT / "benchmarks" / "peer_workers" / "rejax_worker.py"),
                json.dumps(spec(algo, config)),
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["ok"], result.get("traceback")
        assert result["library"] == "rejax" and result["env_steps"] == 64 and result["steps_per_s"] > 0


@pytest.mark.extended
def test_jaxrl_worker_curve_as_subprocess():
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "peer_workers" / "jaxrl_worker.py"),
            json.dumps(spec("dqn", TINY_DQN, curve=True)),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env={"PYTHONPATH": str(ROOT), "PATH": ""},
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["ok"], result.get("traceback")
    assert result["curve"]["eval_steps"] == [32, 64]
    assert len(result["curve"]["final_return_per_seed"]) == 2


def test_program_memory_and_op_count_of_a_compiled_program():
    from benchmarks.common import program_memory
    from benchmarks.limits import ops

    small = jax.jit(lambda x: x + 1).lower(jnp.ones((1000,))).compile()
    large = jax.jit(lambda x: jnp.sort(x) @ x + jnp.cumsum(x).max()).lower(jnp.ones((1000,))).compile()
    memory = program_memory(small)
    assert memory["argument"] == memory["output"] == 4000
    assert 1 <= ops(small) < ops(large)


def test_limits_cuts_alternate_a_b_b_a_and_compare_the_best_runs(monkeypatch):
    from benchmarks import limits

    calls, times = [], iter([4.0, 1.0, 3.0, 2.0])  # A, B, B, A

    def fake_timed(fn, *args, repeats):
        calls.append(fn)
        return {"run_s": next(times), "xla_s": 0.5, "trace_s": 0.1, "ops": 1}

    monkeypatch.setattr(limits, "timed", fake_timed)
    row = limits.alternating("case", "A", "B", (), (), repeats=1, per=2)[0]
    assert calls == ["A", "B", "B", "A"]
    assert row["us_a"] == 1e6 * 2.0 / 2 and row["us_b"] == 1e6 * 1.0 / 2 and row["ratio"] == 0.5
    text = limits.markdown(
        [row],
        {
            "commit": "x",
            "machine": {"processor": "p", "cpu_count": 2},
            "xla_flags": "",
            "load_before": [0],
            "load_after": [0],
        },
    )
    assert "## (e)" in text and "## (a)" not in text and "| case | 1000000.0 | 500000.0 | 0.50 |" in text
    assert "one per core (the default) CPU thread(s)" in text


def test_purejaxrl_side_by_side_pairs_each_jaxrl_run_with_that_rounds_peer_run():
    from benchmarks import purejaxrl

    assert purejaxrl.order(0) == ("jaxrl", "purejaxrl") and purejaxrl.order(1) == ("purejaxrl", "jaxrl")

    def run(label, library, round_index, steps_per_s, compile_s=1.0):
        case = label.split(" ")[0]
        return dict(
            ok=True,
            label=label,
            case=case,
            library=library,
            round=round_index,
            steps_per_s=steps_per_s,
            compile_s=compile_s,
            final_return=500.0,
        )

    results = [
        run("ppo", "jaxrl", 0, 200.0),
        run("ppo on 2 devices", "jaxrl", 0, 300.0),
        run("ppo", "purejaxrl", 0, 100.0),
        run("ppo", "purejaxrl", 1, 200.0, 2.0),
        run("ppo", "jaxrl", 1, 300.0),
        run("ppo on 2 devices", "jaxrl", 1, 400.0),
        {"ok": False, "label": "dqn", "case": "dqn", "library": "purejaxrl", "round": 0, "error": "x"},
        run("dqn", "jaxrl", 0, 50.0),
    ]
    table = {row["case"]: row for row in purejaxrl.ratio_rows(results)}
    assert set(table) == {"ppo", "ppo on 2 devices"}  # dqn has no peer run to pair with
    assert table["ppo"]["throughput_ratio"] == [2.0, 1.5] and table["ppo"]["throughput_ratio_median"] == 1.75
    assert table["ppo on 2 devices"]["throughput_ratio"] == [3.0, 2.0]
    assert table["ppo"]["compile_ratio_median"] == 0.75


def test_xla_phases_split_the_longest_compile_by_its_log_timestamps():
    from benchmarks.common import xla_phases

    def line(clock, text):
        return f"I1203 {clock}    3436 some_file.cc:1] {text}"

    log = "\n".join(
        [
            line("10:00:00.000000", "Running HLO pass pipeline on module jit_small: simplification"),
            line("10:00:00.100000", "Compiling: jit_small"),
            line("10:00:00.150000", "Compile LLVM module with 0 kernels and 0 comparators"),
            line("10:00:00.200000", "Compilation finished"),
            line("10:00:01.000000", "Running HLO pass pipeline on module jit_train: spmd"),
            "a line from Python, not XLA's",
            line("10:00:01.250000", "HLO pass: dce time: 9 us"),
            line("10:00:01.500000", "Compiling: jit_train"),
            line("10:00:03.500000", "Compile LLVM module with 10 kernels and 1 comparators"),
            line("10:00:07.500000", "Compilation finished"),
            line("10:00:07.600000", "Compiling: jit_unfinished"),
        ]
    )
    phases = xla_phases(log)
    assert phases["module"] == "jit_train"
    assert phases["hlo_passes_s"] == pytest.approx(0.5)
    assert phases["ir_emission_s"] == pytest.approx(2.0)
    assert phases["llvm_s"] == pytest.approx(4.0)
    assert phases["total_s"] == pytest.approx(6.5)
    assert xla_phases("no XLA timers here") is None


def test_purejaxrl_side_by_side_takes_each_librarys_median_xla_phases():
    from benchmarks import purejaxrl

    def run(library, round_index, llvm_s):
        phases = {"hlo_passes_s": 1.0, "ir_emission_s": 2.0, "llvm_s": llvm_s}
        return dict(
            ok=True,
            label="ppo",
            case="ppo",
            library=library,
            round=round_index,
            steps_per_s=1.0,
            compile_s=1.0,
            final_return=0.0,
            xla_phases=phases,
        )

    results = [run("jaxrl", 0, 3.0), run("purejaxrl", 0, 1.0), run("jaxrl", 1, 5.0), run("purejaxrl", 1, 2.0)]
    (row,) = purejaxrl.ratio_rows(results)
    assert row["jaxrl_xla_phases"]["llvm_s"] == 4.0 and row["purejaxrl_xla_phases"]["llvm_s"] == 1.5
    text = purejaxrl.markdown(
        [row],
        {
            "machine": {"processor": "cpu", "cpu_count": 2},
            "argv": [],
            "commit": "x",
            "load_before": [],
            "load_after": [],
            "rounds": 2,
        },
    )
    assert "| ppo | jaxrl | 1.00 | 2.00 | 4.00 | 7.00 |" in text
    assert "| ppo | purejaxrl | 1.00 | 2.00 | 1.50 | 4.50 |" in text


def test_xla_options_are_paired_with_the_default_run_of_their_case_and_round():
    from benchmarks import xla_options

    names = ["default", "llvm -O1", "XNNPACK dots"]
    assert xla_options.order(0, names) == names and xla_options.order(1, names) == names[::-1]

    def run(case, options, round_index, compile_s, steps_per_s):
        return dict(ok=True, case=case, options=options, round=round_index, compile_s=compile_s,
                    steps_per_s=steps_per_s, final_return=500.0)  # fmt: skip

    results = [
        run("ppo", "default", 0, 4.0, 100e3),
        run("ppo", "llvm -O1", 0, 2.0, 90e3),
        run("ppo", "llvm -O1", 1, 4.0, 110e3),
        run("ppo", "default", 1, 5.0, 100e3),
        run("dqn", "llvm -O1", 0, 1.0, 10e3),  # no default run of dqn to pair with
        {"ok": False, "case": "dqn", "options": "default", "round": 0, "error": "x"},
    ]
    table = {(row["case"], row["options"]): row for row in xla_options.ratio_rows(results)}
    assert set(table) == {("ppo", "default"), ("ppo", "llvm -O1")}
    assert table["ppo", "llvm -O1"]["compile_ratio"] == pytest.approx((0.5 + 0.8) / 2)
    assert table["ppo", "llvm -O1"]["throughput_ratio"] == pytest.approx((0.9 + 1.1) / 2)
    assert table["ppo", "default"]["compile_ratio"] == 1.0
    record = {"argv": ["--options", "llvm -O1"], "commit": "abc", "machine": {"processor": "cpu", "cpu_count": 2},
              "load_before": [1.0], "load_after": [1.0], "rounds": 2}  # fmt: skip
    text = xla_options.markdown(list(table.values()), record)
    assert "`python -m benchmarks.xla_options --options 'llvm -O1'`" in text  # a command that can be pasted
    assert "| ppo | `--xla_backend_optimization_level=1` | 2.00-4.00 | 0.65x | 90k-110k | 1.00x | 500.0-500.0 |" in text
    assert "| ppo | `(none)` | 4.00-5.00 | 1.00x |" in text


def test_every_xla_option_set_names_flags_and_values_xla_accepts():
    """XLA aborts a process on a flag or a value it does not know; one process parses every set's flags at once."""
    from benchmarks import xla_options

    flags = " ".join(xla_options.OPTION_SETS.values())
    code = "import jax.numpy as jnp; print(int(jnp.ones(2).sum()))"
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "XLA_FLAGS": flags}, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0 and done.stdout.strip() == "2", done.stderr[-2000:]


def test_jaxrl_takes_purejaxrl_dqn_config_in_its_own_units():
    from benchmarks.peer_workers import jaxrl_at_purejaxrl_worker, purejaxrl_cases

    algo, case, seeds, devices = purejaxrl_cases.case("dqn")
    config = jaxrl_at_purejaxrl_worker.jaxrl_config(algo, case)
    assert config.env_steps_per_iteration == 10 and config.target_update_interval == 50  # 500 env steps
    assert config.epsilon_decay_fraction == 0.5 and config.hidden_sizes == (120, 84)
    algo, case, seeds, _ = purejaxrl_cases.case("ppo_8_seeds")
    config = jaxrl_at_purejaxrl_worker.jaxrl_config(algo, case)
    assert seeds == 8 and config.num_envs * config.num_steps == 512 and config.anneal_lr


@pytest.mark.slow
def test_the_side_by_side_gives_both_libraries_the_same_prng_and_a_worker_takes_it():
    """`--prng unsafe_rbg`: every run of the round, jaxrl's (the CPU-thread row included) and PureJaxRL's, carries it,
    in ABBA order; without it no run does. A worker sets it as JAX's default before making its first key."""
    import argparse

    from benchmarks import purejaxrl

    args = argparse.Namespace(cases=["dqn"], repeats=1, devices=1, cpu_threads=1, source="DIR", prng="unsafe_rbg")
    rows = purejaxrl.runs_of(args, "purejaxrl")
    assert [library for _, library, _ in rows] == ["purejaxrl", "jaxrl", "jaxrl"]
    assert all(spec["prng"] == "unsafe_rbg" for _, _, spec in rows)
    assert rows[2][2]["cpu_threads"] == 1
    args.prng = None
    assert not any("prng" in spec for _, _, spec in purejaxrl.runs_of(args, "jaxrl"))
    code = (
        "import sys; sys.argv = ['w', '{\"prng\": \"unsafe_rbg\"}']\n"
        "from benchmarks.peer_workers.common import main\n"
        "import jax\n"
        "main(lambda spec: {'key': str(jax.random.key_impl(jax.random.key(0))), 'raw': jax.random.PRNGKey(0).shape})"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root)
    assert '"ok": true' in done.stdout and "unsafe_rbg" in done.stdout and '"raw": [4]' in done.stdout, done


def test_pbt_vs_search_traces_the_best_members_schedule_through_its_parents():
    """Member 2 copies member 0 at step 0, member 1 copies member 2 at step 1: member 1's schedule is member 0's
    block, then member 2's (perturbed), then its own (perturbed again)."""
    from benchmarks.pbt_vs_search import ancestry
    from jaxrl import pbt

    during = {"learning_rate": np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 10.0]])}
    after = {"learning_rate": np.array([[1.0, 2.0, 10.0], [1.0, 20.0, 10.0]])}
    parent = np.array([[0, 1, 0], [0, 2, 2]])
    exploited = parent != np.arange(3)
    lineage = pbt.Lineage(np.array([2, 4]), np.zeros((2, 3)), np.zeros((2, 3), int), exploited, parent, during, after)
    np.testing.assert_array_equal(ancestry(lineage, 1)["learning_rate"], [1.0, 10.0, 20.0])
    np.testing.assert_array_equal(ancestry(lineage, 0)["learning_rate"], [1.0, 1.0, 1.0])


def test_install_size_finds_what_only_one_dependency_needs():
    """`install_size.only_for`: the distributions that only the dropped direct dependencies need, through extras
    and markers; a distribution another dependency also needs stays."""
    from benchmarks.install_size import only_for

    def dist(name, size, *requires):
        return {"name": name, "version": "1", "bytes": size, "requires": list(requires)}

    base = {
        "distributions": [
            dist("jaxrl", 1, "A", "b", "c[x]", 'pytest; extra == "test"'),
            dist("a", 10, "d"),
            dist("B", 20, "d>=1", "e"),
            dist("c", 30, "f", 'g; extra == "x"', 'h; extra == "dev"'),
            *(dist(name, 1e6) for name in "defgh"),
        ]
    }
    assert only_for(base, {"a"}) == {"distributions": ["a"], "mb": 0.0}
    assert only_for(base, {"b"}) == {"distributions": ["b", "e"], "mb": 1.0}
    assert only_for(base, {"c"}) == {"distributions": ["c", "f", "g"], "mb": 2.0}
    assert only_for(base, {"a", "b"})["distributions"] == ["a", "b", "d", "e"]


@pytest.mark.slow
def test_memory_cores_row_on_a_popgym_task_has_both_returns(tmp_path):
    """A memory_cores row (the MLP on POPGym's RepeatPrevious, 2 seeds, 9 iterations of 24 steps, so that a 51-step
    episode ends in the last): the greedy and the training return per seed, both in POPGym's [-1, 1]; the table
    shows the training return, and says where an older row has none."""
    from benchmarks import memory_cores

    row = memory_cores.row("ppo", "popgym-RepeatPreviousEasy-v0", "none", 9 * 32 * 24, 2, None)
    assert row["env"] == "popgym-RepeatPreviousEasy-v0" and row["seeds"] == 2
    for name in ("greedy_return", "training_return"):
        per_seed = np.asarray(row[f"{name}_per_seed"])
        assert per_seed.shape == (2,) and np.all(np.abs(per_seed) <= 1.0), (name, per_seed)
        assert row[f"{name}_mean"] == pytest.approx(per_seed.mean(), abs=1e-3)
    old = {k: v for k, v in row.items() if not k.startswith("training_return")}
    record = memory_cores.merge(tmp_path / "none.json", [row, {**old, "core": "gru"}])
    table = memory_cores.markdown({**record, "machine": {"processor": "x", "cpu_count": 2}})
    assert f"| {row['training_return_mean']:.2f} |" in table and "| not recorded |" in table


def test_trees_pair_each_round_and_refuse_jaxrl_from_elsewhere(monkeypatch, tmp_path):
    from benchmarks import trees

    def run(tree, case, round_index, steps_per_s, compile_s=1.0):
        return dict(ok=True, tree=tree, case=case, round=round_index, steps_per_s=steps_per_s,
                    compile_s=compile_s, final_return=500.0)  # fmt: skip

    results = [
        run("base", "ppo", 0, 100e3, 2.0),
        run("change", "ppo", 0, 150e3),
        run("change", "ppo", 1, 120e3, 3.0),
        run("base", "ppo", 1, 100e3),
        run("change", "dqn", 0, 50e3),
        {"ok": False, "tree": "base", "case": "dqn", "round": 0, "error": "x"},
    ]
    (row,) = trees.ratio_rows(results)  # dqn's base run failed: nothing to pair with
    assert row["case"] == "ppo" and row["throughput_ratio"] == [1.5, 1.2] and row["compile_ratio"] == [0.5, 3.0]
    record = {"argv": [], "base": "a", "change": "b", "date": "d", "load_before": [], "load_after": [],
              "rounds": 2, "machine": {"processor": "cpu", "cpu_count": 2}}  # fmt: skip
    assert "| ppo | 100.0k-100.0k | 120.0k-150.0k | 1.20-1.50 |" in trees.markdown([row], record)

    # a worker that imported jaxrl from another tree is refused
    tree = tmp_path / "tree"
    (tree / "jaxrl").mkdir(parents=True)
    seen = {}

    def worker(python, name, spec, timeout_s, extra_env=None):
        seen["jaxrl"] = Path(extra_env["PYTHONPATH"].split(os.pathsep)[0], "jaxrl").resolve()
        return {"ok": True, "jaxrl_source": str(tmp_path / "elsewhere")}

    monkeypatch.setattr(trees, "run_worker", worker)
    assert not trees.run_tree(tree, {"case": "ppo"}, 1.0)["ok"]
    assert seen["jaxrl"] == (tree / "jaxrl").resolve()  # the tree's package comes first on the worker's path
    monkeypatch.setattr(trees, "run_worker", lambda *a, **k: {"ok": True, "jaxrl_source": str(tree)})
    assert trees.run_tree(tree, {"case": "ppo"}, 1.0)["ok"]


def test_trees_alternate_the_two_trees_and_write_both_files(monkeypatch, tmp_path):
    from benchmarks import trees

    calls = []

    def fake(tree, spec, timeout_s):
        calls.append(("base" if tree.name == "a" else "change", spec["case"]))
        return {"ok": True, "steps_per_s": 1e3 if tree.name == "a" else 2e3, "compile_s": 1.0, "final_return": 1.0}

    monkeypatch.setattr(trees, "run_tree", fake)
    for name in ("a", "b"):
        (tmp_path / name / "jaxrl").mkdir(parents=True)
        (tmp_path / name / "jaxrl" / "__init__.py").touch()
    out = tmp_path / "result"
    trees.main(["--base", str(tmp_path / "a"), "--change", str(tmp_path / "b"), "--cases", "dqn", "--out", str(out)])
    assert calls == [("base", "dqn"), ("change", "dqn"), ("change", "dqn"), ("base", "dqn")]  # A, B, B, A
    record = json.loads(out.with_suffix(".json").read_text())
    assert record["table"][0]["throughput_ratio"] == [2.0, 2.0] and record["argv"][1] == "DIR"
    assert "| dqn | 1.0k-1.0k | 2.0k-2.0k | 2.00-2.00 |" in out.with_suffix(".md").read_text()


def test_threefry_benchmark_alternates_the_lowerings_and_leaves_jaxrls_in_place(monkeypatch, tmp_path):
    from benchmarks import threefry
    from jaxrl import _compat

    def while_loops():  # a fresh function each time: jax.jit caches the lowering of one
        return jax.jit(lambda key: jax.random.bits(key, (64,))).lower(jax.random.key(0)).as_text().count("while")

    threefry.use("jax")
    rolled = while_loops()
    threefry.use("jaxrl")
    assert rolled >= 1 and while_loops() == 0  # the 64-word draw: JAX's loop, then jaxrl's straight line
    order = []

    def fake(algo, config, repeats):
        lowering = "jax" if while_loops() else "jaxrl"
        order.append(lowering)
        return {"compile_s": 2.0 if lowering == "jax" else 1.0, "steps_per_s": 10.0, "while_loops": 1, "digest": "d"}

    monkeypatch.setattr(threefry, "measured", fake)
    out = tmp_path / "threefry"
    threefry.main(["--algos", "ppo", "--rounds", "2", "--out", str(out)])
    assert order == ["jax", "jaxrl", "jaxrl", "jax"]  # A, B, B, A
    assert while_loops() == 0, "the benchmark must leave jaxrl's lowering registered"
    row = json.loads(out.with_suffix(".json").read_text())["rows"][0]
    assert row["compile_ratio"] == [0.5, 0.5] and row["same_bits"]
    assert "| ppo | CartPole-v1 | 2.00-2.00 | 1.00-1.00 | 0.50x |" in out.with_suffix(".md").read_text()
    assert _compat.THREEFRY_UNROLLED_FROM <= 64


def test_init_compile_alternates_flax_and_jaxrl_and_compiles_both(monkeypatch, tmp_path):
    from benchmarks import init_compile

    for way in init_compile.WAYS:  # both programs compile for real
        run = init_compile.measured(init_compile.NETWORKS["dqn"](), way, 2)
        assert run["compile_s"] > 0 and run["kernels"] > 0
    order = []

    def fake(network, way, seeds):
        order.append((type(network).__name__, seeds, way))
        return {"compile_s": 2.0 if way == "flax" else 1.5, "kernels": 10 if way == "flax" else 8}

    monkeypatch.setattr(init_compile, "measured", fake)
    out = tmp_path / "init"
    init_compile.main(["--networks", "ppo", "--seeds", "1", "--rounds", "2", "--out", str(out)])
    assert [way for _, _, way in order] == ["flax", "jaxrl", "jaxrl", "flax"]  # A, B, B, A
    assert {name for name, _, _ in order} == {"ActorCritic"}
    row = json.loads(out.with_suffix(".json").read_text())["rows"][0]
    assert row["compile_ratio"] == [0.75, 0.75]
    assert "| ppo | 1 | 2.00-2.00 | 1.50-1.50 | 0.75x (0.75-0.75) | 10 / 8 |" in out.with_suffix(".md").read_text()


def test_gradient_chunks_benchmark_alternates_whole_and_chunks_and_restores_the_threshold(monkeypatch, tmp_path):
    """Whole, chunks, chunks, whole (ABBA), each case's minibatches above the threshold, the threshold back in
    place afterwards, and the ratios chunks / whole in the table."""
    from benchmarks import gradient_chunks
    from jaxrl import minibatch
    from jaxrl.algos import ALGORITHMS

    threshold = minibatch.GRADIENT_CHUNKS_FROM
    for name, (algo, overrides) in gradient_chunks.CASES.items():
        config = ALGORITHMS[algo].Config().replace(**overrides)
        samples = config.num_envs * config.num_steps // getattr(config, "num_minibatches", 1)
        assert samples > threshold, name
    order = []

    def fake(algo, config, repeats, devices, seeds):
        chunks = "whole" if minibatch.GRADIENT_CHUNKS_FROM == float("inf") else "chunks"
        order.append(chunks)
        params = {"w": jnp.full((2,), 1.0 if chunks == "whole" else 1.5)}
        return {"compile_s": 1.0, "steps_per_s": 10.0 if chunks == "whole" else 12.0, "params": params}

    monkeypatch.setattr(gradient_chunks, "measured", fake)
    out = tmp_path / "chunks"
    gradient_chunks.main(["--cases", "a2c", "--rounds", "2", "--out", str(out)])
    assert order == ["whole", "chunks", "chunks", "whole"]
    assert minibatch.GRADIENT_CHUNKS_FROM == threshold
    row = json.loads(out.with_suffix(".json").read_text())["rows"][0]
    assert row["speed_ratio"] == [1.2, 1.2] and row["largest_parameter_difference"] == 0.5
    assert "| a2c | 40,960 | 1.00-1.00 | 1.00-1.00 | 1.00x | 0.0-0.0k | 0.0-0.0k | 1.20x (1.20-1.20) |" in (
        out.with_suffix(".md").read_text()
    )


def test_train_layouts_alternate_auto_and_one_device_and_span_both_sides_of_the_rule(monkeypatch, tmp_path):
    """Auto, one device, one device, auto (ABBA) per case, the ratios auto / one device in the table; the cases
    fall on the side of `device_rules.cpu_data_parallel_pays` (2 CPU devices) that their comments name."""
    from benchmarks import train_layouts
    from jaxrl import cli, commands, device_rules
    from jaxrl.algos import ALGORITHMS

    two = {"ppo_64x128", "ppo_32x512", "grpo", "dpo"}
    for name, arguments in train_layouts.CASES.items():
        args = cli.build_parser().parse_args(["train", *arguments.split()])
        config = commands.config_from_args(ALGORITHMS[args.algo].Config, args)
        samples = device_rules.rollout_samples(config, time_limit=500)
        assert device_rules.cpu_data_parallel_pays(config, 1, 2, samples) == (name in two), name
    order = []

    def fake(arguments, flags, folder, processes=1):
        auto = flags == "--devices auto"
        order.append("auto" if auto else "one")
        return {"steps_per_second": 12.0 if auto else 10.0, "compile_s": 1.0, "final_return_mean": 500.0,
                "devices": 2 if auto else 1, "wall_s": 2.0}  # fmt: skip

    monkeypatch.setattr(train_layouts, "train", fake)
    monkeypatch.setattr(train_layouts, "RESULTS", tmp_path)
    train_layouts.main(["--cases", "grpo", "--rounds", "2", "--out", "layouts"])
    assert order == ["auto", "one", "one", "auto"]
    table = (tmp_path / "layouts.md").read_text()
    row = "| `jaxrl train grpo --total-timesteps 6.4e5` | 2 | 0k-0k | 0k-0k | 1.20, 1.20 | 1.0 | 1.0 | 500.0 | 500.0 |"
    assert row in table
