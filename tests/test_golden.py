"""Golden metrics: every registered algorithm (and its main variants) reproduces, bit for bit on CPU, the
per-iteration metrics and final parameters recorded in `tests/golden/` (one set per kind of CPU: see
`golden_cases.py`) before the algorithm layer was reshaped.

A failure here means behaviour changed. If the change is deliberate, re-record with `python tests/golden_cases.py`
and name the change (and its own test) in the commit.

Every case's lowered train program is also pinned by its digest (`tests/golden/programs.json`), the same on every
CPU: a change that leaves a digest unchanged leaves that case's numbers unchanged on every kind of CPU, including
those with no recordings of their own.
"""

import json

import numpy as np
import pytest
from golden_cases import CASES, GOLDEN_DIR, PROGRAMS, RECORD_DIR, lowering_versions, program_digest, run_case

# the quick tier (-m "not slow") replays PPO and DQN (on-policy, Q-learning); the default suite (CI) one case per
# code path: every algorithm, the recurrent PPO and DQN (R2D2), GRPO's replay and PPO's Gaussian policy; the extended
# tier the variants that switch options inside one of those paths
QUICK = {"ppo", "dqn"}
VARIANTS = {
    "a2c_gae_adam_anneal",
    "reinforce_no_baseline_whole",
    "trpo_pendulum",
    "impala_q",
    "grpo_branch",
    "grpo_lag_kl",
    "grpo_pendulum_process",
    "dqn_plain",
    "dqn_dueling_polyak",
    "dqn_prioritized",
    "sarsa_expected",
    "sac_fixed_alpha",
}


def tier(case: str):
    if case in QUICK:
        return case
    return pytest.param(case, marks=pytest.mark.extended if case in VARIANTS else pytest.mark.slow)


@pytest.mark.parametrize("case", [tier(case) for case in sorted(CASES)])
def test_bit_identical_to_recorded(case):
    if not GOLDEN_DIR.is_dir():
        pytest.skip(f"no golden recordings for this CPU ({GOLDEN_DIR.name}): `python tests/golden_cases.py` records")
    recorded = GOLDEN_DIR / f"{case}.npz"
    if not recorded.exists():
        pytest.skip(f"{case}: no recording in {GOLDEN_DIR.name}/ (`python tests/golden_cases.py --case {case}`)")
    expected = dict(np.load(recorded))
    actual = run_case(case)
    assert sorted(actual) == sorted(expected), "the set of metrics / parameter leaves changed"
    where = (
        ""
        if GOLDEN_DIR == RECORD_DIR
        else f" (replayed against {GOLDEN_DIR.name}/, recorded on another CPU of this ISA: with the code unchanged,"
        f" `python tests/golden_cases.py` records this CPU's own in {RECORD_DIR.name}/)"
    )
    for name, value in expected.items():
        np.testing.assert_array_equal(actual[name], value, err_msg=f"{case}: {name} differs{where}")


@pytest.mark.parametrize("case", sorted(CASES))
def test_program_unchanged(case):
    if not PROGRAMS.exists():
        pytest.skip(f"no {PROGRAMS.name}: `python tests/golden_cases.py --programs-only` records the digests")
    recorded = json.loads(PROGRAMS.read_text())
    if case not in recorded["sha256"]:
        pytest.skip(f"{case}: no digest in {PROGRAMS.name} (`python tests/golden_cases.py --programs-only`)")
    installed = lowering_versions()
    if recorded["versions"] != installed:
        changed = ", ".join(f"{k} {v} here, {recorded['versions'].get(k)} when recorded" for k, v in installed.items()
                            if recorded["versions"].get(k) != v)  # fmt: skip
        pytest.skip(f"{PROGRAMS.name} was recorded with other package versions ({changed})")
    assert program_digest(case) == recorded["sha256"][case], (
        f"{case}: the train program JAX lowers changed, so its numbers may change on any CPU; if the change is "
        "deliberate, re-record (`python tests/golden_cases.py`) and name it in the commit"
    )
