"""Checkpoints of a run's whole training state (orbax), with the metrics recorded so far.

A checkpoint is written to a temporary folder and renamed when complete (orbax's atomic finalisation); then
the SHA-256 of every file in it is written to `CHECKSUMS` inside it (atomically: a temporary file renamed).
Only a checkpoint with its checksums counts as complete, so a crash or kill during a save leaves the previous
checkpoint loadable. A save that fails (a full disk: refused before writing when the free space cannot hold
it) removes what it wrote and raises one error, orbax's own error logs kept quiet. A restore verifies every
file against the checksums first and refuses a corrupt checkpoint naming the file; one without checksums is
passed over for the latest verified one, or restored unverified when none has them, and says so in one line.
PRNG keys are stored as their raw key data and re-wrapped on restore.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import gc
import hashlib
import json
import logging
import math
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.run import checkpoint_layout as layout
from jaxrl.run import hosts
from jaxrl.run.checkpoint_steps import CHECKSUMS, latest_iteration  # noqa: F401 (latest_iteration: importable here)
from jaxrl.run.checkpoint_steps import steps as _steps


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, unreadable or does not match the run being restored."""


LEARNING_ONLY = ("buffer", "opt_state")
"""The fields of a training state that only learning reads (the replay buffer, the optimiser's moments): a restore
for playing the policies (`jaxrl eval`, `jaxrl render`) leaves them out (`restore(..., leave_out=LEARNING_ONLY)`)."""


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


def without_empty(tree):
    """Zero-size arrays (MJX's physics state has some) as None: orbax refuses to save an array without elements,
    and they hold nothing to save."""
    return jax.tree.map(lambda x: None if math.prod(x.shape) == 0 else x, tree)


def with_empty(tree, like):
    """`tree` with the zero-size arrays of `like` (arrays or eval_shape) back where `without_empty` left None."""

    def fill(x, ref):
        return jnp.zeros(ref.shape, ref.dtype) if x is None and ref is not None else x

    return jax.tree.map(fill, tree, like, is_leaf=lambda x: x is None)


QUIET_S = 0.2  # a failed save's leftovers count as removed once absent this long (see _remove_unfinished)


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


def note(message: str) -> None:
    """One `jaxrl:` line on stderr about a checkpoint (what a restore passed over or could not verify)."""
    print(f"jaxrl: {message}", file=sys.stderr)


