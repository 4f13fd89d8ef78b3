import os
import shutil
import signal
import tempfile

# Compiling is most of what the suite does, so its programs compile for speed of compiling, with XLA CPU's older loop
# emitters instead of its MLIR fusion emitters (about a third fewer seconds, for programs that run up to twice as
# slowly, which the suite's small programs do not notice), at two optimisation levels:
# - FAST_COMPILE, level 1 instead of the runner's 2 (`jaxrl.run.compile.CPU_COMPILE_OPTIONS`; level 1 took about
#   half the seconds of XLA's default 3): the programs the runner compiles (its options take the level XLA_FLAGS
#   names), in the test process and in the CLI subprocesses tests start. At it, as at the runner's level 2, two
#   programs of one computation round alike (a run in chunks and in one program), which tests check bit for bit.
# - QUICK_COMPILE, level 0: what a test compiles itself (`jax.jit` of a function), in about 0.6x the seconds of
#   level 1; its programs round differently from one another in the last bits. A test that compares its own program
#   with the runner's bit for bit compiles it with the runner's options (`jaxrl.run.compile.compiler_options()`).
# The numbers differ from the runner's in the last bits, so the golden cases (tests/golden_cases.py) ask for the
# runner's options back.
FAST_COMPILE = "--xla_backend_optimization_level=1 --xla_cpu_use_fusion_emitters=false"
QUICK_COMPILE = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"


def _with_flags(flags: str, given: str) -> str:
    """`given` XLA_FLAGS with each of `flags` added where `given` does not set it already."""
    for flag in flags.split():
        if flag.partition("=")[0] not in given:
            given = f"{given} {flag}".strip()
    return given


# the XLA_FLAGS the suite was started with (a level they name wins at both places); pytest-xdist's workers inherit
# the controlling process's environment, whose XLA_FLAGS are FAST_COMPILE's by then
_GIVEN_ENV = "JAXRL_TESTS_GIVEN_XLA_FLAGS"
_GIVEN_FLAGS = os.environ.setdefault(_GIVEN_ENV, os.environ.get("XLA_FLAGS", ""))
os.environ["XLA_FLAGS"] = _with_flags(QUICK_COMPILE, _GIVEN_FLAGS)  # read once, when JAX's backend starts below

# One persistent compilation cache for the whole session, shared by the pytest-xdist workers (in-process training)
# and by the CLI subprocesses tests start (through JAXRL_COMPILE_CACHE, the default of --compile-cache): the suite
# compiles the same small programs many times over, in several processes. The first process to compile a program
# stores it; later ones load it. Only a test that passes `--compile-cache none` compiles for itself.
CACHE_ENV = "JAXRL_COMPILE_CACHE"
_MADE_CACHE = CACHE_ENV not in os.environ  # the controlling process makes the folder; its workers inherit the variable
if _MADE_CACHE:
    os.environ[CACHE_ENV] = tempfile.mkdtemp(prefix="jaxrl-test-xla-")
COMPILE_CACHE = os.environ[CACHE_ENV]

import jax  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from jaxrl.render import prefer_offscreen_gl  # noqa: E402
from jaxrl.run.compile import compiler_options, enable_compilation_cache  # noqa: E402

enable_compilation_cache(COMPILE_CACHE)
# Every test process starts JAX's CPU backend now, with one device, as a fresh `python` has. Otherwise a worker
# whose first test runs `jaxrl train` in-process (which makes one CPU device per core while the backend is not yet
# up) keeps that many devices for the rest of its tests. Tests that need several devices start processes of their own.
jax.devices()
os.environ["XLA_FLAGS"] = _with_flags(FAST_COMPILE, _GIVEN_FLAGS)  # for the runner's options and subprocesses
# MuJoCo (Brax, Playground) draws off screen where it can (`jaxrl render` does the same): set before any test module
# imports mujoco
prefer_offscreen_gl()


EXTENDED = "extended"


def pytest_addoption(parser):
    parser.addoption(
        "--extended",
        action="store_true",
        help="also run the extended tier: the breadth checks beyond the default suite (every environment suite, "
        "every algorithm over 2 devices and 2 processes, every memory core learning, the documentation's "
        "training pages)",
    )


def _named(item, config) -> bool:
    """Whether the command line names the item's file or the item itself (not only a folder above it)."""
    for arg in config.args:
        path, _, rest = arg.partition("::")
        if path.endswith(".py") and os.path.exists(path) and os.path.samefile(path, item.path):
            if not rest or item.nodeid.split("::", 1)[1].startswith(rest):
                return True
    return False


