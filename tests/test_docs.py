"""The documentation cannot rot: every fenced Python and shell block of README.md and docs/ runs here, unless the
line before its fence is `<!-- no-run: reason -->`; the generated pages equal `scripts/docs.py`'s output; links stay
inside the repository (or are public http(s) URLs); no issue numbers; the README stays short.

Conventions of a page (docs/development.md):
- `<!-- no-run: reason -->` on the line before a fence: the block is not run (the reason is required).
- `<!-- file: NAME -->` on the line before a fence: the block is written to NAME in the page's working folder, in
  document order, so later blocks of the page can import or read it.
- The blocks of a page run in document order in one fresh working folder: Python blocks in one namespace of their
  own, shell blocks with bash -e, `jaxrl` on PATH as this checkout's `python -m jaxrl.cli`.
- A block that trains (make_train, sweep.run, loop.run, make_pbt, `jaxrl train|sweep|eval|plot`) runs in the slow
  tier, with `total_timesteps=` / `--total-timesteps` lowered to at most JAXRL_DOCS_TIMESTEPS (default 20000; a
  `jaxrl train|sweep` command without the flag gets it). The quick tier runs every page's other blocks, in order.
- Each tier runs its pages in one process, with the session's persistent compilation cache (conftest), which the
  `jaxrl` commands of the blocks share: a program compiled by one page or command loads in the next.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.rglob("*.md"))]
TINY = int(os.environ.get("JAXRL_DOCS_TIMESTEPS", "20000"))
PYTHON_LANGS = {"python", "py"}
SHELL_LANGS = {"bash", "sh", "console", "shell"}
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
MARKER = re.compile(r"^\s*<!--\s*(no-run|file):\s*(.*?)\s*-->\s*$")
PY_TRAINS = re.compile(r"make_train|sweep\.run\(|loop\.run\(|make_pbt|\b\w+\.train\b")
SH_TRAINS = re.compile(r"\bjaxrl\b.*\b(train|sweep|eval|plot)\b")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    marker: str | None  # "no-run" or "file"
    argument: str | None  # the reason, or the file name

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def kind(self) -> str | None:
        return "python" if self.lang in PYTHON_LANGS else "shell" if self.lang in SHELL_LANGS else None

    @property
    def trains(self) -> bool:
        if self.kind == "python":
            return bool(PY_TRAINS.search(self.text))
        if self.kind == "shell":
            return any(SH_TRAINS.search(line) and "--help" not in line for line in _shell_lines(self.text))
        return False


def blocks_of(page: Path) -> list[Block]:
    lines = page.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        indent, fence, lang = match.groups()
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = MARKER.match(before)
        body = textwrap.dedent("\n".join(lines[i + 1 : end])) + "\n"
        out.append(Block(page, i + 1, lang.lower(), body, *(marker.groups() if marker else (None, None))))
        i = end + 1
    return out


def _shell_lines(text: str) -> list[str]:
    """Shell commands with their `\\` continuations joined."""
    return text.replace("\\\n", " ").splitlines()


def _lower(value: str) -> str:
    return str(min(int(float(value.replace("_", ""))), TINY))


def small_budget(block: Block) -> str:
    """The block's text with its training budgets lowered to at most TINY env steps."""
    if block.kind == "python":
        return re.sub(r"total_timesteps=([0-9_.e+]+)", lambda m: f"total_timesteps={_lower(m.group(1))}", block.text)
    lines = []
    for line in _shell_lines(block.text):
        line = re.sub(r"--total-timesteps[ =](\S+)", lambda m: f"--total-timesteps {_lower(m.group(1))}", line)
        if "--total-timesteps" not in line and "--resume" not in line and "--help" not in line:
            line = re.sub(
                r"(\bjaxrl\b(?:\s+--env-module\s+\S+)*\s+(?:train|sweep)\s+\w+)", rf"\1 --total-timesteps {TINY}", line
            )
        lines.append(line)
    return "\n".join(lines) + "\n"


ALL_BLOCKS = [b for page in PAGES for b in blocks_of(page)]
RUNNABLE = [b for b in ALL_BLOCKS if b.kind and b.marker != "no-run"]
SLOW_PAGES = sorted({b.page for b in RUNNABLE if b.trains and b.marker != "file"})

