"""The shape of the jaxrl.envs package: its import graph (every import statement, those inside functions too) has
no cycle and no edge out of jaxrl.envs, the suite adapters import only spec, wrappers and their siblings, the
public names are re-exported, and the old `jaxrl.suites` path fails with a message naming the new one."""

import ast
import importlib
from pathlib import Path

import pytest

import jaxrl.envs

PACKAGE = Path(jaxrl.envs.__file__).parent
ROOT = PACKAGE.parent.parent  # the directory holding jaxrl/


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def is_module(name: str) -> bool:
    return name in MODULES or name.startswith("jaxrl.") and (ROOT / (name.replace(".", "/") + ".py")).exists()


def jaxrl_imports(name: str, path: Path) -> set[str]:
    """The jaxrl modules `name` imports anywhere in its body (module level, functions, classes): for
    `from package import x`, the submodule `package.x` where x is one, else `package`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if is_module(full) or full in MODULES else base)
    return {m for m in found if m == "jaxrl" or m.startswith("jaxrl.")}


GRAPH = {name: jaxrl_imports(name, path) - {name} for name, path in MODULES.items()}


def test_the_graph_covers_the_package():
    assert {"jaxrl.envs", "jaxrl.envs.spec", "jaxrl.envs.gymnax", "jaxrl.envs.wrappers", "jaxrl.envs.registry"} <= set(
        GRAPH
    )
    assert "jaxrl.envs.suites.base" in GRAPH and "jaxrl.envs.suites.navix" in GRAPH
    assert GRAPH["jaxrl.envs.registry"] >= {"jaxrl.envs.spec", "jaxrl.envs.gymnax", "jaxrl.envs.wrappers"}


def test_nothing_imports_upward():
    upward = {name: sorted(m for m in imports if not m.startswith("jaxrl.envs")) for name, imports in GRAPH.items()}
    assert not {name: up for name, up in upward.items() if up}, upward


def test_no_import_cycle():
    done, path = set(), []

    def visit(name):
        if name in path:
            raise AssertionError(f"import cycle: {' -> '.join(path[path.index(name) :] + [name])}")
        if name in done:
            return
        path.append(name)
        for target in sorted(GRAPH.get(name, ())):
            visit(target)
        path.pop()
        done.add(name)

    for name in sorted(GRAPH):
        visit(name)


def test_spec_is_the_bottom_and_adapters_stay_below_the_registry():
    assert GRAPH["jaxrl.envs.spec"] == set()
    assert GRAPH["jaxrl.envs.wrappers"] <= {"jaxrl.envs.spec"}
    assert GRAPH["jaxrl.envs.gymnax"] <= {"jaxrl.envs.spec"}
    assert GRAPH["jaxrl.envs.suites"] == set()  # the table finds the adapters by name (importlib)
    allowed = {"jaxrl.envs.spec", "jaxrl.envs.wrappers", "jaxrl.envs.suites"}
    for name, imports in GRAPH.items():
        if name.startswith("jaxrl.envs.suites."):
            outside = {m for m in imports if m not in allowed and not m.startswith("jaxrl.envs.suites.")}
            assert not outside, f"{name} imports {sorted(outside)}: adapters import only spec and wrappers"


def test_every_suite_of_the_table_has_its_adapter():
    from jaxrl.envs import suites

    assert {f"jaxrl.envs.suites.{prefix}" for prefix in suites.SUITES} <= set(GRAPH)


@pytest.mark.parametrize(
    "name",
    [
        "make",
        "register",
        "registered_ids",
        "check_env_id",
        "EnvSpec",
        "VecEnv",
        "GymnaxVecEnv",
        "action_mask",
        "ScaleAction",
        "ClipAction",
        "scale_action",
        "EpisodeStatistics",
        "NormalizeObservation",
        "NormalizeReward",
        "RunningMeanStd",
        "observation_normalizer",
        "DeviceKeys",
        "_REGISTERED",
    ],
)
def test_public_names_are_re_exported(name):
    assert hasattr(jaxrl.envs, name)


def test_old_suites_path_names_the_new_one():
    with pytest.raises(ImportError, match=r"jaxrl\.envs\.suites"):
        importlib.import_module("jaxrl.suites")
