# Sourced by the scripts in this folder (not run): the repository root and its virtual environment.
# use_venv [EXTRA]: the active virtual environment if there is one, else ./.venv, created only when absent;
# installs this checkout (`pip install -e ".[EXTRA]"`) when the environment lacks jaxrl or the extra's packages.

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

use_venv() {
  local extra="${1:-}" spec="." check="jaxrl"
  if [[ -n "$extra" ]]; then
    spec=".[$extra]"
    [[ "$extra" == test ]] && check="jaxrl pytest pytest-xdist rlax rliable"
  fi
  if [[ -z "${VIRTUAL_ENV:-}" ]]; then
    if [[ ! -x .venv/bin/python ]]; then
      echo "creating $ROOT/.venv" >&2
      python3 -m venv .venv
    fi
    # shellcheck disable=SC1091
    . .venv/bin/activate
  fi
  # installed distributions only: importing jaxrl here would cost seconds and hide nothing pytest won't show
  if ! python - "$check" <<'PY' 2>/dev/null; then
import importlib.metadata as metadata, sys
for name in sys.argv[1].split():
    metadata.version(name)
PY
    echo "installing $spec into $VIRTUAL_ENV" >&2
    python -m pip install --quiet --upgrade pip
    python -m pip install --quiet -e "$spec"
  fi
}
