"""The scheduler's decisions on short Ai2-like and frontier simulations match those recorded
in tests/data/decisions, decision by decision (see tests/decision_log.py)."""

from __future__ import annotations

import pytest
from decision_log import RUNS, Run, path_of, record


@pytest.mark.parametrize("run", RUNS, ids=[run.name for run in RUNS])
def test_decisions_match_the_recorded_log(run: Run) -> None:
    expected = path_of(run).read_text().splitlines()
    assert expected, f"{path_of(run)} holds no decisions"

    actual = record(run)

    for number, (want, got) in enumerate(zip(expected, actual, strict=False), start=1):
        assert got == want, f"{run.name}: decision {number} differs"
    assert len(actual) == len(expected), f"{run.name}: decision counts differ"
