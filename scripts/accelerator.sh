#!/usr/bin/env bash
# The one-shot accelerator benchmark: PPO throughput at many environments and vmapped seeds
# (benchmarks/gpu.py), on whatever accelerator this machine has, within a time budget; then the data-parallel
# scaling of one run over its devices (benchmarks/scaling.py).
#   scripts/accelerator.sh                     # 240 s budget: num_envs 2048 8192 x seeds 1 8 32
#   BUDGET_S=120 scripts/accelerator.sh        # a smaller budget (no new case starts after it)
#   scripts/accelerator.sh --quick             # any arguments pass through to benchmarks/gpu.py
# With an NVIDIA GPU (nvidia-smi lists one) it installs jax[cuda12] at the installed jax's version when jax does
# not see the GPU yet; with a TPU (/dev/accel*), jax[tpu]. Without either it runs on the CPU. The whole run is cut
# off at HARD_LIMIT_S (default: budget + 300 s). Results: benchmarks/results/gpu_<device kind>.json and .md.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
use_venv

budget="${BUDGET_S:-240}"
hard_limit="${HARD_LIMIT_S:-$((budget + 300))}"
backend() { python -c "import jax; print(jax.default_backend())" 2>/dev/null || echo none; }
jax_version="$(python -c "import importlib.metadata as m; print(m.version('jax'))")"

wanted=cpu
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  wanted=gpu
  extra=cuda12
elif compgen -G "/dev/accel*" >/dev/null || compgen -G "/dev/vfio/[0-9]*" >/dev/null; then
  wanted=tpu
  extra=tpu
fi
if [[ "$wanted" != cpu && "$(backend)" != "$wanted" ]]; then
  echo "installing jax[$extra]==$jax_version for the $wanted" >&2
  python -m pip install --quiet "jax[$extra]==$jax_version" \
    || echo "could not install jax[$extra]; benchmarking the $(backend) backend instead" >&2
fi
echo "jax $jax_version, backend $(backend); budget ${budget} s, cut off at ${hard_limit} s" >&2
nvidia-smi -L 2>/dev/null || true
timeout --signal=INT --kill-after=30 "$hard_limit" python -m benchmarks.gpu --budget-s "$budget" "$@"
# one run data-parallel over this machine's devices (benchmarks/scaling.py; counts above the device count are skipped)
counts=1,2,4,8
[[ "$(backend)" == cpu ]] && counts=1,2
exec timeout --signal=INT --kill-after=30 "$hard_limit" python -m benchmarks.scaling --devices "$counts" \
  --num-envs 8192 --tag "$(backend)"
