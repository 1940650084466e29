"""The simulated backend: it starts, evicts and ends runs as the scheduler decides, and tells
the scheduler of the workload's submissions, cancellations, node failures and repairs."""

from __future__ import annotations

import math

import numpy as np

from toposched.cluster.state import Health
from toposched.cluster.units import MILLI_PER_GPU
from toposched.policy.budget import BudgetTree
from toposched.scheduler.decisions import Bind, Evict, Reserve
from toposched.scheduler.jobs import JobState
from toposched.sim.events import EventKind, EventQueue, Run
from toposched.sim.protocol import CycleLike, SchedulerLike
from toposched.sim.records import JobRecord, RecordState
from toposched.sim.team_ledger import TeamLedger
from toposched.sim.topology_price import Pricing
from toposched.workloads.model import Workload

__all__ = ["SimulatedBackend"]


class SimulatedBackend:
    """Every job's life and every node's health as the backend sees them, and the running
    totals the cluster's rates are read from.

    Each `on_*` handler takes an event's payload and the time, and returns whether the event
    changed the scheduler's world (a cycle is then due).
    """

    def __init__(
        self,
        workload: Workload,
        scheduler: SchedulerLike,
        tree: BudgetTree,
        events: EventQueue,
        pricing: Pricing | None,
    ) -> None:
        self.workload = workload
        self.scheduler = scheduler
        self.events = events
        self.pricing = pricing
        capacity = workload.topology.n_gpus
        self.records: dict[str, JobRecord] = {}
        for job in workload.jobs:
            allocated = job.spec.min_runtime > 0 and tree.has_budget(job.spec.account)
            self.records[job.name] = JobRecord(
                job=job,
                name=job.name,
                gpus=job.gpus,
                allocated=allocated,
                remaining=job.runtime,
                checkpoint_interval=workload.checkpoint_interval_of(job),
            )
        self.submitted_records = [self.records[job.name] for job in workload.jobs]
        """Each job's record by its index in the workload (what a submission event holds)."""
        teams = [leaf for leaf in tree.leaves() if tree.has_budget(leaf)]
        self.team_shares = {team: tree.effective_share(team) for team in teams}
        self.ledger = TeamLedger(
            teams, budgets=[self.team_shares[team] * capacity for team in teams]
        )
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
            "checkpoints": 0,
        }
        self.scheduler_events = 0
        """Calls that changed the scheduler's world (see `SimulationResult.scheduler_events`)."""
        self.running_gpus = 0.0
        self.unallocated_gpus = 0.0
        self.pending_gpus = 0.0
        self.pending_jobs = 0
        self.running_jobs = 0
        self.evicting: set[str] = set()
        self.unhealthy: dict[int, Health] = {}
        self.unhealthy_nodes = np.zeros(0, dtype=np.int64)

    def finished_jobs(self) -> int:
        """Jobs that completed or were cancelled so far."""
        return self.counts["completions"] + self.counts["cancellations"]

    def apply(self, cycle: CycleLike, now: float) -> None:
        """Carry out a cycle's decisions: start bound jobs, begin evictions, count reservations."""
        # Cycles after submissions only (toposched's scheduler; a baseline's never are).
        self.counts["incremental_cycles"] += bool(getattr(cycle, "incremental", False))
        for decision in cycle.decisions:
            if isinstance(decision, Bind):
                self._start(decision, now)
            elif isinstance(decision, Evict):
                self._evict(decision, now)
            elif isinstance(decision, Reserve):
                self.counts["reservations"] += 1

    def close(self, end: float) -> None:
        """Count the work of jobs still running at the end, and close the team ledger."""
        for record in self.records.values():
            if record.state is RecordState.RUNNING:
                elapsed = max(end - record.run_start, 0.0)
                record.delivered_gpu_seconds += record.run_gpus * elapsed
                if record.run_unallocated:
                    record.unallocated_gpu_seconds += record.run_gpus * elapsed
        self.ledger.close(end)

    # --- runs and their ends ----------------------------------------------------------------------
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
        run = Run(record, record.attempt)
        self.events.push(now + record.remaining * record.run_slowdown, EventKind.COMPLETION, run)
        if not decision.unallocated:
            job = self.scheduler.jobs.get(record.name)
            protection = job.min_runtime if job is not None else 0.0
            if protection > 0 and protection < record.remaining:
                self.events.push(now + protection, EventKind.PROTECTION_END, run)
        self._next_checkpoint(record, run, now)

    def _evict(self, decision: Evict, now: float) -> None:
        record = self.records[decision.job_id]
        if decision.job_id in self.evicting or record.state is not RecordState.RUNNING:
            return
        self.evicting.add(decision.job_id)
        self.events.push(
            now + max(decision.grace_s, 0.0),
            EventKind.GRACE_END,
            Run(record, record.attempt),
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
        self.evicting.discard(record.name)
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
        job = self.scheduler.jobs.get(record.name)
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
    def on_completion(self, run: Run, now: float) -> bool:
        record, attempt = run
        if record.state is not RecordState.RUNNING or record.attempt != attempt:
            return False  # the run ended before: evicted, or its node failed
        self.scheduler.finish(record.name, now)
        self.scheduler_events += 1
        self.counts["completions"] += 1
        self._stop(record, now)
        record.remaining = 0.0
        self._ended(record, now, RecordState.FINISHED)
        return True

    def on_grace_end(self, run: Run, now: float) -> bool:
        record, attempt = run
        if record.state is not RecordState.RUNNING or record.attempt != attempt:
            return False  # the run ended before (its node failed)
        self.scheduler.evicted(record.name, now)
        self.scheduler_events += 1
        self.counts["evictions"] += 1
        record.preemptions += 1
        lost = self._interrupted(record, now)
        if record.run_unallocated:
            record.lost_evicted_unallocated_gpu_seconds += lost
        else:
            record.lost_evicted_allocated_gpu_seconds += lost
        return True

    def on_failure(self, index: int, now: float) -> bool:
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
            self.events.push(now + failure.repair_after, EventKind.REPAIR, tuple(nodes))
        return True

    def on_repair(self, nodes: tuple[int, ...], now: float) -> bool:
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

    def on_cancel(self, name: str, now: float) -> bool:
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

    def on_submission(self, index: int, now: float) -> bool:
        job = self.workload.jobs[index]
        record = self.submitted_records[index]
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
            self.events.push(now + job.cancel_after, EventKind.CANCEL, record.name)
        return True

    def on_protection_end(self, run: Run, now: float) -> bool:
        # A job leaving its min runtime becomes preemptible: worth a cycle only if someone waits.
        record, attempt = run
        running = record.state is RecordState.RUNNING and record.attempt == attempt
        return running and self.pending_jobs > 0

    def on_checkpoint(self, run: Run, now: float) -> bool:
        """A resumable run saved its work: an eviction now loses only what follows. It opens no
        room, so no cycle is due for it."""
        record, attempt = run
        if record.state is not RecordState.RUNNING or record.attempt != attempt:
            return False  # the run ended before
        name = record.name
        if name in self.evicting:
            return False
        self.scheduler.report_checkpoint(name, now)
        self.counts["checkpoints"] += 1
        self._checkpoint_after(record, run, now)  # a run with checkpoints: no need to ask
        return False

    # --- checkpoints ---------------------------------------------------------------------------
    # A resumable run saves its work every `checkpoint_interval` seconds from its start (what
    # `_interrupted` keeps), and each save is reported to the scheduler, as a backend would.
    def _next_checkpoint(self, record: JobRecord, run: Run, now: float) -> None:
        if record.job.spec.resumable and record.checkpoint_interval > 0:
            self._checkpoint_after(record, run, now)

    def _checkpoint_after(self, record: JobRecord, run: Run, now: float) -> None:
        """The run's first checkpoint after `now`, queued if it comes before the run's end."""
        interval = record.checkpoint_interval
        saved = math.floor((now - record.run_start) / interval)
        following = record.run_start + (saved + 1) * interval
        if following <= now:  # `now` is a checkpoint that rounding put just below its multiple
            following += interval
        if following < record.run_start + record.remaining * record.run_slowdown:
            self.events.push(following, EventKind.CHECKPOINT, run)
