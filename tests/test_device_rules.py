"""The devices a `jaxrl train` run asks for (`jaxrl.device_rules`), checked before JAX starts where the process can
only have XLA's CPU devices: the count the process will have is the count `jaxrl train` makes, and each refusal is
the runner's (`jaxrl.run.loop.validate_run`), in its words."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
from test_parallel import run_on_two_devices, subprocess_env

from jaxrl import device_rules

# (algorithm, Config fields, --devices, --seed-devices, seeds): each breaks one device rule on 2 devices, or none
CASES = [
    ("ppo", {}, 2, None, 1),
    ("ppo", {}, "all", None, 1),
    ("ppo", {}, None, 2, 4),
    ("ppo", {}, 1, 2, 3),
    ("ppo", {}, 3, None, 1),
    ("ppo", {"num_envs": 3, "num_minibatches": 3}, 2, None, 1),
    ("ppo", {"num_envs": 5, "num_minibatches": 5}, "all", None, 1),
    ("dqn", {"num_envs": 10, "buffer_size": 10010, "replay_batch_size": 127}, 2, None, 1),
    ("grpo", {"num_groups": 3, "num_minibatches": 3}, 2, None, 1),
    ("ppo", {}, 2, 2, 4),
    ("ppo", {}, "all", 2, 4),
    ("ppo", {}, None, 3, 4),
    ("ppo", {"core": "gru", "num_envs": 8, "num_minibatches": 8}, 2, None, 1),
    ("dqn", {"num_envs": 10, "buffer_size": 100, "replay_batch_size": 64}, 2, None, 1),
    ("grpo", {"num_groups": 2, "group_size": 2, "horizon": 0, "num_minibatches": 2}, "all", None, 1),
    ("ppo", {"num_envs": 4, "num_steps": 1, "num_minibatches": 4, "total_timesteps": 400}, 2, None, 1),
]

BOTH = """
import json, sys
import jax
from jaxrl import catalog, device_rules
from jaxrl.algos import ALGORITHMS
from jaxrl.run import loop

def refusal(check, *args):
    try:
        check(*args)
    except ValueError as error:
        return str(error)

have, platform = len(jax.devices()), jax.devices()[0].platform
pairs = []
for algo, fields, devices, seed_devices, seeds in json.loads(sys.argv[1]):
    module = ALGORITHMS[algo]
    config = module.Config(**fields)
    values = {name: getattr(config, name) for name in config.__dataclass_fields__}
    env = catalog.env_facts(config.env)
    early = refusal(device_rules.check_train_devices, devices, seed_devices, have, platform, algo, values, env)
    # what jaxrl train hands the runner: --seed-devices alone trains each seed's envs on one device
    options = loop.RunOptions(seeds=seeds, seed_devices=seed_devices or 1,
                              devices=1 if seed_devices and devices is None else devices)
    pairs.append([early, refusal(loop.validate_run, module, config, options)])
from jaxrl.pbt.runner import population_mesh
from jaxrl.pbt_settings import PBTConfig
from jaxrl.sweep.program import sweep_devices
config = ALGORITHMS["ppo"].Config()
for devices, population in [(3, None), (2, 5), (2, 4)]:  # jaxrl sweep's, jaxrl pbt's
    early = refusal(device_rules.check_local_count, devices, have, "this run")
    pairs.append([early, refusal(sweep_devices, config, 2, 1, devices)])
    if population is not None:
        early = refusal(device_rules.check_local_count, devices, have, "this process")
        early = early or refusal(device_rules.check_population_split, population, devices, 1)
        pairs.append([early, refusal(population_mesh, PBTConfig(population=population), devices)])
