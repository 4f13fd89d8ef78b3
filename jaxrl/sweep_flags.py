"""The text of `jaxrl sweep`'s flags read into values, without JAX: `--grid NAME=V1,V2` (a grid's values) and
`--random N` with `--dist NAME=KIND:LOW:HIGH` or `--dist NAME=V1,V2` (the distributions of random points), each
value by its field's flag kind (`jaxrl.catalog.kind_of`). `jaxrl sweep` reads its flags here before JAX starts, with
the kinds the catalog lists, and `jaxrl.sweep.space.from_flags` reads them again with a Config's own fields."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence

DIST_KINDS = {
    "uniform": "uniform",
    "loguniform": "log_uniform",
    "log_uniform": "log_uniform",
    "int": "int_uniform",
    "int_uniform": "int_uniform",
}


def _integer(text: str) -> int:
    """500000, 5e5 or 500_000 as an int; ValueError for anything else."""
    try:
        value = float(text.replace("_", ""))
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value != int(value):
        raise ValueError(f"{text} is not an integer")
    return int(value)


def check_name(name: str, fields: Collection[str], sweepable: Sequence[str], owner: str) -> None:
    """`name` is a field of `owner` (e.g. "jaxrl.algos.ppo.Config", whose fields are `fields`) that a sweep can
    vary: one of `sweepable`, its traced hyperparameters. ValueError naming the field otherwise."""
    if name not in fields:
        raise ValueError(
            f"Config.{name}: unknown field, {owner} has no field {name!r}; sweepable fields: {', '.join(sweepable)}."
        )
    if name not in sweepable:
        raise ValueError(
            f"Config.{name}: a static field (it fixes shapes or control flow and is compiled into the program), "
            f"so it cannot vary inside one compiled sweep; sweepable fields: {', '.join(sweepable)}. "
            f"Run one sweep per value of {name} instead."
        )


def value_of(kind: str, name: str, text: str):
    """`text` as a value of the field `name` of flag kind `kind` (`jaxrl.catalog.kind_of`): int fields accept 5e5
    or 500_000, bool fields true/false; ValueError naming the field otherwise."""
    if kind == "bool":
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"Config.{name}: {text!r} is not true or false.")
        return text.lower() in ("true", "1")
    if kind == "int":
        return _integer(text)
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"Config.{name}: {text!r} is not a number.") from None


def _split_assignment(text: str, flag: str) -> tuple[str, str]:
    name, sep, values = text.partition("=")
    if not sep or not name or not values:
        raise ValueError(f"{flag} {text!r}: expected NAME=VALUES, e.g. {flag} learning_rate=1e-3,3e-3.")
    return name.strip().replace("-", "_"), values.strip()


def read(
    kinds: Mapping[str, str],
    sweepable: Sequence[str],
    owner: str,
    grid_specs: Sequence[str] | None = None,
    random_points: int | None = None,
    dist_specs: Sequence[str] | None = None,
) -> tuple[dict[str, list], dict[str, tuple | list] | None]:
    """(grid values {name: [v, ...]}, None) from `grid_specs` ["NAME=V1,V2", ...]; or, with `random_points`, ({},
    distributions {name: (KIND, low, high) or [v, ...]}) from `dist_specs` ["NAME=KIND:LOW:HIGH" (KIND a key of
    `DIST_KINDS`) or "NAME=V1,V2,...", ...]. `kinds` gives each field of `owner` its flag kind, `sweepable` the
    fields a sweep can vary (`check_name`). ValueError naming the flag otherwise."""
    if random_points is not None:
        if grid_specs:
            raise ValueError("use either --grid or --random with --dist, not both.")
        if not dist_specs:
            raise ValueError("--random N needs at least one --dist NAME=KIND:LOW:HIGH (or NAME=V1,V2,...).")
        dists = {}
        for text in dist_specs:
            name, spec = _split_assignment(text, "--dist")
            check_name(name, kinds, sweepable, owner)
            kind, _, bounds = spec.partition(":")
            if kind.lower() in DIST_KINDS:
                low, sep, high = bounds.partition(":")
                if not sep:
                    raise ValueError(f"--dist {text!r}: expected {name}={kind}:LOW:HIGH.")
                dists[name] = (
                    DIST_KINDS[kind.lower()],
                    value_of(kinds[name], name, low),
                    value_of(kinds[name], name, high),
                )
            elif ":" in spec:
                known = ", ".join(sorted(DIST_KINDS))
                raise ValueError(f"--dist {text!r}: unknown distribution {kind!r}; use one of {known}, or V1,V2,...")
            else:
                dists[name] = [value_of(kinds[name], name, v) for v in spec.split(",") if v]
        return {}, dists
    if dist_specs:
        raise ValueError("--dist needs --random N (the number of points to draw).")
    values = {}
    for text in grid_specs or []:
        name, spec = _split_assignment(text, "--grid")
        check_name(name, kinds, sweepable, owner)
        values[name] = [value_of(kinds[name], name, v) for v in spec.split(",") if v]
    return values, None
