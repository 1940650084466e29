"""Scheduler: the event-driven cycle over the cluster state, the policy and the placement engine."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Collection, Iterator, Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation, ClusterState, Health, distinct
from toposched.jobs.spec import JobSpec
from toposched.placement.request import GangRequest
from toposched.placement.search import Placement
from toposched.policy.budget import BudgetTree
from toposched.policy.contract import PreemptedFate
from toposched.policy.fairshare import PendingQueue, Segment
from toposched.policy.owed_standing import OwedOrder
from toposched.policy.usage import UsageTracker
from toposched.scheduler.adoptions import Adoption, Adoptions
from toposched.scheduler.between_cycles import BetweenCycles
from toposched.scheduler.decisions import Bind
from toposched.scheduler.defrag import fragmentation
from toposched.scheduler.evictions import Evictor
from toposched.scheduler.explain import Explanation, QueueRow, queue_rows
from toposched.scheduler.explain import explain as explain_job
from toposched.scheduler.failures import FailureMemo, FailureReasons
from toposched.scheduler.fence import Fence, FenceMarks
from toposched.scheduler.incremental import Incremental, Walk
from toposched.scheduler.interruptions import Interruptions
from toposched.scheduler.jobs import Job, JobState, ReasonCode, job_sets
from toposched.scheduler.ledger import Ledger, work_since
from toposched.scheduler.lifecycle import Lifecycle
from toposched.scheduler.owed_first import LeastMetFirst, OwedAccounts
from toposched.scheduler.placing import Placing
from toposched.scheduler.preemption import VictimSearch
from toposched.scheduler.preemptor import Preemptor
from toposched.scheduler.queueing import JobQueue, TalliedQueue, queue_runs
from toposched.scheduler.reservations import ReservationSearch
from toposched.scheduler.settings import SchedulerSettings
from toposched.scheduler.spares import SparePool
from toposched.scheduler.tally import PendingTally
from toposched.scheduler.turn import CycleResult, FullCycle, Turn
from toposched.scheduler.walker import Walker, checked_cycle

__all__ = ["CycleResult", "Scheduler"]

IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]


class Scheduler:
    """Orders pending jobs by Fair Tree (accounts short of their budget first), places what
    fits, preempts under the contract for jobs that should run but do not fit, reserves for the
    first blocked large job, and backfills behind it only where the reservation is not delayed.

    No clock and no I/O: every call passes `now` (seconds). `cycle(now)` returns decisions; the
    allocations of bound jobs are already held in `state`, and a backend starts the pods. Events
    (`finish`, `fail`, `set_health`, budget changes) are applied as calls, each followed by a cycle.
    A resumable gang a node failure interrupts within its account's budget heads the next cycle
    (`failed_first`, on by default).

    Settings come as one `SchedulerSettings`, or by their names as keywords
    (`Scheduler(state, tree, reserve_min_gpus=16)`), or both (the keywords win). `queue`
    replaces the Fair Tree order (see `JobQueue`).
    """

    orders_owed_first = True
    """Whether the allocated work of accounts running below their budget goes first."""

    def __init__(
        self,
        state: ClusterState,
        tree: BudgetTree,
        settings: SchedulerSettings | None = None,
        *,
        usage: UsageTracker | None = None,
        queue: JobQueue | None = None,
        **keywords: Any,
    ) -> None:
        self.settings = settings = SchedulerSettings.of(settings, keywords)
        self.state = state
        self.tree = tree
        self.contract = settings.contract
        self.policy = settings.policy
        self.usage = usage if usage is not None else UsageTracker()
        self.jobs: dict[str, Job] = {}
        self.queue: JobQueue = (
            queue
            if queue is not None
            else PendingQueue(tree, self.usage, settings.unallocated_order)
        )
        self.tally: PendingTally | None = None
        if type(self.queue) is PendingQueue:
            # Fair Tree's queue counted by key, so that a cycle may stop walking it early.
            self.tally = PendingTally()
            self.queue = TalliedQueue(self.queue, self.jobs, self.tally)
        self.ledger = Ledger(state, tree, self.usage)
        self.running = self.ledger.running
        self.victim_search = VictimSearch(state, self.policy, settings.impact)
        self.preemptor = Preemptor(
            state, tree, self.usage, self.contract, self.ledger, self.victim_search
        )
        self.reservations = ReservationSearch(state, self.policy, self.ledger, self.victim_search)
        self.evictor = Evictor(state, self.ledger, settings)
        self.spares = SparePool(state, *settings.spares) if settings.spares is not None else None
        self.lifecycle = Lifecycle(state, tree, self.usage, self.queue, self.ledger, settings)
        self.interruptions = Interruptions(
            state,
            self.ledger,
            self.spares,
            settings.failed_first,
            settings.keep_failed_nodes,
            settings.keep_failed_nodes_from,
            self.jobs,
        )
        self._cycles = 0
        self.least_met: LeastMetFirst | None = None
        if settings.owed_order is OwedOrder.LEAST_MET and self.tally is not None:
            self.least_met = LeastMetFirst(tree, self.ledger, self.tally, settings.owed_half_life)
        self.owed = OwedAccounts(tree, self.ledger, self.usage, self.queue, self.least_met)
        self.failures = FailureMemo()
        self.fence_marks = FenceMarks(state.topology.n_nodes)
        self.placing = Placing(
            state, self.policy, self.failures, self._start, settings.verify_kept_failures
        )
        # A cycle after submissions only walks the new jobs and the few whose answers others
        # read (see `Incremental`); only with Fair Tree's queue, whose order it can check.
        self.incremental = Incremental(
            settings.incremental and self.tally is not None, settings.full_cycle_every
        )
        self.between_cycles = BetweenCycles(
            state,
            settings,
            self.ledger,
            self.failures,
            self.incremental,
            self.preemptor,
            self.interruptions,
            self.spares,
            self.jobs,
            self.tally is not None,
        )
        self.walker = Walker(
            state,
            tree,
            self.usage,
            self.queue,
            self.ledger,
            settings,
            self.failures,
            self.placing,
            self.preemptor,
            self.reservations,
            self.evictor,
            self.incremental,
            self.between_cycles.epoch,
            self.jobs,
            self.tally,
            self.interruptions,
        )

    # --- events ------------------------------------------------------------------------------
    def submit(self, spec: JobSpec, now: float) -> Job:
        """Queue a job; names must be unique among live jobs and accounts must exist."""
        job = self._new_job(spec, now)
        self._enqueue(job)
        self.incremental.submitted_job(job.job_id)
        return job

    def _new_job(self, spec: JobSpec, now: float, request: GangRequest | None = None) -> Job:
        """A new job, registered; `request`: the spec's, when the caller resolved it."""
        existing = self.jobs.get(spec.name)
        if existing is not None and existing.state in (JobState.PENDING, JobState.RUNNING):
            raise InputError("name", spec.name, f"a job of that name is already {existing.state}")
        self._check_account(spec.account)
        sets = job_sets(spec, self.state.topology)
        if request is None:
            request = GangRequest.from_spec(spec, self.state.topology)
        submit_time = spec.submit_time if spec.submit_time is not None else now
        job = Job(spec=spec, request=request, submit_time=submit_time, sets=sets)
        job.record(now, "submitted")
        self.jobs[spec.name] = job
        return job

    def _check_account(self, account: str) -> None:
        """InputError unless `account` names a leaf of the budget tree (a team)."""
        # `is_leaf` refuses an account the tree does not name, as `require` would.
        if not self.tree.is_leaf(account):
            raise InputError("account", account, "jobs charge to a leaf account (a team)")

    def adopt(self, spec: JobSpec, allocation: Allocation, start_time: float, now: float) -> Job:
        """Take over a job already running on `allocation` (recovery after a restart)."""
        self.incremental.forget(FullCycle.ADOPTED)
        job = self.submit(spec, now)
        self._start(job, Placement(job.request, allocation), now)
        # Protection counts from the real start; usage is charged from now, when we took over.
        self.ledger.forget(job, self.jobs)
        job.start_time = start_time
        self.ledger.remember(job)
        return job

    def adopt_many(self, adoptions: Sequence[Adoption] | Adoptions, now: float) -> list[Job]:
        """`adopt` each in order, with the same result, for the many running jobs of a restart,
        in one pass: a job goes to the running set without passing through the queue, and is
        counted in the ledger once, from its real start (made as `_new_jobs` makes them)."""
        self.incremental.forget(FullCycle.ADOPTED)
        columns = adoptions if isinstance(adoptions, Adoptions) else Adoptions.of(adoptions)
        adopted = list(self._new_jobs(columns.specs, now, JobState.RUNNING))
        self.lifecycle.adopt_many(adopted, columns.allocations, columns.start_times, now)
        self.between_cycles.started(len(adopted))
        return adopted

    def submit_many(self, specs: Sequence[JobSpec], now: float) -> list[Job]:
        """`submit` each in order, with the same result, for the many pending jobs of a
        restart (made as `_new_jobs` makes them)."""
        jobs = []
        enqueue, submitted = self.lifecycle.enqueue, self.incremental.submitted_job
        for job in self._new_jobs(specs, now, JobState.PENDING):
            enqueue(job)
            submitted(job.job_id)
            jobs.append(job)
        return jobs

    def _new_jobs(self, specs: Sequence[JobSpec], now: float, state: JobState) -> Iterator[Job]:
        """`_new_job` for each spec in order, each job put in `state` and handed over before
        the next is made (so that a name given twice is refused as live). The specs are stored
        documents, validated when they were accepted: each account is checked once, and specs
        copied from one document (sharing its resources and topology) share one request,
        resolved against the topology once and copied under each job's name."""
        jobs = self.jobs
        requests: dict[tuple[int, int, int], GangRequest] = {}
        accounts: set[str] = set()
        for spec in specs:
            name = spec.name
            key = (id(spec.resources_per_pod), id(spec.topology), spec.pods)
            known = requests.get(key)
            if known is None or spec.pod_sets is not None or name in jobs:
                job = self._new_job(spec, now)
                if spec.pod_sets is None:
                    requests[key] = job.request
                accounts.add(spec.account)
            else:
                if spec.account not in accounts:
                    self._check_account(spec.account)
                    accounts.add(spec.account)
                submit_time = spec.submit_time if spec.submit_time is not None else now
                job = Job(spec, known.renamed(name), submit_time, history=[(now, "submitted")])
                jobs[name] = job
            job.state = state
            yield job

    def finish(self, job_id: str, now: float) -> Job:
        """A running job ended on its own: its GPUs return."""
        self.incremental.completed()
        job = self._running(job_id)
        self._stop(job, now)
        job.state = JobState.FINISHED
        job.reason_code = ReasonCode.ENDED
        job.end_time = now
        job.record(now, "finished")
        return job

    def fail(self, job_id: str, now: float, requeue: bool | None = None) -> Job:
        """A running job failed: requeue it (resumable jobs by default) or mark it failed."""
        self.incremental.forget(FullCycle.JOB_FAILED)
        job = self._running(job_id)
        self._stop(job, now)
        again = job.spec.resumable if requeue is None else requeue
        if again:
            job.record(now, "failed; requeued")
            self.lifecycle.requeue(job)
        else:
            job.state = JobState.FAILED
            job.reason_code = ReasonCode.ENDED
            job.end_time = now
            job.record(now, "failed")
        return job

    def evicted(self, job_id: str, now: float) -> Job:
        """The backend reports an evicted job gone: its GPUs return to the nominee, and the job
        is requeued (resumable, or restartable by policy) or failed, as the contract says.
        To the next cycle, a release and, requeued, a submission (see
        `toposched.scheduler.incremental`)."""
        self.incremental.completed()
        job = self._running(job_id)
        self._stop(job, now)
        job.preemptions += 1
        # Of the contract's answer, the fate and its reason: the job is queued again with
        # `Lifecycle.requeue`'s entry.
        fate, reason = self.contract.preempted_fate(job.spec.resumable)
        job.record(now, f"preempted; {reason}")
        if fate is not PreemptedFate.FAIL:
            self.lifecycle.requeue(job)
            self.incremental.submitted_job(job.job_id)
        else:
            job.state = JobState.FAILED
            job.reason_code = ReasonCode.ENDED
            job.end_time = now
        return job

    def report_checkpoint(self, job_id: str, now: float) -> None:
        """A running job saved its state: preempting it now loses only work after `now`."""
        self.incremental.checkpointed()
        job = self._running(job_id)
        previous = job.last_checkpoint if job.last_checkpoint is not None else job.start_time
        if previous is not None and now > previous:
            job.checkpoint_every = now - previous
        job.last_checkpoint = now
        self.ledger.preemptible.checkpoint(job_id, work_since(job))

    def cancel(self, job_id: str, now: float) -> Job:
        self.incremental.forget(FullCycle.CANCELLED)
        job = self._job(job_id)
        if job.state is JobState.RUNNING:
            self._stop(job, now)
        elif job.state is JobState.PENDING:
            self.queue.remove(job_id)
            self.preemptor.left_queue(job_id)
            kept = self.interruptions.forget(job)
            if job.nomination is not None and self.spares is not None and not kept:
                # A spare given to this job goes back to its pool.
                self.spares.refill(job.nomination.nodes)
            job.nomination = None
        else:
            raise InputError("job", job_id, f"is already {job.state}")
        job.state = JobState.CANCELLED
        job.reason_code = ReasonCode.ENDED
        job.end_time = now
        job.record(now, "cancelled")
        return job

    def set_health(self, nodes: list[int] | IntArray, health: Health, now: float) -> list[Job]:
        """Change node health; gangs on nodes that go down fail at once (resumable: requeued).

        With spares, a requeued gang is nominated its surviving nodes plus a spare of the
        failed node's domain, and restarts there in the next cycle. Held spares stay held when
        marked healthy (a hold is a closure, apart from health); a repaired node refills its
        domain's pool.
        """
        self.incremental.forget(FullCycle.NODE_HEALTH)
        node_array = distinct(np.asarray(nodes, dtype=np.int64))
        spares = self.spares
        self.state.set_health(node_array, health)
        failed: list[Job] = []
        if spares is not None and health is Health.DOWN:
            spares.release_down(node_array)
        if health is Health.DOWN:
            self.interruptions.new_failure()
            for owner in sorted(self.owners_on(node_array)):
                if owner not in self.running:
                    continue
                allocation = self.state.allocations[owner]
                job = self.fail(owner, now)
                failed.append(job)
                if job.state is JobState.PENDING:
                    self.interruptions.requeued(job, allocation, node_array, now)
        elif spares is not None and health is Health.HEALTHY:
            spares.refill(node_array)
        return failed

    def set_priority(self, job_id: str, priority: int, now: float) -> Job:
        """Change a live job's priority. A pending job takes its new place among its account's
        jobs; a running job keeps running, and its new priority counts in later preemption
        decisions (as a victim, against jobs of its account)."""
        self.incremental.forget(FullCycle.PRIORITY)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise InputError(
                "priority", priority, "must be an integer (higher runs first within an account)"
            )
        job = self._job(job_id)
        if job.state not in (JobState.PENDING, JobState.RUNNING):
            raise InputError(
                "job", job_id, f"is {job.state}: only a pending or running job can change priority"
            )
        old = job.spec.priority
        job.spec = job.spec.model_copy(update={"priority": priority})
        if job.state is JobState.PENDING:
            entry = self.queue.remove(job_id)
            self.queue.add(dataclasses.replace(entry, priority=priority))
        else:
            self.ledger.set_priority(job)
            self.preemptor.kept.forget_all()
        job.record(now, f"priority changed from {old} to {priority}")
        return job

    def set_share(self, account: str, share: float) -> None:
        """A budget change: the next cycle orders by it (accounts re-rank, jobs do not re-sort)."""
        self.incremental.forget(FullCycle.BUDGET)
        self.tree.set_share(account, share)

    # --- the cycle ---------------------------------------------------------------------------
    def cycle(self, now: float) -> CycleResult:
        """Order pending jobs, place what fits, preempt for what should run, reserve for the
        first blocked large job and backfill behind it. Returns the decisions; bound jobs
        already hold their allocation, evicted jobs keep theirs until reported gone.

        The phases, in order: jobs leave draining nodes; the queue is ordered (gangs a node
        failure interrupted first); then each pending job in turn starts on nodes kept for it,
        is placed (or backfilled behind the reservation), preempts, or gets the reservation.
        After submissions only, the jobs the last cycle answered alike are skipped, with the
        same decisions (see `toposched.scheduler.incremental`).
        """
        if self.settings.check_incremental and self.incremental.reference is not None:
            # A full cycle on a copy taken before, to compare with.
            trial = copy.deepcopy(self)
            trial.incremental.enabled = False
            return checked_cycle(now, self._cycle, trial._cycle)
        return self._cycle(now)

    def _cycle(self, now: float) -> CycleResult:
        result = CycleResult(now)
        self._cycles += 1
        if self.least_met is not None:
            self.least_met.advance(now)
        self.between_cycles.before_cycle()
        stamp = self.walker.stamp()
        fence = Fence(self.state, self.fence_marks)
        turn = Turn(
            now,
            self._cycles,
            result,
            fence,
            FailureReasons(self._cycles, self.failures.older_messages),
            self.settings.max_preemptions_per_cycle,
        )
        walk: Walk | None = None
        try:
            self.evictor.evict_from_draining_nodes(now, result.decisions)
            if result.decisions:
                self.incremental.forget(FullCycle.DRAINING)
            # Accounts below their budget go first for the whole cycle, even once a start here
            # takes one past it: the order is fixed before any decision.
            # Read as far as the walk goes (see `toposched.scheduler.tally`), but where
            # compared job by job with the order the last cycle left.
            size = len(self.queue)
            owed = self._owed_first(now)
            queued = queue_runs(self.queue, now, owed)
            self.interruptions.owed_first(owed)
            reordered = self.interruptions.puts_gangs_first
            runs = self.interruptions.first(queued)
            # Gangs put first make one run of every account's jobs, which no walk may leave.
            by_account = runs is queued and self.tally is not None
            segments = None if reordered else self._segments(now, owed)
            leaves = self.walker.leaves(now)
            walk = self.incremental.walk(now, stamp, leaves, size, segments, self.tally)
            result.incremental = walk.skipping
            result.full_because = walk.full_because
            whole = self.walker.walk(turn, runs, size, walk, owed, by_account)
            result.skipped = walk.skipped
        except BaseException:
            walk = None
            raise
        finally:
            fence.open_all()
            if walk is not None:
                self.walker.leave_reference(turn, walk, whole, owed)
            self.between_cycles.after_cycle(turn.opened)
            if self.least_met is not None:
                self.least_met.settle()
        return result

    def _segments(self, now: float, owed: Collection[str]) -> list[Segment] | None:
        """The runs the queue lays its jobs in at `now`, to compare with those the last cycle
        left (None: it left none)."""
        tallied = self.walker.tallied
        if self.incremental.reference is None or tallied is None:
            return None
        return tallied.segments(tallied.ranking(now), owed)

    # --- bookkeeping -------------------------------------------------------------------------
    def bind(self, job_id: str, placement: Placement, now: float) -> Bind:
        """Start the pending job on `placement`, found by the caller's own placement (a
        scheduler that brings its own cycle, as the baselines do); returns the decision."""
        self.incremental.forget(FullCycle.OUTSIDE)
        job = self._job(job_id)
        if job.state is not JobState.PENDING:
            raise InputError("job", job_id, f"is {job.state}, not pending")
        self._start(job, placement, now)
        return Bind(job.job_id, placement.allocation, job.unallocated)

    def _enqueue(self, job: Job) -> None:
        self.lifecycle.enqueue(job)

    def _start(self, job: Job, placement: Placement, now: float) -> None:
        self.lifecycle.start(job, placement, now)
        self.preemptor.left_queue(job.job_id)
        self.between_cycles.started()

    def _stop(self, job: Job, now: float) -> None:
        with self.between_cycles.stopping(job):
            self.lifecycle.stop(job, now, self.jobs)

    def _job(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise InputError("job", job_id, "no job of that name")
        return job

    def _running(self, job_id: str) -> Job:
        # Asked at every end and checkpoint of a run: one lookup, and `_job`'s error if none.
        job = self.jobs.get(job_id)
        if job is None or job.state is not JobState.RUNNING:
            job = self._job(job_id)
            raise InputError("job", job_id, f"is {job.state}, not running")
        return job

    # --- accounts ----------------------------------------------------------------------------
    def running_gpus(self, account: str) -> float:
        """GPUs the account's allocated jobs hold now, without those already on their way out
        (see `Ledger.running_gpus`)."""
        return self.ledger.running_gpus(account)

    def budget_gpus(self, account: str) -> float:
        """The account's budget in GPUs: its effective share of the cluster's GPUs."""
        return self.ledger.budget_gpus(account)

    def _owed_first(self, now: float) -> Collection[str]:
        """The accounts whose allocated work the queue puts first (see `OwedAccounts`)."""
        return self.owed.in_order(now) if self.orders_owed_first else frozenset()

    def owed_accounts(self) -> frozenset[str]:
        """Accounts with pending jobs that run fewer allocated GPUs than their budget: their
        allocated work goes first in the queue, since a budget is what an account is owed."""
        return self.owed.accounts()

    def owners_on(self, nodes: IntArray) -> set[str]:
        """Running jobs holding anything on `nodes`."""
        return self.ledger.owners_on(nodes)

    def grace_for(self, job: Job) -> float:
        """Seconds an evicted job gets to exit: its own `grace_period` up to `max_grace_s`, or
        the cluster default `grace_s`."""
        return self.evictor.grace_for(job)

    # --- moves -------------------------------------------------------------------------------
    def compact(self, now: float) -> CycleResult:
        """Background compaction: empty one partly used innermost domain by moving its
        resumable jobs into fuller ones, within `compaction_moves_per_hour`."""
        self.incremental.forget(FullCycle.OUTSIDE)
        result = CycleResult(now)
        self.evictor.compact(now, result.decisions)
        return result

    def fragmentation(self, now: float, max_shapes: int = 32) -> float:
        """Share of free GPUs that none of the pending job shapes could use."""
        shapes: dict[tuple[object, ...], GangRequest] = {}
        for entry in self.queue.ordered(now, self._owed_first(now)):
            pending = self.jobs[entry.job_id]
            shapes.setdefault(pending.shape, pending.request)
            if len(shapes) >= max_shapes:
                break
        return fragmentation(self.state, shapes.values())

    # --- explanations ------------------------------------------------------------------------
    def is_protected(self, job_id: str, now: float) -> bool:
        """Whether a running job is inside its min runtime (unallocated work never is)."""
        job = self._running(job_id)
        assert job.start_time is not None
        return not job.unallocated and now < job.start_time + job.min_runtime

    def explain(self, job_id: str, now: float) -> Explanation:
        """Why a job is where it is: state, queue position, sort key, reservation, reason and
        history; `.text` says it in one line."""
        return explain_job(self._job(job_id), self.queue, now, self._owed_first(now))

    def queue_rows(self, now: float) -> list[QueueRow]:
        """The pending queue in order: position, job, account, standing, priority, tier,
        whether the account runs below its budget (`owed`), reason."""
        return queue_rows(self.queue, self.jobs, now, self._owed_first(now))
