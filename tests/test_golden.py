"""Golden metrics: every registered algorithm (and its main variants) reproduces, bit for bit on CPU, the
per-iteration metrics and final parameters recorded in `tests/golden/` (one set per kind of CPU: see
`golden_cases.py`) before the algorithm layer was reshaped.

A failure here means behaviour changed. If the change is deliberate, re-record with `python tests/golden_cases.py`
and name the change (and its own test) in the commit.
"""

import numpy as np
import pytest
from golden_cases import CASES, GOLDEN_DIR, RECORD_DIR, run_case

# the quick tier (-m "not slow") replays PPO and DQN (on-policy, Q-learning); the full suite (CI) every case
QUICK = {"ppo", "dqn"}


@pytest.mark.parametrize(
    "case", [case if case in QUICK else pytest.param(case, marks=pytest.mark.slow) for case in sorted(CASES)]
)
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
