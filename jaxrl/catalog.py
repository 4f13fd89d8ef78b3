"""What the command line needs to know of each algorithm without importing it (and JAX with it): what it is, in a
phrase from its module docstring; per Config field, the flag's kind, the default as shown and the help; and the fields
a sweep can vary. Also the environment ids a plain `--env` may name: gymnax's (for the gymnax version they were read
from) and jaxrl's own. `jaxrl train ppo --help`, a mistyped algorithm, a bad flag value or an unknown env id answer
from here at once; the algorithms are imported only to train. The description is data, `catalog.json` and
`env_ids.json` beside this file; `python -m jaxrl.catalog` regenerates both from the algorithms and the environments,
and a test checks that they still match them."""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path

PATH = Path(__file__).with_name("catalog.json")
ENV_IDS_PATH = Path(__file__).with_name("env_ids.json")


def kind_of(default, takes_inf: bool = False) -> str:
    """The flag kind of a Config field from its default: bool, int, float, tuple or str; float_or_inf for a
    field whose inf means no limit (its `takes_inf` metadata)."""
    if takes_inf:
        return "float_or_inf"
    for kind in (bool, int, float, tuple):
        if isinstance(default, kind):
            return kind.__name__
    return "str"


def summary(docstring: str | None) -> str:
    """What an algorithm is, in a phrase: its docstring's first paragraph, joined, up to the first " (" (the
    citation and the details stay in the docstring and the docs)."""
    paragraph = " ".join((docstring or "").strip().split("\n\n")[0].split())
    return paragraph.split(" (")[0].rstrip(".:,")


def build() -> dict[str, dict]:
    """{algorithm: {"doc": `summary` of its docstring, "fields": [[name, kind, default as text, help], ...],
    "sweepable": [the traced fields, which a sweep can vary]}} of every registered algorithm, read from the modules
    themselves (imports them, and JAX)."""
    import dataclasses

    from jaxrl.algos import ALGORITHMS
    from jaxrl.algos.base import is_static

    return {
        name: {
            "doc": summary(module.__doc__),
            "fields": [
                [
                    f.name,
                    kind_of(f.default, f.metadata.get("takes_inf", False)),
                    str(f.default),
                    f.metadata.get("help", ""),
                ]
                for f in dataclasses.fields(module.Config)
            ],
            "sweepable": [f.name for f in dataclasses.fields(module.Config) if not is_static(f)],
        }
        for name, module in ALGORITHMS.items()
    }


def gymnax_version() -> str | None:
    """The installed gymnax's version, read from its metadata (gymnax is not imported); None when not installed."""
    return installed_version("gymnax")


def build_env_ids(facts_of: list[str] | None = None) -> dict:
    """{"gymnax_version": the installed gymnax's, "gymnax": its environment ids, "own": the ids jaxrl registers
    itself (`jaxrl.envs.registered_ids` in a fresh process: the memory tasks), "facts": {id: [observation shape,
    discrete actions, time limit or null]} of each of them that can be made here (`jaxrl.algos.base.env_facts`), or
    of `facts_of` when given, "suites": {prefix: the package a `prefix:Name` id needs} (`jaxrl.envs.suites`),
    "suite_ids": {prefix: {"distribution", "version", "ids", "facts"}} of each suite installed here: its
    distribution's name and version, the names its adapter knows, and {name: facts} of each name that can be made
    here (of those `facts_of` names as `prefix:Name`, when given)}; imports gymnax, the installed suites, and JAX with
    them."""
    from jaxrl import envs
    from jaxrl.algos.base import env_facts
    from jaxrl.envs import gymnax, suites

    def facts_of_each(env_ids: list[str]) -> dict:
        facts = {}
        for env_id in env_ids:
            try:
                made = env_facts(env_id)
            except Exception:  # an env that cannot be made here (it needs a dataset or a download): its rules wait
                continue  # for validate
            facts[env_id] = [list(made.observation_shape), made.discrete, made.time_limit]
        return facts

    ids, own = list(gymnax.ids()), envs.registered_ids()
    facts = facts_of_each([*ids, *own] if facts_of is None else [i for i in facts_of if ":" not in i])
    packages = {prefix: suite.package for prefix, suite in suites.SUITES.items()}
    from importlib.metadata import packages_distributions

    distributions, suite_ids = packages_distributions(), {}
    for prefix, package in packages.items():
        try:
            names = list(suites.adapter(prefix).ids())
        except ImportError:  # not installed here: its names wait for its import
            continue
        distribution = distributions[package][0]
        wanted = names if facts_of is None else [i.partition(":")[2] for i in facts_of if i.startswith(f"{prefix}:")]
        suite_facts = facts_of_each([f"{prefix}:{name}" for name in wanted])
        suite_ids[prefix] = {
            "distribution": distribution,
            "version": installed_version(distribution),
            "ids": names,
            "facts": {env_id.partition(":")[2]: made for env_id, made in suite_facts.items()},
        }
    return {
        "gymnax_version": gymnax_version(),
        "gymnax": ids,
        "own": own,
        "facts": facts,
        "suites": packages,
        "suite_ids": suite_ids,
    }


