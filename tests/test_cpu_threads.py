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
