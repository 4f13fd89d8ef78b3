"""Tuned Configs per (algorithm, environment): the configs found to work where an algorithm's defaults (tuned for
its default environment) do not. They are data, one TOML file per algorithm (`jaxrl/presets/<algo>.toml`, shipped
with the package), shared by the CLI (`jaxrl train ALGO --env ENV --preset`), the scorecard
(`benchmarks/scorecard.py`) and user code, and readable without importing jaxrl.

A file holds one table per environment: its keys are the Config fields that differ from the algorithm's defaults
(arrays become tuples, integers stay integers, floats floats; an integer given for a float field becomes a float),
and its `result` sub-table is the measured results row behind it (the results file, seeds, budget, training and
evaluation returns):

    [Pendulum-v1]
    normalize_observations = true
    learning_rate = 1e-3

    [Pendulum-v1.result]
    file = "benchmarks/results/scorecard.md"
    seeds = 8
    training_return = -158.7

`get("ppo", "Pendulum-v1")` is `ppo.Config(env="Pendulum-v1", **overrides("ppo", "Pendulum-v1"))`; keyword
arguments override single fields on top (`get("ppo", "Pendulum-v1", total_timesteps=2_000_000)`). A pair without
a preset gives the algorithm's defaults on that env. `result(algo, env)` is the measured row. A file that is not
valid TOML, names no registered algorithm, or holds an unknown field or a value of the wrong type raises a
one-line ValueError naming the file and the field.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from jaxrl import catalog

DIRECTORY = Path(__file__).parent
RESULT = "result"  # the sub-table of an environment's table that holds its measured results row
# the keys a result may hold, and their types
RESULT_KEYS: dict[str, type | tuple[type, ...]] = {
    "file": str,  # the results file it comes from (a path in the repository)
    "test": str,  # the test that measures it, where that is where it is recorded
    "seeds": int,
    "budget": int,  # env steps per seed asked for
    "env_steps": int,  # env steps per seed run (whole iterations)
    "training_return": (int, float),
    "training_ci": list,
    "evaluation_return": (int, float),
    "evaluation_ci": list,
    "evaluation_per_seed": list,
    "evaluation_episodes": int,
    "note": str,
}


@dataclasses.dataclass(frozen=True)
class Preset:
    algo: str
    env: str
    fields: dict[str, Any]  # Config field -> value, typed as the Config's defaults
    result: dict[str, Any] | None  # the measured results row (None where none is recorded)
    path: Path  # the file it comes from


def _fail(path: Path, where: str, message: str) -> ValueError:
    return ValueError(f"{path}: {where}: {message}")


def _field_value(path: Path, env: str, name: str, default: Any, value: Any) -> Any:
    """`value` as the type of the field's default: an array becomes a tuple, an integer for a float a float."""
    where = f"[{env}] {name}"
    if isinstance(default, tuple):
        if not isinstance(value, list):
            raise _fail(path, where, f"got {value!r}, must be an array like the default {list(default)!r}.")
        return tuple(value)
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif isinstance(default, float):
        if isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        ok = isinstance(value, float)
    elif isinstance(default, str):
        ok = isinstance(value, str)
    else:  # no default, or None: as written
        ok = True
    if not ok:
        got, kind = type(value).__name__, _kind_name(type(default))
        shown = str(default).lower() if isinstance(default, bool) else repr(default)  # as TOML writes it
        raise _fail(path, where, f"got {value!r} ({got}), must be {kind} like the default {shown}.")
    return value


def _result(path: Path, env: str, table: Any) -> dict[str, Any]:
    if not isinstance(table, dict):
        raise _fail(path, f"[{env}] {RESULT}", f"must be a table ([{env}.{RESULT}]), got {table!r}.")
    for key, value in table.items():
        where = f"[{env}.{RESULT}] {key}"
        if key not in RESULT_KEYS:
            raise _fail(path, where, f"unknown key; one of {', '.join(RESULT_KEYS)}.")
        kind = RESULT_KEYS[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            raise _fail(path, where, f"got {value!r} ({type(value).__name__}), must be {_kind_name(kind)}.")
    return dict(table)


def _kind_name(kind) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {bool: "true or false", str: "a string", int: "an integer", float: "a number", list: "an array"}
    return " or ".join(dict.fromkeys(names[k] for k in kinds))


def load_file(path: Path) -> list[Preset]:
    """The presets of one file, `<algo>.toml`, checked against the defaults of `algo`'s Config, which the catalog
    records (`jaxrl.catalog.defaults`): reading presets imports no JAX."""
    path = Path(path)
    algo = path.stem
    if algo not in catalog.CATALOG:
        names = ", ".join(catalog.CATALOG)
        raise _fail(path, "file name", f"{algo!r} is not an algorithm; name the file <algo>.toml, one of {names}.")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise _fail(path, "not valid TOML", str(error).splitlines()[0]) from None
    fields = catalog.defaults(algo)
    presets = []
    for env, table in data.items():
        if not isinstance(table, dict):
            raise _fail(path, env, f"must be an environment's table ([{env}]), got {table!r}.")
        values, result = {}, None
        for name, value in table.items():
            if name == RESULT:
                result = _result(path, env, value)
            elif name == "env":
                raise _fail(path, f"[{env}] env", "the environment is the table's name; remove the field.")
            elif name not in fields:
                close = difflib.get_close_matches(name, fields, n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise _fail(path, f"[{env}] {name}", f"not a field of {algo}.Config{hint}.")
            else:
                values[name] = _field_value(path, env, name, fields[name], value)
        presets.append(Preset(algo, env, values, result, path))
    return presets


def load(directory: Path = DIRECTORY) -> dict[tuple[str, str], Preset]:
    """Every preset of the `*.toml` files in `directory` (default: the package's), by (algo, env)."""
    out: dict[tuple[str, str], Preset] = {}
    for path in sorted(Path(directory).glob("*.toml")):
        for preset in load_file(path):
            out[preset.algo, preset.env] = preset
    return out


@functools.cache
def _package() -> dict[tuple[str, str], Preset]:
    return load()


def __getattr__(name: str):
    if name == "PRESETS":  # (algo, env) -> the preset's field values, as the package's files give them
        return _presets()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.cache
def _presets() -> dict[tuple[str, str], dict[str, Any]]:
    return {key: dict(preset.fields) for key, preset in _package().items()}


def overrides(algo: str, env: str) -> dict[str, Any]:
    """The preset's field values for (algo, env); {} where there is none."""
    return dict(_presets().get((algo, env), {}))


def result(algo: str, env: str) -> dict[str, Any] | None:
    """The measured results row behind the preset for (algo, env); None where there is no preset or no row."""
    preset = _package().get((algo, env))
    return None if preset is None or preset.result is None else dict(preset.result)


def get(algo: str, env: str, **changes):
    """`ALGORITHMS[algo].Config` on `env` with the preset for (algo, env) applied, then `changes`."""
    from jaxrl.algos import ALGORITHMS

    if algo not in ALGORITHMS:
        raise ValueError(f"algo={algo!r} is not one of {', '.join(ALGORITHMS)}.")
    return ALGORITHMS[algo].Config(env=env, **{**overrides(algo, env), **changes})


def available() -> list[tuple[str, str]]:
    """Every (algorithm, env) pair with a preset."""
    return sorted(_presets())
