"""The sweep space: a `Sweep` is a list of hyperparameter points over a base Config, made by `grid`, `random` or
`from_points` (or from the text of `jaxrl sweep`'s flags, `from_flags`). Only pytree-leaf fields of a Config
(numeric hyperparameters) may vary, so every point shares one compiled program; `Sweep.configs` holds the points
stacked, every leaf a [C] array."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl import sweep_flags
from jaxrl.algos.base import is_static
from jaxrl.catalog import kind_of


@dataclasses.dataclass(frozen=True)
class Sweep:
    """A list of hyperparameter points over a base config.

    base: the config every point starts from; points: one {field: value} dict per config (the varied fields
    only, plain Python numbers); configs: the C point configs stacked, every leaf a [C] array.
    """

    base: Any
    points: list[dict[str, Any]]
    configs: Any

    def __len__(self) -> int:
        return len(self.points)

    @property
    def names(self) -> list[str]:
        """The varied fields, in the order they were given."""
        return list(self.points[0]) if self.points else []

    def config(self, i: int):
        """The i-th point as an ordinary (unstacked) Config with Python-number hyperparameters."""
        return self.base.replace(**self.points[i])


def _fields(config) -> dict[str, dataclasses.Field]:
    if not dataclasses.is_dataclass(config) or isinstance(config, type):
        raise TypeError(f"expected a Config instance (a flax.struct dataclass), got {type(config).__name__}")
    return {f.name: f for f in dataclasses.fields(config)}


def _names(config) -> tuple[dict[str, dataclasses.Field], list[str], str]:
    """(its fields, the sweepable ones: its traced hyperparameters, its class's full name) of a Config."""
    fields = _fields(config)
    return (
        fields,
        [n for n, f in fields.items() if not is_static(f)],
        f"{type(config).__module__}.{type(config).__name__}",
    )


def _check_names(config, names) -> None:
    fields, sweepable, owner = _names(config)
    for name in names:
        sweep_flags.check_name(name, fields, sweepable, owner)


def leaf_dtype(default):
    """The dtype of a hyperparameter's [C] leaf: bool, int32 for integers, float32 otherwise."""
    if isinstance(default, (bool, np.bool_)):
        return jnp.bool_
    if isinstance(default, (int, np.integer)):
        return jnp.int32
    return jnp.float32


def _stack(base, points: list[dict[str, Any]]):
    """The configs of `points` stacked: every pytree leaf a [C] array (float32 for float hyperparameters)."""
    fields = _fields(base)
    leaves = {}
    for name, field in fields.items():
        if is_static(field):
            continue
        default = getattr(base, name)
        dtype = leaf_dtype(default)
        leaves[name] = jnp.asarray(np.array([p.get(name, default) for p in points]), dtype)
    return base.replace(**leaves)


def from_points(config, points: Sequence[Mapping[str, Any]]) -> Sweep:
    """A sweep over an explicit list of points, e.g. `[{"learning_rate": 1e-3}, {"learning_rate": 3e-4}]`.
    Every point must set the same fields."""
    points = [dict(p) for p in points]
    if not points:
        raise ValueError("a sweep needs at least one point.")
    names = list(points[0])
    for p in points:
        if set(p) != set(names):
            raise ValueError(f"every point must set the same fields: {sorted(p)} != {sorted(names)}.")
    _check_names(config, names)
    points = [{n: _plain(p[n]) for n in names} for p in points]
    return Sweep(config, points, _stack(config, points))


def _plain(value):
    """A Python number (floats stay floats, so that `config.replace(**point)` validates on the host)."""
    if isinstance(value, (np.ndarray, jax.Array)) and np.ndim(value) == 0:
        value = value.item()
    if isinstance(value, np.generic):
        value = value.item()
    if not isinstance(value, (int, float, bool)):
        raise ValueError(f"sweep values must be numbers, got {value!r} ({type(value).__name__}).")
    return value


def grid(config, **values: Sequence[Any]) -> Sweep:
    """The cartesian product of the given values, the first field varying slowest:
    `grid(cfg, learning_rate=[1e-4, 3e-4], clip_eps=[0.1, 0.2])` is 4 configs."""
    _check_names(config, values)
    for name, vals in values.items():
        if isinstance(vals, (str, bytes)) or not isinstance(vals, Sequence | np.ndarray) or len(vals) == 0:
            raise ValueError(f"Config.{name}: grid() needs a non-empty list of values, got {vals!r}.")
    names = list(values)
    points = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values.values())]
    return from_points(config, points)


DISTRIBUTIONS = ("uniform", "log_uniform", "int_uniform")


def random(config, num: int, seed: int = 0, **distributions) -> Sweep:
    """`num` points drawn independently (NumPy, reproducible from `seed`). Each distribution is
    `("uniform", low, high)`, `("log_uniform", low, high)` (uniform in log space, low > 0),
    `("int_uniform", low, high)` (integers, both ends included) or a list of values to choose from uniformly.
    Fields are drawn in the order given; one field's draws do not depend on the others' distributions."""
    _check_names(config, distributions)
    if num < 1:
        raise ValueError(f"random(): num={num}, need at least one point.")
    columns = {}
    for i, (name, dist) in enumerate(distributions.items()):
        # one stream per field: changing one field's distribution leaves the others' draws unchanged
        rng = np.random.default_rng([seed, i])
        if isinstance(dist, tuple) and len(dist) == 3 and isinstance(dist[0], str):
            kind, low, high = dist
            if kind not in DISTRIBUTIONS:
                known = ", ".join(DISTRIBUTIONS)
                raise ValueError(f"Config.{name}: unknown distribution {kind!r}; use one of {known}.")
            if not low <= high:
                raise ValueError(f"Config.{name}: ({kind!r}, {low}, {high}) needs low <= high.")
            if kind == "uniform":
                draws = rng.uniform(low, high, num)
            elif kind == "log_uniform":
                if low <= 0:
                    raise ValueError(f"Config.{name}: log_uniform needs low > 0, got {low}.")
                draws = np.exp(rng.uniform(np.log(low), np.log(high), num))
            else:
                draws = rng.integers(low, high, num, endpoint=True)
        elif isinstance(dist, Sequence | np.ndarray) and not isinstance(dist, (str, bytes)) and len(dist) > 0:
            draws = [dist[j] for j in rng.integers(0, len(dist), num)]
        else:
            raise ValueError(
                f"Config.{name}: expected ('uniform'|'log_uniform'|'int_uniform', low, high) or a non-empty list "
                f"of values, got {dist!r}."
            )
        columns[name] = [_plain(x) for x in draws]
    points = [{n: columns[n][j] for n in columns} for j in range(num)]
    return from_points(config, points)


def from_flags(base, grid_specs=None, random_points=None, dist_specs=None, random_seed: int = 0) -> Sweep:
    """The Sweep over `base` that the flags of `jaxrl sweep` give (`jaxrl.sweep_flags.read`): `grid_specs`
    ["NAME=V1,V2", ...] (their cartesian product), or `random_points` N with `dist_specs` ["NAME=KIND:LOW:HIGH" or
    "NAME=V1,V2,...", ...] drawn with `random_seed`; none of them: the base config alone. ValueError naming the flag
    otherwise."""
    fields, sweepable, owner = _names(base)
    kinds = {name: kind_of(f.default, f.metadata.get("takes_inf", False)) for name, f in fields.items()}
    values, dists = sweep_flags.read(kinds, sweepable, owner, grid_specs, random_points, dist_specs)
    if dists is not None:
        return random(base, random_points, seed=random_seed, **dists)
    return grid(base, **values) if values else from_points(base, [{}])
