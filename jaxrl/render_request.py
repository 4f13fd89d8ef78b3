"""What `jaxrl render` is asked for, checked without JAX: the animation's file type and the seed that plays.
`jaxrl.render.render_run` refuses with these; `jaxrl render` refuses with them before JAX starts, from the run's
config.json."""

from __future__ import annotations

from pathlib import Path

ANIMATIONS = (".gif", ".mp4")


def check_out(out: str | Path) -> None:
    """Refuses an animation file that is neither a .gif nor an .mp4."""
    if Path(out).suffix.lower() not in ANIMATIONS:
        raise ValueError(f"--out {out}: write a .gif or an .mp4.")


def check_seed_index(seed_index: int, seeds: int) -> None:
    """Refuses a seed the run does not have (0 to `seeds` - 1)."""
    if not 0 <= seed_index < seeds:
        raise ValueError(f"--seed-index {seed_index}: the run has seeds 0 to {seeds - 1}.")
