"""The shape of the package: imports point down the layers, no cycle between modules or packages (imports inside
functions included), and no algorithm imports another.

Layers, top to bottom: cli -> (run, sweep, presets, plot) -> algos -> the library (networks, rollout, estimators,
losses, minibatch, shuffle, replay, lag, optim, parallel, types) -> envs. `jaxrl.envs` imports nothing of jaxrl
outside itself.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "jaxrl"

# unit -> layer (higher imports lower, never the reverse); a unit is a subpackage or a top-level module
LAYERS = {
    "cli": 4,
    "cli_flags": 4,  # each command's flags as data: imports no JAX
    "commands": 4,
    "run": 3,
    "sweep": 3,
    "presets": 3,
    "plot": 3,
    "report": 3,
    "render": 3,
    "render_request": 0,  # what jaxrl render is asked for: imports nothing, so it is checked before JAX starts
    "catalog": 3,  # describes the algorithms for the command line (imports them only to regenerate)
    "sweep_flags": 3,  # the text of jaxrl sweep's flags read into values: imports nothing, so they are read before JAX
    "algos": 2,
    "networks": 1,
    "rollout": 1,
    "estimators": 1,
    "losses": 1,
    "minibatch": 1,
    "shuffle": 1,
    "replay": 1,
    "lag": 1,
    "optim": 1,
    "parallel": 1,
    "types": 1,
    "_compat": 1,
    "episodes": 1,
    "scores": 1,
    "pbt": 3,
    "pbt_settings": 3,  # PBTConfig and its checks: imports no JAX, so jaxrl pbt checks its flags before JAX starts
    "envs": 0,
    "config_rules": 1,  # the rules a Config keeps across its fields: imports no JAX, so flags are checked before it
    "device_rules": 1,  # what a run's devices must be: imports no JAX, so jaxrl train checks them before it
    "field_rules": 0,  # each Config field's own rule: imports nothing, so flags are checked before JAX starts
    "suites": 0,  # the former spelling of jaxrl.envs.suites: imports nothing, fails naming the new one
    "__init__": 5,  # jaxrl/__init__.py re-exports the public surface
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The jaxrl modules `path` imports anywhere in its body (functions included), resolved to known modules."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            # `from a.b import c` names the module a.b.c when there is one, else an attribute of a.b
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target.startswith("jaxrl") and target != name and not name.startswith(f"{target}."):
                found.add(target)
    return found


@functools.cache
def graph() -> dict[str, set[str]]:
    """module -> the jaxrl modules it imports (inside functions too), parsed once per session."""
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) - {"jaxrl"} for name, path in mods.items()}


def unit(name: str) -> str:
    parts = name.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_every_unit_has_a_layer():
    assert {unit(name) for name in modules()} <= set(LAYERS)


def test_no_import_cycle_between_modules():
    assert cycle(graph()) is None


def test_no_import_cycle_between_packages():
    units: dict[str, set[str]] = {}
    for name, targets in graph().items():
        units.setdefault(unit(name), set()).update(unit(t) for t in targets if unit(t) != unit(name))
    assert cycle(units) is None


def test_imports_point_down_the_layers():
    upward = [
        f"{name} -> {target}"
        for name, targets in graph().items()
        for target in targets
        if unit(target) != unit(name) and LAYERS[unit(target)] > LAYERS[unit(name)]
    ]
    assert upward == []


def test_the_env_layer_imports_only_itself():
    outside = [
        f"{name} -> {target}"
        for name, targets in graph().items()
        if unit(name) == "envs"
        for target in targets
        if unit(target) != "envs"
    ]
    assert outside == []


@pytest.mark.parametrize("algorithm", ["ppo", "a2c", "dqn", "sac"])
def test_the_graph_sees_what_an_algorithm_imports(algorithm):
    assert "jaxrl.algos.base" in graph()[f"jaxrl.algos.{algorithm}"]


def test_no_algorithm_imports_another():
    from jaxrl.algos import ALGORITHMS

    names = {f"jaxrl.algos.{module.__name__.rpartition('.')[2]}" for module in ALGORITHMS.values()}
    crossing = [f"{name} -> {target}" for name in names for target in graph()[name] if target in names]
    assert crossing == []


def test_algos_holds_algorithms_and_families_hold_what_they_share():
    """Every module directly in `jaxrl/algos/` (but base) is a registered algorithm; what several algorithms share
    lives in `jaxrl/algos/families/`, and no family module imports an algorithm."""
    from jaxrl.algos import ALGORITHMS

    algos = ROOT / "algos"
    modules = {path.stem for path in algos.glob("*.py")} - {"__init__", "base"}
    assert modules == {module.__name__.rpartition(".")[2] for module in ALGORITHMS.values()}
    names = {module.__name__ for module in ALGORITHMS.values()}
    families = [name for name in graph() if name.startswith("jaxrl.algos.families.")]
    assert len(families) >= 7
    assert [f"{f} -> {t}" for f in families for t in graph()[f] if t in names] == []


def test_the_old_spelling_of_init_and_update_names_the_new_one():
    """`ALGO.init(config, key)` and `ALGO.update(config, state)`, the spelling before setups were built once per
    Config, fail with a TypeError that names `ALGO.setup(config)` and the call that works."""
    import jax

    from jaxrl.algos import ALGORITHMS

    for module in ALGORITHMS.values():
        config = module.Config()
        for function, second in ((module.init, jax.random.key(0)), (module.update, None)):
            with pytest.raises(TypeError, match=r"setup = ALGO\.setup\(config\), then ALGO\.(init|update)\(setup"):
                function(config, second)
