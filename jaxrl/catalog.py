"""What the command line needs to know of each algorithm without importing it (and JAX with it): the first line
of its module docstring and, per Config field, the flag's kind, the default as shown and the help. `jaxrl train
ppo --help`, a mistyped algorithm or a bad flag value answer from here at once; the algorithms are imported only
to train. The description is data, `catalog.json` beside this file; `python -m jaxrl.catalog` regenerates it from
the algorithms, and a test checks that it still matches them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

PATH = Path(__file__).with_name("catalog.json")


def kind_of(default) -> str:
    """The flag kind of a Config field from its default: bool, int, float, tuple or str."""
    for kind in (bool, int, float, tuple):
        if isinstance(default, kind):
            return kind.__name__
    return "str"


def build() -> dict[str, dict]:
    """{algorithm: {"doc": first docstring line, "fields": [[name, kind, default as text, help], ...]}} of every
    registered algorithm, read from the modules themselves (imports them, and JAX)."""
    import dataclasses

    from jaxrl.algos import ALGORITHMS

    return {
        name: {
            "doc": (module.__doc__ or "").strip().splitlines()[0],
            "fields": [
                [f.name, kind_of(f.default), str(f.default), f.metadata.get("help", "")]
                for f in dataclasses.fields(module.Config)
            ],
        }
        for name, module in ALGORITHMS.items()
    }


def write(path: Path = PATH) -> None:
    """Writes `build()` to `path` as JSON."""
    path.write_text(json.dumps(build(), indent=1, ensure_ascii=False) + "\n")


CATALOG: dict[str, dict] = json.loads(PATH.read_text())

if __name__ == "__main__":
    write(Path(sys.argv[1]) if len(sys.argv) > 1 else PATH)
