"""The discrete-event simulator: a clock and a simulated backend around an unmodified scheduler."""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from enum import IntEnum
from types import TracebackType
from typing import Any, NamedTuple

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from toposched.cluster.errors import InputError
from toposched.cluster.state import ClusterState, Health
from toposched.cluster.units import DAY, HOUR, MILLI_PER_GPU
from toposched.policy.budget import BudgetTree
from toposched.scheduler.decisions import Bind, Evict, Reserve
from toposched.scheduler.jobs import JobState
from toposched.sim.metrics import (
    Integrals,
    JobRecord,
    RecordState,
    Sample,
    SimulationResult,
    TeamLedger,
)
from toposched.sim.protocol import SchedulerFactory, SchedulerLike, toposched_scheduler
from toposched.sim.topology_price import Pricing, TopologyPrice
from toposched.workloads.model import Workload

__all__ = [
    "DEFAULT_SAMPLE_INTERVAL",
    "EventKind",
    "SchedulerFactory",
    "SchedulerLike",
    "Simulation",
    "simulate",
    "toposched_scheduler",
]

DEFAULT_SAMPLE_INTERVAL = HOUR
# Runs longer than this many batches of events show a progress bar (when asked for one).
_PROGRESS_EVERY = 500


class EventKind(IntEnum):
    """Event kinds; at equal times they are handled in this order (then in push order).

    Completions come first so that work ending at the instant a node fails is not lost, and
    samples last so that they see the cycle that followed the instant's events. CYCLE marks a
    cycle postponed by a minimum cycle interval.
    """

    COMPLETION = 0
    GRACE_END = 1
    REPAIR = 2
    FAILURE = 3
    CANCEL = 4
    SUBMISSION = 5
    PROTECTION_END = 6
    CYCLE = 7
    SAMPLE = 8


class Event(NamedTuple):
    """An event in the heap; the sequence makes the heap order total and replayable."""

    time: float
    kind: int
    sequence: int
    payload: Any
    """What the handler of `kind` takes: a job or failure index, a job name, a `Run`, nodes."""


class Run(NamedTuple):
    """One run of a job: events of a run that has since ended are ignored."""

    name: str
    attempt: int


@dataclass(frozen=True, slots=True)
class Rates:
    """The piecewise-constant quantities that hold until the next event, in GPUs."""

    delivered: float
    """GPUs held by running jobs."""
    unallocated: float
    """GPUs held by running unallocated work."""
    idle: float
    """Free GPUs on healthy nodes, and held spares."""
    unavailable: float
    """Free GPUs on nodes that are down."""
    busy: float
    """GPUs holding any allocation (a shared GPU counts whole)."""
    outstanding: float
    """GPUs asked for by pending and running jobs."""
    waiting: bool
    """Whether any job is pending."""


class Simulation:
    """Replays a workload through a scheduler, jumping from event to event.

    The simulator owns the clock and plays the backend: it submits jobs when they arrive,
    starts bound jobs at once, ends them after their actual runtime, lets evicted jobs go after
    their grace period, takes nodes down and brings them back. After each instant's events it
    runs one scheduler cycle. Nothing here reads a wall clock except to measure the scheduler,
    so a run is a pure function of the workload.
    """

    def __init__(
        self,
        workload: Workload,
        scheduler_factory: SchedulerFactory = toposched_scheduler,
        *,
        horizon: float | None = None,
        sample_interval: float = DEFAULT_SAMPLE_INTERVAL,
        progress: bool = False,
        scheduler_name: str | None = None,
        cycle_interval: float = 0.0,
        topology_price: TopologyPrice | None = None,
    ) -> None:
        if not math.isfinite(sample_interval) or sample_interval <= 0:
            raise InputError("sample_interval", sample_interval, "must be a number of seconds > 0")
        if not math.isfinite(cycle_interval) or cycle_interval < 0:
            raise InputError("cycle_interval", cycle_interval, "must be a number of seconds >= 0")
        self.workload = workload
        self.cycle_interval = cycle_interval
        """Minimum simulated seconds between cycles; 0 runs one after every instant with
        events, as an event-driven scheduler does. Events between cycles still apply at once."""
        self.topology_price = topology_price
        """Runs of jobs with topology constraints slow down when spread beyond them; None: free."""
        self.scheduler_factory = scheduler_factory
        self.horizon = horizon if horizon is not None else workload.horizon
        self.sample_interval = sample_interval
        self.progress = progress
        self.scheduler_name = scheduler_name

    def run(self) -> SimulationResult:
        return _Run(self).execute()


