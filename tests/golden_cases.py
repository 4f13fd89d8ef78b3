"""The golden-metrics cases: short fixed-seed CPU runs of every registered algorithm and its main variants.

`python tests/golden_cases.py` records every case's per-iteration metrics and final parameters to
`tests/golden/<isa>/<case>.npz`; `tests/test_golden.py` replays the cases and requires bit-identical results, so
a refactor that changes any number on CPU fails loudly. Re-record only for a deliberate change of behaviour, on
each kind of machine, and name it in the commit.

XLA compiles CPU code for the CPU it runs on, and the numbers differ in the last bits between vector ISAs (AVX-512
code rounds differently from AVX2 code; capping the ISA with `--xla_cpu_max_isa` does not make them agree: XLA's
runtime kernels still choose by CPU) and between CPU models of one ISA (an Intel and an AMD AVX-512 CPU differ).
So each kind of CPU has its own recordings: `tests/golden/<isa>-<vendor>-<family>-<model>/` (for example
`avx512-intel-6-143`), else the first recordings of its ISA, `tests/golden/<isa>/`.

Beside them, `tests/golden/programs.json` holds the SHA-256 of each case's train program as JAX lowers it (StableHLO
text, before XLA), with the versions of the packages that shape it. The lowered program is the same on every CPU,
and XLA turns the same program into the same numbers on a given CPU, so an unchanged digest means unchanged numbers
on every kind of CPU, recorded here or not; any machine can re-record the digests.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
from importlib import metadata
from pathlib import Path

import jax
import numpy as np

from jaxrl.run.compile import CPU_COMPILE_OPTIONS, WIDE_VECTOR_OPTIONS, this_cpu, wide_vectors


def vector_isa() -> str:
    """The widest x86 vector ISA of this CPU ("avx512", "avx2"), else the machine's name ("aarch64", ...)."""
    flags = this_cpu().get("flags", "").split()
    return "avx512" if "avx512f" in flags else "avx2" if "avx2" in flags else platform.machine()


def cpu_kind() -> str:
    """This CPU as `<isa>-<vendor>-<family>-<model>` ("avx512-intel-6-143"), or the ISA alone where /proc/cpuinfo
    does not say."""
    info = this_cpu()
    vendor = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(info.get("vendor_id", ""), info.get("vendor_id"))
    parts = [vector_isa(), vendor, info.get("cpu family"), info.get("model")]
    return "-".join(parts) if all(parts) else vector_isa()


GOLDEN_ROOT = Path(__file__).parent / "golden"
RECORD_DIR = GOLDEN_ROOT / cpu_kind()  # where this CPU's recordings go
GOLDEN_DIR = RECORD_DIR if RECORD_DIR.is_dir() else GOLDEN_ROOT / vector_isa()  # what this CPU replays
PROGRAMS = GOLDEN_ROOT / "programs.json"  # {"versions": {package: version}, "sha256": {case: digest}}
# the packages whose code shapes the lowered programs (jaxlib's MLIR bindings print their text)
LOWERING_PACKAGES = ("jax", "jaxlib", "flax", "optax", "gymnax", "distrax", "flashbax")


# What jaxrl's runner compiles with on this CPU (its optimisation level, its vector width where it widens them, XLA's
# CPU fusion emitters), which the recordings were made with; test processes compile with other options
# (tests/conftest.py) and the cases ask for the runner's back
XLA_DEFAULT = {
    **CPU_COMPILE_OPTIONS,
    **(WIDE_VECTOR_OPTIONS if wide_vectors() else {}),
    "xla_cpu_use_fusion_emitters": True,
}

# DQN's defaults when its cases were recorded (they changed for stability on long runs: see
# benchmarks/results/dqn_defaults.md)
DQN_BEFORE_2026_12 = dict(
    learning_rate=5e-4, target_update_interval=5, double=True, n_step=3, td_loss="huber", layer_norm=True
)

