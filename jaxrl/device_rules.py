"""What a run's devices must be: a device count the process has, a batch each device holds an equal share of, and a
seed split that fits the devices. `jaxrl.parallel` and the runner (`jaxrl.run.loop`) refuse with these once JAX is
up; `jaxrl train` refuses with the same before JAX starts where the device count is known without it: one process
whose only backend is XLA's CPU (`expected_cpu_devices`), with the rules of the Config each device runs
(`check_per_device`). Imports nothing of JAX."""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping

from jaxrl import config_rules, field_rules

# fields counted over the whole run that each device holds 1/D of (a shape or a batch: D must divide them)
DIVIDED = ("num_envs", "num_groups", "buffer_size", "replay_batch_size")
DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"

# the smallest share of a batch per CPU device at which one run's data parallelism pays: seeds x num_envs
# environments a device, or, for a learner that learns from each iteration's rollout, seeds x num_envs x
# num_steps samples a device (benchmarks/results/notes/scaling.md)
MIN_ENVS_PER_CPU_DEVICE = 256
MIN_SAMPLES_PER_CPU_DEVICE = 4096


def cpu_data_parallel_pays(config, seeds: int, devices: int, samples: int) -> bool:
    """Whether one run of `config` (x `seeds`) over `devices` CPU devices gives each enough to outrun one device:
    `MIN_ENVS_PER_CPU_DEVICE` environments, or, where the learner learns from each iteration's rollout of
    `samples` env steps (no replay buffer), `MIN_SAMPLES_PER_CPU_DEVICE` of them. A rollout's steps of a few
    environments hand little work to each device, but an update over thousands of samples splits well."""
    if seeds * getattr(config, "num_envs", 0) >= devices * MIN_ENVS_PER_CPU_DEVICE:
        return True
    return not hasattr(config, "buffer_size") and seeds * samples >= devices * MIN_SAMPLES_PER_CPU_DEVICE


def rollout_samples(config, time_limit: int | None) -> int:
    """num_envs x num_steps of one iteration's rollout, without JAX: a grouped learner's `horizon` 0 runs the env's
    `time_limit` steps (0 where that is unknown)."""
    if hasattr(config, "horizon"):
        return config.num_envs * (config.horizon or time_limit or 0)
    return getattr(config, "num_envs", 0) * getattr(config, "num_steps", 0)


def check_count(devices: int, have: int, platform: str) -> None:
    """Refuses a data-parallel device count this process does not have (1 to `have`)."""
    if not 1 <= devices <= have:
        raise ValueError(
            f"devices={devices}: this process sees {have} device(s) ({platform}); on a CPU, make more with "
            f"--cpu-cores {devices} (jaxrl.sweep.use_cpu_cores({devices}) before any JAX operation)."
        )


def check_local_count(devices: int, have: int, holder: str) -> None:
    """Refuses a `--devices` count of `jaxrl sweep` (`holder` "this run") or `jaxrl pbt` ("this process") beyond
    the `have` devices."""
    if not 1 <= devices <= have:
        raise ValueError(f"--devices {devices}: {holder} has {have} device(s).")


def check_population_split(population: int, devices: int, processes: int) -> None:
    """Refuses a population whose members do not split evenly over `devices` devices (of `processes`)."""
    if population % devices:
        fewer = " or fewer --devices" if processes == 1 else f" (the devices of {processes} processes hold members)"
        raise ValueError(
            f"PBTConfig.population: {population} members do not split evenly over {devices} devices; use a "
            f"multiple of {devices} members{fewer}."
        )


def divided_names(fields: Mapping) -> list[str]:
    """The `DIVIDED` fields a Config (`fields`, by name) has; not `num_envs` where it counts groups (`num_groups`)."""
    return [name for name in DIVIDED if name in fields and not (name == "num_envs" and "num_groups" in fields)]