def simulate(
    workload: Workload,
    scheduler_factory: SchedulerFactory = toposched_scheduler,
    **options: Any,
) -> SimulationResult:
    """Run `workload` through the scheduler `scheduler_factory` builds; see `Simulation`."""
    return Simulation(workload, scheduler_factory, **options).run()


class _Run:
    """The mutable state of one simulation run."""

    def __init__(self, simulation: Simulation) -> None:
        workload = simulation.workload
        self.simulation = simulation
        self.workload = workload
        self.horizon = simulation.horizon
        self.state = ClusterState(workload.topology)
        self.tree = BudgetTree.from_dict(workload.budget)
        self.scheduler = simulation.scheduler_factory(self.state, self.tree)
        self.name = simulation.scheduler_name or type(self.scheduler).__name__.lower()
        self.capacity = workload.topology.n_gpus
        price = simulation.topology_price
        self.pricing = Pricing(price, workload.topology) if price is not None else None
        self.records: dict[str, JobRecord] = {}
        for job in workload.jobs:
            allocated = job.spec.min_runtime > 0 and self.tree.has_budget(job.spec.account)
            self.records[job.name] = JobRecord(
                job=job,
                gpus=job.gpus,
                allocated=allocated,
                remaining=job.runtime,
                checkpoint_interval=workload.checkpoint_interval_of(job),
            )
        teams = [leaf for leaf in self.tree.leaves() if self.tree.has_budget(leaf)]
        self.team_shares = {team: self.tree.effective_share(team) for team in teams}
        self.ledger = TeamLedger(
            teams, budgets=[self.team_shares[team] * self.capacity for team in teams]
        )
        self.integrals = Integrals()
        self.samples: list[Sample] = []
        self.cycle_seconds: list[float] = []
        self.scheduler_cpu_seconds = 0.0
        self.counts: dict[str, int] = {
            "submissions": 0,
            "completions": 0,
            "cancellations": 0,
            "evictions": 0,
            "failures": 0,
            "failures_skipped": 0,
            "repairs": 0,
            "reservations": 0,
            "binds": 0,
            "backfilled_binds": 0,
            "batches": 0,
            "incremental_cycles": 0,
        }
        self.scheduler_events = 0
        self.heap: list[Event] = []
        self.sequence = 0
        self.live_events = 0
        """Events other than samples still in the heap: the run ends when none are left."""
        self.running_gpus = 0.0
        self.unallocated_gpus = 0.0
        self.pending_gpus = 0.0
        self.pending_jobs = 0
        self.running_jobs = 0
        self.evicting: set[str] = set()
        self.unhealthy: dict[int, Health] = {}
        self.unhealthy_nodes = np.zeros(0, dtype=np.int64)
        self.now = 0.0
        self.rates = Rates(0.0, 0.0, float(self.capacity), 0.0, 0.0, 0.0, False)
        self.last_cycle = -math.inf
        self.cycle_pending = False

    # --- the loop ------------------------------------------------------------------------------
    def execute(self) -> SimulationResult:
        jobs = self.workload.jobs
        start = 0.0  # workload times are >= 0: the clock starts at 0
        self.now = start
        for index, job in enumerate(jobs):
            self._push(job.submit_time, EventKind.SUBMISSION, index)
        for index, failure in enumerate(self.workload.failures):
            self._push(failure.time, EventKind.FAILURE, index)
        self._push(start, EventKind.SAMPLE, None, live=False)
        self._measure_rates()
        wall_start = time.perf_counter()
        handlers: dict[int, Callable[[Any, float], bool]] = {
            EventKind.COMPLETION: self._completion,
            EventKind.GRACE_END: self._grace_end,
            EventKind.REPAIR: self._repair,
            EventKind.FAILURE: self._failure,
            EventKind.CANCEL: self._cancel,
            EventKind.SUBMISSION: self._submission,
            EventKind.PROTECTION_END: self._protection_end,
            EventKind.CYCLE: self._postponed_cycle,
        }
        interrupted = False
        try:
            self._loop(handlers)
        except KeyboardInterrupt:
            interrupted = True
        wall = time.perf_counter() - wall_start
        horizon = self.horizon
        end = horizon if horizon is not None and not interrupted else self.now
        self._integrate(end)
        self._close(end)
        result = SimulationResult(
            workload=self.workload.name,
            scheduler=self.name,
            capacity_gpus=self.capacity,
            start=start,
            end=end,
            team_shares=self.team_shares,
            records=self.records,
            samples=self.samples,
            integrals=self.integrals,
            ledger=self.ledger,
            cycle_seconds=self.cycle_seconds,
            wall_seconds=wall,
            scheduler_events=self.scheduler_events,
            counts=self.counts,
            notes=dict(self.workload.notes),
            scheduler_cpu_seconds=self.scheduler_cpu_seconds,
            interrupted=interrupted,
        )
        if interrupted:
            raise SimulationInterrupted(result)
        return result

    def _loop(self, handlers: dict[int, Callable[[Any, float], bool]]) -> None:
        heap = self.heap
        horizon = self.horizon
        with self._progress_bar() as advance:
            while heap:
                now = heap[0].time
                if horizon is not None and now >= horizon:
                    break
                if horizon is None and not self.live_events:
                    break  # only samples are left: the run is over
                self._integrate(now)
                changed = False
                sample = False
                while heap and heap[0].time == now:
                    _, kind, _, payload = heapq.heappop(heap)
                    if kind == EventKind.SAMPLE:
                        sample = True
                        continue
                    self.live_events -= 1
                    if handlers[kind](payload, now):
                        changed = True
                if changed:
                    self._maybe_cycle(now)
                self.counts["batches"] += 1
                self._measure_rates()
                if sample:
                    self._sample(now)
                    following = now + self.simulation.sample_interval
                    if self.live_events or (horizon is not None and following < horizon):
                        self._push(following, EventKind.SAMPLE, None, live=False)
                if advance is not None and self.counts["batches"] % _PROGRESS_EVERY == 0:
                    advance(now)

    def _progress_bar(self) -> AbstractContextManager[Callable[[float], None] | None]:
        if not self.simulation.progress:
            return nullcontext(None)
        horizon = self.horizon
        if horizon is not None:
            return _ProgressBar(
                "day {task.completed:.1f} of {task.total:.1f}",
                horizon / DAY,
                lambda now: min(now, horizon) / DAY,
            )
        # Without a horizon the run ends when the last job does, whenever that is: count jobs.
        return _ProgressBar(
            "{task.completed:,.0f} of {task.total:,.0f} jobs finished",
            max(len(self.workload.jobs), 1),
            lambda now: self.finished_jobs(),
        )

    def finished_jobs(self) -> int:
        """Jobs that completed or were cancelled so far."""
        return self.counts["completions"] + self.counts["cancellations"]

    def _push(self, when: float, kind: EventKind, payload: Any, live: bool = True) -> None:
        self.sequence += 1
        heapq.heappush(self.heap, Event(when, int(kind), self.sequence, payload))
        if live:
            self.live_events += 1

    # --- measuring -----------------------------------------------------------------------------
    def _measure_rates(self) -> None:
        """Read the piecewise-constant quantities that hold until the next event."""
        state = self.state
        idle = int(state.free_milli[0][0]) / MILLI_PER_GPU
        free_whole = int(state.free_gpus[0][0])
        unavailable = 0.0
        if self.unhealthy_nodes.size:
            nodes = self.unhealthy_nodes
            unavailable = int(state.gpu_free_milli[nodes].sum(dtype=np.int64)) / MILLI_PER_GPU
            free_whole += int(state.free_whole_gpus[nodes].sum(dtype=np.int64))
        spares = self.scheduler.spares
        if spares is not None:
            # Held spare nodes are idle capacity kept out of service, not work.
            idle += spares.gpus
            free_whole += spares.gpus
        busy = float(self.capacity - free_whole)
        outstanding = self.pending_gpus + self.running_gpus
        self.rates = Rates(
            delivered=self.running_gpus,
            unallocated=self.unallocated_gpus,
            idle=idle,
            unavailable=unavailable,
            busy=busy,
            outstanding=outstanding,
            waiting=self.pending_jobs > 0,
        )

    def _integrate(self, now: float) -> None:
        elapsed = now - self.now
        if elapsed > 0:
            rates = self.rates
            integrals = self.integrals
            integrals.delivered += rates.delivered * elapsed
            integrals.unallocated += rates.unallocated * elapsed
            integrals.idle += rates.idle * elapsed
            integrals.unavailable += rates.unavailable * elapsed
            integrals.busy += rates.busy * elapsed
            integrals.outstanding += rates.outstanding * elapsed
            if rates.waiting:
                integrals.waiting_seconds += elapsed
                integrals.busy_while_waiting += rates.busy * elapsed
        self.now = max(self.now, now)

    def _sample(self, now: float) -> None:
        rates = self.rates
        delivered = rates.delivered
        capacity = self.capacity or 1
        unhealthy_gpus = (
            int(self.workload.topology.gpu_count[self.unhealthy_nodes].sum())
            if self.unhealthy_nodes.size
            else 0
        )
        self.samples.append(
            Sample(
                time=now,
                occupancy=rates.busy / capacity,
                allocation_ratio=delivered / capacity,
                unallocated_share=rates.unallocated / delivered if delivered > 0 else 0.0,
                running_jobs=self.running_jobs,
                pending_jobs=self.pending_jobs,
                pending_gpus=self.pending_gpus,
                outstanding_ratio=rates.outstanding / capacity,
                unhealthy_gpus=unhealthy_gpus,
            )
        )

    def _close(self, end: float) -> None:
        """Count the work of jobs still running at the end, and close the team ledger."""
        for record in self.records.values():
            if record.state is RecordState.RUNNING:
                elapsed = max(end - record.run_start, 0.0)
                record.delivered_gpu_seconds += record.run_gpus * elapsed
                if record.run_unallocated:
                    record.unallocated_gpu_seconds += record.run_gpus * elapsed
        self.ledger.close(end)

    # --- the scheduler's cycle and its decisions -------------------------------------------------
    def _maybe_cycle(self, now: float) -> None:
        interval = self.simulation.cycle_interval
        if interval <= 0 or now >= self.last_cycle + interval:
            self.last_cycle = now
            self._cycle(now)
        elif not self.cycle_pending:
            self.cycle_pending = True
            self._push(self.last_cycle + interval, EventKind.CYCLE, None)

    def _postponed_cycle(self, payload: None, now: float) -> bool:
        self.cycle_pending = False
        return True

    def _cycle(self, now: float) -> None:
        began, cpu_began = time.perf_counter(), time.process_time()
        result = self.scheduler.cycle(now)
        self.cycle_seconds.append(time.perf_counter() - began)
        self.scheduler_cpu_seconds += time.process_time() - cpu_began
        # Cycles after submissions only (toposched's scheduler; a baseline's never are).
        self.counts["incremental_cycles"] += bool(getattr(result, "incremental", False))
        for decision in result.decisions:
            if isinstance(decision, Bind):
                self._start(decision, now)
            elif isinstance(decision, Evict):
                self._evict(decision, now)
            elif isinstance(decision, Reserve):
                self.counts["reservations"] += 1

    def _start(self, decision: Bind, now: float) -> None:
        record = self.records[decision.job_id]
        gpus = decision.allocation.gpu_milli_total / MILLI_PER_GPU
        record.state = RecordState.RUNNING
        record.attempt += 1
        record.run_start = now
        record.run_gpus = gpus
        record.run_unallocated = decision.unallocated
        record.run_slowdown = (
            self.pricing.factor(record.job.spec, decision.allocation) if self.pricing else 1.0
        )
        record.backfilled = record.backfilled or decision.backfilled
        if record.first_start is None:
            record.first_start = now
        if record.allocated:
            self.ledger.waiting(record.account, now, record.gpus, added=False)
        self.pending_gpus -= record.gpus
        self.pending_jobs -= 1
        self.running_jobs += 1
        self.running_gpus += gpus
        if decision.unallocated:
            self.unallocated_gpus += gpus
        else:
            self.ledger.change(record.account, now, delivered=gpus)
        self.counts["binds"] += 1
        self.counts["backfilled_binds"] += decision.backfilled
        run = Run(record.job.name, record.attempt)
        self._push(now + record.remaining * record.run_slowdown, EventKind.COMPLETION, run)
        if not decision.unallocated:
            job = self.scheduler.jobs.get(record.job.name)
            protection = job.min_runtime if job is not None else 0.0
            if protection > 0 and protection < record.remaining:
                self._push(now + protection, EventKind.PROTECTION_END, run)

    def _evict(self, decision: Evict, now: float) -> None:
        record = self.records[decision.job_id]
        if decision.job_id in self.evicting or record.state is not RecordState.RUNNING:
            return
        self.evicting.add(decision.job_id)
        self._push(
            now + max(decision.grace_s, 0.0),
            EventKind.GRACE_END,
            Run(decision.job_id, record.attempt),
        )

    def _stop(self, record: JobRecord, now: float) -> float:
        """End the current run; returns its length in seconds."""
        elapsed = now - record.run_start
        gpus = record.run_gpus
        record.delivered_gpu_seconds += gpus * elapsed
        record.topology_gpu_seconds += gpus * elapsed * (1.0 - 1.0 / record.run_slowdown)
        self.running_gpus -= gpus
        self.running_jobs -= 1
        if record.run_unallocated:
            record.unallocated_gpu_seconds += gpus * elapsed
            self.unallocated_gpus -= gpus
        else:
            self.ledger.change(record.account, now, delivered=-gpus)
        # Sums of float GPU counts drift by 1e-12; an empty cluster must read exactly 0.
        if self.running_jobs == 0:
            self.running_gpus = self.unallocated_gpus = 0.0
        self.evicting.discard(record.job.name)
        return elapsed

    def _interrupted(self, record: JobRecord, now: float) -> float:
        """A run ended early (preempted or its node failed): keep checkpointed work, requeue or
        fail as the scheduler decided. Returns the GPU-seconds of work lost."""
        elapsed = self._stop(record, now)
        if record.job.spec.resumable:
            interval = record.checkpoint_interval
            saved = math.floor(elapsed / interval) * interval if interval > 0 else elapsed
            record.remaining = max(record.remaining - saved / record.run_slowdown, 0.0)
            lost = elapsed - saved
        else:
            record.remaining = record.job.runtime
            lost = elapsed
        record.lost_gpu_seconds += record.run_gpus * lost
        job = self.scheduler.jobs.get(record.job.name)
        if job is not None and job.state is JobState.PENDING:
            record.state = RecordState.PENDING
            if record.allocated:
                self.ledger.waiting(record.account, now, record.gpus, added=True)
            self.pending_gpus += record.gpus
            self.pending_jobs += 1
        else:
            self._ended(record, now, RecordState.FAILED)
        return record.run_gpus * lost

    def _ended(self, record: JobRecord, now: float, state: RecordState) -> None:
        record.state = state
        record.end_time = now
        if record.allocated:
            self.ledger.change(record.account, now, demand=-record.gpus)

    # --- events ----------------------------------------------------------------------------------
    def _running_attempt(self, run: Run) -> JobRecord | None:
        record = self.records[run.name]
        if record.state is not RecordState.RUNNING or record.attempt != run.attempt:
            return None  # the run this event belonged to already ended
        return record

    def _completion(self, run: Run, now: float) -> bool:
        record = self._running_attempt(run)
        if record is None:
            return False
        self.scheduler.finish(record.job.name, now)
        self.scheduler_events += 1
        self.counts["completions"] += 1
        self._stop(record, now)
        record.remaining = 0.0
        self._ended(record, now, RecordState.FINISHED)
        return True

    def _grace_end(self, run: Run, now: float) -> bool:
        record = self._running_attempt(run)
        if record is None:
            return False
        self.scheduler.evicted(record.job.name, now)
        self.scheduler_events += 1
        self.counts["evictions"] += 1
        record.preemptions += 1
        lost = self._interrupted(record, now)
        if record.run_unallocated:
            record.lost_evicted_unallocated_gpu_seconds += lost
        else:
            record.lost_evicted_allocated_gpu_seconds += lost
        return True

    def _failure(self, index: int, now: float) -> bool:
        failure = self.workload.failures[index]
        nodes = [node for node in failure.nodes if node not in self.unhealthy]
        if not nodes:
            self.counts["failures_skipped"] += 1
            return False
        failed = self.scheduler.set_health(np.asarray(nodes, dtype=np.int64), Health.DOWN, now)
        self.scheduler_events += 1
        self.counts["failures"] += 1
        for job in failed:
            record = self.records.get(job.job_id)
            if record is not None and record.state is RecordState.RUNNING:
                record.interruptions += 1
                record.lost_to_failures_gpu_seconds += self._interrupted(record, now)
        for node in nodes:
            self.unhealthy[node] = Health.DOWN
        self.unhealthy_nodes = np.fromiter(sorted(self.unhealthy), dtype=np.int64)
        if failure.repair_after is not None:
            self._push(now + failure.repair_after, EventKind.REPAIR, tuple(nodes))
        return True

    def _repair(self, nodes: tuple[int, ...], now: float) -> bool:
        back = [node for node in nodes if self.unhealthy.get(node) is Health.DOWN]
        if not back:
            return False
        self.scheduler.set_health(np.asarray(back, dtype=np.int64), Health.HEALTHY, now)
        self.scheduler_events += 1
        self.counts["repairs"] += 1
        for node in back:
            del self.unhealthy[node]
        self.unhealthy_nodes = np.fromiter(sorted(self.unhealthy), dtype=np.int64)
        return True

    def _cancel(self, name: str, now: float) -> bool:
        record = self.records[name]
        if record.state is not RecordState.PENDING or record.first_start is not None:
            return False
        self.scheduler.cancel(name, now)
        self.scheduler_events += 1
        self.counts["cancellations"] += 1
        if record.allocated:
            self.ledger.waiting(record.account, now, record.gpus, added=False)
        self.pending_gpus -= record.gpus
        self.pending_jobs -= 1
        self._ended(record, now, RecordState.CANCELLED)
        return True

    def _submission(self, index: int, now: float) -> bool:
        job = self.workload.jobs[index]
        record = self.records[job.name]
        self.scheduler.submit(job.spec, now)
        self.scheduler_events += 1
        self.counts["submissions"] += 1
        record.state = RecordState.PENDING
        self.pending_gpus += record.gpus
        self.pending_jobs += 1
        if record.allocated:
            self.ledger.change(record.account, now, demand=record.gpus)
            self.ledger.waiting(record.account, now, record.gpus, added=True)
        if job.cancel_after is not None:
            self._push(now + job.cancel_after, EventKind.CANCEL, job.name)
        return True

    def _protection_end(self, run: Run, now: float) -> bool:
        # A job leaving its min runtime becomes preemptible: worth a cycle only if someone waits.
        return self._running_attempt(run) is not None and self.pending_jobs > 0


class SimulationInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C (or SIGTERM turned into it) before its end, with the record of
    what it simulated until then (`result.interrupted` is set)."""

    def __init__(self, result: SimulationResult) -> None:
        super().__init__(f"simulation interrupted at {result.end / DAY:.2f} simulated days")
        self.result = result


class _ProgressBar:
    """A rich progress bar on stderr: `done(now)` of `total`, shown with `text`."""

    def __init__(self, text: str, total: float, done: Callable[[float], float]) -> None:
        self.done = done
        self.progress = Progress(
            TextColumn("simulating"),
            BarColumn(),
            TextColumn(text),
            TimeElapsedColumn(),
            console=Console(stderr=True),
            transient=True,
        )
        self.task = self.progress.add_task("simulate", total=total)

    def __enter__(self) -> Callable[[float], None]:
        self.progress.__enter__()
        return self.advance

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.progress.__exit__(exc_type, exc, traceback)

    def advance(self, now: float) -> None:
        self.progress.update(self.task, completed=self.done(now))
