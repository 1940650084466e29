"""Jobs moving between the queue and the running set: the allocation held in the state, the
protection fixed at start, usage charged, and the ledger kept."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from toposched.cluster.batch_allocate import allocate_many
from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation, ClusterState
from toposched.placement.search import Placement
from toposched.policy.budget import ROOT, BudgetTree, account_ancestors
from toposched.policy.queue_entry import QueueEntry
from toposched.policy.usage import UsageTracker
from toposched.scheduler.errors import InternalError
from toposched.scheduler.jobs import Job, JobState, ReasonCode
from toposched.scheduler.ledger import Ledger
from toposched.scheduler.queueing import JobQueue, TalliedQueue
from toposched.scheduler.settings import SchedulerSettings
from toposched.scheduler.wording import hours


class Lifecycle:
    """Queues, starts and stops jobs; every change of a job's place goes through here."""

    def __init__(
        self,
        state: ClusterState,
        tree: BudgetTree,
        usage: UsageTracker,
        queue: JobQueue,
        ledger: Ledger,
        settings: SchedulerSettings,
    ) -> None:
        self.state = state
        self.tree = tree
        self.usage = usage
        self.queue = queue
        self.ledger = ledger
        self.settings = settings
        # Without a protection cap, how a job runs follows from its min runtime and account
        # alone (and the budget tree): fixed once per pair while the tree stands, as
        # (unallocated, min runtime, reason, history event).
        self._protections: dict[tuple[float, str], tuple[bool, float, str, str]] = {}
        self._protections_version = -1

    def enqueue(self, job: Job) -> None:
        """Put the new `job` in the pending queue."""
        self.queue.add(self._queued(job))

    def requeue(self, job: Job) -> None:
        """Put `job`, back from running, in the pending queue again. Fair Tree's queue takes
        its entry without checking its fields again (`PendingQueue.add_again`): they are the
        ones checked when it was first queued, or a new priority checked when set."""
        entry = self._queued(job)
        queue = self.queue
        if isinstance(queue, TalliedQueue):
            queue.add_again(entry, job)
        else:
            queue.add(entry)

    def _queued(self, job: Job) -> QueueEntry:
        """The job marked pending, and its entry for the queue."""
        job.state = JobState.PENDING
        job.start_time = None
        job.unhold()
        job.reason = "queued; waiting for the next cycle"
        job.reason_code = ReasonCode.QUEUED
        spec = job.spec
        return QueueEntry(
            job_id=job.job_id,
            # One string per account: a cycle reads every pending job's account, and one
            # shared string stays in cache where thousands of copies would not.
            account=sys.intern(spec.account),
            priority=spec.priority,
            submit_time=job.submit_time,
            unallocated=spec.min_runtime == 0,
            gpus=job.gpus,
        )

    def start(self, job: Job, placement: Placement, now: float) -> None:
        """Start the pending `job` on `placement`: hold it, fix its protection, charge it.
        An allocation that does not fit the cluster is bad input (`InputError`); an owner the
        state already holds is the scheduler's own fault (`InternalError`)."""
        self._allocate(job, placement.allocation)
        self.queue.remove(job.job_id)
        self._mark_started(job, now)
        self.ledger.started(job)

    def _allocate(self, job: Job, allocation: Allocation) -> None:
        """Hold `allocation` for `job` (elastic pod sets: the pods each got, `Job.hold`), or
        neither."""
        try:
            job.hold(allocation)
            self.state.allocate(job.job_id, allocation)
        except InputError as error:
            job.unhold()
            if error.field == "owner":
                raise InternalError(job.job_id, str(error)) from error
            raise

    def _mark_started(self, job: Job, now: float) -> None:
        """The job runs from `now`: its state, start, attempt, protection and history, and its
        usage charged (GPU time: pods without GPUs charge nothing)."""
        job.state = JobState.RUNNING
        job.start_time = now
        job.attempts += 1
        if self.settings.protection_cap is None:
            unallocated, job.min_runtime, job.reason, event = self._protection(job)
            job.unallocated = unallocated
            job.reason_code = ReasonCode.RUNNING
        else:
            how = self._protect(job)
            event = f"started ({how})" if how else "started"
        job.record(now, event)
        if self._charged(job):
            self.usage.start(job.spec.account, job.gpus, now)

    def adopt(self, job: Job, placement: Placement, start_time: float, now: float) -> None:
        """Take over the new `job`, never queued, as running on `placement` since `start_time`:
        the same as queueing it and `start` at `now`, then dating its start back (protection
        counts from the real start; usage is charged from `now`)."""
        self._allocate(job, placement.allocation)
        self._mark_started(job, now)
        job.start_time = start_time
        self.ledger.started(job)

    def adopt_many(
        self,
        jobs: Sequence[Job],
        allocations: Sequence[Allocation],
        start_times: Sequence[float],
        now: float,
    ) -> None:
        """`adopt` each job in order, with the same result; their allocations are checked and
        taken together (`allocate_many`), all or none. What the first searches would count of
        the running jobs is counted here (see `ReleaseOrder.count_every_job`): a restart pays
        for it, not the first decision after it."""
        try:
            for job, allocation in zip(jobs, allocations, strict=True):
                if job.sets is not None:  # `hold` changes nothing for a job of one pod set
                    job.hold(allocation)
            allocate_many(self.state, [job.spec.name for job in jobs], allocations)
        except InputError as error:
            for job in jobs:
                job.unhold()
            if error.field == "owner":
                raise InternalError(str(error.value), str(error)) from error
            raise
        if self.settings.protection_cap is None:
            self._mark_many_started(jobs, start_times, now)
        else:
            # A cap reads the team's usage as each job before it was charged.
            for job, start_time in zip(jobs, start_times, strict=True):
                self._mark_started(job, now)
                job.start_time = start_time
        # The ledger's records are read by no step above (protection reads usage): filled
        # once, for all of them.
        self.ledger.started_many(jobs)
        # What the first cycle's searches would read of the jobs adopted, read here, once:
        # where each holds GPUs per innermost domain in release order (a reservation search's
        # count), and the protections ended by `now` (the preemptible index's refresh).
        self.ledger.release_order.count_every_job()
        self.ledger.preemptible.refresh(now)

    def _mark_many_started(
        self, jobs: Sequence[Job], start_times: Sequence[float], now: float
    ) -> None:
        """`_mark_started` for each job, then its start dated back, in one pass (without a
        protection cap): a job's protection depends on its min runtime and account only, and
        is fixed once per pair; usage is charged together (`_charge_many`)."""
        charges: list[tuple[str, float]] = []
        running, code = JobState.RUNNING, ReasonCode.RUNNING
        charge_unallocated = self.settings.charge_unallocated
        for job, start_time in zip(jobs, start_times, strict=True):
            spec = job.spec
            unallocated, job.min_runtime, job.reason, event = self._protection(job)
            job.unallocated = unallocated
            job.reason_code = code
            job.state = running
            job.attempts += 1
            job.history.append((now, event))
            job.start_time = start_time
            gpus = job.gpus
            if gpus > 0 and (not unallocated or charge_unallocated):
                charges.append((spec.account, gpus))
        self._charge_many(charges, now)

    def _charge_many(self, charges: list[tuple[str, float]], now: float) -> None:
        """`usage.start` for each (account, GPUs) in order; where every charge and every meter
        it moves holds a whole number of GPUs, as one charge per account (sums of whole numbers
        are exact in any order, so the meters end the same)."""
        usage = self.usage
        whole = all(gpus.is_integer() for _, gpus in charges) and all(
            usage.running(meter).is_integer()
            for account in {account for account, _ in charges}
            for meter in (ROOT, *account_ancestors(account))
        )
        if not whole:
            for account, gpus in charges:
                usage.start(account, gpus, now)
            return
        totals: dict[str, float] = {}
        for account, gpus in charges:
            totals[account] = totals.get(account, 0.0) + gpus
        for account, total in totals.items():
            usage.start(account, total, now)

    def _protection(self, job: Job) -> tuple[bool, float, str, str]:
        """How the starting `job` runs without a protection cap (see `_protections`): whether
        as unallocated work, its protection, its reason and its history event; `_protect`
        fixes them for the first job of each (min runtime, account) while the tree stands."""
        if self._protections_version != self.tree.version:
            self._protections.clear()
            self._protections_version = self.tree.version
        spec = job.spec
        key = (spec.min_runtime, spec.account)
        protection = self._protections.get(key)
        if protection is None:
            how = self._protect(job)
            protection = self._protections[key] = (
                job.unallocated,
                job.min_runtime,
                job.reason,
                f"started ({how})" if how else "started",
            )
        return protection

    def _protect(self, job: Job) -> str:
        """Fix whether the starting job runs as unallocated work and its protection, and say
        so in its reason; returns how it runs, in words ("" when plainly)."""
        spec, contract = job.spec, self.settings.contract
        job.unallocated = contract.is_unallocated(spec.min_runtime, spec.account, self.tree)
        job.min_runtime = (
            0.0 if job.unallocated else contract.effective_min_runtime(spec.min_runtime)
        )
        how = " as unallocated work" if job.unallocated else ""
        cap = self.settings.protection_cap
        if cap is not None and job.min_runtime > cap and self.ledger.beyond_budget(job):
            job.min_runtime = cap
            how = (
                " beyond its team's budget, unprotected"
                if cap == 0
                else f" beyond its team's budget, protected for {hours(cap)}"
            )
        job.reason = "running" + how
        job.reason_code = ReasonCode.RUNNING
        return how.strip()

    def stop(self, job: Job, now: float, jobs: dict[str, Job]) -> None:
        """The running `job` stopped: its GPUs return and its charge ends."""
        self.ledger.forget(job, jobs)
        try:
            self.state.release(job.job_id)
        except InputError as error:
            raise InternalError(job.job_id, str(error)) from error
        del self.ledger.running[job.job_id]
        if self._charged(job):
            self.usage.stop(job.spec.account, job.gpus, now)

    def _charged(self, job: Job) -> bool:
        """Whether the job's run is charged to its account's usage."""
        return job.gpus > 0 and (not job.unallocated or self.settings.charge_unallocated)
