#!/usr/bin/env bash
# The test command (README; .ci/run calls it): pytest over tests/ in a virtual environment with jaxrl and its
# test extra. Any arguments pass through to pytest; tests/ is the default path when none is given.
#   scripts/test.sh                                  # every test, the slow learning checks included (what CI runs)
#   scripts/test.sh -m "not slow"                    # the quick tier
#   scripts/test.sh tests/test_scorecard.py -x -k resume  # some tests
# Uses the active virtual environment, else ./.venv (created, with `pip install -e ".[test]"`, only when absent).
# Tests run in one pytest-xdist worker per core (`-n auto`; one XLA CPU program keeps one core busy), and the tests
# that share a module's fixtures run in one worker, which computes them once (`--dist loadgroup`; tests/conftest.py
# groups them): pass `-n 0` (or any -n) to choose otherwise. (`--dist worksteal` was slower: 3 min 41 s against
# 2 min 55 s for the quick tier, idle, since a stolen test recomputes its module's fixtures on the other worker.)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
use_venv test

paths=(tests)
for arg in "$@"; do
  if [[ "$arg" != -* && -e "${arg%%::*}" ]]; then  # a test path of its own (tests/x.py, tests/x.py::test_y)
    paths=()
    break
  fi
done
workers=(-n auto --dist loadgroup)
for arg in "$@"; do
  [[ "$arg" == -n* || "$arg" == --numprocesses* || "$arg" == no:xdist ]] && workers=()
done
for arg in "$@"; do
  [[ "$arg" == --dist* && ${#workers[@]} -gt 0 ]] && workers=(-n auto)
done
exec python -m pytest -q "${workers[@]}" "${paths[@]}" "$@"