DRIVER = r"""
import json, os, resource, subprocess, sys, time, traceback
if os.environ.get("JAXRL_COMPILE_CACHE"):  # the session's persistent cache (conftest), as the `jaxrl` commands use
    from jaxrl.run.compile import enable_compilation_cache
    enable_compilation_cache(os.environ["JAXRL_COMPILE_CACHE"])
pages = json.load(open(sys.argv[1]))
failures = []


def cpu_s():
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


for page in pages:
    work = page["work"]
    os.makedirs(work, exist_ok=True)
    os.chdir(work)
    sys.path.insert(0, work)
    namespace = {"__name__": "__main__"}
    for block in page["blocks"]:
        start = cpu_s()
        try:
            if block["file"]:
                path = os.path.join(work, block["file"])
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "w").write(block["text"])
            elif block["kind"] == "python":
                exec(compile(block["text"], block["where"], "exec"), namespace)
            else:
                subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block["text"]], check=True)
        except BaseException as error:
            failures.append(block["where"])
            print(f"FAILED {block['where']}: {error!r}", flush=True)
            traceback.print_exc()
            break
        finally:
            print(f"CPU-SECONDS {cpu_s() - start:6.1f} {block['where']}", flush=True)
    sys.path.remove(work)
print("DOCS-FAILURES " + json.dumps(failures), flush=True)
sys.stderr.flush()
# the verdict is printed: exit without the interpreter's teardown, where XLA's runtime once crashed (SIGSEGV) after
# every block had passed, on a loaded machine
os._exit(1 if failures else 0)
"""


def run_pages(pages: dict[Path, list[Block]], tmp_path: Path, timeout: float) -> None:
    """Runs the blocks of each page in document order, each page in a working folder of its own, in one process."""
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "jaxrl").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m jaxrl.cli "$@"\n')
    (shim / "jaxrl").chmod(0o755)
    spec = [
        {
            "work": str(tmp_path / f"page{i}"),
            "blocks": [
                {
                    "where": b.where,
                    "kind": b.kind,
                    "file": b.argument if b.marker == "file" else None,
                    "text": small_budget(b) if b.marker != "file" else b.text,
                }
                for b in blocks
            ],
        }
        for i, (page, blocks) in enumerate(pages.items())
    ]
    (tmp_path / "pages.json").write_text(json.dumps(spec))
    (tmp_path / "driver.py").write_text(DRIVER)
    env = {
        **os.environ,
        "PATH": f"{shim}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
        "MPLBACKEND": "Agg",
        "WANDB_MODE": "offline",
    }
    done = subprocess.run(
        [sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "pages.json")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    print("\n".join(line for line in done.stdout.splitlines() if line.startswith("CPU-SECONDS")))
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]


# ----------------------------------------------------------------------------------------------- the code blocks
def test_every_block_runs_or_says_why_not():
    """Every fence names its language, every no-run marker gives a reason, every file marker a relative name, and
    every Python or shell block is either run (quick or extended tier) or marked."""
    problems = []
    for b in ALL_BLOCKS:
        if not b.lang:
            problems.append(f"{b.where}: a fence without a language")
        if b.marker == "no-run" and len(b.argument) < 4:
            problems.append(f"{b.where}: no-run needs a reason")
        if b.marker == "file" and (not b.argument or Path(b.argument).is_absolute() or ".." in b.argument):
            problems.append(f"{b.where}: file needs a relative name")
        if b.marker == "file" and b.kind != "python":
            problems.append(f"{b.where}: file blocks are Python modules")
    assert not problems, "\n".join(problems)
    assert len(RUNNABLE) >= 20, "the docs should show runnable examples"


def test_budgets_are_lowered():
    shell = "jaxrl train ppo --seeds 4\njaxrl sweep ppo --total-timesteps 3e6 \\\n --out x\n"
    lowered = (
        f"jaxrl train ppo --total-timesteps {TINY} --seeds 4\njaxrl sweep ppo --total-timesteps {TINY}   --out x\n"
    )
    assert small_budget(Block(README, 1, "bash", shell, None, None)) == lowered
    python = "ppo.Config(total_timesteps=200_000)\nConfig(total_timesteps=1_000)\n"
    block = Block(README, 1, "python", python, None, None)
    assert small_budget(block) == f"ppo.Config(total_timesteps={TINY})\nConfig(total_timesteps=1000)\n"
    assert not block.trains and not Block(README, 1, "sh", "jaxrl train dqn --help\n", None, None).trains


@pytest.mark.slow
def test_quick_blocks_run(tmp_path):
    """Every page's blocks that do not train, in document order (with its file blocks), in one process."""
    pages = {}
    for b in RUNNABLE:
        if not b.trains or b.marker == "file":
            pages.setdefault(b.page, []).append(b)
    pages = {page: blocks for page, blocks in pages.items() if any(b.marker != "file" for b in blocks)}
    run_pages(pages, tmp_path, timeout=600)