print(json.dumps(pairs))
"""


def test_the_device_refusals_before_jax_are_the_runners():
    """On 2 CPU devices, each case's flags checked by `device_rules.check_train_devices` get the refusal
    `validate_run` gives the options `jaxrl train` makes of them, or none: a count beyond the devices, a batch
    field (num_envs, num_groups, replay_batch_size) the devices do not divide, a device's share of the Config that
    breaks its rules (a GRPO horizon from the env's recorded time limit), a seed split beside a data-parallel one
    or beyond the devices; and `jaxrl sweep`'s and `jaxrl pbt`'s --devices, as `sweep_devices` and
    `population_mesh` refuse them."""
    pairs = json.loads(run_on_two_devices(BOTH, args=(json.dumps(CASES),)).strip().splitlines()[-1])
    cases = [*CASES, "sweep --devices 3", "sweep --devices 2", "pbt --devices 2 --population 5", "sweep --devices 2",
             "pbt --devices 2 --population 4"]  # fmt: skip
    for case, (early, late) in zip(cases, pairs, strict=True):
        assert early == late, (case, early, late)
    refused = [late for _, late in pairs if late]
    assert len(refused) == 12 and len(pairs) - len(refused) == 9, pairs
    for words in ["sees 2 device(s)", "Config.num_envs: 3", "Config.num_envs: 5", "Config.replay_batch_size: 127",
                  "Config.num_groups: 3", "split either the seeds", "this process has 2 device(s)",
                  "on each of 2 devices (1/2 of the batch): Config.num_minibatches: 8 does not divide num_envs = 4",
                  "on each of 2 devices (1/2 of the batch): Config.num_minibatches: 4 does not divide the batch",
                  "--devices 3: this run has 2 device(s)", "5 members do not split evenly"]:  # fmt: skip
        assert any(words in late for late in refused), words


EXPECTED = """
import json, sys
from jaxrl import device_rules
from jaxrl.sweep.devices import default_cpu_cores, start_processes
cpu_cores = json.loads(sys.argv[1])
expected = device_rules.expected_cpu_devices(cpu_cores)
start_processes(None, 1, None, cpu_cores if cpu_cores is not None else default_cpu_cores(), "training")
import jax
print(json.dumps([expected, len(jax.devices())]))
"""


def test_the_expected_cpu_devices_are_those_jaxrl_train_makes():
    """In fresh processes (run side by side), the devices `expected_cpu_devices` reads before JAX starts (from
    --cpu-cores, XLA_FLAGS or the cores) are those `jaxrl train`'s start makes (`start_jax`: --cpu-cores, else one
    per core), with XLA_FLAGS forcing no count or 3, and --cpu-cores absent or 2."""
    variants = [(None, None), (3, None), (3, 2)]
    procs = [
        subprocess.Popen([sys.executable, "-c", EXPECTED, json.dumps(cpu_cores)], env=subprocess_env(forced),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for forced, cpu_cores in variants
    ]  # fmt: skip
    for (forced, cpu_cores), proc in zip(variants, procs, strict=True):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        expected, made = json.loads(out.strip().splitlines()[-1])
        assert expected == made == (cpu_cores or forced or device_rules.usable_cores()), (forced, cpu_cores)


def test_where_an_accelerator_may_be_there_the_devices_wait_for_jax(monkeypatch):
    """`expected_cpu_devices` gives no count where JAX alone can tell the devices: JAX_PLATFORMS names another
    platform, a PJRT plugin is named or installed, or JAX_NUM_CPU_DEVICES sets the count without --cpu-cores."""
    for name in ("JAX_PLATFORMS", "JAX_PLATFORM_NAME", "PJRT_NAMES_AND_LIBRARY_PATHS", "JAX_NUM_CPU_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XLA_FLAGS", f"--xla_cpu_use_fusion_emitters=false {device_rules.DEVICE_COUNT_FLAG}=5")
    assert device_rules.cpu_only() and device_rules.expected_cpu_devices(None) == 5
    assert device_rules.expected_cpu_devices(3) == 3
    monkeypatch.setenv("JAX_NUM_CPU_DEVICES", "4")
    assert device_rules.expected_cpu_devices(None) is None and device_rules.expected_cpu_devices(3) == 3
    monkeypatch.delenv("JAX_NUM_CPU_DEVICES")
    for name, value in [("JAX_PLATFORMS", "cuda"), ("JAX_PLATFORMS", "cuda,cpu"), ("JAX_PLATFORM_NAME", "tpu"),
                        ("PJRT_NAMES_AND_LIBRARY_PATHS", "mine:/opt/libmine.so")]:  # fmt: skip
        with monkeypatch.context() as env:
            env.setenv(name, value)
            assert device_rules.expected_cpu_devices(2) is None, (name, value)
    with monkeypatch.context() as env:
        env.setenv("JAX_PLATFORMS", "cpu")
        assert device_rules.expected_cpu_devices(2) == 2
    real = importlib.util.find_spec
    for plugin in ("jax_plugins", "libtpu"):
        with monkeypatch.context() as patched:
            patched.setattr(importlib.util, "find_spec", lambda name, p=plugin: object() if name == p else real(name))
            assert device_rules.expected_cpu_devices(2) is None, plugin
    assert os.environ["XLA_FLAGS"].endswith("=5")


@pytest.mark.parametrize(
    ("algo", "fields", "time_limit", "pays"),
    [
        ("ppo", {"num_envs": 64, "num_steps": 64}, None, False),  # 2,048 samples a device
        ("ppo", {"num_envs": 64, "num_steps": 128}, None, True),  # 4,096 samples a device
        ("ppo", {"num_envs": 512, "num_steps": 1}, None, True),  # 256 envs a device
        ("dqn", {"num_envs": 16, "num_steps": 512}, None, False),  # a replay learner: its envs only
        ("dqn", {"num_envs": 512, "buffer_size": 512 * 20}, None, True),
        ("grpo", {}, 500, True),  # 32 members x the env's 500 steps
        ("grpo", {}, None, False),  # the time limit unknown before JAX: its envs only
        ("grpo", {"horizon": 128}, None, False),  # 4,096 samples over 2 devices
    ],
)
def test_one_runs_data_parallelism_pays_on_cpu_by_its_envs_or_its_rollouts_samples(algo, fields, time_limit, pays):
    from jaxrl.algos import ALGORITHMS

    config = ALGORITHMS[algo].Config(**fields)
    samples = device_rules.rollout_samples(config, time_limit)
    assert device_rules.cpu_data_parallel_pays(config, 1, 2, samples) is pays