def _extended_wanted(config) -> bool:
    return config.getoption("--extended") or EXTENDED in (config.getoption("markexpr") or "")


def _shared_fixture_module(item) -> str | None:
    """The test module's name when the item uses a module-scoped fixture of its module (a compiled program, a
    training run); else None."""
    info = getattr(item, "_fixtureinfo", None)  # test functions have one; other items share no fixtures
    for defs in info.name2fixturedefs.values() if info is not None else ():
        if any(d.scope != "function" and d.baseid.endswith(".py") for d in defs):
            return item.module.__name__
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Extended-tier tests are slow tests too (the quick tier never holds them); they run with `--extended`, with
    `-m` naming the marker, or when the command line names their file or themselves."""
    wanted = _extended_wanted(config)
    kept, left = [], []
    for item in items:
        extended = item.get_closest_marker(EXTENDED) is not None
        if extended:
            item.add_marker(pytest.mark.slow)
        (left if extended and not wanted and not _named(item, config) else kept).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept


def pytest_itemcollected(item):
    """`--dist loadgroup` (scripts/test.sh) sends the tests that share a module's fixtures to one worker, which
    computes them once; with plain `--dist load` each worker that gets one of them computes them again. (Marked
    as each test is collected: pytest-xdist reads the groups in its own `pytest_collection_modifyitems`.)"""
    module = _shared_fixture_module(item)
    if module is not None:
        item.add_marker(pytest.mark.xdist_group(module))


def pytest_terminal_summary(terminalreporter, config):
    named = any(arg.partition("::")[0].endswith(".py") for arg in config.args)
    if not _extended_wanted(config) and not named:
        terminalreporter.write_line("the extended tier did not run (scripts/test.sh --extended runs it too)")


def pytest_unconfigure(config):
    if _MADE_CACHE and not hasattr(config, "workerinput"):
        shutil.rmtree(COMPILE_CACHE, ignore_errors=True)


def default_sigint():
    """`preexec_fn` of a child that a test sends SIGINT to: SIGINT back to its default, as under a terminal's
    Ctrl-C. A shell starts background jobs (`cmd &`, so CI scripts run that way) with SIGINT ignored, and a child
    inherits that: its Python then never raises KeyboardInterrupt and a test of Ctrl-C tests nothing."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt_on_chunk(monkeypatch, n: int) -> None:
    """Ctrl-C (KeyboardInterrupt) right after the n-th chunk's metrics are written to metrics.csv, as a user's
    Ctrl-C at that moment; `monkeypatch.undo()` (or the test's end) puts the writer back."""
    from jaxrl.run import logging

    calls = {"n": 0}
    write = logging.CsvSink.write

    def write_then_interrupt(self, *args):
        calls["n"] += 1
        write(self, *args)
        if calls["n"] == n:
            raise KeyboardInterrupt

    monkeypatch.setattr(logging.CsvSink, "write", write_then_interrupt)


def _host(x):
    if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
        x = jax.random.key_data(x)
    return np.asarray(x)


def refusal(check, *args) -> str | None:
    """The message of the ValueError `check(*args)` raises; None where it passes."""
    try:
        check(*args)
    except ValueError as error:
        return str(error)
    return None


def runner_jit(fn, **jit_kwargs):
    """`jax.jit(fn)` compiled with the runner's XLA options (`compiler_options()`: FAST_COMPILE's level in the
    suite) instead of the test process's QUICK_COMPILE: for a program whose bits a test compares with a program
    the runner compiles, and for a learning check, which trains as the runner does (and runs long enough that
    level 0's slower code would cost more than its quicker compile saves)."""
    return jax.jit(fn, compiler_options=compiler_options(), **jit_kwargs)


def assert_trees_close(actual, expected, rtol=1e-5, atol=1e-6):
    """Leaf-wise allclose of two pytrees (PRNG keys compared by their data), NaNs equal."""
    jax.tree.map(lambda a, e: np.testing.assert_allclose(_host(a), _host(e), rtol=rtol, atol=atol), actual, expected)


def index(tree, i):
    return jax.tree.map(lambda x: x[i], tree)


def eqns_named(jaxpr, name: str) -> list:
    """The equations of primitive `name` in `jaxpr` and every jaxpr nested in it (scans', conds' and calls' bodies)."""
    from jax.extend.core import jaxprs_in_params

    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == name:
            found.append(eqn)
        for sub in jaxprs_in_params(eqn.params):
            found.extend(eqns_named(sub, name))
    return found
