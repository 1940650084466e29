"""Shared helper for decision-log tests: a simulation under toposched's scheduler whose every
cycle is logged, its decisions as lines of `decision_log.line`, with what the cycles did."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from decision_log import line

from toposched.cluster.state import ClusterState
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.sim.engine import simulate
from toposched.workloads.model import Workload


@dataclass
class CycleLog:
    """What a simulation's cycles decided, one line per decision, and what they did."""

    lines: list[str] = field(default_factory=list)
    searches: int = 0
    """Placement searches run."""
    incremental: int = 0
    """Cycles run after submissions only."""
    skipped: int = 0
    """Pending jobs' turns those cycles skipped."""
    schedulers: list[Scheduler] = field(default_factory=list)
    """The scheduler the simulation built."""

    @property
    def scheduler(self) -> Scheduler:
        (scheduler,) = self.schedulers
        return scheduler


def logged_run(
    workload: Workload, configure: Callable[[Scheduler], None] | None = None, **settings: Any
) -> CycleLog:
    """Simulate `workload` under a scheduler built with `settings` and then `configure`d,
    logging every cycle."""
    log = CycleLog()

    def build(state: ClusterState, tree: BudgetTree) -> Scheduler:
        scheduler = Scheduler(state, tree, **settings)
        if configure is not None:
            configure(scheduler)
        cycle = scheduler.cycle

        def recorded(now: float) -> CycleResult:
            result = cycle(now)
            log.lines.extend(line(now, decision) for decision in result.decisions)
            log.searches += result.searches
            log.incremental += result.incremental
            log.skipped += result.skipped
            return result

        scheduler.cycle = recorded  # type: ignore[method-assign]
        log.schedulers.append(scheduler)
        return scheduler

    simulate(workload, build)
    return log
