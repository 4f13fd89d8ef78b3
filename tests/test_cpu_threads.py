"""`use_cpu_threads`: JAX's CPU backend started with an intra-op pool of n threads, every thread free to run on
all the process's cores afterwards; refused once the backend is up; `--cpu-threads` on the command line."""

import json
import os
import subprocess
import sys

import pytest

from jaxrl import cli

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1

# XLA names its intra-op pool's threads tf_XLAEigen (Linux shows a thread's name in /proc/self/task/ID/comm)
PROBE = """
import json, os, sys
from jaxrl.sweep.devices import use_cpu_threads
if sys.argv[1] != "default":
    use_cpu_threads(int(sys.argv[1]))
import jax
jax.numpy.ones(3).block_until_ready()
names, affinities = [], []
for thread in os.listdir("/proc/self/task"):
    names.append(open(f"/proc/self/task/{thread}/comm").read().strip())
    affinities.append(sorted(os.sched_getaffinity(int(thread))))
cores = sorted(os.sched_getaffinity(0))
print(json.dumps({"pool": names.count("tf_XLAEigen"), "affinities": affinities, "cores": cores}))
"""


def probe(threads: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, threads], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.skipif(CORES < 2 or not os.path.isdir("/proc/self/task"), reason="needs Linux and two or more cores")
def test_the_pool_has_n_threads_and_every_thread_all_the_cores():
    default, one = probe("default"), probe("1")
    assert default["pool"] == CORES  # XLA's own size: one per core
    assert one["pool"] == 1
    assert all(affinity == one["cores"] for affinity in one["affinities"])
    assert len(one["cores"]) == CORES


def test_refused_once_the_backend_is_up_and_for_a_bad_count():
    import jax

    from jaxrl.sweep.devices import use_cpu_threads

    jax.numpy.ones(1).block_until_ready()
    with pytest.raises(RuntimeError, match="already initialised.*before the first JAX operation"):
        use_cpu_threads(1)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="need a positive integer"):
            use_cpu_threads(bad)


@pytest.mark.parametrize("command", ["train", "sweep"])
def test_the_command_line_takes_cpu_threads(command):
    assert cli.build_parser().parse_args([command, "dqn", "--cpu-threads", "1"]).cpu_threads == 1
    assert cli.build_parser().parse_args([command, "dqn"]).cpu_threads is None


def test_the_benchmark_pairs_each_one_thread_run_with_the_default_of_its_round():
    from benchmarks import cpu_threads

    def run(pool, round_index, steps_per_s, compile_s=2.0):
        return {"case": "dqn", "pool": pool, "round": round_index, "steps_per_s": steps_per_s, "compile_s": compile_s}

    results = [
        run("default", 0, 100.0),
        run("1 thread", 0, 130.0),
        run("1 thread", 1, 90.0, 3.0),
        run("default", 1, 60.0),
    ]
    (row,) = cpu_threads.table(results)
    assert row["ratios"] == pytest.approx([1.3, 1.5])
    assert row["ratio_median"] == pytest.approx(1.4)
    assert row["compile_ratio_median"] == pytest.approx(1.25)  # 1.0 and 1.5
    for case in cpu_threads.CASES + cpu_threads.MORE:  # a call is several iterations, not one
        config = cpu_threads.config_of(case)
        assert config.num_iterations >= 4


TRAIN = """
import hashlib, sys
import numpy as np
from jaxrl.sweep.devices import use_cpu_threads
if sys.argv[1] != "default":
    use_cpu_threads(int(sys.argv[1]))
import jax
from jaxrl.algos import dqn, ppo
digests = []
small_dqn = dqn.Config(num_envs=10, num_steps=1, hidden_sizes=(120, 84), activation="relu", total_timesteps=2000)
for module, config in ((ppo, ppo.Config(num_envs=16, total_timesteps=4096)), (dqn, small_dqn)):
    state, _ = jax.jit(module.make_train(config))(jax.random.key(0))
    leaves = [np.asarray(leaf) for leaf in jax.tree.leaves(state.params)]
    digests.append(hashlib.sha256(b"".join(leaf.tobytes() for leaf in leaves)).hexdigest())
print(" ".join(digests))
"""