def env_facts(env_id: str):
    """The `jaxrl.config_rules.EnvFacts` that `ENV_IDS` records for `env_id`, without importing gymnax, the suite or
    JAX; None for an id it cannot judge: one it has no facts of, a plain id when the installed gymnax is not the
    version the facts were read from, a suite's id when the installed suite is not."""
    from jaxrl.config_rules import EnvFacts

    prefix, _, name = env_id.partition(":") if ":" in env_id else ("", "", env_id)
    recorded = ENV_IDS["suite_ids"].get(prefix, {}).get("facts", {}) if prefix else ENV_IDS["facts"]
    facts = recorded.get(name)
    if facts is None or not recorded_version_installed(env_id):
        return None
    shape, discrete, limit = facts
    return EnvFacts(tuple(shape), discrete, limit)


def recorded_version_installed(env_id: str) -> bool:
    """Whether the package `env_id` comes from (gymnax for a plain id, the suite's distribution for `suite:Name`)
    is installed at the version `ENV_IDS` was read from, so that what it records of the id holds here."""
    prefix = env_id.partition(":")[0] if ":" in env_id else None
    if prefix is None:
        return gymnax_version() == ENV_IDS["gymnax_version"]
    recorded = ENV_IDS["suite_ids"].get(prefix)
    return recorded is not None and installed_version(recorded["distribution"]) == recorded["version"]


def check_env_id(env_id: str) -> None:
    """Refuses a plain env id that is neither one of gymnax's nor one of jaxrl's own, and a suite's id
    (`suite:Name`) of an unknown suite or of one whose package is not installed, in the words of
    `jaxrl.envs.check_env_id`, without importing gymnax, the suite or JAX. It passes what it cannot judge from
    `ENV_IDS`: a suite's names, and any plain id when the installed gymnax is not the version the ids were read
    from."""
    if ":" in env_id:
        check_suite(env_id)
        return
    if not recorded_version_installed(env_id):
        return
    registered, own = ENV_IDS["gymnax"], ENV_IDS["own"]
    if env_id in registered or env_id in own:
        return
    close = difflib.get_close_matches(env_id, [*registered, *own], n=3, cutoff=0.4)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(
        f"env={env_id!r} is not a registered gymnax environment.{hint} Known ids: {', '.join(registered)}. "
        "Other suites take a prefix (e.g. 'navix:Navix-Empty-5x5-v0'); your own: jaxrl.envs.register."
    )


def check_suite(env_id: str) -> None:
    """Refuses `suite:Name` when jaxrl knows no such suite, its package is not installed (found without importing
    it), or the suite has no such name (from the names `ENV_IDS` records, when the installed suite is the version
    they were read from), in the words of `jaxrl.envs.suites`, without importing the suite."""
    import importlib.util

    prefix, _, name = env_id.partition(":")
    packages = ENV_IDS["suites"]
    if prefix not in packages:
        known = ", ".join(f"{p}:" for p in packages)
        raise ValueError(
            f"env={env_id!r}: unknown suite prefix {prefix!r} (known: {known}); a plain id is a gymnax environment, "
            "and ids of your own are added with jaxrl.envs.register."
        )
    package = packages[prefix]
    if importlib.util.find_spec(package) is None:
        raise ValueError(
            f'{prefix} environments need the {prefix} extra: pip install "jaxrl[{prefix}]" (No module named '
            f"{package!r})"
        )
    if name in ENV_IDS["suite_ids"].get(prefix, {}).get("ids", ()) or not recorded_version_installed(env_id):
        return
    known = ENV_IDS["suite_ids"][prefix]["ids"]
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.4)
    hint = f" Did you mean {', '.join(repr(f'{prefix}:{c}') for c in close)}?" if close else ""
    raise ValueError(f"env={env_id!r} is not a {prefix} environment.{hint} Known: {', '.join(known)}.")


def installed_version(distribution: str) -> str | None:
    """The installed version of `distribution` (read from its metadata, nothing imported); None when absent."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return None


def defaults(algo: str) -> dict:
    """Each Config field of the catalogued algorithm `algo`, by name, to its default as a value (the type the
    Config's default has: a tuple for a tuple, inf for a float_or_inf field's inf), without importing it."""
    import ast

    from jaxrl.sweep_flags import value_of

    values = {}
    for name, kind, default, *_ in CATALOG[algo]["fields"]:
        if kind == "str":
            values[name] = default
        elif kind == "tuple":
            values[name] = ast.literal_eval(default)
        else:
            values[name] = value_of("float" if kind == "float_or_inf" else kind, name, default)
    return values


def write(path: Path = PATH, env_ids_path: Path = ENV_IDS_PATH) -> None:
    """Writes `build()` to `path` and `build_env_ids()` to `env_ids_path` as JSON."""
    path.write_text(json.dumps(build(), indent=1, ensure_ascii=False) + "\n")
    env_ids_path.write_text(json.dumps(build_env_ids(), indent=1, ensure_ascii=False) + "\n")


CATALOG: dict[str, dict] = json.loads(PATH.read_text())
ENV_IDS: dict = json.loads(ENV_IDS_PATH.read_text())

if __name__ == "__main__":
    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else PATH.parent
    write(folder / PATH.name, folder / ENV_IDS_PATH.name)
