"""The scheduler's shortcuts across cycles change no decision: on short Ai2-like, frontier and
ITP simulations with several seeds, the decision log with them equals the log of a scheduler that
re-examines every pending job after every release, while their debugging check (a search
wherever a shortcut answered) holds throughout; and the shortcuts do save searches."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from cycle_log import CycleLog, logged_run

from toposched.workloads.ai2 import ai2_like
from toposched.workloads.frontier import frontier_lab
from toposched.workloads.model import Workload
from toposched.workloads.replay import default_traces_dir, itp_replay

TRACES = default_traces_dir()
needs_itp = pytest.mark.skipif(
    not (TRACES / "itp").is_dir(), reason=f"ITP traces not found at {TRACES / 'itp'}"
)


@dataclass(frozen=True)
class Run:
    name: str
    workload: Callable[[], Workload]


RUNS = (
    Run("ai2-seed4", lambda: ai2_like(seed=4, days=0.5, gpus=256)),
    Run("ai2-seed5-team", lambda: ai2_like(seed=5, days=0.5, gpus=256, training_sizes="team")),
    Run("ai2-seed6", lambda: ai2_like(seed=6, days=0.3, gpus=512)),
    Run("frontier-seed2", lambda: frontier_lab(seed=2, days=3.0, racks_per_block=2)),
    Run("frontier-seed4", lambda: frontier_lab(seed=4, days=3.0, racks_per_block=3)),
)
ITP_RUNS = (
    Run("itp04", lambda: itp_replay(4, nodes=16, days=2.0)),
    Run("itp07", lambda: itp_replay(7, nodes=8, days=2.0)),
)
ALL_RUNS = (
    *(pytest.param(run, id=run.name) for run in RUNS),
    *(pytest.param(run, id=run.name, marks=needs_itp) for run in ITP_RUNS),
)


def decisions(run: Run, **settings: Any) -> CycleLog:
    """The decision log of `run` under a scheduler with `settings`, and its placement searches."""
    return logged_run(run.workload(), None, **settings)


@pytest.mark.parametrize("run", ALL_RUNS)
def test_kept_failures_decide_as_full_re_examination(run: Run) -> None:
    full = decisions(run, keep_failures_through_releases=False)
    kept = decisions(run, keep_failures_through_releases=True, verify_kept_failures=True)

    assert full.lines, f"{run.name}: no decisions to compare"
    for number, (want, got) in enumerate(zip(full.lines, kept.lines, strict=False), start=1):
        assert got == want, f"{run.name}: decision {number} differs"
    assert len(kept.lines) == len(full.lines)
    assert kept.searches <= full.searches


def test_kept_failures_save_searches_on_a_loaded_cluster() -> None:
    run = RUNS[0]
    full = decisions(run, keep_failures_through_releases=False)
    kept = decisions(run, keep_failures_through_releases=True)
    assert kept.lines == full.lines
    assert kept.searches < full.searches * 0.9, (kept.searches, full.searches)
