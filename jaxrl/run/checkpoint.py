"""Checkpoints of a run's whole training state (orbax), with the metrics recorded so far.

A checkpoint is written to a temporary folder and renamed when complete (orbax's atomic finalisation); then
the SHA-256 of every file in it is written to `CHECKSUMS` inside it (atomically: a temporary file renamed).
Only a checkpoint with its checksums counts as complete, so a crash or kill during a save leaves the previous
checkpoint loadable. A restore verifies every file against the checksums first and refuses a corrupt
checkpoint naming the file. PRNG keys are stored as their raw key data and re-wrapped on restore.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxrl.run import hosts


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, unreadable or does not match the run being restored."""


def _is_key(x) -> bool:
    return hasattr(x, "dtype") and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def unwrap_keys(tree):
    """PRNG keys as their raw key data (what orbax, NumPy and the multi-process gathers can hold)."""
    return jax.tree.map(lambda x: jax.random.key_data(x) if _is_key(x) else x, tree)


def rewrap_keys(tree, like):
    """Wraps raw key data back into typed keys of the implementation `like` holds (arrays or eval_shape)."""

    def rewrap(x, ref):
        return jax.random.wrap_key_data(x, impl=ref.dtype._impl) if _is_key(ref) else x

    return jax.tree.map(rewrap, tree, like)


CHECKSUMS = "checksums.json"


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def _files(step_dir: Path) -> dict[str, Path]:
    return {
        p.relative_to(step_dir).as_posix(): p
        for p in sorted(step_dir.rglob("*"))
        if p.is_file() and p.name != CHECKSUMS
    }


def write_checksums(step_dir: Path) -> None:
    """Writes `step_dir/CHECKSUMS`: {relative path: sha256} of every file of the finished checkpoint."""
    sums = {name: _digest(path) for name, path in _files(step_dir).items()}
    tmp = step_dir / (CHECKSUMS + ".tmp")
    with open(tmp, "w") as file:
        json.dump({"sha256": sums}, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(tmp, step_dir / CHECKSUMS)


def verify(step_dir: Path) -> None:
    """Raises CheckpointError naming the first file of `step_dir` that is missing, extra, or differs from the
    checksums saved with it."""
    try:
        sums = json.loads((step_dir / CHECKSUMS).read_text())["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise CheckpointError(f"checkpoint {step_dir} is corrupt: unreadable {CHECKSUMS} ({error})") from error
    files = _files(step_dir)
    hint = "delete that checkpoint folder to resume from the one before it, if any"
    for name, expected in sums.items():
        if name not in files:
            raise CheckpointError(f"checkpoint {step_dir} is corrupt: {step_dir / name} is missing; {hint}.")
        if _digest(files[name]) != expected:
            raise CheckpointError(
                f"checkpoint {step_dir} is corrupt: {step_dir / name} does not match the checksum saved with it; "
                f"{hint}."
            )


def _steps(directory: Path) -> list[int]:
    """The finished checkpoints (orbax's step folders), oldest first."""
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.is_dir() and p.name.isdigit())


def _discard_incomplete(directory: Path) -> None:
    """Removes step folders newer than the latest verified one that have no checksums: saves a kill cut short
    after orbax's finalisation (the run resumed from the verified one and will write these steps again)."""
    import shutil

    steps = _steps(directory)
    verified = [s for s in steps if (directory / str(s) / CHECKSUMS).exists()]
    for step in steps:
        if verified and step > verified[-1]:
            shutil.rmtree(directory / str(step))


def _manager(directory: Path, max_to_keep: int = 2):
    """orbax's manager of `directory`. In a multi-process run only process 0 saves and restores (`jaxrl.run.hosts`),
    so orbax is told that this process alone takes part (no barrier waits for the others)."""
    import orbax.checkpoint as ocp

    if jax.process_count() == 1:
        options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=True)
    else:
        me = jax.process_index()
        alone = ocp.options.MultiprocessingOptions(primary_host=me, active_processes={me})
        directory.mkdir(parents=True, exist_ok=True)  # orbax's create=True is refused with active_processes
        options = ocp.CheckpointManagerOptions(max_to_keep=max_to_keep, create=False, multiprocessing_options=alone)
    return ocp.CheckpointManager(directory.absolute(), options=options)


