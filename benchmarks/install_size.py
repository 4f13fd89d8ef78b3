"""How much disk jaxrl takes: the files that `pip install jaxrl` (from this checkout) adds to a fresh virtual
environment, and `pip install "jaxrl[EXTRA]"` for each extra in pyproject.toml, as MB on disk of site-packages
and number of distributions; and what the base install's matplotlib, tensorboardX and gymnax weigh with the
dependencies nothing else in the base install needs.

    python -m benchmarks.install_size [--extras navix,brax] [--keep DIR]

Each install goes into its own fresh virtual environment (`python -m venv --without-pip`, filled by this
interpreter's pip through `pip --python`, so the count holds jaxrl and its dependencies alone), from the package
index pip is configured with. Sizes are disk blocks (as `du` counts them) of the venv's site-packages, in MB
(10^6 bytes). Takes minutes (every install downloads or unpacks jax and jaxlib again; pip's cache helps).
Results: `benchmarks/results/install_size.{json,md}`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results" / "install_size"
# what .ci/run (and so the test command on a fresh clone) installs
COMBINED = {"test,suites,docs": "what .ci/run installs"}
# lists, run by the venv's own interpreter: each distribution with its version, disk bytes and requirements
INVENTORY = """
import json, os, importlib.metadata as md
out = []
for dist in md.distributions():
    size = 0
    for f in dist.files or []:
        try:
            size += os.lstat(f.locate()).st_blocks * 512
        except OSError:
            pass
    out.append({"name": dist.metadata["Name"], "version": dist.version, "bytes": size,
                "requires": dist.requires or []})