@pytest.mark.extended
def test_pages_run_with_small_budgets(tmp_path):
    """All runnable blocks of every page that trains, in document order, with budgets lowered to
    JAXRL_DOCS_TIMESTEPS: each page in a working folder and a namespace of its own, the pages in one process (one
    JAX start, and a program that two pages compile, such as the README's and getting-started's, compiles once).
    The output names each block that failed; a failure stops its page, not the others."""
    run_pages({page: [b for b in RUNNABLE if b.page == page] for page in SLOW_PAGES}, tmp_path, timeout=2400)


# ------------------------------------------------------------------------------------------- the generated pages
def _docs_script():
    spec = importlib.util.spec_from_file_location("jaxrl_docs_script", ROOT / "scripts" / "docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_pages_equal_the_script_output():
    stale = [str(p.relative_to(ROOT)) for p, text in _docs_script().render().items() if p.read_text() != text]
    assert not stale, f"run `python scripts/docs.py`: {stale} differ from what it writes"


def test_cli_reference_covers_every_command_and_algorithm():
    from jaxrl.algos import ALGORITHMS

    text = _docs_script().cli_reference()
    for command in ("train", "sweep", "eval", "plot"):
        assert f"## jaxrl {command}\n" in text
    for algo in ALGORITHMS:
        assert f"### jaxrl train {algo}\n" in text and f"### jaxrl sweep {algo}\n" in text
    assert "--total-timesteps" in text and "--learning-rate" in text
    assert (DOCS / "reference" / "cli.md").read_text().count(_docs_script().CLI_MARKER) == 1


def test_config_tables_name_every_field():
    from jaxrl.algos import ALGORITHMS

    script = _docs_script()
    table = script.config_table("ppo")
    assert "`learning_rate`" in table and "traced" in table and "static" in table
    for page in (DOCS / "algorithms").glob("*.md"):
        for algo in re.findall(r"<!-- config: (\w+) -->", page.read_text()):
            assert algo in ALGORITHMS, f"{page.name}: unknown algorithm {algo}"


# ------------------------------------------------------------------------------------------------- the prose
def _prose(page: Path) -> str:
    """The page without its fenced blocks and inline code spans."""
    text = re.sub(r"^(\s*)(`{3,}|~{3,}).*?^\1\2\s*$", "", page.read_text(), flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|<(https?://[^>]+)>")


def test_links_stay_in_the_repository():
    problems = []
    for page in PAGES:
        for match in LINK.finditer(_prose(page)):
            target = match.group(1) or match.group(2)
            if re.match(r"https?://", target):
                continue
            if re.match(r"\w+:", target) or target.startswith("/"):
                problems.append(f"{page.relative_to(ROOT)}: {target} (not a relative link or a public URL)")
                continue
            path = target.split("#")[0]
            if not path:
                continue
            resolved = (page.parent / path).resolve()
            if page.parent == DOCS / "results" and path.startswith("img/"):  # published from benchmarks/results
                resolved = ROOT / "benchmarks" / "results" / path[len("img/") :]
            if not resolved.is_relative_to(ROOT):
                problems.append(f"{page.relative_to(ROOT)}: {target} points outside the repository")
            elif not resolved.exists():
                problems.append(f"{page.relative_to(ROOT)}: {target} does not exist")
            elif page == README and resolved.is_relative_to(DOCS) and resolved.suffix == ".md":
                continue
    assert not problems, "\n".join(problems)


def test_no_issue_numbers_or_load_averages():
    problems = []
    for page in PAGES:
        text = page.read_text()
        for pattern in (r"\bissues?\s*#?\d+", r"(?<![\w&/#])#\d+\b", r"\bthe issue\b"):
            problems += [f"{page.relative_to(ROOT)}: {m.group(0)!r}" for m in re.finditer(pattern, text, re.I)]
        # a load average is a condition of one measurement: it stays with the result files in benchmarks/results
        problems += [f"{page.relative_to(ROOT)}: {m.group(0)!r}" for m in re.finditer(r"\bload\s+(average|\d)", text)]
    assert not problems, "\n".join(problems)


def test_readme_is_short_and_keeps_its_two_commands():
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    assert "pip install -e . && jaxrl train ppo" in text
    assert "\nscripts/test.sh " in text