@pytest.mark.slow
@pytest.mark.skipif(CORES < 2, reason="needs two or more cores")
def test_one_thread_trains_small_runs_bit_for_bit_as_the_default_pool():
    """PPO at 16 envs and DQN at PureJaxRL's 10 envs and 120-84 network: no product there is split over threads
    (a large one may be, and then the last bits differ)."""

    def digests(threads):
        done = subprocess.run([sys.executable, "-c", TRAIN, threads], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert digests("1") == digests("default")


@pytest.mark.parametrize(
    ("algo", "changes", "seeds", "cores", "threads"),
    [
        ("ppo", {}, 1, 2, 1),  # 16 envs, 64-64
        ("dqn", {}, 1, 2, 1),  # 10 envs, 128-128
        ("ppo", {}, 2, 2, 1),  # 32 envs over the seeds
        ("ppo", {}, 4, 2, None),
        ("ppo", {"num_envs": 64}, 1, 2, None),
        ("ppo", {"hidden_sizes": (256, 256)}, 1, 2, None),
        ("ppo", {"env": "Breakout-MinAtar", "torso": "cnn"}, 1, 2, None),
        ("ppo", {"core": "gru"}, 1, 2, None),
        ("grpo", {}, 1, 2, None),  # 32 members x 500 steps: data-parallel over the 2 cores, on XLA's pool
        ("grpo", {}, 1, 1, 1),  # one core: one device, one thread
        ("ppo", {"num_envs": 16, "num_steps": 512}, 1, 2, None),  # 8,192 samples: data-parallel
        ("dqn", {"num_envs": 16, "num_steps": 512}, 1, 2, 1),  # a replay learner counts its envs only
    ],
)
def test_train_takes_one_thread_for_a_small_mlp_run_only(algo, changes, seeds, cores, threads):
    from jaxrl.algos import ALGORITHMS
    from jaxrl.sweep.devices import auto_cpu_threads

    assert auto_cpu_threads(ALGORITHMS[algo].Config(**changes), seeds, cores, time_limit=500) == threads


class Started(Exception):
    pass


@pytest.mark.parametrize(
    ("argv", "threads"),
    [
        (["train", "ppo"], 1),
        (["train", "ppo", "--num-envs", "256"], None),
        (["train", "ppo", "--cpu-threads", "2"], 2),  # given: kept
        (["train", "ppo", "--devices", "2"], None),  # several devices: XLA's pool
        (["train", "grpo", "--cpu-cores", "2"], None),  # 32 members x 500 steps: data-parallel, XLA's pool
        (["train", "grpo", "--cpu-cores", "2", "--devices", "1"], 1),
        (["train", "grpo", "--cpu-cores", "2", "--env", "Pendulum-v1"], 1),  # 32 x 200 steps: one device
    ],
)
def test_the_train_command_chooses_the_pool_before_jax_starts(monkeypatch, argv, threads):
    from jaxrl import commands
    from jaxrl.sweep import devices

    seen = {}
    monkeypatch.setattr(devices, "backend_initialized", lambda: False)  # as in a fresh `jaxrl` process

    def start_jax(args, what):
        seen["threads"] = args.cpu_threads
        raise Started

    monkeypatch.setattr(commands, "start_jax", start_jax)
    with pytest.raises(Started):
        commands.train_command(cli.build_parser().parse_args(argv))
    assert seen["threads"] == threads


def test_in_process_after_jax_started_the_train_command_keeps_the_pool(monkeypatch):
    from jaxrl import commands

    seen = {}

    def start_jax(args, what):
        seen["threads"] = args.cpu_threads
        raise Started

    monkeypatch.setattr(commands, "start_jax", start_jax)
    import jax

    jax.numpy.ones(1).block_until_ready()  # JAX is up in this process
    with pytest.raises(Started):
        commands.train_command(cli.build_parser().parse_args(["train", "ppo"]))
    assert seen["threads"] is None