@contextlib.contextmanager
def _quiet():
    """orbax's error logs (absl, and asyncio's for the futures a failed operation leaves) off while it saves or
    restores: its failure is raised once, as one error. After a failure they stay off: orbax's background
    threads and the futures they leave go on logging that failure after it was raised."""
    loggers = [logging.getLogger(name) for name in ("absl", "asyncio")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    except BaseException:
        gc.collect()
        raise
    for logger, level in zip(loggers, levels, strict=True):
        logger.setLevel(level)


def reason(error: BaseException) -> str:
    """Why a checkpoint operation failed, in a few words: the OS error under it (orbax and tensorstore wrap
    them; tensorstore names it by `os_error_code`), else the first 300 characters of its message."""
    seen = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno:
            return seen.strerror or os.strerror(seen.errno)
        code = str(seen).split("os_error_code='", 1)[1].split("'", 1)[0] if "os_error_code='" in str(seen) else ""
        if code.isdigit():
            return os.strerror(int(code))
        seen = seen.__cause__ or seen.__context__
    text = " ".join(str(error).split()) or "no message"
    return f"{type(error).__name__}: {text[:300]}{' ...' if len(text) > 300 else ''}"


def _free_bytes(directory: Path) -> int | None:
    """The free space of the file system `directory` is (or will be) on; None when it cannot be told."""
    path = directory.absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def _check_space(directory: Path, state, payload: dict) -> None:
    """Raises OSError(ENOSPC) when the free space cannot hold the checkpoint (its arrays, its metrics, and
    orbax's metadata: 64 KiB and a 4 KiB block per array), before anything is written."""
    arrays = [x for x in jax.tree.leaves(state) if hasattr(x, "dtype")]
    need = sum(x.size * x.dtype.itemsize for x in arrays) + len(json.dumps(payload)) + (64 << 10) + 4096 * len(arrays)
    free = _free_bytes(directory)
    if free is not None and free < need:
        detail = f"No space left on device ({need / 2**20:.1f} MiB needed, {free / 2**20:.1f} MiB free)"
        raise OSError(errno.ENOSPC, detail, str(directory))


def _unfinished(directory: Path, iteration: int) -> list[Path]:
    """What a failed save of `iteration` left: orbax's temporary folder, or the step without checksums."""
    if not directory.is_dir():
        return []
    return [
        path
        for path in directory.iterdir()
        if (path.name == str(iteration) and not (path / CHECKSUMS).exists())
        or path.name.startswith(f"{iteration}.orbax-checkpoint-tmp")
    ]


def _remove_unfinished(directory: Path, iteration: int, patience_s: float = 10.0) -> None:
    """Removes what a failed save of `iteration` left. A write that failed (a full disk) can leave orbax's other
    writer threads still adding files to the temporary folder, so a removal can fail or be undone: it is repeated
    until the folder has stayed absent for QUIET_S, or patience_s has passed."""
    deadline = time.monotonic() + patience_s
    quiet_since = None
    while time.monotonic() < deadline:
        left = _unfinished(directory, iteration)
        if not left:
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since >= QUIET_S:
                return
        else:
            quiet_since = None
            for path in left:
                shutil.rmtree(path, ignore_errors=True)
        time.sleep(0.02)


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

    directory = Path(directory)
    _discard_incomplete(directory)
    payload = {
        "info": info,
        "metrics": {k: [str(np.asarray(v).dtype), np.asarray(v).tolist()] for k, v in metrics.items()},
    }
    if devices > 1:
        payload["devices"] = devices
    saved = unwrap_keys(state)
    if devices > 1:
        saved = hosts.to_host(saved)
    saved = without_empty(saved)
    _check_space(directory, saved, payload)
    try:
        with _quiet(), _manager(directory) as manager:
            manager.save(
                iteration,
                args=ocp.args.Composite(state=ocp.args.StandardSave(saved), meta=ocp.args.JsonSave(payload)),
            )
            manager.wait_until_finished()
        write_checksums(directory / str(iteration))
    except BaseException:
        _remove_unfinished(directory, iteration)
        raise


def _without_fields(state, names: tuple[str, ...]):
    """`state` (a dataclass, e.g. a TrainState, or a dict of them, e.g. a population's {"states": ...}) with its
    fields `names` set to None, where it has them."""
    if names and isinstance(state, dict):
        kept = {key: _without_fields(value, names) for key, value in state.items()}
        return state if all(kept[key] is value for key, value in state.items()) else kept
    if not names or not dataclasses.is_dataclass(state):
        return state
    present = {field.name for field in dataclasses.fields(state)}
    return state.replace(**{name: None for name in names if name in present})


def _kept_fields(state, names: tuple[str, ...]):
    """`state` (as `_without_fields` takes it) with each state's fields but `names` as a dict: the part of the
    saved tree to read, with the left-out fields absent rather than None, which orbax would match against the
    saved fields' own structure."""
    if isinstance(state, dict):
        return {key: _kept_fields(value, names) for key, value in state.items()}
    if not dataclasses.is_dataclass(state):
        return state
    return {field.name: getattr(state, field.name) for field in dataclasses.fields(state) if field.name not in names}


def _as_states(restored, like):
    """The inverse of `_kept_fields`: the dicts of fields read back into the states of `like` (the left-out fields
    None, as `like` holds them)."""
    if isinstance(like, dict):
        return {key: _as_states(restored[key], value) for key, value in like.items()}
    if not dataclasses.is_dataclass(like):
        return restored
    return like.replace(**restored)


def _partial_reading(abstract):
    """orbax's arguments that read only the leaves of `abstract` from a checkpoint that holds more, onto this
    process's first device; None where this orbax cannot read part of a tree."""
    import orbax.checkpoint as ocp

    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    args = jax.tree.map(lambda x: ocp.ArrayRestoreArgs(sharding=device, global_shape=x.shape, dtype=x.dtype), abstract)
    try:
        return ocp.args.PyTreeRestore(item=abstract, restore_args=args, partial_restore=True)
    except TypeError:  # an orbax before partial restores
        return None


def restore(
    directory: str | Path,
    like_state,
    info: dict[str, Any],
    devices: int = 1,
    like_for=None,
    leave_out: tuple[str, ...] = (),
) -> tuple[int, Any, dict[str, np.ndarray]]:
    """Restores the latest checkpoint into the structure of `like_state` (a state or its `jax.eval_shape`).

    Raises CheckpointError when there is none, when it cannot be read, when its `info` differs from `info`, or
    when its state lacks arrays that `like_state` has (a layout of another jaxrl version), naming one. An
    optimiser state saved per parameter array is read into the run's raveled vector (`checkpoint_layout`).
    A checkpoint of a data-parallel run on another device count than `devices` is read in its own layout,
    `like_for(saved_devices)` (the abstract state on that count), and laid out for `devices`
    (`parallel.relayout`); without `like_for` it is refused. `leave_out`: fields of the state that are not
    read (None in the restored state; in a dict of states, such as a population's, in each), e.g. the replay
    buffer (`buffer`) that evaluating a policy does not need; every file is verified all the same.
    """
    import orbax.checkpoint as ocp

    directory = Path(directory)
    iteration = latest_iteration(directory)
    if iteration is None:
        raise CheckpointError(f"no checkpoint in {directory}")
    step_dir = directory / str(iteration)
    verified = (step_dir / CHECKSUMS).exists()
    passed_over = [s for s in _steps(directory) if s > iteration]
    if verified:
        verify(step_dir)
    kept = _without_fields(like_state, leave_out)
    abstract = jax.eval_shape(unwrap_keys, like_state)
    kept_abstract = abstract if kept is like_state else jax.eval_shape(unwrap_keys, kept)
    try:
        with _quiet(), _manager(directory) as manager:
            meta = manager.restore(iteration, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
            changed = differences(meta["info"], info)
            if changed:
                raise CheckpointError(f"checkpoint {step_dir} was written by a different run: {changed}")
            subtrees = _raveled_subtrees(step_dir, without_empty(kept_abstract))
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
            reading = None
            if kept is not like_state and saved_devices == devices and not subtrees:  # read the kept fields alone
                reading = _partial_reading(_kept_fields(without_empty(kept_abstract), leave_out))
            partial = reading is not None
            if partial:
                abstract = kept_abstract
            else:
                reading = ocp.args.StandardRestore(layout.expanded(without_empty(abstract), subtrees))
            restored = manager.restore(iteration, args=ocp.args.Composite(state=reading))["state"]
            if partial:
                restored = _as_states(restored, kept_abstract)
            if subtrees:
                restored = _raveled(restored, without_empty(abstract), subtrees, step_dir)
            restored = with_empty(restored, abstract)
            if saved_devices != devices:
                restored = _relayout(restored, saved_devices, target, devices, step_dir)
            restored = _without_fields(restored, leave_out)
    except CheckpointError:
        raise
    except Exception as error:  # orbax raises many types for truncated or corrupt files
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        first_line = first_line[:200] + (" ..." if len(first_line) > 200 else "")
        hint = "" if verified else f"; it has no {CHECKSUMS} to tell which file is damaged"
        raise CheckpointError(
            f"checkpoint {step_dir} cannot be restored: {first_line}{hint}; delete that checkpoint folder to "
            "restore the one before it, if any."
        ) from error
    state = rewrap_keys(restored, kept)
    metrics = {k: np.asarray(values, dtype) for k, (dtype, values) in meta["metrics"].items()}
    if passed_over:
        note(
            f"checkpoint {directory / str(passed_over[-1])} has no {CHECKSUMS} (a save cut short, or the file was "
            f"deleted): restored checkpoint {iteration}, the latest verified one."
        )
    elif not verified:
        note(f"checkpoint {step_dir} has no {CHECKSUMS}, nor has any other: restored it unverified.")
    return iteration, state, metrics


def _raveled_subtrees(step_dir: Path, wanted) -> dict[str, Any]:
    """`checkpoint_layout.raveled_subtrees` of the state saved in `step_dir`, its refusal a CheckpointError."""
    try:
        return layout.raveled_subtrees(layout.saved_tree(step_dir), wanted, step_dir)
    except layout.LayoutError as error:
        raise CheckpointError(str(error)) from None


def _raveled(restored, abstract, subtrees: dict[str, Any], step_dir: Path):
    try:
        restored = layout.ravel(restored, abstract, subtrees, step_dir)
    except layout.LayoutError as error:
        raise CheckpointError(str(error)) from None
    note(
        f"checkpoint {step_dir} holds the optimiser's state per parameter array (an earlier jaxrl's layout): "
        "read into this jaxrl's one raveled vector, the same numbers."
    )
    return restored


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
