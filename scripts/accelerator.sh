#!/usr/bin/env bash
# The one-shot accelerator benchmark: PPO throughput at many environments and vmapped seeds
# (benchmarks/gpu.py), on whatever accelerator this machine has, then the data-parallel scaling of one run over
# its devices (benchmarks/scaling.py); the whole script ends within WINDOW_S (default 570 s, a 10-minute slot).
#   scripts/accelerator.sh                          # num_envs 2048 8192 x seeds 1 8 32
#   WHEELHOUSE=DIR scripts/accelerator.sh           # no network: install what is missing from DIR's wheels only
#                                                   # (into the machine's own Python when that already has jax)
#   BUDGET_S=120 scripts/accelerator.sh             # start no new throughput case after 120 s (default 240)
#   ALLOW_CPU=1 scripts/accelerator.sh --quick      # run on the CPU too; arguments pass through to benchmarks/gpu.py
# With an NVIDIA GPU (nvidia-smi lists one) it installs jax[cuda12] at the installed jax's version when jax does
# not see the GPU yet; with a TPU (/dev/accel*), jax[tpu]; from WHEELHOUSE (`pip install --no-index --find-links`)
# when it is set. An accelerator image often ships its own Python with jax built for its accelerator: with
# WHEELHOUSE set, no virtual environment active and `python3` importing jax, that Python is used as it is, the
# wheelhouse's wheels are added to it (`pip install --no-index --no-deps`; no package it has is replaced) and
# jaxrl runs from this checkout. Before anything is timed it checks that JAX's backend is the accelerator the
# machine has, and stops with a one-line reason when it is not (ALLOW_CPU=1 benchmarks the CPU instead). Every
# compiled program's memory (`compiled.memory_analysis()`) is printed and stored. Results:
# benchmarks/results/gpu_<device kind>.json and .md, and benchmarks/results/scaling_<backend>.json and .md.
set -euo pipefail
started=$SECONDS
. "$(dirname "$0")/lib.sh"
pip_from=()
if [[ -n "${WHEELHOUSE:-}" ]]; then
  [[ -d "$WHEELHOUSE" ]] || { echo "accelerator.sh: WHEELHOUSE=$WHEELHOUSE is not a folder" >&2; exit 2; }
  pip_from=(--no-index --find-links "$WHEELHOUSE")
  export PIP_NO_INDEX=1 PIP_FIND_LINKS="$WHEELHOUSE"  # use_venv's install reads these too
fi
if [[ -n "${WHEELHOUSE:-}" && -z "${VIRTUAL_ENV:-}" ]] && python3 -c "import jax" 2>/dev/null; then
  wheels=("$WHEELHOUSE"/*.whl)
  echo "using $(command -v python3) and its jax; adding ${#wheels[@]} wheels from $WHEELHOUSE" >&2
  [[ -e "${wheels[0]}" ]] && python3 -m pip install --quiet --no-index --no-deps --no-cache-dir "${wheels[@]}"
  PY=python3
  "$PY" -c "import jaxrl.cli, gymnax, distrax, flashbax, tensorboardX, orbax.checkpoint" || {
    echo "accelerator.sh: jaxrl's dependencies do not import; add the missing ones' wheels to $WHEELHOUSE" >&2
    exit 2
  }
else
  use_venv
  PY=python
fi

window="${WINDOW_S:-570}"
budget="${BUDGET_S:-240}"
left() { echo $((window - (SECONDS - started))); }
backend() { "$PY" -c "import jax; print(jax.default_backend())" 2>/dev/null || echo none; }
jax_version="$("$PY" -c "import importlib.metadata as m; print(m.version('jax'))")"

wanted=cpu
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  wanted=gpu
  extra=cuda12
elif compgen -G "/dev/accel*" >/dev/null || compgen -G "/dev/vfio/[0-9]*" >/dev/null; then
  wanted=tpu
  extra=tpu
fi
if [[ "$wanted" != cpu && "$(backend)" != "$wanted" ]]; then
  echo "installing jax[$extra]==$jax_version for the $wanted${WHEELHOUSE:+ from $WHEELHOUSE}" >&2
  "$PY" -m pip install --quiet "${pip_from[@]}" "jax[$extra]==$jax_version" \
    || echo "could not install jax[$extra]" >&2
fi
have="$(backend)"
echo "jax $jax_version, backend $have (this machine: $wanted); window ${window} s, throughput budget ${budget} s" >&2
nvidia-smi -L 2>/dev/null || true
if [[ "$have" != "$wanted" || "$have" == cpu ]] && [[ -z "${ALLOW_CPU:-}" ]]; then
  echo "accelerator.sh: JAX's backend is $have, not an accelerator (machine: $wanted); nothing timed." \
    "Install jax[cuda12] or jax[tpu] (WHEELHOUSE=DIR offline), or set ALLOW_CPU=1 to benchmark the CPU." >&2
  exit 3
fi
"$PY" -c "import jax; print('devices:', jax.devices())"
scaling_s=120  # kept for the scaling run after the throughput cases
devices="$("$PY" -c "import jax; print(jax.device_count())")"
[[ "$have" != cpu && "$devices" == 1 ]] && scaling_s=0  # one accelerator: no data-parallel scaling to measure
timeout --signal=INT --kill-after=20 "$(( $(left) - scaling_s ))" "$PY" -m benchmarks.gpu --budget-s "$budget" "$@"
# one run data-parallel over this machine's devices (benchmarks/scaling.py; counts above the device count are skipped)
counts=1,2,4,8
[[ "$have" == cpu ]] && counts=1,2
if [[ "$scaling_s" == 0 ]]; then
  echo "one $have device: no data-parallel scaling to measure" >&2
  exit 0
fi
exec timeout --signal=INT --kill-after=20 "$(( $(left) - 20 ))" "$PY" -m benchmarks.scaling --devices "$counts" \
  --num-envs 8192 --tag "$have"