# case name -> (algorithm, Config overrides). Small configs: a few iterations each, gradient steps included.
CASES: dict[str, tuple[str, dict]] = {
    "ppo": ("ppo", dict(num_envs=4, num_steps=16, total_timesteps=192, num_minibatches=2)),
    "ppo_gru": ("ppo", dict(num_envs=4, num_steps=16, total_timesteps=192, num_minibatches=2, core="gru", core_size=8)),
    "ppo_pendulum_obsnorm": (
        "ppo",
        dict(
            env="Pendulum-v1",
            num_envs=4,
            num_steps=16,
            total_timesteps=192,
            num_minibatches=2,
            normalize_observations=True,
        ),
    ),
    "a2c": ("a2c", dict(num_envs=4, num_steps=5, total_timesteps=60)),
    "a2c_gae_adam_anneal": (
        "a2c",
        dict(
            num_envs=4,
            num_steps=8,
            total_timesteps=96,
            advantage="gae",
            gae_lambda=0.9,
            optimizer="adam",
            anneal_lr=True,
            update_epochs=2,
            num_minibatches=2,
        ),
    ),
    "reinforce": ("reinforce", dict(num_envs=4, num_steps=16, total_timesteps=192)),
    "reinforce_no_baseline_whole": (
        "reinforce",
        dict(num_envs=4, num_steps=32, total_timesteps=384, baseline=False, whole_episodes=True),
    ),
    "trpo": ("trpo", dict(num_envs=4, num_steps=16, total_timesteps=192, vf_minibatches=2)),
    "trpo_pendulum": ("trpo", dict(env="Pendulum-v1", num_envs=4, num_steps=16, total_timesteps=192, vf_minibatches=2)),
    "impala": ("impala", dict(num_envs=4, num_steps=16, total_timesteps=256)),
    "impala_q": ("impala", dict(num_envs=4, num_steps=16, total_timesteps=256, critic="q")),
    "grpo": ("grpo", dict(num_groups=2, group_size=2, horizon=16, total_timesteps=192, num_minibatches=2)),
    "grpo_branch": (
        "grpo",
        dict(num_groups=2, group_size=2, horizon=16, total_timesteps=192, num_minibatches=2, group_mode="branch"),
    ),
    "grpo_replay": (
        "grpo",
        dict(
            num_groups=2,
            group_size=2,
            horizon=16,
            total_timesteps=256,
            num_minibatches=2,
            replay_ratio=1,
            replay_capacity=4,
        ),
    ),
    "grpo_lag_kl": (
        "grpo",
        dict(
            num_groups=2,
            group_size=2,
            horizon=16,
            total_timesteps=256,
            num_minibatches=2,
            behaviour_lag=2,
            kl_reference="moving",
            kl_coef=0.1,
            ref_update_interval=2,
        ),
    ),
    "grpo_pendulum_process": (
        "grpo",
        dict(
            env="Pendulum-v1",
            num_groups=2,
            group_size=2,
            horizon=16,
            total_timesteps=192,
            num_minibatches=2,
            supervision="process",
        ),
    ),
    "dqn": (
        "dqn",
        dict(
            DQN_BEFORE_2026_12,
            num_envs=4,
            num_steps=4,
            total_timesteps=256,
            learning_starts=32,
            buffer_size=128,
            batch_size=16,
            updates_per_iteration=2,
        ),
    ),
    "dqn_plain": (
        "dqn",
        dict(
            DQN_BEFORE_2026_12,
            num_envs=4,
            num_steps=4,
            total_timesteps=256,
            learning_starts=32,
            buffer_size=128,
            batch_size=16,
            updates_per_iteration=2,
            double=False,
            n_step=1,
            layer_norm=False,
            td_loss="l2",
        ),
    ),
    "dqn_dueling_polyak": (
        "dqn",
        dict(
            DQN_BEFORE_2026_12,
            num_envs=4,
            num_steps=4,
            total_timesteps=256,
            learning_starts=32,
            buffer_size=128,
            batch_size=16,
            updates_per_iteration=2,
            dueling=True,
            tau=0.5,
            target_update_interval=1,
        ),
    ),
    "dqn_prioritized": (
        "dqn",
        dict(
            DQN_BEFORE_2026_12,
            num_envs=4,
            num_steps=4,
            total_timesteps=256,
            learning_starts=32,
            buffer_size=128,
            batch_size=16,
            updates_per_iteration=2,
            prioritized=True,
        ),
    ),
    "dqn_gru": (  # recurrent replay (R2D2): stored hidden states, a burn-in prefix
        "dqn",
        dict(
            num_envs=4,
            num_steps=4,
            total_timesteps=256,
            learning_starts=64,
            buffer_size=128,
            batch_size=8,
            updates_per_iteration=2,
            core="gru",
            core_size=16,
            sequence_length=8,
            burn_in=4,
        ),
    ),
    "pqn": ("pqn", dict(num_envs=4, num_steps=8, total_timesteps=128, num_minibatches=2)),
    "sarsa": ("sarsa", dict(num_envs=4, num_steps=8, total_timesteps=128, num_minibatches=2)),
    "sarsa_expected": ("sarsa", dict(num_envs=4, num_steps=8, total_timesteps=128, num_minibatches=2, expected=True)),
    "ddpg": (
        "ddpg",
        dict(
            num_envs=2,
            num_steps=4,
            total_timesteps=96,
            learning_starts=32,
            batch_size=16,
            updates_per_iteration=2,
            buffer_size=64,
        ),
    ),
    "td3": (
        "td3",
        dict(
            num_envs=2,
            num_steps=4,
            total_timesteps=96,
            learning_starts=32,
            batch_size=16,
            updates_per_iteration=3,
            buffer_size=64,
        ),
    ),
    "sac": (
        "sac",
        dict(
            num_envs=2,
            num_steps=4,
            total_timesteps=96,
            learning_starts=32,
            batch_size=16,
            updates_per_iteration=2,
            buffer_size=64,
        ),
    ),
    "sac_fixed_alpha": (
        "sac",
        dict(
            num_envs=2,
            num_steps=4,
            total_timesteps=96,
            learning_starts=32,
            batch_size=16,
            updates_per_iteration=2,
            buffer_size=64,
            autotune=False,
            alpha=0.2,
        ),
    ),
}

