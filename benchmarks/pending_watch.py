"""What the scripts that read a toposched run after every cycle share: the run itself, with the
pending jobs kept by name as the scheduler is told of them, and a call after each cycle."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from toposched.cli.simulate_run import build_workload, scheduler_factory
from toposched.cluster.state import ClusterState
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler
from toposched.scheduler.jobs import Job, JobState
from toposched.scheduler.turn import CycleResult
from toposched.sim.engine import simulate
from toposched.sim.protocol import SchedulerLike
from toposched.sim.records import SimulationResult
from toposched.workloads.model import Workload


class Observer(Protocol):
    """What reads the run after every cycle."""

    def observe(self, now: float, result: CycleResult, pending: list[Job]) -> None:
        """After the cycle at `now` that gave `result`, with the jobs pending then."""

    def close(self, now: float) -> None:
        """The run ended at `now`."""


WatchedObserver = TypeVar("WatchedObserver", bound=Observer)


class PendingWatch:
    """The pending jobs of one scheduler: those submitted or requeued after an eviction that
    have not left the queue since (read after a cycle; pending jobs leave only in cycles and
    in calls that end them)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.names: set[str] = set()

    def pending(self) -> list[Job]:
        """The jobs pending now; the others are forgotten."""
        jobs = self.scheduler.jobs
        self.names = {name for name in self.names if jobs[name].state is JobState.PENDING}
        return [jobs[name] for name in self.names]


def watched_run(
    args: argparse.Namespace,
    observer_for: Callable[[Scheduler], WatchedObserver],
    workload: Workload | None = None,
) -> tuple[SimulationResult, WatchedObserver]:
    """Simulate the workload of `args` (or `workload`) under toposched with the options of
    `args`, the observer `observer_for` makes for its scheduler reading it after every cycle;
    the result and the observer, closed at the run's end."""
    made = scheduler_factory(args)
    observers: list[WatchedObserver] = []

    def factory(state: ClusterState, tree: BudgetTree) -> SchedulerLike:
        scheduler = made(state, tree)
        assert isinstance(scheduler, Scheduler)
        watch = PendingWatch(scheduler)
        observer = observer_for(scheduler)
        observers.append(observer)
        submit, cycle, evicted = scheduler.submit, scheduler.cycle, scheduler.evicted

        def on_submit(spec: Any, now: float) -> Any:
            watch.names.add(spec.name)
            return submit(spec, now)

        def on_evicted(job_id: str, now: float) -> Any:
            watch.names.add(job_id)
            return evicted(job_id, now)

        def on_cycle(now: float) -> CycleResult:
            result = cycle(now)
            observer.observe(now, result, watch.pending())
            return result

        scheduler.submit = on_submit  # type: ignore[method-assign]
        scheduler.evicted = on_evicted  # type: ignore[method-assign]
        scheduler.cycle = on_cycle  # type: ignore[method-assign]
        return scheduler

    result = simulate(
        workload if workload is not None else build_workload(args),
        factory,
        scheduler_name="toposched",
        cycle_interval=args.cycle_every,
    )
    (observer,) = observers
    observer.close(result.end)
    return result, observer
