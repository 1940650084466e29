"""The placement phase of a cycle: a pending job starts where it fits now, behind the
reservation (EASY backfill), or on the nodes kept for it; known failures answer the rest.

A job of several pod sets is searched set by set, all or none (`place_job_sets`), and holds
its sets' pods in one allocation, set after set (of several pod shapes when the sets' differ).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

from toposched.cluster.errors import InputError
from toposched.cluster.state import ClusterState
from toposched.cluster.statement import Statement
from toposched.placement.job_sets import place_job_sets
from toposched.placement.policies import PlacementPolicy
from toposched.placement.search import Placement, Unschedulable, place
from toposched.policy.queue_entry import QueueEntry, QueueTier
from toposched.scheduler.candidates import PreemptionPlan
from toposched.scheduler.decisions import Bind
from toposched.scheduler.errors import InternalError
from toposched.scheduler.failures import Failure, FailureMemo
from toposched.scheduler.fence import Fence
from toposched.scheduler.jobs import Job, JobKind, ReasonCode, Reservation
from toposched.scheduler.refusals import Refusal, RefusalCode
from toposched.scheduler.turn import CycleResult, Turn


class Placed(NamedTuple):
    """Whether the placement phase started the job, and else the job whose known failure
    answered it (None when a search or none answered)."""

    started: bool
    answered_by: str | None


class Placing:
    """Places pending jobs for the cycle; `start` holds a placement and starts the job."""

    def __init__(
        self,
        state: ClusterState,
        policy: PlacementPolicy,
        failures: FailureMemo,
        start: Callable[[Job, Placement, float], None],
        verify_kept: bool = False,
    ) -> None:
        self.state = state
        self.policy = policy
        self.failures = failures
        self.start = start
        self.verify_kept = verify_kept
        """Search again where a failure kept through a release answers (a debugging check)."""

    def place(
        self,
        turn: Turn,
        entry: QueueEntry,
        job: Job,
        kind: JobKind,
        short: bool,
        epoch: int,
    ) -> Placed:
        """Start the job where it fits now, or, when it may backfill (`short`: see
        `backfills`), on the reserved nodes too (EASY backfill). Returns whether it started,
        and the job whose known failure answered it, if one did."""
        fence, failures, now = turn.fence, self.failures, turn.now
        shape, pods = kind.shape, kind.pods
        known = failures.find(shape, pods, fence, turn.number)
        if known is None:
            # Settled as for the search: a failure the last release dropped is checked again
            # against the capacity every search but a backfill's sees now.
            fence.settle()
            known = failures.recheck(shape, pods, fence)
        if known is not None and known.outlived_release and self.verify_kept:
            fence.settle()
            self._verify(job, known)
        if known is not None and not short:
            # A gang of this shape no larger did not fit, and nothing was freed since: neither
            # does this one.
            other = known.job_id != entry.job_id
            message = turn.reasons.known(known, pods) if other else None
            if message is None:
                message = turn.reasons.reason(job, known, fence, epoch)
            job.reason = message
            job.reason_code = ReasonCode.DOES_NOT_FIT
            return Placed(False, known.job_id if other else None)
        outcome: Placement | Unschedulable | None = None
        if known is None:
            fence.settle()
            turn.result.searches += 1
            outcome = self.search(job)
            if isinstance(outcome, Placement):
                self.bind(job, outcome, now, turn.result, fence.any)
                return Placed(True, None)
            self._failed(shape, job, outcome, fence, turn.number, epoch)
        if short:
            # A failure may already show that it does not fit even on the reserved nodes.
            backfill = failures.find_beyond(shape, pods, fence, turn.reserved_nodes, turn.number)
            if backfill is None:
                # Lifted until a search that must not see the reserved nodes: backfills in a
                # row share one lift. A failure the last release dropped is checked again
                # against the capacity the backfill's search would see.
                fence.lift()
                backfill = failures.recheck(shape, pods, fence, turn.reserved_nodes)
            if backfill is None:
                turn.result.searches += 1
                outcome = self.search(job)
                if isinstance(outcome, Placement):
                    self.bind(job, outcome, now, turn.result, True)
                    return Placed(True, None)
                self._failed(shape, job, outcome, fence, turn.number, epoch)
            else:
                if backfill.outlived_release and self.verify_kept:
                    fence.lift()
                    self._verify(job, backfill)
                job.reason = turn.reasons.reason(job, backfill, fence, epoch)
                job.reason_code = ReasonCode.DOES_NOT_FIT
                other = backfill.job_id != entry.job_id
                return Placed(False, backfill.job_id if known is not None and other else None)
        if isinstance(outcome, Unschedulable):
            job.reason = outcome.reason
            job.reason_code = ReasonCode.DOES_NOT_FIT
        return Placed(False, None)

    def search(self, job: Job) -> Placement | Unschedulable:
        """Where the job fits now: its gang, or every one of its pod sets (all or none)."""
        if job.sets is None:
            return place(self.state, job.request, self.policy)
        placed = place_job_sets(self.state, job.sets, self.policy)
        if isinstance(placed, Unschedulable):
            return placed
        return Placement(job.request, placed.joined())

    def _verify(self, job: Job, kept: Failure) -> None:
        """Raise `InternalError` if `job` fits now although `kept`, a failure kept through a
        release, says it does not: a search would have started it."""
        if isinstance(self.search(job), Placement):
            raise InternalError(
                job.job_id,
                f"a failure kept through a release answered it, yet it fits ({kept.reason})",
            )

    def bind(
        self,
        job: Job,
        placement: Placement,
        now: float,
        result: CycleResult,
        backfilled: bool = False,
    ) -> None:
        self.start(job, placement, now)
        result.decisions.append(Bind(job.job_id, placement.allocation, job.unallocated, backfilled))

    def _failed(
        self,
        shape: tuple[object, ...],
        job: Job,
        outcome: Unschedulable,
        fence: Fence,
        cycle_number: int,
        epoch: int,
    ) -> None:
        failure = Failure(
            job.request.pods,
            outcome.reason,
            fence.seen(),
            job.job_id,
            epoch,
            cycle_number,
            job.request,
            of_sets=job.sets is not None,
        )
        self.failures.add(shape, failure, fence)

    def start_nominee(self, job: Job, fence: Fence, now: float, result: CycleResult) -> bool:
        """Start a preemptor whose victims are gone, on the nodes kept for it."""
        nomination = job.nomination
        assert nomination is not None
        if nomination.victims:
            job.reason_code = ReasonCode.PREEMPTING
            job.reason = (
                f"preempting: waiting for {len(nomination.victims)} evicted job(s) to exit "
                "(grace period); their GPUs are kept for this job"
            )
            return True
        fence.open(nomination.nodes)
        job.nomination = None
        if nomination.allocation is not None and job.sets is None:
            exact = Placement(job.request, nomination.allocation)
            try:
                self.start(job, exact, now)
            except InputError as error:
                job.record(now, f"spare placement no longer fits ({error}); placing anew")
            else:
                result.decisions.append(Bind(job.job_id, exact.allocation, job.unallocated))
                return True
        outcome = self.search(job)
        if isinstance(outcome, Placement):
            self.bind(job, outcome, now, result)
            return True
        # The cluster changed while victims left (e.g. a node failed): plan again.
        job.record(now, f"nominated capacity no longer fits ({outcome.reason}); re-planning")
        return False


def sets_after(
    state: ClusterState, policy: PlacementPolicy, job: Job, plan: PreemptionPlan
) -> PreemptionPlan | Refusal:
    """`plan` for a job of several pod sets, found for its pods as one gang within the
    job's topology (`JobSets.gang`), checked on a what-if without its victims: every set
    placed there, the plan's placement becomes the sets' (the nodes kept for the job); a
    refusal when the room it makes does not hold every set (elastic sets: their minimums,
    for which the victims were chosen; they take what fits there). Other jobs' plans, and
    those of fixed sets that share one shape and have no topology of their own (the
    gang's placement is theirs), are returned as they are."""
    sets = job.sets
    if sets is None or (sets.one_shape and sets.own_topology() is None and not sets.elastic):
        return plan
    statement = Statement(state)
    try:
        for victim in plan.victims:
            statement.release(victim.job_id)
        placed = place_job_sets(state, sets, policy)
    finally:
        statement.discard()
    if isinstance(placed, Unschedulable):
        return Refusal(
            RefusalCode.TOPOLOGY,
            f"the room its best victims make does not hold every pod set ({placed.reason})",
        )
    return replace(plan, placement=Placement(job.request, placed.joined()))


def backfills(kind: JobKind, tier: QueueTier, reservation: Reservation | None, now: float) -> bool:
    """Whether a job of `kind` in `tier` may use the reserved nodes too: it ends before the
    reservation starts, or is unallocated work (which the reserved job may preempt at any
    moment). The placement phase reads the job's expected runtime for this only."""
    if reservation is None:
        return False
    runtime = kind.expected_runtime
    return (
        runtime is not None and now + runtime <= reservation.start_time
    ) or tier is QueueTier.UNALLOCATED


def sets_refusal(job: Job) -> Refusal | None:
    """Why no moves are looked for a job of several pod sets, or None. Moves open a domain for
    one gang, the job's pods within its topology; a job whose sets have topology of their own
    (a required level inner to the job's, a preference or slices) or ask different resources
    per pod may need other room, so no resumable job is moved for room the job could not
    use."""
    if job.sets is None:
        return None
    own = job.sets.own_topology()
    if own is not None:
        return Refusal(
            RefusalCode.TOPOLOGY,
            f"pod set {own.name} has topology of its own, and moves open room for the job's "
            "pods as one gang",
        )
    if not job.sets.one_shape:
        return Refusal(
            RefusalCode.TOPOLOGY,
            "its pod sets ask different resources per pod, and moves open room for the job's "
            "pods as one gang",
        )
    return None
