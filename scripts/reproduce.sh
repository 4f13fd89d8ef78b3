#!/usr/bin/env bash
# Reproduces the results the README quotes, with the README's commands; every result lands in benchmarks/results/
# (Markdown tables and PNG plots where the script draws them, compact JSON for the rest).
#   scripts/reproduce.sh                 # every step below, in order (many hours on a 2-core CPU)
#   scripts/reproduce.sh quick scorecard # some steps
#   scripts/reproduce.sh --list          # the steps and their commands, nothing run
# Steps (times as measured on the README's 2-core CPU machine):
#   quick       the scorecard's quick tier: CartPole-v1 and Pendulum-v1 at a fifth of the budgets (minutes)
#   scorecard   the scorecard at the README's budgets (about 2.5 h and more); it resumes: the cells already in
#               benchmarks/results/scorecard.json are kept (move that file away to measure them again)
#   families    value-based, REINFORCE/A2C/TRPO and DDPG/TD3/SAC tables of the README's algorithm section
#   grpo        PPO vs the GRPO variants (about 45 min)
#   throughput  the throughput table (about 3 min) and the sweep throughput figures (a few minutes)
#   peers       jaxrl against rejax and a PyTorch PPO (about 13 min; builds benchmarks/.venv-rejax and .venv-torch)
# The MinAtar cells at full budget and the accelerator figures are a GPU job: scripts/accelerator.sh.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

step_commands() {
  case "$1" in
    quick) echo "python -m benchmarks.scorecard --quick" ;;
    scorecard)
      echo "python -m benchmarks.scorecard --envs CartPole-v1 Acrobot-v1 --resume"
      echo "python -m benchmarks.scorecard --envs Pendulum-v1 MountainCar-v0 MountainCarContinuous-v0 --resume"
      echo "python -m benchmarks.scorecard --envs Breakout-MinAtar --algos ppo --resume"
      echo "python -m benchmarks.scorecard --envs SpaceInvaders-MinAtar Breakout-MinAtar --algos ppo pqn --budget-fraction 0.2 --resume"
      echo "python -m benchmarks.scorecard --envs Breakout-MinAtar SpaceInvaders-MinAtar --algos sarsa a2c impala reinforce grpo --budget-fraction 0.1 --resume"
      ;;
    families)
      echo "python -m benchmarks.value_family --algos dqn pqn sarsa expected_sarsa"
      echo "python -m benchmarks.spectrum_onpolicy"
      echo "python -m benchmarks.spectrum_continuous"
      ;;
    grpo) echo "python -m benchmarks.grpo_curves" ;;
    throughput)
      echo "python -m benchmarks.throughput"
      echo "python -m benchmarks.sweep_throughput --quick --repeats 5"
      ;;
    peers) echo "python -m benchmarks.peers --seeds 4 --repeats 5 --torch-steps 32768" ;;
    *) return 1 ;;
  esac
}

all_steps=(quick scorecard families grpo throughput peers)
if [[ "${1:-}" == --list ]]; then
  for step in "${all_steps[@]}"; do
    echo "$step:"
    step_commands "$step" | sed 's/^/  /'
  done
  exit 0
fi
steps=("$@")
[[ ${#steps[@]} -eq 0 ]] && steps=("${all_steps[@]}")
for step in "${steps[@]}"; do
  step_commands "$step" >/dev/null || { echo "unknown step '$step'; one of: ${all_steps[*]}" >&2; exit 2; }
done

use_venv
for step in "${steps[@]}"; do
  while IFS= read -r command; do
    echo "== $step: $command" >&2
    start=$SECONDS
    eval "$command" </dev/null
    echo "== $step: done in $((SECONDS - start)) s" >&2
  done < <(step_commands "$step")
done
