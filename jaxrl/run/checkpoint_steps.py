"""The finished steps of a checkpoint folder, read from its layout without JAX or orbax (the run folder's checks
before JAX starts use them): orbax's step folders, named by iteration, each verified by its `CHECKSUMS` file."""

from __future__ import annotations

from pathlib import Path

CHECKSUMS = "checksums.json"


def steps(directory: Path) -> list[int]:
    """The finished checkpoints (orbax's step folders), oldest first."""
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.is_dir() and p.name.isdigit())


def latest_iteration(directory: str | Path) -> int | None:
    """The latest complete checkpoint: the newest step folder with its checksums (a kill between orbax's
    finalisation and the checksums leaves an unverifiable step, skipped). A folder written before checksums
    existed (no step has them) gives its latest step, restored unverified."""
    found = steps(Path(directory))
    verified = [s for s in found if (Path(directory) / str(s) / CHECKSUMS).exists()]
    if verified:
        return verified[-1]
    return found[-1] if found else None
