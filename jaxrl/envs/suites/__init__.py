"""Environment suites beyond gymnax, each an optional extra adapted to jaxrl's VecEnv contract.

An id `suite:Name` names environment `Name` of `suite` (`navix:Navix-Empty-5x5-v0`, `craftax:Craftax-Symbolic-v1`,
`xminigrid:MiniGrid-Empty-6x6`, `jumanji:Snake-v1`, `brax:inverted_pendulum`, `playground:CartpoleBalance`).
`jaxrl.envs.make` dispatches such ids here; the adapter of each suite lives in `jaxrl.envs.suites.<suite>` and exposes
`ids()` (the names it knows) and `make(name, num_envs, **kwargs)` (a VecEnv-contract object). A suite's package is
imported only when one of its ids is used, so a missing extra costs nothing until then and is one line naming
the install command. The adapters import only `jaxrl.envs.spec`, `jaxrl.envs.wrappers` and `jaxrl.envs.suites.base`;
this table finds them by name (`importlib`), so nothing here imports an adapter or the registry.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Suite:
    package: str  # the suite's import name; its absence means the extra is not installed
    example: str  # an id of the suite, for messages and docs


SUITES: dict[str, Suite] = {
    "navix": Suite("navix", "navix:Navix-Empty-5x5-v0"),
    "craftax": Suite("craftax", "craftax:Craftax-Classic-Symbolic-v1"),
    "xminigrid": Suite("xminigrid", "xminigrid:MiniGrid-Empty-6x6"),
    "jumanji": Suite("jumanji", "jumanji:Snake-v1"),
    "brax": Suite("brax", "brax:inverted_pendulum"),
    "playground": Suite("mujoco_playground", "playground:CartpoleBalance"),
}


class MissingExtraError(ImportError, ValueError):
    """A suite's package is not installed; the message names `pip install "jaxrl[<suite>]"`."""


def split_id(env_id: str) -> tuple[str, str]:
    """`"suite:Name"` -> ("suite", "Name"); a ValueError naming the known prefixes for an unknown suite."""
    prefix, _, name = env_id.partition(":")
    if prefix not in SUITES:
        known = ", ".join(f"{p}:" for p in SUITES)
        raise ValueError(
            f"env={env_id!r}: unknown suite prefix {prefix!r} (known: {known}); a plain id is a gymnax environment, "
            "and ids of your own are added with jaxrl.envs.register."
        )
    return prefix, name


def adapter(prefix: str):
    """The adapter module `jaxrl.envs.suites.<prefix>`, after checking that the suite's package is installed."""
    suite = SUITES[prefix]
    try:
        importlib.import_module(suite.package)
    except ImportError as error:
        raise MissingExtraError(
            f'{prefix} environments need the {prefix} extra: pip install "jaxrl[{prefix}]" ({error})'
        ) from error
    return importlib.import_module(f"jaxrl.envs.suites.{prefix}")


def check_id(env_id: str) -> None:
    """Raises a ValueError (an unknown prefix or name, with close matches) or a MissingExtraError."""
    prefix, name = split_id(env_id)
    known = adapter(prefix).ids()
    if name in known:
        return
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.4)
    hint = f" Did you mean {', '.join(repr(f'{prefix}:{c}') for c in close)}?" if close else ""
    raise ValueError(f"env={env_id!r} is not a {prefix} environment.{hint} Known: {', '.join(known)}.")


def make(env_id: str, num_envs: int, **kwargs):
    """The VecEnv-contract adapter of `env_id` (`suite:Name`) with `num_envs` environments."""
    prefix, name = split_id(env_id)
    return adapter(prefix).make(name, num_envs, **kwargs)
