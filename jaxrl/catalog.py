"""What the command line needs to know of each algorithm without importing it (and JAX with it): what it is, in a
phrase from its module docstring; per Config field, the flag's kind, the default as shown and the help; and the fields
a sweep can vary. `jaxrl train ppo --help`, a mistyped algorithm or a bad flag value answer from here at once; the
algorithms are imported only to train. The description is data, `catalog.json` beside this file; `python -m
jaxrl.catalog` regenerates it from the algorithms, and a test checks that it still matches them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

PATH = Path(__file__).with_name("catalog.json")


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


def write(path: Path = PATH) -> None:
    """Writes `build()` to `path` as JSON."""
    path.write_text(json.dumps(build(), indent=1, ensure_ascii=False) + "\n")


CATALOG: dict[str, dict] = json.loads(PATH.read_text())

if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else PATH)
