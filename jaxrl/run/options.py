"""The counts a run is given, each checked alone without JAX: seeds, the base seed, chunks, checkpoints, evaluations
and the devices the seeds split over. `jaxrl.run.loop.validate_run` checks a run's options with `check_counts`, and
`jaxrl train` checks its flags with it before JAX starts, so a refusal reads the same either way. What needs the
devices (how many this process has, a seed split beside a data-parallel one) is `jaxrl.device_rules`."""

from __future__ import annotations

MAX_CHUNKS = 10**6  # so that the chunk plan, a list, stays small


def count(value, name: str, minimum: int, what: str) -> None:
    """An integer (not a bool) >= `minimum`; else ValueError("name=value: what.")."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name}={value!r}: {what}.")


def check_counts(seeds, seed, num_chunks, checkpoint_every, eval_every, eval_episodes, seed_devices=1) -> None:
    """Refuses, in one line naming the option, a count out of its range: at least one seed, a base seed >= 0,
    1 to `MAX_CHUNKS` chunks, a checkpoint every 1 chunk or more, an evaluation every 0 chunks or more (with one
    episode at least), and 1 to `seeds` seed devices."""
    count(seeds, "seeds", 1, "need at least one seed")
    count(seed, "seed", 0, "the base random seed is an integer >= 0")
    count(num_chunks, "num_chunks", 1, "a number of compiled chunks, >= 1")
    if num_chunks > MAX_CHUNKS:
        raise ValueError(
            f"num_chunks={num_chunks} (--chunks): at most {MAX_CHUNKS:,} compiled chunks (each one ends in host "
            "work: logs, checks, the progress bar)."
        )
    count(checkpoint_every, "checkpoint_every", 1, "a number of chunks, >= 1 (a checkpoint is also written at the end)")
    count(eval_every, "eval_every", 0, "a number of chunks, >= 0 (0: no evaluation)")
    if eval_every:
        count(eval_episodes, "eval_episodes", 1, "need at least one episode per evaluation")
    count(seed_devices, "seed_devices", 1, "a number of devices, >= 1")
    if seed_devices > seeds:
        raise ValueError(f"seed_devices={seed_devices} is more than seeds={seeds}: each device trains whole seeds.")