# Config fields renamed since the cases were recorded: old name -> new name, per algorithm.
RENAMED: dict[str, dict[str, str]] = {
    name: {"batch_size": "replay_batch_size"} for name in ("dqn", "ddpg", "td3", "sac")
}


def make_config(case: str):
    from jaxrl.algos import ALGORITHMS

    algo_name, overrides = CASES[case]
    renames = RENAMED.get(algo_name, {})
    algo = ALGORITHMS[algo_name]
    return algo, algo.Config(**{renames.get(k, k): v for k, v in overrides.items()})


def run_case(case: str) -> dict[str, np.ndarray]:
    """Every per-iteration metric (`metric/<name>`) and every final parameter leaf (`params/<path>`)."""
    algo, config = make_config(case)
    key = jax.random.key(0)
    state, metrics = jax.jit(algo.make_train(config)).lower(key).compile(compiler_options=XLA_DEFAULT)(key)
    out = {f"metric/{k}": np.asarray(v) for k, v in metrics.items()}
    for path, leaf in jax.tree_util.tree_flatten_with_path(state.params)[0]:
        out[f"params/{jax.tree_util.keystr(path)}"] = np.asarray(leaf)
    return out


def lowering_versions() -> dict[str, str]:
    """The installed version of each of LOWERING_PACKAGES ("absent" for one that is not installed)."""

    def installed(package: str) -> str:
        try:
            return metadata.version(package)
        except metadata.PackageNotFoundError:
            return "absent"

    return {package: installed(package) for package in LOWERING_PACKAGES}


def program_digest(case: str) -> str:
    """SHA-256 of the case's train program as JAX lowers it (`jax.jit(...).lower(key).as_text()`: StableHLO, without
    source locations), which does not depend on the CPU."""
    algo, config = make_config(case)
    text = jax.jit(algo.make_train(config)).lower(jax.random.key(0)).as_text()
    return hashlib.sha256(text.encode()).hexdigest()


def record_programs(cases) -> None:
    """Writes the digests of `cases` to PROGRAMS with this machine's LOWERING_PACKAGES versions; the other cases'
    digests are kept only when they were recorded with the same versions."""
    versions = lowering_versions()
    recorded = json.loads(PROGRAMS.read_text()) if PROGRAMS.exists() else {}
    digests = recorded.get("sha256", {}) if recorded.get("versions") == versions else {}
    digests.update({case: program_digest(case) for case in cases})
    text = json.dumps({"versions": versions, "sha256": dict(sorted(digests.items()))}, indent=1)
    PROGRAMS.write_text(text + "\n")
    print(f"{PROGRAMS}: {len(digests)} program digests ({', '.join(f'{k} {v}' for k, v in versions.items())})")


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Record the golden cases (all of them unless --case is given): this CPU's metrics and parameters,"
        " and the programs' digests, which are the same on every CPU."
    )
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="a case to record (repeatable)")
    parser.add_argument("--out", type=Path, default=RECORD_DIR, help=f"folder of the .npz files (default {RECORD_DIR})")
    parser.add_argument("--programs-only", action="store_true", help=f"record only the digests ({PROGRAMS.name})")
    args = parser.parse_args()
    record_programs(args.case or CASES)
    if args.programs_only:
        return
    args.out.mkdir(parents=True, exist_ok=True)
    for case in args.case or CASES:
        out = run_case(case)
        np.savez_compressed(args.out / f"{case}.npz", **out)
        print(
            f"{case}: {sum(k.startswith('metric/') for k in out)} metrics, "
            f"{sum(k.startswith('params/') for k in out)} parameter leaves"
        )


if __name__ == "__main__":  # python tests/golden_cases.py [--case NAME] [--out DIR] [--programs-only]
    main()