print(json.dumps(out))
"""


def disk_bytes(folder: Path) -> int:
    """Disk blocks under `folder` in bytes, as `du -s --block-size=1` counts them (hard links once)."""
    total, seen = 0, set()
    for parent, _, files in os.walk(folder):
        for name in files:
            stat = os.lstat(os.path.join(parent, name))
            if (stat.st_dev, stat.st_ino) not in seen:
                seen.add((stat.st_dev, stat.st_ino))
                total += stat.st_blocks * 512
    return total


def install(target: str, folder: Path) -> dict:
    """A fresh venv in `folder` with `jaxrl[target]` (plain jaxrl when target is "base") installed: its
    site-packages bytes, the distributions in it and pip's seconds."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    python = folder / "bin" / "python"
    spec = str(ROOT) if target == "base" else f"{ROOT}[{target}]"
    start = datetime.datetime.now()
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", spec]
    done = subprocess.run(pip, capture_output=True, text=True)
    seconds = (datetime.datetime.now() - start).total_seconds()
    if done.returncode != 0:
        return {"error": (done.stderr or done.stdout).strip().splitlines()[-5:], "pip_s": round(seconds, 1)}
    site = Path(
        subprocess.check_output(
            [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True
        ).strip()
    )
    dists = json.loads(subprocess.check_output([python, "-c", INVENTORY], text=True))
    return {"bytes": disk_bytes(site), "distributions": dists, "pip_s": round(seconds, 1)}


def closure(roots: list[Requirement], dists: dict[str, dict]) -> set[str]:
    """The installed distributions `roots` need, transitively (markers evaluated for this interpreter, the
    requested extras followed)."""
    needed: set[tuple[str, str]] = set()
    todo = [(r, "") for r in roots]
    while todo:
        req, extra = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": extra}):
            continue
        name = canonicalize_name(req.name)
        if name not in dists:
            continue
        for wanted in ["", *sorted(req.extras)]:
            if (name, wanted) in needed:
                continue
            needed.add((name, wanted))
            todo += [(Requirement(r), wanted) for r in dists[name]["requires"]]
    return {name for name, _ in needed}


def only_for(base: dict, dropped: set[str]) -> dict:
    """What the base install would lose without the direct dependencies `dropped`: the distributions that only
    they need, and their MB."""
    dists = {canonicalize_name(d["name"]): d for d in base["distributions"]}
    direct = [Requirement(r) for r in dists["jaxrl"]["requires"]]
    everything = closure(direct, dists)
    kept = closure([r for r in direct if canonicalize_name(r.name) not in dropped], dists)
    alone = sorted(everything - kept)
    return {"distributions": alone, "mb": round(sum(dists[n]["bytes"] for n in alone) / 1e6, 1)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--extras", help="comma-separated extras to measure (default: every extra, and the CI one)")
    parser.add_argument("--keep", type=Path, help="build the venvs here and keep them (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    targets = ["base", *(args.extras.split(",") if args.extras else [*extras, *COMBINED])]
    measured = {}
    with tempfile.TemporaryDirectory() as tmp:
        where = args.keep or Path(tmp)
        for target in targets:
            print(f"installing {target} ...", flush=True)
            venv = where / target.replace(",", "+")
            measured[target] = install(target, venv)
            print(f"  {summary(measured[target])}", flush=True)
            if args.keep is None:  # one venv on disk at a time (the gpu one is gigabytes)
                shutil.rmtree(venv)
    base = measured["base"]
    only = {}
    if "error" not in base:
        for name, dropped in {
            "matplotlib": ["matplotlib"],
            "tensorboardx": ["tensorboardx"],
            "matplotlib and tensorboardx": ["matplotlib", "tensorboardx"],
            "gymnax": ["gymnax"],  # the environments' own pins (seaborn, pandas, gymnasium, ...)
        }.items():
            only[name] = only_for(base, set(dropped))
    for one in measured.values():  # [name, version, bytes] of each distribution, without its requirements
        if "error" not in one:
            one["distributions"] = [[d["name"], d["version"], d["bytes"]] for d in one["distributions"]]
    pip_version = subprocess.check_output([sys.executable, "-m", "pip", "--version"], text=True).split()[1]
    record = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "pip": pip_version,
        "installs": measured,
        "base_only_for": only,
    }
    sys.path.insert(0, str(ROOT))
    from benchmarks.common import write_json

    write_json(args.out.with_suffix(".json"), record)
    text = markdown(record)
    args.out.with_suffix(".md").write_text(text)
    print(text)


def summary(one: dict) -> str:
    if "error" in one:
        return "failed: " + " / ".join(one["error"])
    return f"{one['bytes'] / 1e6:.0f} MB, {len(one['distributions'])} distributions, pip {one['pip_s']:.0f} s"


def markdown(record: dict) -> str:
    installs, base = record["installs"], record["installs"]["base"]
    lines = [
        "# Install size (`python -m benchmarks.install_size`)",
        "",
        f"{record['date']}; {record['platform']}; Python {record['python']}, pip {record['pip']}. Each row is a "
        "fresh virtual environment with `pip install` of this checkout (the extra in brackets): MB on disk of its "
        "site-packages and the distributions in it (jaxrl included); an extra's cost is its row less the base row.",
        "",
        "| install | MB | distributions | extra adds MB | extra adds distributions |",
        "|---|---|---|---|---|",
    ]
    for name, one in installs.items():
        label = "`pip install jaxrl`" if name == "base" else f'`pip install "jaxrl[{name}]"`'
        label += f" ({COMBINED[name]})" if name in COMBINED else ""
        if "error" in one:
            lines.append(f"| {label} | failed: {' / '.join(one['error'])} | | | |")
            continue
        mb, count = one["bytes"] / 1e6, len(one["distributions"])
        more = "" if name == "base" or "error" in base else f"{mb - base['bytes'] / 1e6:.0f}"
        extra = "" if name == "base" or "error" in base else f"{count - len(base['distributions'])}"
        lines.append(f"| {label} | {mb:.0f} | {count} | {more} | {extra} |")
    if "gpu" in installs:
        lines += [
            "",
            "The gpu row is the CUDA 12 wheels on disk (jaxlib's CUDA plugin and NVIDIA's libraries); that they run "
            "needs an NVIDIA GPU and its driver, which this measurement neither has nor counts.",
        ]
    if record["base_only_for"]:
        lines += ["", "What the base install holds only for a direct dependency (it and what nothing else needs):", ""]
        lines += ["| dependency | MB | distributions |", "|---|---|---|"]
        for name, one in record["base_only_for"].items():
            alone = ", ".join(one["distributions"]) or "none: another dependency needs it too"
            lines.append(f"| {name} | {one['mb']:.1f} | {alone} |")
    if "error" not in base:
        biggest = sorted(base["distributions"], key=lambda d: -d[2])[:8]
        lines += ["", "The base install's largest distributions:", "", "| distribution | MB |", "|---|---|"]
        lines += [f"| {name} {version} | {size / 1e6:.0f} |" for name, version, size in biggest]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