def check_divides(fields: Mapping, size: int) -> None:
    """Refuses a Config (`fields`: its field names to values) whose `divided_names` fields `size` devices do not
    divide."""
    for name in divided_names(fields):
        value = fields[name]
        if value % size:
            fix = -(-value // size) * size
            raise ValueError(
                f"Config.{name}: {value} is not divisible by the {size} devices (each device holds 1/{size}); "
                f"use a multiple of {size}, e.g. {fix}, or fewer devices."
            )


def divided(fields: Mapping, size: int) -> dict:
    """The fields of a Config (`fields`, by name) that each of `size` devices holds its share of: the
    `divided_names` ones divided by `size`, `learning_starts` divided rounded up."""
    shares = {name: fields[name] // size for name in divided_names(fields)}
    if "learning_starts" in fields:
        shares["learning_starts"] = -(-fields["learning_starts"] // size)
    return shares


def check_per_device(algorithm: str, fields: Mapping, size: int, env=None) -> None:
    """Refuses a Config (`fields`) whose share on each of `size` devices breaks a rule (`jaxrl.field_rules`,
    `jaxrl.config_rules` with the env's facts `env`), as `jaxrl.algos.base.data_parallel_config` refuses it: the
    `divided` fields, and total_timesteps for the same iterations. Passes where the env's facts are needed and
    not given."""
    local = {**fields, **divided(fields, size)}
    try:
        iterations = config_rules.Values(dict(fields), env).num_iterations
        local["total_timesteps"] = iterations * config_rules.Values(local, env).env_steps_per_iteration
    except config_rules.Unknown:
        return
    try:
        field_rules.check_values({name: local[name] for name in local if local[name] != fields[name]})
        config_rules.check_values(algorithm, local, env)
    except ValueError as error:
        raise ValueError(f"on each of {size} devices (1/{size} of the batch): {error}") from error


def check_seed_devices(seed_devices: int, devices, data_parallel: bool, processes: int, local: int) -> None:
    """Refuses a split of the seeds over `seed_devices` devices beside a data-parallel split (`data_parallel`,
    `devices` as given), a count that is not a multiple of the `processes`, or more than each process's `local`
    devices."""
    if data_parallel:
        raise ValueError(
            f"seed_devices={seed_devices} with devices={devices!r}: split either the seeds (whole seeds per "
            "device) or each seed's envs (data parallelism) over the devices, not both."
        )
    if seed_devices % processes:
        raise ValueError(
            f"seed_devices={seed_devices}: over {processes} processes each process takes the same number of "
            f"seed devices; choose a multiple of {processes}."
        )
    if seed_devices // processes > local:
        where = "this process has" if processes == 1 else f"over {processes} processes, each has"
        raise ValueError(f"seed_devices={seed_devices}: {where} {local} device(s) (on a CPU, more with --cpu-cores).")


def check_train_devices(
    devices, seed_devices: int | None, have: int, platform: str, algorithm: str, fields: Mapping, env=None
) -> None:
    """What `jaxrl train ALGORITHM --devices DEVICES --seed-devices SEED_DEVICES` (None: not given) checks of one
    process with `have` devices on `platform` and a Config of `fields` on an env of facts `env`, in the order the
    runner checks them: the data-parallel device count (a count or "all"; --seed-devices alone trains each seed on
    one device), the batch it divides and each device's share of the Config, then the seed split. --devices auto
    chooses what fits, and is not checked."""
    devices = 1 if seed_devices is not None and devices in (None, "auto") else devices
    if devices in (None, "auto"):
        return
    if devices != "all":
        check_count(devices, have, platform)
    size = have if devices == "all" else devices
    if size > 1:
        check_divides(fields, size)
        check_per_device(algorithm, fields, size, env)
    if seed_devices is not None and seed_devices > 1:
        check_seed_devices(seed_devices, devices, size > 1, 1, have)


def usable_cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cpu_only() -> bool:
    """Whether JAX, once started, can have no backend but the CPU: JAX_PLATFORMS says "cpu", or it is unset and
    no accelerator plugin is installed (a `jax_plugins` module or entry point, libtpu, PJRT_NAMES_AND_LIBRARY_PATHS),
    all found without importing them."""
    platforms = os.environ.get("JAX_PLATFORMS") or os.environ.get("JAX_PLATFORM_NAME")
    if platforms:
        return platforms.strip().lower() == "cpu"
    if os.environ.get("PJRT_NAMES_AND_LIBRARY_PATHS"):
        return False
    if importlib.util.find_spec("jax_plugins") is not None or importlib.util.find_spec("libtpu") is not None:
        return False
    from importlib.metadata import entry_points

    return not entry_points(group="jax_plugins")


def expected_cpu_devices(cpu_cores: int | None) -> int | None:
    """The devices one `jaxrl train` process will have, read before JAX starts: `cpu_cores` (--cpu-cores) where
    given, else the count XLA_FLAGS sets, else one per core this process may use (as `jaxrl train` makes them).
    None where only JAX can tell: an accelerator may be there (`cpu_only`), JAX_NUM_CPU_DEVICES sets the count."""
    if not cpu_only():
        return None
    if cpu_cores is not None:
        return cpu_cores
    if os.environ.get("JAX_NUM_CPU_DEVICES"):
        return None
    forced = re.findall(rf"{DEVICE_COUNT_FLAG}=(\d+)", os.environ.get("XLA_FLAGS", ""))
    return int(forced[-1]) if forced else usable_cores()
