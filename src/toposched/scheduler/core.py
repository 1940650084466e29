"""Scheduler: the event-driven cycle over the cluster state, the policy and the placement engine."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation, ClusterState, Health, distinct
from toposched.jobs.spec import JobSpec
from toposched.placement.request import GangRequest
from toposched.placement.search import Placement
from toposched.policy.budget import BudgetTree
from toposched.policy.fairshare import PendingQueue, QueueEntry, QueueTier
from toposched.policy.usage import UsageTracker
from toposched.scheduler.admission import AdmissionGate
from toposched.scheduler.decisions import Bind, Evict, Reserve
from toposched.scheduler.defrag import fragmentation
from toposched.scheduler.errors import InternalError
from toposched.scheduler.evictions import Evictor
from toposched.scheduler.explain import Explanation, QueueRow, queue_rows
from toposched.scheduler.explain import explain as explain_job
from toposched.scheduler.failures import FailureMemo, FailureReasons
from toposched.scheduler.fence import Fence
from toposched.scheduler.freed import FreedCapacity
from toposched.scheduler.incremental import (
    Incremental,
    Outcome,
    Reference,
    Walk,
    differences,
)
from toposched.scheduler.interruptions import Interruptions
from toposched.scheduler.jobs import Job, JobKind, JobState, ReasonCode, Reservation, job_sets
from toposched.scheduler.ledger import Ledger, work_since
from toposched.scheduler.lifecycle import Lifecycle
from toposched.scheduler.placing import Placing, sets_refusal
from toposched.scheduler.preemption import PreemptionPlan, VictimSearch
from toposched.scheduler.preemptor import Preemptor
from toposched.scheduler.queueing import JobQueue
from toposched.scheduler.reservations import ReservationSearch
from toposched.scheduler.settings import SchedulerSettings
from toposched.scheduler.spares import SparePool
from toposched.scheduler.turn import Answer, Asked, CycleResult, Refused, Turn
from toposched.scheduler.wording import no_preemption

__all__ = ["CycleResult", "Scheduler"]

IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]


@dataclass(frozen=True)
class Adoption:
    """A job found running (after a restart): its spec, what it holds, and since when."""

    spec: JobSpec
    allocation: Allocation
    start_time: float


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
        self.queue: JobQueue = queue if queue is not None else PendingQueue(tree, self.usage)
        self.jobs: dict[str, Job] = {}
        self.ledger = Ledger(state, tree, self.usage)
        self.running = self.ledger.running
        self.reservation: Reservation | None = None
        self.victim_search = VictimSearch(state, self.policy, settings.impact)
        self.preemptor = Preemptor(
            state, tree, self.usage, self.contract, self.ledger, self.victim_search
        )
        self.reservations = ReservationSearch(state, self.policy, self.ledger, self.victim_search)
        self.evictor = Evictor(state, self.ledger, settings)
        self.admission = AdmissionGate(settings.admission)
        self.spares = SparePool(state, *settings.spares) if settings.spares is not None else None
        self.lifecycle = Lifecycle(state, tree, self.usage, self.queue, self.ledger, settings)
        self.interruptions = Interruptions(state, self.ledger, self.spares, settings.failed_first)
        # What the cycle may remember between cycles. `_epoch` moves whenever free capacity may
        # have changed (a job started, or the cluster changed between cycles, seen by its
        # version); equal epochs and fences mean equal free capacity. Failures to place stay
        # true until capacity they could use may have been freed (`freed` tells where jobs
        # released GPUs between cycles); a reservation until anything changed.
        self._cycles = 0
        self._epoch = 0
        self._settled_version = -1
        self.failures = FailureMemo()
        self.freed = FreedCapacity(state)
        self.placing = Placing(
            state, self.policy, self.failures, self._start, settings.verify_kept_failures
        )
        self._kinds: dict[tuple[object, ...], JobKind] = {}
        # A cycle after submissions only walks the new jobs and the few whose answers others
        # read (see `Incremental`); only with Fair Tree's queue, whose order it can check.
        self.incremental = Incremental(
            settings.incremental and type(self.queue) is PendingQueue, settings.full_cycle_every
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
        self.tree.require(spec.account, "account")
        if not self.tree.is_leaf(spec.account):
            raise InputError("account", spec.account, "jobs charge to a leaf account (a team)")
        sets = job_sets(spec, self.state.topology)
        if request is None:
            request = GangRequest.from_spec(spec, self.state.topology)
        submit_time = spec.submit_time if spec.submit_time is not None else now
        job = Job(spec=spec, request=request, submit_time=submit_time, sets=sets)
        job.record(now, "submitted")
        self.jobs[spec.name] = job
        return job

    def adopt(self, spec: JobSpec, allocation: Allocation, start_time: float, now: float) -> Job:
        """Take over a job already running on `allocation` (recovery after a restart)."""
        self.incremental.forget()
        job = self.submit(spec, now)
        self._start(job, Placement(job.request, allocation), now)
        # Protection counts from the real start; usage is charged from now, when we took over.
        self.ledger.forget(job, self.jobs)
        job.start_time = start_time
        self.ledger.remember(job)
        return job

    def adopt_many(self, adoptions: Sequence[Adoption], now: float) -> list[Job]:
        """`adopt` each in order, with the same result, for the many running jobs of a restart:
        a job goes to the running set without passing through the queue, and is counted in
        the ledger once, from its real start."""
        self.incremental.forget()
        # Specs copied from one stored document share its resources and topology: their
        # requests differ by name only, resolved against the topology once.
        requests: dict[tuple[int, int, int], GangRequest] = {}
        jobs = []
        for adoption in adoptions:
            spec = adoption.spec
            key = (id(spec.resources_per_pod), id(spec.topology), spec.pods)
            known = requests.get(key)
            if known is None:
                job = self._new_job(spec, now)
                requests[key] = job.request
            else:
                job = self._new_job(spec, now, known.renamed(spec.name))
            # Running from here, never queued: the same name adopted twice is refused as such.
            job.state = JobState.RUNNING
            jobs.append(job)
        allocations = [adoption.allocation for adoption in adoptions]
        start_times = [adoption.start_time for adoption in adoptions]
        self.lifecycle.adopt_many(jobs, allocations, start_times, now)
        self._epoch += len(jobs)
        return jobs

    def finish(self, job_id: str, now: float) -> Job:
        """A running job ended on its own: its GPUs return."""
        self.incremental.forget()
        job = self._running(job_id)
        self._stop(job, now)
        job.state = JobState.FINISHED
        job.reason_code = ReasonCode.ENDED
        job.end_time = now
        job.record(now, "finished")
        return job

    def fail(self, job_id: str, now: float, requeue: bool | None = None) -> Job:
        """A running job failed: requeue it (resumable jobs by default) or mark it failed."""
        self.incremental.forget()
        job = self._running(job_id)
        self._stop(job, now)
        again = job.spec.resumable if requeue is None else requeue
        if again:
            job.record(now, "failed; requeued")
            self._enqueue(job)
        else:
            job.state = JobState.FAILED
            job.reason_code = ReasonCode.ENDED
            job.end_time = now
            job.record(now, "failed")
        return job

    def evicted(self, job_id: str, now: float) -> Job:
        """The backend reports an evicted job gone: its GPUs return to the nominee, and the job
        is requeued (resumable, or restartable by policy) or failed, as the contract says."""
        self.incremental.forget()
        job = self._running(job_id)
        view = self.ledger.views[job_id]
        self._stop(job, now)
        job.preemptions += 1
        outcome = self.contract.after_preemption(view)
        if outcome.requeued is not None:
            job.record(now, f"preempted; {outcome.reason}")
            self._enqueue(job)
        else:
            job.state = JobState.FAILED
            job.reason_code = ReasonCode.ENDED
            job.end_time = now
            job.record(now, f"preempted; {outcome.reason}")
        return job

    def report_checkpoint(self, job_id: str, now: float) -> None:
        """A running job saved its state: preempting it now loses only work after `now`."""
        self.incremental.forget()
        job = self._running(job_id)
        job.last_checkpoint = now
        self.ledger.preemptible.checkpoint(job_id, work_since(job))

    def cancel(self, job_id: str, now: float) -> Job:
        self.incremental.forget()
        job = self._job(job_id)
        if job.state is JobState.RUNNING:
            self._stop(job, now)
        elif job.state is JobState.PENDING:
            self.queue.remove(job_id)
            if job.nomination is not None and self.spares is not None:
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
        self.incremental.forget()
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
        self.incremental.forget()
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
        self.incremental.forget()
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
            return self._checked_cycle(now)
        return self._cycle(now)

    def _checked_cycle(self, now: float) -> CycleResult:
        """`_cycle`, and if it skipped jobs, a full cycle on a copy of the scheduler taken
        before it: `InternalError` unless both decided the same."""
        trial = copy.deepcopy(self)
        trial.incremental.enabled = False
        result = self._cycle(now)
        if result.incremental:
            expected = trial._cycle(now)
            difference = differences(expected.decisions, result.decisions)
            if difference is not None:
                raise InternalError(
                    "cycle", f"at {now!r}, the cycle after submissions only {difference}"
                )
        return result

    def _cycle(self, now: float) -> CycleResult:
        result = CycleResult(now)
        self.reservation = None
        self._cycles += 1
        if self.state.version != self._settled_version:
            # Something outside the cycle changed the cluster (a job ended, a node came back):
            # capacity may have been freed, so earlier failures prove nothing any more, but
            # those of gangs that no domain gaining GPUs can hold.
            self.incremental.forget()
            self._epoch += 1
            self._after_changes()
            self.preemptor.kept.after_changes(self.freed)
        stamp = self._stamp()
        fence = Fence(self.state)
        turn = Turn(
            now,
            self._cycles,
            result,
            fence,
            FailureReasons(self._cycles),
            self.settings.max_preemptions_per_cycle,
        )
        walk: Walk | None = None
        try:
            self.evictor.evict_from_draining_nodes(now, result.decisions)
            if result.decisions:
                self.incremental.forget()
            # Accounts below their budget go first for the whole cycle, even once a start here
            # takes one past it: the order is fixed before any decision.
            entries = list(self.queue.ordered(now, self._owed_first()))
            entries = self.interruptions.first(entries)
            order = [entry.job_id for entry in entries]
            walk = self.incremental.walk(now, stamp, self._leaves(now), order)
            result.incremental = walk.skipping
            self._walk(turn, entries, walk)
            result.skipped = walk.skipped
        except BaseException:
            walk = None
            raise
        finally:
            fence.open_all()
            self._settled_version = self.state.version
            self.freed.settle()
            if walk is not None:
                self._leave_reference(turn, walk, order)
        return result

    def _walk(self, turn: Turn, entries: list[QueueEntry], walk: Walk) -> None:
        """Each pending job's turn, in queue order, but those `walk` skips; with incremental
        cycles on, what each turn left for the next cycle is noted in `walk`."""
        jobs = self.jobs
        pending = [jobs[entry.job_id] for entry in entries]
        nominated = [job.nomination.nodes for job in pending if job.nomination is not None]
        fence, result, now = turn.fence, turn.result, turn.now
        if nominated:
            # One change of the cluster state for all of them, not one per preemptor.
            fence.close(np.concatenate(nominated))
        result.considered = len(entries)
        decisions = result.decisions
        track = self.incremental.enabled
        replays, outcomes = walk.replays, walk.outcomes
        asked_now, asked_before = walk.asked, walk.asked_before
        for entry, job in zip(entries, pending, strict=True):
            job_id = entry.job_id
            if walk.reference is not None:
                skipped, replayed = walk.skip(job_id)
                if skipped:
                    if replayed is not None:
                        self._refused(turn, replayed)
                    continue
            if not track:
                self._consider(turn, entry, job)
                continue
            # Each of these only grows: an equal sum after the turn means none moved (a
            # reservation found comes with its decision).
            made = len(decisions)
            moves = made + result.searches + fence.generation + self.failures.version
            turn.asked = None
            answered = self._consider(turn, entry, job)
            if answered and walk.reference is None:
                continue  # settled: nothing a later job reads moved
            decided = len(decisions) != made
            asked = turn.asked
            if asked is not None:
                asked_now[job_id] = asked.refusal
            outcome = Outcome.of(job, now, self.reservations.reserved_nodes)
            # Settled too: no move, and a refusal from the memory of the preemption search
            # (the very one it gave last time).
            if answered or (
                moves == len(decisions) + result.searches + fence.generation + self.failures.version
                and (asked is None or asked_before.get(job_id) is asked.refusal)
            ):
                if asked is not None and not answered:
                    replays[job_id] = asked
            else:
                outcomes[job_id] = outcome
            if walk.reference is not None:
                walk.check(job_id, decided, outcome)

    def _stamp(self) -> tuple[int, ...]:
        """The versions of what the cycle's answers depend on besides the queue and the
        clock: equal stamps, and the cycle between them changed nothing either."""
        return (
            self.state.version,
            self.tree.version,
            self.usage.version,
            self._epoch,
            self.failures.version,
            self.ledger.leaving_version,
            self.ledger.preemptible.version,
        )

    def _leaves(self, now: float) -> tuple[str, ...] | None:
        """The accounts' order where preemption reads it (under the fair-share rule)."""
        if self.contract.cross_account != "fair_share":
            return None
        return self.queue.ranking(now).leaves

    def _leave_reference(self, turn: Turn, walk: Walk, order: list[str]) -> None:
        """Keep what the cycle saw for a cycle after submissions only, unless it evicted,
        spent a preemption or settled a nominee (then the next cycle is a full one)."""
        decisions, now = turn.result.decisions, turn.now
        reference = None
        if (
            turn.preemptions_left == self.settings.max_preemptions_per_cycle
            and not turn.nominees_settled
            and not any(isinstance(decision, Evict) for decision in decisions)
        ):
            bound = {d.job_id for d in decisions if isinstance(d, Bind)}
            if bound:
                order = [job_id for job_id in order if job_id not in bound]
            reference = Reference(
                now,
                self._stamp(),
                self.ledger.next_protection_end(now),
                self._leaves(now),
                order,
                walk.replays,
                walk.outcomes,
            )
        self.incremental.settle(walk, reference)

    def _after_changes(self) -> None:
        """Forget the failures that the changes since the last cycle may have undone: every
        one, unless the only changes were jobs releasing GPUs (see `FreedCapacity`)."""
        freed = self.freed.since_settled()
        if freed is None or not self.settings.keep_failures_through_releases:
            self.failures.clear()
            return
        self.failures.outlive_release(freed, self.state)

    def _consider(self, turn: Turn, entry: QueueEntry, job: Job) -> bool:
        """One pending job's turn: start it, preempt or reserve for it, or say why not.
        Returns whether it was answered alike an earlier job, or waits for its victims to exit:
        nothing a later job reads changed (see `toposched.scheduler.incremental`)."""
        job.reservation = None
        job.refusal = None
        fence = turn.fence
        if job.nomination is not None:
            fence.settle()
            started = self.placing.start_nominee(job, fence, turn.now, turn.result)
            if job.nomination is None:
                # Its fence is open: the nominee may have started elsewhere or not at all, so
                # capacity may have grown. Remembered failures are checked against the fence
                # they were found under; refused preemptions too.
                turn.unpreemptable.clear()
                turn.refusals += 1
                turn.nominees_settled = True
            if started:
                return job.nomination is not None
        kind = job.kind
        if kind is None:
            kind = self._kind_of(job)
        alike = (kind, entry.account, entry.priority, entry.unallocated)
        known_so_far = (
            fence.generation,
            self.failures.version,
            self.reservation,
            turn.refusals,
            turn.preemptions_left,
        )
        same = turn.answered.get(alike)
        if same is not None and same.known == known_so_far and same.failed_job != entry.job_id:
            job.reason = same.reason
            job.reason_code = same.code
            job.refusal = same.refusal
            return True
        tier_key = (entry.account, entry.unallocated)
        tier = turn.tiers.get(tier_key)
        if tier is None:
            tier = turn.tiers[tier_key] = self.queue.tier(entry)
        reservation, held = self.admission.backfill(job, tier, self.reservation, turn.now)
        started, answered_by = self.placing.place(
            turn, entry, job, kind, tier, reservation, self._epoch
        )
        if started:
            return False
        if held is not None:
            job.reason, answered_by = held.explain(job.reason), None
        allocated = tier is QueueTier.ALLOCATED
        if allocated and turn.preemptions_left > 0 and not entry.unallocated:
            if self._preempt(turn, entry, job, kind):
                return False
        if self.reservation is None and allocated and job.gpus >= self.settings.reserve_min_gpus:
            answered_by = None  # a reservation is looked for job by job
            if self._reserve(turn, job):
                return False
        if answered_by is not None and known_so_far == (
            fence.generation,
            self.failures.version,
            self.reservation,
            turn.refusals,
            turn.preemptions_left,
        ):
            turn.answered[alike] = Answer(
                known_so_far, answered_by, job.reason, job.reason_code, job.refusal
            )
        return False

    def _preempt(self, turn: Turn, entry: QueueEntry, job: Job, kind: JobKind) -> bool:
        """Evict for the job if the contract allows a set of victims that makes room; else add
        why not to its reason. Returns whether victims were evicted for it (or it started)."""
        pods = kind.pods
        refusal_key = (kind.shape, entry.account, entry.priority)
        refused = turn.unpreemptable.get(refusal_key)
        if refused is not None and pods >= refused.pods:
            note = self.preemptor.beyond_budget_note(job, entry)
            explained = (job.reason, refused.refusal.reason, note)
            text = turn.no_preemption_texts.get(explained)
            if text is None:
                text = turn.no_preemption_texts[explained] = no_preemption(
                    job.reason, refused.refusal, note
                )
            job.reason = text
            job.refusal = refused.refusal
            job.reason_code = ReasonCode.NO_PREEMPTION
            return False
        if turn.ranking is None:
            turn.ranking = self.queue.ranking(turn.now)
        plan = self.preemptor.preempt_or_refuse(
            job, kind, entry, turn.ranking, turn.fence, turn.now, self._epoch
        )
        if isinstance(plan, PreemptionPlan):
            plan = self.placing.sets_after(job, plan)
        if isinstance(plan, PreemptionPlan):
            turn.preemptions_left -= 1
            self._carry_out(job, plan, turn.now, turn.result)
            turn.fence.close(job.nomination.nodes if job.nomination else plan.nodes)
            return True
        turn.asked = asked = Asked(refusal_key, pods, plan)
        self._refused(turn, asked)
        note = self.preemptor.beyond_budget_note(job, entry)
        job.reason = no_preemption(job.reason, plan, note)
        job.refusal = plan
        job.reason_code = ReasonCode.NO_PREEMPTION
        return False

    @staticmethod
    def _refused(turn: Turn, asked: Asked) -> None:
        """Remember a refused preemption for the jobs alike later in the cycle, unless one
        refused for no more pods is known."""
        refused = turn.unpreemptable.get(asked.key)
        if refused is None or asked.pods < refused.pods:
            turn.unpreemptable[asked.key] = Refused(asked.pods, asked.refusal)
            turn.refusals += 1

    def _reserve(self, turn: Turn, job: Job) -> bool:
        """Reserve the earliest place the job fits as running jobs end, or open one now by
        moving jobs (defragmentation). Returns whether moves were decided for it."""
        now, fence = turn.now, turn.fence
        reserved = self.reservations.reserve(job, now, fence, self._epoch)
        if reserved is None:
            return False
        job.reason = f"{reserved.describe(now)}; now: {job.reason}"
        job.reason_code = ReasonCode.RESERVED
        # Moves open a domain for one gang: not for sets with topology of their own.
        unaimed = sets_refusal(job) is not None
        if not unaimed and self.evictor.defragment_for(job, reserved, now, turn.result.decisions):
            # Moves open a domain now: the nominated nodes replace the wait.
            assert job.nomination is not None
            fence.close(job.nomination.nodes)
            return True
        self.reservation = reserved
        job.reservation = reserved
        nodes = self.reservations.reserved_nodes
        turn.reserved_nodes = np.zeros(self.state.topology.n_nodes, dtype=bool)
        turn.reserved_nodes[nodes] = True
        turn.result.decisions.append(Reserve(job.job_id, reserved.start_time, reserved.domain))
        # Capacity shrinks for everyone behind: earlier failures still hold.
        fence.close_block(nodes)
        return False

    def _kind_of(self, job: Job) -> JobKind:
        """The job's kind, one object shared by every job of that kind; kept on the job."""
        key = (job.shape, job.request.pods, job.spec.expected_runtime)
        kind = self._kinds.get(key)
        if kind is None:
            kind = self._kinds[key] = JobKind(*key)
        job.kind = kind
        return kind

    def _carry_out(self, job: Job, plan: PreemptionPlan, now: float, result: CycleResult) -> None:
        """Evict the plan's victims with their grace period and nominate their capacity."""
        if not plan.victims:
            # Room appeared since the job's last search (a nominee started elsewhere): no one
            # needs to leave.
            self.placing.bind(job, plan.placement, now, result)
            return
        self.evictor.carry_out(job, plan, now, result.decisions)

    # --- bookkeeping -------------------------------------------------------------------------
    def bind(self, job_id: str, placement: Placement, now: float) -> Bind:
        """Start the pending job on `placement`, found by the caller's own placement (a
        scheduler that brings its own cycle, as the baselines do); returns the decision."""
        self.incremental.forget()
        job = self._job(job_id)
        if job.state is not JobState.PENDING:
            raise InputError("job", job_id, f"is {job.state}, not pending")
        self._start(job, placement, now)
        return Bind(job.job_id, placement.allocation, job.unallocated)

    def _enqueue(self, job: Job) -> None:
        self.lifecycle.enqueue(job)

    def _start(self, job: Job, placement: Placement, now: float) -> None:
        self.lifecycle.start(job, placement, now)
        self._epoch += 1

    def _stop(self, job: Job, now: float) -> None:
        nodes = self.state.allocations[job.job_id].nodes
        free_to_take = job.unallocated and not job.evicting
        self.freed.before_release()
        self.lifecycle.stop(job, now, self.jobs)
        self.freed.released(nodes, free_to_take)

    def _job(self, job_id: str) -> Job:
        job = self.jobs.get(job_id)
        if job is None:
            raise InputError("job", job_id, "no job of that name")
        return job

    def _running(self, job_id: str) -> Job:
        job = self._job(job_id)
        if job.state is not JobState.RUNNING:
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

    def _owed_first(self) -> frozenset[str]:
        """The accounts whose allocated work the queue puts first."""
        return self.owed_accounts() if self.orders_owed_first else frozenset()

    def owed_accounts(self) -> frozenset[str]:
        """Accounts with pending jobs that run fewer allocated GPUs than their budget: their
        allocated work goes first in the queue, since a budget is what an account is owed."""
        tree, ledger = self.tree, self.ledger
        return frozenset(
            account
            for account in self.queue.accounts()
            if account in tree
            and tree.is_leaf(account)
            and ledger.running_gpus(account) < ledger.budget_gpus(account) - 1e-9
        )

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
        self.incremental.forget()
        result = CycleResult(now)
        self.evictor.compact(now, result.decisions)
        return result

    def fragmentation(self, now: float, max_shapes: int = 32) -> float:
        """Share of free GPUs that none of the pending job shapes could use."""
        shapes: dict[tuple[object, ...], GangRequest] = {}
        for entry in self.queue.ordered(now, self._owed_first()):
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
        return explain_job(self._job(job_id), self.queue, now, self._owed_first())

    def queue_rows(self, now: float) -> list[QueueRow]:
        """The pending queue in order: position, job, account, standing, priority, tier,
        whether the account runs below its budget (`owed`), reason."""
        return queue_rows(self.queue, self.jobs, now, self._owed_first())