def save(
    directory: str | Path,
    iteration: int,
    state,
    metrics: dict[str, np.ndarray],
    info: dict[str, Any],
    devices: int = 1,
) -> None:
    """Saves `state` (any pytree) after `iteration` completed iterations, with the per-iteration `metrics`
    ({name: [seeds, iteration]}) and JSON-able `info` (the config) used to check a resume. `devices`: the
    device count of a data-parallel state (device-stacked leaves [D, ...], saved as host arrays so that no
    device layout is written; see `jaxrl.parallel`). A run over several processes calls it in process 0 alone,
    with the state already gathered to host arrays (`hosts.to_host`, in every process)."""
    import orbax.checkpoint as ocp

    _discard_incomplete(Path(directory))
    payload = {
        "info": info,
        "metrics": {k: [str(np.asarray(v).dtype), np.asarray(v).tolist()] for k, v in metrics.items()},
    }
    if devices > 1:
        payload["devices"] = devices
    saved = unwrap_keys(state)
    if devices > 1:
        saved = hosts.to_host(saved)
    with _manager(Path(directory)) as manager:
        manager.save(
            iteration,
            args=ocp.args.Composite(state=ocp.args.StandardSave(saved), meta=ocp.args.JsonSave(payload)),
        )
        manager.wait_until_finished()
    write_checksums(Path(directory) / str(iteration))


def latest_iteration(directory: str | Path) -> int | None:
    """The latest complete checkpoint: the newest step folder with its checksums (a kill between orbax's
    finalisation and the checksums leaves an unverifiable step, skipped). A folder written before checksums
    existed (no step has them) gives its latest step, restored unverified."""
    steps = _steps(Path(directory))
    verified = [s for s in steps if (Path(directory) / str(s) / CHECKSUMS).exists()]
    if verified:
        return verified[-1]
    return steps[-1] if steps else None


def restore(
    directory: str | Path, like_state, info: dict[str, Any], devices: int = 1, like_for=None
) -> tuple[int, Any, dict[str, np.ndarray]]:
    """Restores the latest checkpoint into the structure of `like_state` (a state or its `jax.eval_shape`).

    Raises CheckpointError when there is none, when it cannot be read, or when its `info` differs from `info`.
    A checkpoint of a data-parallel run on another device count than `devices` is read in its own layout,
    `like_for(saved_devices)` (the abstract state on that count), and laid out for `devices`
    (`parallel.relayout`); without `like_for` it is refused.
    """
    import orbax.checkpoint as ocp

    directory = Path(directory)
    iteration = latest_iteration(directory)
    if iteration is None:
        raise CheckpointError(f"no checkpoint in {directory}")
    step_dir = directory / str(iteration)
    if (step_dir / CHECKSUMS).exists():
        verify(step_dir)
    abstract = jax.eval_shape(unwrap_keys, like_state)
    try:
        with _manager(directory) as manager:
            meta = manager.restore(iteration, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
            changed = differences(meta["info"], info)
            if changed:
                raise CheckpointError(f"checkpoint {step_dir} was written by a different run: {changed}")
            saved_devices = int(meta.get("devices", 1))
            if saved_devices != devices:
                if like_for is None:
                    raise CheckpointError(
                        f"checkpoint {step_dir} holds a run on {saved_devices} device(s); restore it with "
                        f"--devices {saved_devices}."
                    )
                target = abstract
                abstract = jax.eval_shape(unwrap_keys, like_for(saved_devices))
                abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), abstract)
            restored = manager.restore(iteration, args=ocp.args.Composite(state=ocp.args.StandardRestore(abstract)))
            if saved_devices != devices:
                restored = {"state": _relayout(restored["state"], saved_devices, target, devices, step_dir)}
    except CheckpointError:
        raise
    except Exception as error:  # orbax raises many types for truncated or corrupt files
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise CheckpointError(f"checkpoint {step_dir} cannot be restored: {first_line}") from error
    state = rewrap_keys(restored["state"], like_state)
    metrics = {k: np.asarray(values, dtype) for k, (dtype, values) in meta["metrics"].items()}
    return iteration, state, metrics


def _relayout(state, saved_devices: int, target, devices: int, step_dir: Path):
    from jaxrl import parallel

    try:
        return parallel.relayout(state, saved_devices, target, devices)
    except ValueError as error:
        raise CheckpointError(f"checkpoint {step_dir}: {error}") from error


def _flat(info: dict, prefix: str = "") -> dict[str, Any]:
    out = {}
    for key, value in info.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def differences(saved: dict, now: dict) -> str:
    """'' when equal, else the differing entries only, e.g. "config.learning_rate: saved 0.0025, now 0.001"."""
    saved, now = _flat(saved), _flat(now)
    missing = object()
    changed = [k for k in sorted(set(saved) | set(now)) if saved.get(k, missing) != now.get(k, missing)]

    def shown(d, k):
        return repr(d[k]) if k in d else "(none)"

    return "; ".join(f"{k}: saved {shown(saved, k)}, now {shown(now, k)}" for k in changed)
