"""Scheduler: the event-driven cycle over the cluster state, the policy and the placement engine."""

from __future__ import annotations

import dataclasses
import math
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sortedcontainers import SortedList

from toposched.cluster import kernels
from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation, ClusterState, Health, distinct, distinct_inverse
from toposched.cluster.statement import Statement
from toposched.placement.jobspec import JobSpec
from toposched.placement.policies import BestFit, PlacementPolicy
from toposched.placement.request import GangRequest
from toposched.placement.search import Placement, Unschedulable, place
from toposched.policy.budget import BudgetTree
from toposched.policy.contract import Contract, PreemptionRule, RunningJob
from toposched.policy.fairshare import PendingQueue, QueueEntry, QueueTier, Ranking
from toposched.policy.usage import UsageTracker
from toposched.scheduler.decisions import Bind, Decision, Evict, Reserve
from toposched.scheduler.defrag import Defragmenter, MovePlan, Mover, fragmentation
from toposched.scheduler.fence import Fence, FencedNodes, NodeGroup
from toposched.scheduler.jobs import (
    EvictionRecord,
    Job,
    JobKind,
    JobState,
    Nomination,
    Reservation,
)
from toposched.scheduler.preemptible import PreemptibleIndex, SlotVerdicts, domain_nodes
from toposched.scheduler.preemption import (
    DOMAINS_EXAMINED,
    CandidatePool,
    ImpactPolicy,
    PreemptionPlan,
    VictimSearch,
)
from toposched.scheduler.releases import LeafRoom, ReleaseBounds, ReleasedPrefix
from toposched.scheduler.spares import SparePool

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
#: Contract verdicts on (preemptor, victim pair) kept at most (see `Scheduler._pair_verdict`).
_PAIR_VERDICTS_KEPT = 100_000
_UNKNOWN: Any = object()


@dataclass
class CycleResult:
    """What one cycle decided, and what it looked at."""

    now: float
    decisions: list[Decision] = field(default_factory=list)
    considered: int = 0
    searches: int = 0
    """Placement searches run; the rest were answered by a failure of the same shape."""

    @property
    def bound(self) -> list[Bind]:
        return [d for d in self.decisions if isinstance(d, Bind)]

    @property
    def reservation(self) -> Reserve | None:
        return next((d for d in self.decisions if isinstance(d, Reserve)), None)


@dataclass(frozen=True)
class _Fit:
    """Where a blocked job fits, and `release`: when the last running job it waits for ends."""

    release: float
    nodes: IntArray
    domain: str
    released: int
    """How many running jobs, in release order, must end first."""
    last: tuple[float, str]
    """The last of them, as (expected end, job id): its place in the release order of a later
    cycle hints at the answer there, as jobs start and end before it."""


def _needs(job: Job) -> str:
    request = job.request
    text = f"needs {request.pods:,} pod{'s' if request.pods > 1 else ''} of "
    text += request.describe_pod_plain()
    if request.gpus_per_pod and not request.is_fractional and request.pods > 1:
        text += f" ({request.pods * request.gpus_per_pod:,} GPUs)"
    return text


_VICTIM_KINDS = {
    "unallocated-victim": "unallocated",
    "higher-priority": "of lower priority in the team",
    "better-fair-share": "of accounts further above their share",
    "reclaim-budget": "of accounts running beyond their budget",
}


def _victims_by_rule(rules: list[str]) -> str:
    """E.g. "2 unallocated jobs and 1 job of lower priority in the team"."""
    counts: dict[str, int] = {}
    for rule in rules:
        counts[rule] = counts.get(rule, 0) + 1
    parts = []
    for rule, count in counts.items():
        kind = _VICTIM_KINDS.get(rule, f"({rule})")
        noun = "job" if count == 1 else "jobs"
        parts.append(
            f"{count} {kind} {noun}" if kind == "unallocated" else f"{count} {noun} {kind}"
        )
    return " and ".join(parts)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"


@dataclass(frozen=True, eq=False)
class _Failure:
    """A gang that did not fit: its pod count, why, and the nodes fenced at the time.

    Free capacity only shrinks while jobs start and the fence grows, so a gang of the same
    shape and at least as many pods cannot fit either while no capacity has been freed and the
    fence still holds every node it held then (the placement search fails monotonically).
    """

    pods: int
    reason: str
    fenced: FencedNodes
    job_id: str
    epoch: int
    """The scheduler's `_epoch` at the time: equal epochs and fences mean equal free capacity."""
    cycle: int


_Remembered = tuple[int, int, int, _Failure | None]
"""A remembered answer of `_Failures`: the cycle, fence generation and failures' version it was
found at, and the failure (None: none implied)."""
_NOT_REMEMBERED: _Remembered = (-1, -1, -1, None)


class _Failures:
    """Gang shapes that did not fit, kept across cycles until capacity may have been freed."""

    def __init__(self) -> None:
        self.by_shape: dict[tuple[object, ...], list[_Failure]] = {}
        self.version = 0
        # Per shape, the failure with the fewest pods among those the fence still implies, as
        # of (cycle, fence generation, version): most jobs ask again before anything moved.
        self._smallest: dict[tuple[object, ...], _Remembered] = {}
        # Whether a failure's fenced nodes miss the nodes `find_beyond` opens, by the identity
        # of those fenced nodes (kept alive here), and whether each group of fenced nodes
        # does, for one marking of opened nodes: a cycle asks about the same reserved nodes
        # for every short job, and each answer looks at tens of thousands of nodes.
        self._opened: NDArray[np.bool_] | None = None
        self._disjoint: dict[int, tuple[FencedNodes, bool]] = {}
        self._group_disjoint: dict[int, tuple[NodeGroup, bool]] = {}
        # `_smallest` for `find_beyond`, for the same opened nodes.
        self._smallest_beyond: dict[tuple[object, ...], _Remembered] = {}

    def clear(self) -> None:
        self.by_shape.clear()
        self._smallest.clear()
        self._opened = None
        self._disjoint.clear()
        self._group_disjoint.clear()
        self._smallest_beyond.clear()
        self.version += 1

    def _current(self, cached: _Remembered, cycle: int, fence: Fence) -> bool:
        """Whether a remembered answer was found in this cycle, with the fence and the known
        failures as they are now."""
        return cached[:3] == (cycle, fence.generation, self.version)

    def find(
        self, shape: tuple[object, ...], pods: int, fence: Fence, cycle: int
    ) -> _Failure | None:
        """A failure implying that a gang of `shape` with `pods` pods does not fit now."""
        cached = self._smallest.get(shape, _NOT_REMEMBERED)
        if not self._current(cached, cycle, fence):
            smallest: _Failure | None = None
            for failure in self.by_shape.get(shape, ()):
                if (smallest is None or failure.pods < smallest.pods) and fence.holds(
                    failure.fenced
                ):
                    smallest = failure
            cached = (cycle, fence.generation, self.version, smallest)
            self._smallest[shape] = cached
        found = cached[3]
        return found if found is not None and pods >= found.pods else None

    def find_beyond(
        self,
        shape: tuple[object, ...],
        pods: int,
        fence: Fence,
        opened: NDArray[np.bool_],
        cycle: int,
    ) -> _Failure | None:
        """`find` as if the fence let the nodes marked in `opened` go: a failure found with none
        of those nodes fenced (short jobs, before they try the reserved nodes). Like `find`,
        the smallest such failure of a shape is remembered until the fence moves: a cycle can
        ask for thousands of backfill candidates, and each comparison of fences may cover tens
        of thousands of nodes."""
        if self._opened is not opened:
            self._opened = opened
            self._disjoint = {}
            self._group_disjoint = {}
            self._smallest_beyond = {}
        cached = self._smallest_beyond.get(shape, _NOT_REMEMBERED)
        if not self._current(cached, cycle, fence):
            disjoint = self._disjoint
            smallest: _Failure | None = None
            for failure in self.by_shape.get(shape, ()):
                if smallest is None or failure.pods < smallest.pods:
                    fenced = failure.fenced
                    known = disjoint.get(id(fenced))
                    if known is None:
                        known = disjoint[id(fenced)] = (
                            fenced,
                            fenced.misses(opened, self._group_disjoint),
                        )
                    if known[1] and fence.holds(fenced):
                        smallest = failure
            cached = (cycle, fence.generation, self.version, smallest)
            self._smallest_beyond[shape] = cached
        found = cached[3]
        return found if found is not None and pods >= found.pods else None

    def add(self, shape: tuple[object, ...], failure: _Failure, fence: Fence) -> None:
        """Remember a failure, unless one already known implies it; drop those it implies.
        `failure` was found under `fence` as it is now: when the search saw all of it, its
        fenced nodes are compared with older ones through the fence's record, not as sets."""
        known = self.by_shape.setdefault(shape, [])
        fenced = failure.fenced
        whole = fenced is fence.frozen()

        def implied_by(old: _Failure) -> bool:  # old.fenced <= fenced
            return fence.holds(old.fenced) if whole else old.fenced <= fenced

        def implies(old: _Failure) -> bool:  # fenced <= old.fenced
            return fence.within(old.fenced) if whole else fenced <= old.fenced

        if any(old.pods <= failure.pods and implied_by(old) for old in known):
            return
        known[:] = [old for old in known if not (failure.pods <= old.pods and implies(old))]
        known.append(failure)
        self.version += 1


class Scheduler:
    """Orders pending jobs by Fair Tree (accounts short of their budget first), places what
    fits, preempts under the contract for jobs that should run but do not fit, reserves for the
    first blocked large job, and backfills behind it only where the reservation is not delayed.

    No clock and no I/O: every call passes `now` (seconds). `cycle(now)` returns decisions; the
    allocations of bound jobs are already held in `state`, and a backend starts the pods. Events
    (`finish`, `fail`, `set_health`, budget changes) are applied as calls, each followed by a cycle.
    A resumable gang a node failure interrupts within its account's budget heads the next cycle
    (`failed_first`, on by default).
    """

    orders_owed_first = True
    """Whether the allocated work of accounts running below their budget goes first."""

    def __init__(
        self,
        state: ClusterState,
        tree: BudgetTree,
        contract: Contract | None = None,
        usage: UsageTracker | None = None,
        policy: PlacementPolicy | None = None,
        reserve_min_gpus: float = 8,
        grace_s: float = 30.0,
        max_grace_s: float = 600.0,
        max_preemptions_per_cycle: int = 8,
        impact: ImpactPolicy | None = None,
        defragment: bool = True,
        compaction_moves_per_hour: int = 0,
        spares: tuple[str, int] | None = None,
        protect_beyond_budget: bool = True,
        borrowed_min_runtime: float | None = None,
        failed_first: bool = True,
    ) -> None:
        self.state = state
        self.tree = tree
        self.contract = contract or Contract()
        self.usage = usage or UsageTracker()
        self.policy = policy or BestFit()
        self.reserve_min_gpus = reserve_min_gpus
        self.queue = PendingQueue(tree, self.usage)
        self.jobs: dict[str, Job] = {}
        self.running: dict[str, Job] = {}
        self.reservation: Reservation | None = None
        self._reserved_nodes: IntArray = np.zeros(0, dtype=np.int64)
        # Running jobs by expected release time, kept sorted as jobs start and stop, so a
        # reservation reads them in order without sorting every running job each cycle.
        self._releases: SortedList = SortedList()
        self.grace_s = grace_s
        self.max_grace_s = max_grace_s
        self.max_preemptions_per_cycle = max_preemptions_per_cycle
        self.victim_search = VictimSearch(state, self.policy, impact)
        # Preemption candidates without scanning every running job: unallocated work, and
        # allocated jobs by the time their protection ends.
        self._unallocated_running: set[str] = set()
        self._protection: SortedList = SortedList()
        self._contract_views: dict[str, RunningJob] = {}
        # Budgets in GPUs by account, valid for one version of the budget tree.
        self._budgets: dict[str, float] = {}
        self._budgets_version = -1
        self._preemptor_of: dict[str, str] = {}
        self.defragmenter = Defragmenter(state, self.policy) if defragment else None
        self.compaction_moves_per_hour = compaction_moves_per_hour
        self._recent_moves: deque[float] = deque()
        # A job that defragmentation could not help stays so until the cluster changes.
        self._no_defrag: dict[str, tuple[int, str]] = {}
        # Running jobs as arrays, and per rack the GPUs and work of unprotected jobs, so that a
        # preemption decision starts from aggregates instead of scanning nodes.
        self._preemptible = PreemptibleIndex(state)
        # (level, nodes per domain): idle nodes held back to replace failed ones in place.
        self.spares = SparePool(state, *spares) if spares is not None else None
        # A job that takes its team's running allocated GPUs past its budget is borrowing: it
        # stays allocated and charged, but its protection is capped at `borrowed_min_runtime`
        # seconds (None, the default: no cap; `protect_beyond_budget=False` is a cap of 0). A cap
        # suits many small teams' jobs; on a fleet of 100,000-GPU runs an hour's cap evicted
        # borrowed runs over and over (docs/policy.md), so it is the site's choice.
        if borrowed_min_runtime is not None and (
            isinstance(borrowed_min_runtime, bool)
            or not isinstance(borrowed_min_runtime, int | float)
            or not math.isfinite(borrowed_min_runtime)
            or borrowed_min_runtime < 0
        ):
            raise InputError(
                "borrowed_min_runtime",
                borrowed_min_runtime,
                "must be a number of seconds >= 0, or None for no cap",
            )
        self.protect_beyond_budget = protect_beyond_budget
        self.borrowed_min_runtime = 0.0 if not protect_beyond_budget else borrowed_min_runtime
        # Gangs a node failure interrupted while they ran within their account's budget: they
        # head the next cycle's order (`failed_first`), so that their surviving nodes are not
        # handed to the queue while they wait to take back unallocated work elsewhere.
        self.failed_first = failed_first
        self._restart_first: set[str] = set()
        # What the cycle may remember between cycles. `_epoch` moves whenever free capacity may
        # have changed (a job started, or the cluster changed between cycles, seen by its
        # version); equal epochs and fences mean equal free capacity. Failures to place stay
        # true until capacity may have been freed; a reservation until anything changed.
        self._cycles = 0
        self._epoch = 0
        self._settled_version = -1
        self._failures = _Failures()
        self._kinds: dict[tuple[object, ...], JobKind] = {}
        self._last_reservation: tuple[Job, GangRequest, int, FencedNodes, _Fit | None] | None = None
        self._held_cache: dict[str, tuple[Allocation, tuple[IntArray, IntArray]]] = {}
        self._n_leaves = int(self.victim_search.leaf_starts.size - 1)
        # The contract's verdicts on pairs of running jobs (see `_pair_verdict`), for one
        # ranking and one version of the loads and budgets.
        self._pair_verdicts: dict[
            tuple[str, int, bool, float, int, float, str, float], tuple[str, float | None] | None
        ] = {}
        # Victim accounts' loads and standings by account code (see `_account_load`), for one
        # version of the usage, of the GPUs on their way out and of the ranking.
        self._account_loads: dict[int, tuple[str, float, float | None]] = {}
        self._account_loads_key: tuple[int, int, Ranking | None] = (-1, -1, None)
        # Refused preemptions by (pod shape, pods, account, priority), or by (pod shape, pods)
        # for jobs that may take unallocated work only: what the refusal depends on, the nodes
        # fenced then, until when no protection ends, and the reason (see `_preempt_or_refuse`).
        self._refusals: dict[
            tuple[object, ...], tuple[tuple[object, ...], FencedNodes, float, str]
        ] = {}
        self._refusals_epoch = 0
        self._pair_verdicts_ranking: Ranking | None = None
        self._pair_verdicts_stamp = -1
        # GPUs of each account's allocated jobs on their way out (evicted or moved, in their
        # grace period): the budget rule counts an account without them.
        self._leaving_gpus: dict[str, float] = {}
        self._leaving_version = 0

    # --- events ------------------------------------------------------------------------------
    def submit(self, spec: JobSpec, now: float) -> Job:
        """Queue a job; names must be unique among live jobs and accounts must exist."""
        existing = self.jobs.get(spec.name)
        if existing is not None and existing.state in (JobState.PENDING, JobState.RUNNING):
            raise InputError("name", spec.name, f"a job of that name is already {existing.state}")
        self.tree.require(spec.account, "account")
        if not self.tree.is_leaf(spec.account):
            raise InputError("account", spec.account, "jobs charge to a leaf account (a team)")
        request = GangRequest.from_spec(spec, self.state.topology)
        submit_time = spec.submit_time if spec.submit_time is not None else now
        job = Job(spec=spec, request=request, submit_time=submit_time)
        job.record(now, "submitted")
        self.jobs[spec.name] = job
        self._enqueue(job)
        return job

    def adopt(self, spec: JobSpec, allocation: Allocation, start_time: float, now: float) -> Job:
        """Take over a job already running on `allocation` (recovery after a restart)."""
        job = self.submit(spec, now)
        self._start(job, Placement(job.request, allocation), now)
        # Protection counts from the real start; usage is charged from now, when we took over.
        self._forget_running(job)
        job.start_time = start_time
        self._remember_running(job)
        return job

    def finish(self, job_id: str, now: float) -> Job:
        """A running job ended on its own: its GPUs return."""
        job = self._running(job_id)
        self._stop(job, now)
        job.state = JobState.FINISHED
        job.end_time = now
        job.record(now, "finished")
        return job

    def fail(self, job_id: str, now: float, requeue: bool | None = None) -> Job:
        """A running job failed: requeue it (resumable jobs by default) or mark it failed."""
        job = self._running(job_id)
        self._stop(job, now)
        again = job.spec.resumable if requeue is None else requeue
        if again:
            job.record(now, "failed; requeued")
            self._enqueue(job)
        else:
            job.state = JobState.FAILED
            job.end_time = now
            job.record(now, "failed")
        return job

    def evicted(self, job_id: str, now: float) -> Job:
        """The backend reports an evicted job gone: its GPUs return to the nominee, and the job
        is requeued (resumable, or restartable by policy) or failed, as the contract says."""
        job = self._running(job_id)
        view = self._contract_views[job_id]
        self._stop(job, now)
        job.preemptions += 1
        outcome = self.contract.after_preemption(view)
        if outcome.requeued is not None:
            job.record(now, f"preempted; {outcome.reason}")
            self._enqueue(job)
        else:
            job.state = JobState.FAILED
            job.end_time = now
            job.record(now, f"preempted; {outcome.reason}")
        return job

    def report_checkpoint(self, job_id: str, now: float) -> None:
        """A running job saved its state: preempting it now loses only work after `now`."""
        job = self._running(job_id)
        job.last_checkpoint = now
        self._preemptible.checkpoint(job_id, self._work_since(job))

    def cancel(self, job_id: str, now: float) -> Job:
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
        job.end_time = now
        job.record(now, "cancelled")
        return job

    def set_health(self, nodes: list[int] | IntArray, health: Health, now: float) -> list[Job]:
        """Change node health; gangs on nodes that go down fail at once (resumable: requeued).

        With spares, a requeued gang is nominated its surviving nodes plus a spare of the
        failed node's domain, and restarts there in the next cycle. Held spares stay held when
        marked healthy; a repaired node refills its domain's pool.
        """
        node_array = distinct(np.asarray(nodes, dtype=np.int64))
        spares = self.spares
        if spares is not None and health is Health.HEALTHY:
            node_array = np.setdiff1d(node_array, spares.keep_held(node_array))
        self.state.set_health(node_array, health)
        failed: list[Job] = []
        if spares is not None and health is Health.DOWN:
            spares.release_down(node_array)
        if health is Health.DOWN:
            taken: dict[int, int] = {}
            restarting: dict[str, float] = {}  # GPUs of each account's gangs put first here
            for owner in sorted(self.owners_on(node_array)):
                if owner not in self.running:
                    continue
                allocation = self.state.allocations[owner]
                job = self.fail(owner, now)
                failed.append(job)
                if job.state is not JobState.PENDING:
                    continue
                if spares is not None:
                    self._nominate_spare(job, allocation, node_array, taken, now)
                # `unallocated` is still what the job ran as.
                if self.failed_first and job.nomination is None and not job.unallocated:
                    self._put_first_if_within_budget(job, restarting)
        elif spares is not None and health is Health.HEALTHY:
            spares.refill(node_array)
        return failed

    def _put_first_if_within_budget(self, job: Job, restarting: dict[str, float]) -> None:
        """Put a gang a node failure interrupted at the head of the next cycle if it runs
        within its account's budget again, counting the account's other gangs put first by the
        same failure."""
        account = job.spec.account
        put_first = restarting.get(account, 0.0)
        if self._beyond_budget(job, put_first):
            return
        restarting[account] = put_first + job.gpus
        self._restart_first.add(job.job_id)
        job.reason = (
            "interrupted by a node failure within its team's budget: first in the next cycle"
        )

    def _nominate_spare(
        self,
        job: Job,
        allocation: Allocation,
        down: IntArray,
        taken: dict[int, int],
        now: float,
    ) -> None:
        assert self.spares is not None
        moved = self.spares.replacement(job.request, allocation, down, taken)
        if moved is None:
            job.record(now, f"no spare node of the failed node's {self.spares.level_name}")
            return
        spare_nodes = np.setdiff1d(moved.nodes, allocation.nodes)
        job.nomination = Nomination(set(), np.unique(moved.nodes), now, moved)
        names = ", ".join(self.state.topology.node_names[n] for n in spare_nodes.tolist())
        job.reason = f"restarting on its surviving nodes and spare node(s) {names}"
        job.record(now, job.reason)

    def set_priority(self, job_id: str, priority: int, now: float) -> Job:
        """Change a live job's priority. A pending job takes its new place among its account's
        jobs; a running job keeps running, and its new priority counts in later preemption
        decisions (as a victim, against jobs of its account)."""
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
            view = self._contract_views[job_id]
            self._contract_views[job_id] = dataclasses.replace(view, priority=priority)
            self._preemptible.set_priority(job_id, priority)
        job.record(now, f"priority changed from {old} to {priority}")
        return job

    def set_share(self, account: str, share: float) -> None:
        """A budget change: the next cycle orders by it (accounts re-rank, jobs do not re-sort)."""
        self.tree.set_share(account, share)

    # --- the cycle ---------------------------------------------------------------------------
    def cycle(self, now: float) -> CycleResult:
        """Order pending jobs, place what fits, preempt for what should run, reserve for the
        first blocked large job and backfill behind it. Returns the decisions; bound jobs
        already hold their allocation, evicted jobs keep theirs until reported gone."""
        result = CycleResult(now)
        # Refused preemptions by (shape, account, priority): who may be evicted depends on the
        # preemptor's account and priority. A start later in the cycle may give another account
        # work beyond its budget; such a refusal is revisited at the next cycle.
        unpreemptable: dict[tuple[object, ...], tuple[int, str]] = {}
        # Keyed by the failure itself, not its id(): a failure dropped during the cycle may be
        # freed and its id() reused by a new one.
        memo_messages: dict[tuple[_Failure, int], str] = {}
        self.reservation = None
        self._cycles += 1
        cycle_number = self._cycles
        if self.state.version != self._settled_version:
            # Something outside the cycle changed the cluster (a job ended, a node came back):
            # capacity may have been freed, so earlier failures prove nothing any more.
            self._epoch += 1
            self._failures.clear()
        failures = self._failures
        fence = Fence(self.state)
        preemptions_left = self.max_preemptions_per_cycle
        jobs = self.jobs
        try:
            self._evict_from_draining_nodes(now, result)
            # Accounts below their budget go first for the whole cycle, even once a start here
            # takes one past it: the order is fixed before any decision.
            entries = list(self.queue.ordered(now, self._owed_first()))
            if self._restart_first:
                entries = self._failed_first(entries)
            rankings: list[Ranking] = []

            def ranking_now() -> Ranking:
                # Computed when a preemption first needs it: the standings at `now` do not move
                # within a cycle (a job started now has used nothing yet).
                if not rankings:
                    rankings.append(self.queue.ranking(now))
                return rankings[0]

            pending = [jobs[entry.job_id] for entry in entries]
            nominated = [job.nomination.nodes for job in pending if job.nomination is not None]
            if nominated:
                # One change of the cluster state for all of them, not one per preemptor.
                fence.close(np.concatenate(nominated))
            # The tier depends only on the account and the declared kind: asked once for each.
            tiers: dict[tuple[str, bool], QueueTier] = {}
            # Jobs refused preemption for the same reason share their explanation.
            no_preemption_texts: dict[tuple[str, str, str], str] = {}
            # The reservation's nodes, marked: what backfills may use.
            reserved_nodes = np.zeros(0, dtype=bool)
            # Most pending jobs are answered by a known failure and a refused preemption, and
            # many share everything that answer depends on: their kind (shape, pod count,
            # expected runtime), account, priority, whether declared unallocated, and what the
            # cycle knows so far (fence, failures, reservation, refusals, preemptions left). Such
            # a job gets the reason an earlier job alike got, unless its own failure is the answer.
            answered: dict[tuple[object, ...], tuple[tuple[object, ...], str, str]] = {}
            refusals = 0  # moves whenever `unpreemptable` does
            result.considered = len(entries)
            for entry, job in zip(entries, pending, strict=True):
                job.reservation = None
                if job.nomination is not None:
                    fence.settle()
                    started = self._start_nominee(job, fence, now, result)
                    if job.nomination is None:
                        # Its fence is open: the nominee may have started elsewhere or not at
                        # all, so capacity may have grown. Remembered failures are checked
                        # against the fence they were found under; refused preemptions too.
                        unpreemptable.clear()
                        refusals += 1
                    if started:
                        continue
                job_kind = job.kind
                if job_kind is None:
                    job_kind = self._kind_of(job)
                reservation = self.reservation
                alike = (job_kind, entry.account, entry.priority, entry.unallocated)
                known_so_far = (
                    fence.generation,
                    failures.version,
                    reservation,
                    refusals,
                    preemptions_left,
                )
                same = answered.get(alike)
                if same is not None and same[0] == known_so_far and same[1] != entry.job_id:
                    job.reason = same[2]
                    continue
                shape = job_kind.shape
                pods = job_kind.pods
                runtime = job_kind.expected_runtime
                answered_by: str | None = None  # the failure's job, if a known failure answered
                # EASY backfill: a job that ends before the reservation may use its nodes, and
                # so may unallocated work: the reserved job may preempt it at any moment.
                tier_key = (entry.account, entry.unallocated)
                tier = tiers.get(tier_key)
                if tier is None:
                    tier = tiers[tier_key] = self.queue.tier(entry)
                short = reservation is not None and (
                    (runtime is not None and now + runtime <= reservation.start_time)
                    or tier is QueueTier.UNALLOCATED
                )
                known = failures.find(shape, pods, fence, cycle_number)
                if known is not None and not short:
                    # A gang of this shape no larger did not fit, and nothing was freed since:
                    # neither does this one. Many pending jobs share a size, so each message is
                    # written once per cycle.
                    message = (
                        memo_messages.get((known, pods)) if known.job_id != entry.job_id else None
                    )
                    if message is None:
                        message = self._known_failure_reason(
                            job, known, fence, cycle_number, memo_messages
                        )
                    job.reason = message
                    if known.job_id != entry.job_id:
                        answered_by = known.job_id
                else:
                    outcome = None
                    if known is None:
                        fence.settle()
                        result.searches += 1
                        outcome = place(self.state, job.request, self.policy)
                        if isinstance(outcome, Placement):
                            self._start(job, outcome, now)
                            result.decisions.append(
                                Bind(job.job_id, outcome.allocation, job.unallocated, fence.any)
                            )
                            continue
                        self._failed(shape, job, outcome, fence, cycle_number)
                    if short:
                        assert reservation is not None
                        # EASY backfill: a job ending before the reservation may use its nodes,
                        # unless a failure already shows that it does not fit even there.
                        backfill = failures.find_beyond(
                            shape, pods, fence, reserved_nodes, cycle_number
                        )
                        if backfill is None:
                            # Lifted until a search that must not see the reserved nodes:
                            # backfills in a row share one lift.
                            fence.lift()
                            result.searches += 1
                            outcome = place(self.state, job.request, self.policy)
                            if isinstance(outcome, Placement):
                                self._start(job, outcome, now)
                            else:
                                self._failed(shape, job, outcome, fence, cycle_number)
                        if isinstance(outcome, Placement):
                            result.decisions.append(
                                Bind(job.job_id, outcome.allocation, job.unallocated, True)
                            )
                            continue
                        if backfill is not None:
                            outcome = None
                            job.reason = self._known_failure_reason(
                                job, backfill, fence, cycle_number, memo_messages
                            )
                    if outcome is not None:
                        job.reason = outcome.reason
                allocated = tier is QueueTier.ALLOCATED
                if allocated and preemptions_left > 0 and not entry.unallocated:
                    refusal_key = (shape, entry.account, entry.priority)
                    refused = unpreemptable.get(refusal_key)
                    if refused is not None and pods >= refused[0]:
                        note = self._beyond_budget_note(job, entry)
                        explained = (job.reason, refused[1], note)
                        text = no_preemption_texts.get(explained)
                        if text is None:
                            text = no_preemption_texts[explained] = (
                                f"{job.reason}; no preemption: {refused[1]}{note}"
                            )
                        job.reason = text
                    else:
                        plan = self._preempt_or_refuse(
                            job, job_kind, entry, ranking_now(), fence, now
                        )
                        if isinstance(plan, PreemptionPlan):
                            preemptions_left -= 1
                            self._carry_out(job, plan, now, result)
                            fence.close(job.nomination.nodes if job.nomination else plan.nodes)
                            continue
                        if refused is None or pods < refused[0]:
                            unpreemptable[refusal_key] = (pods, plan)
                            refusals += 1
                        note = self._beyond_budget_note(job, entry)
                        job.reason += f"; no preemption: {plan}{note}"
                if self.reservation is None and allocated and job.gpus >= self.reserve_min_gpus:
                    answered_by = None  # a reservation is looked for job by job
                    reserved = self._reserve(job, now, fence)
                    if reserved is not None:
                        job.reason = f"{reserved.describe(now)}; now: {job.reason}"
                        if self._defragment_for(job, reserved, now, result):
                            # Moves open a domain now: the nominated nodes replace the wait.
                            assert job.nomination is not None
                            fence.close(job.nomination.nodes)
                            continue
                        self.reservation = reserved
                        job.reservation = reserved
                        reserved_nodes = np.zeros(self.state.topology.n_nodes, dtype=bool)
                        reserved_nodes[self._reserved_nodes] = True
                        result.decisions.append(
                            Reserve(job.job_id, reserved.start_time, reserved.domain)
                        )
                        # Capacity shrinks for everyone behind: earlier failures still hold.
                        fence.close_block(self._reserved_nodes)
                if answered_by is not None and known_so_far == (
                    fence.generation,
                    failures.version,
                    self.reservation,
                    refusals,
                    preemptions_left,
                ):
                    answered[alike] = (known_so_far, answered_by, job.reason)
        finally:
            fence.open_all()
            self._settled_version = self.state.version
        return result

    def _kind_of(self, job: Job) -> JobKind:
        """The job's kind, one object shared by every job of that kind; kept on the job."""
        key = (job.shape, job.request.pods, job.spec.expected_runtime)
        kind = self._kinds.get(key)
        if kind is None:
            kind = self._kinds[key] = JobKind(*key)
        job.kind = kind
        return kind

    def _failed(
        self,
        shape: tuple[object, ...],
        job: Job,
        outcome: Unschedulable,
        fence: Fence,
        cycle_number: int,
    ) -> None:
        failure = _Failure(
            job.request.pods, outcome.reason, fence.seen(), job.job_id, self._epoch, cycle_number
        )
        self._failures.add(shape, failure, fence)

    def _known_failure_reason(
        self,
        job: Job,
        failure: _Failure,
        fence: Fence,
        cycle_number: int,
        messages: dict[tuple[_Failure, int], str],
    ) -> str:
        """Why a job is known not to fit, from an earlier failure of its shape."""
        if failure.cycle != cycle_number:
            if (
                failure.job_id == job.job_id
                and failure.epoch == self._epoch
                and fence.equals(failure.fenced)
            ):
                # The same job on the same free capacity: the search would say the same again.
                return failure.reason
        key = (failure, job.request.pods)
        message = messages.get(key)
        if message is None:
            since = "does not fit now" if failure.cycle == cycle_number else "did not fit"
            message = (
                f"{_needs(job)}; a job of the same pod shape with {failure.pods} "
                f"pod{'s' if failure.pods != 1 else ''} "
                f"{since} ({failure.reason})"
            )
            if failure.cycle != cycle_number:
                message += " and no GPUs were freed since"
            messages[key] = message
        return message

    def _failed_first(self, entries: list[QueueEntry]) -> list[QueueEntry]:
        """`entries` with the gangs a node failure interrupted within their budget moved to
        the front (in the queue's order among themselves), for this cycle only."""
        first = self._restart_first
        self._restart_first = set()
        ahead = [entry for entry in entries if entry.job_id in first]
        if not ahead:
            return entries
        return ahead + [entry for entry in entries if entry.job_id not in first]

    def _start_nominee(self, job: Job, fence: Fence, now: float, result: CycleResult) -> bool:
        """Start a preemptor whose victims are gone, on the nodes kept for it."""
        nomination = job.nomination
        assert nomination is not None
        if nomination.victims:
            job.reason = (
                f"preempting: waiting for {len(nomination.victims)} evicted job(s) to exit "
                "(grace period); their GPUs are kept for this job"
            )
            return True
        fence.open(nomination.nodes)
        job.nomination = None
        if nomination.allocation is not None:
            exact = Placement(job.request, nomination.allocation)
            try:
                self._start(job, exact, now)
            except InputError as error:
                job.record(now, f"spare placement no longer fits ({error}); placing anew")
            else:
                result.decisions.append(Bind(job.job_id, exact.allocation, job.unallocated))
                return True
        outcome = place(self.state, job.request, self.policy)
        if isinstance(outcome, Placement):
            self._start(job, outcome, now)
            result.decisions.append(Bind(job.job_id, outcome.allocation, job.unallocated))
            return True
        # The cluster changed while victims left (e.g. a node failed): plan again.
        job.record(now, f"nominated capacity no longer fits ({outcome.reason}); re-planning")
        return False

    def _candidates(
        self,
        entry: QueueEntry,
        ranking: Ranking,
        now: float,
        slots: IntArray | None = None,
        only_unallocated: bool = False,
    ) -> CandidatePool:
        """Running jobs the contract lets `entry` preempt now (among `slots` of the preemptible
        index, else every running job, or every unallocated one when that is all `entry` may
        take), with their lost work and standing."""
        index = self._preemptible
        if slots is None:
            names = sorted(self._unallocated_running)
            if not only_unallocated:
                protected_from = self._protection.bisect_right((now, "\uffff"))
                names += [job_id for _, job_id in self._protection.islice(0, protected_from)]
            slot_of = index.slot_of
            slots = np.array([slot_of[name] for name in names], dtype=np.int64)
        verdicts = self._verdicts(entry, ranking, now, slots)
        keep = verdicts.allowed.nonzero()[0]
        return self._pool(
            slots[keep], verdicts.rules_of(keep), now, verdicts.standing[keep], verdicts.limit[keep]
        )

    def _verdicts(
        self, entry: QueueEntry, ranking: Ranking, now: float, slots: IntArray
    ) -> SlotVerdicts:
        """The contract's answer for each of `slots` (of the preemptible index), asked once per
        kind of victim rather than once per job."""
        index = self._preemptible
        verdicts = SlotVerdicts(
            allowed=index.unprotected(slots, now),
            rule=np.zeros(slots.size, dtype=np.int64),
            rule_names=[],
            standing=np.zeros(slots.size),
            limit=np.full(slots.size, np.inf),
        )
        unallocated = index.unallocated[slots] & verdicts.allowed
        if unallocated.any():
            # Unallocated victims are fair game for any allocated preemptor: one question.
            first = str(index.ids[slots[unallocated.argmax()]])
            verdict = self.contract.may_preempt(
                entry, self._contract_views[first], now, ranking, self
            )
            if not verdict.allowed:
                verdicts.allowed[:] = False
                return verdicts
            verdicts.rule_names.append(str(verdict.rule))
        mine = (~index.unallocated[slots] & verdicts.allowed).nonzero()[0]
        if mine.size == 0:
            return verdicts
        # For an unprotected allocated job the contract's verdict depends only on its account
        # and priority, and under the budget rule on its size too, monotonically (a job no
        # larger than what its account runs beyond its budget may go): one question per pair,
        # asked about the pair's smallest job, the others then judged by that limit.
        mine_slots = slots[mine]
        sizes = index.gpus[mine_slots]
        pairs = index.pair[mine_slots]
        # By pair, smallest first; stable, so that among equal sizes the first job answers.
        order = np.lexsort((sizes, pairs))
        sorted_pairs = pairs[order]
        opens = np.concatenate(([True], sorted_pairs[1:] != sorted_pairs[:-1]))
        heads = np.flatnonzero(opens)
        group_of_row = np.empty(mine.size, dtype=np.int64)
        group_of_row[order] = np.cumsum(opens) - 1
        n_groups = heads.size
        pair_allowed = np.zeros(n_groups, dtype=bool)
        pair_limit = np.full(n_groups, np.inf)
        pair_rule = np.zeros(n_groups, dtype=np.int64)
        pair_standing = np.zeros(n_groups)
        pair_ranked = np.zeros(n_groups, dtype=bool)
        rule_codes: dict[str, int] = {}
        self._check_pair_verdicts(ranking)
        preemptor = (
            entry.account,
            entry.priority,
            entry.unallocated,
            self.running_gpus(entry.account),
        )
        # The pairs' heads as Python scalars, each account's load and standing looked up once:
        # a cycle asks for thousands of pairs, most of them answered by the memo.
        head_slots = mine_slots[order[heads]]
        loads_key = (self.usage.version, self._leaving_version, ranking)
        if self._account_loads_key != loads_key:
            self._account_loads = {}
            self._account_loads_key = loads_key
        loads = self._account_loads
        for position, (slot, pair, size, account_code) in enumerate(
            zip(
                head_slots.tolist(),
                index.pair[head_slots].tolist(),
                index.gpus[head_slots].tolist(),
                index.account[head_slots].tolist(),
                strict=True,
            )
        ):
            load = loads.get(account_code)
            if load is None:
                load = loads[account_code] = self._account_load(
                    index.account_names[account_code], ranking
                )
            account, account_running, standing = load
            known = self._pair_verdict(
                entry, ranking, now, slot, preemptor, (pair, size, account, account_running)
            )
            if known is None:
                continue
            rule, limit = known
            code = rule_codes.get(rule)
            if code is None:
                code = rule_codes[rule] = len(verdicts.rule_names)
                verdicts.rule_names.append(rule)
            pair_allowed[position] = True
            pair_rule[position] = code
            if limit is not None:
                pair_limit[position] = limit
            if standing is not None:
                pair_ranked[position] = True
                pair_standing[position] = standing
        kept = pair_allowed[group_of_row] & ~(sizes > pair_limit[group_of_row])
        verdicts.allowed[mine] = kept
        rows = mine[kept]
        verdicts.rule[rows] = pair_rule[group_of_row[kept]]
        verdicts.limit[rows] = pair_limit[group_of_row[kept]]
        ranked = kept & pair_ranked[group_of_row]
        verdicts.standing[mine[ranked]] = pair_standing[group_of_row[ranked]]
        return verdicts

    def _check_pair_verdicts(self, ranking: Ranking) -> None:
        """Forget the remembered pair verdicts when the budgets (or, under the fair-share
        rule, the ranking) changed."""
        stamp = self.tree.version
        if self._pair_verdicts_stamp != stamp or (
            self.contract.cross_account == "fair_share"
            and self._pair_verdicts_ranking is not ranking
        ):
            self._pair_verdicts.clear()
            self._pair_verdicts_ranking = ranking
            self._pair_verdicts_stamp = stamp

    def _account_load(self, account: str, ranking: Ranking) -> tuple[str, float, float | None]:
        """A victim account's name, running GPUs (as the contract counts them) and standing in
        `ranking` (None when it is not a ranked leaf)."""
        standing = None
        if ranking.is_ranked_leaf(account):
            standing = float(len(ranking.leaves) - ranking.rank(account))
        return account, self.running_gpus(account), standing

    def _pair_verdict(
        self,
        entry: QueueEntry,
        ranking: Ranking,
        now: float,
        slot: int,
        preemptor: tuple[str, int, bool, float],
        victim: tuple[int, float, str, float],
    ) -> tuple[str, float | None] | None:
        """The contract's verdict on the unprotected allocated running job in `slot` for
        `entry`, as what `_verdicts` applies to its (account, priority) pair: None if refused,
        else the rule and the largest job of the pair that may go (budget rule; None: any).
        `preemptor`: the entry's account, priority, tier and the GPUs its account runs;
        `victim`: the slot's pair, GPUs, account and the GPUs its account runs.

        Verdicts are remembered by those, while the budgets (and under the fair-share rule
        the ranking, see `_check_pair_verdicts`) stay the same: nothing else of either job
        enters a verdict on an unprotected victim.
        """
        key = (*preemptor, *victim)
        known: tuple[str, float | None] | None = self._pair_verdicts.get(key, _UNKNOWN)
        if known is _UNKNOWN:
            verdict = self.contract.may_preempt(
                entry, self._contract_views[str(self._preemptible.ids[slot])], now, ranking, self
            )
            known = None
            if verdict.allowed:
                limit = None
                if self.contract.cross_account == "budget" and (
                    verdict.rule is PreemptionRule.RECLAIM_BUDGET
                ):
                    limit = self.contract.reclaim_limit(entry.account, victim[2], self)
                known = (str(verdict.rule), limit)
            if len(self._pair_verdicts) >= _PAIR_VERDICTS_KEPT:
                self._pair_verdicts.clear()  # loads wander: keep the memo bounded
            self._pair_verdicts[key] = known
        return known

    def _pool(
        self,
        slots: IntArray,
        rules: list[str],
        now: float,
        standing: FloatArray,
        limit: FloatArray,
    ) -> CandidatePool:
        """The candidate arrays of `slots` of the preemptible index (`limit`: each one's
        account's budget cap, inf when none)."""
        index = self._preemptible
        allocations = index.allocations
        pods = [allocations[slot].nodes for slot in slots.tolist()]  # type: ignore[union-attr]
        counts = index.pods[slots]
        bounded = np.isfinite(limit)
        cap_group: IntArray | None = None
        caps, cap_accounts = np.zeros(0), []
        if bounded.any():
            accounts, group = distinct_inverse(index.account[slots[bounded]].astype(np.int64))
            cap_group = np.full(slots.size, -1, dtype=np.int64)
            cap_group[bounded] = group
            caps = np.zeros(accounts.size)
            caps[group] = limit[bounded]
            cap_accounts = [index.account_names[int(a)] for a in accounts.tolist()]
        return CandidatePool(
            cap_group=cap_group,
            caps=caps,
            cap_accounts=cap_accounts,
            held=index.gpus[slots].astype(np.float64),
            job_ids=index.ids[slots].tolist(),
            rules=rules,
            lost=index.gpus[slots] * np.maximum(now - index.since[slots], 0.0),
            standing=standing,
            whole=index.whole[slots],
            pod_starts=np.concatenate(([0], counts.cumsum())).astype(np.int64),
            pod_nodes=np.concatenate(pods) if pods else np.zeros(0, dtype=np.int64),
        )

    def owners_on(self, nodes: IntArray) -> set[str]:
        """Running jobs holding anything on `nodes`."""
        index = self._preemptible
        holders = index.holders_on(distinct(np.asarray(nodes, dtype=np.int64)))
        return {str(job_id) for job_id in index.ids[holders].tolist()}

    def _preempt_or_refuse(
        self,
        job: Job,
        kind: JobKind,
        entry: QueueEntry,
        ranking: Ranking,
        fence: Fence,
        now: float,
    ) -> PreemptionPlan | str:
        """`_plan_preemption`, with refusals remembered across cycles.

        A refusal is decided by the free capacity, the jobs preemption could take (running,
        not being evicted, past their protection, allowed by the contract) and the gang, not
        by the time otherwise: the work victims would lose orders the search, but the search
        refuses only when placing the gang fails with every allowed candidate gone (or their
        GPUs cannot add up to it), and a smaller set cannot succeed where that failed (the
        placement search fails monotonically, as remembered failures assume). So a
        refusal stands, word for word, while the epoch (free capacity and the running set,
        hence the loads), the fenced nodes, the preemptible index, the budget tree and usage
        (and under the fair-share rule the accounts' order) stay as they were and no
        protection has ended. The search that stopped at `DOMAINS_EXAMINED` domains with room
        depends on which were cheapest, so its refusals are not remembered.

        When unallocated work is all the job may take (`_only_unallocated_victims`), nothing of
        its account or priority enters the search: the refusal is shared by every such job of
        the same shape.
        """
        self._preemptible.refresh(now)
        only_unallocated = self._only_unallocated_victims(entry)
        key: tuple[object, ...] = (
            (kind.shape, kind.pods)
            if only_unallocated
            else (kind.shape, kind.pods, entry.account, entry.priority)
        )
        inputs = (
            self._epoch,
            self._preemptible.version,
            self.tree.version,
            self.usage.version,
            ranking.leaves if self.contract.cross_account == "fair_share" else None,
        )
        fenced = fence.frozen()
        known = self._refusals.get(key)
        if known is not None and known[0] == inputs and now < known[2] and fence.equals(known[1]):
            return known[3]
        fence.settle()
        plan, lasting = self._search_preemption(job, entry, ranking, now, only_unallocated)
        if isinstance(plan, PreemptionPlan):
            return plan
        if self._refusals_epoch != self._epoch:
            # Refusals of an earlier epoch cannot match again: forget them.
            self._refusals.clear()
            self._refusals_epoch = self._epoch
        if lasting:
            protections = self._protection
            ended = protections.bisect_right((now, "\uffff"))
            until = float(protections[ended][0]) if ended < len(protections) else math.inf
            self._refusals[key] = (inputs, fenced, until, plan)
        return plan

    def _plan_preemption(
        self, job: Job, entry: QueueEntry, ranking: Ranking, now: float
    ) -> PreemptionPlan | str:
        """Victims whose eviction lets `job` run, or why there are none."""
        self._preemptible.refresh(now)
        only_unallocated = self._only_unallocated_victims(entry)
        return self._search_preemption(job, entry, ranking, now, only_unallocated)[0]

    def _search_preemption(
        self, job: Job, entry: QueueEntry, ranking: Ranking, now: float, only_unallocated: bool
    ) -> tuple[PreemptionPlan | str, bool]:
        """`_plan_preemption`, and whether its answer does not depend on the order of domains
        by lost work (False when the local search stopped at `DOMAINS_EXAMINED`).
        `only_unallocated`: `_only_unallocated_victims(entry)`, as of a refresh at `now`."""
        local = self._local_candidates(job, now, only_unallocated)
        lasting = True
        if local is not None:
            slots, complete, lasting = local
            if complete and not slots.size:
                unprotected = self._protection.bisect_right((now, "\uffff"))
                if not self._unallocated_running and (only_unallocated or unprotected == 0):
                    return "no running job may be preempted for it under the contract", lasting
                level = self.state.topology.domain_levels[self.victim_search.leaf_level]
                victims = (
                    "all unallocated work (its account runs its whole budget)"
                    if only_unallocated
                    else "every unprotected job"
                )
                return (
                    f"even evicting {victims} leaves no {level} with room for "
                    f"{_needs(job).removeprefix('needs ')}"
                ), lasting
            # A gang that fits one innermost domain: only the domains where preemptible work
            # could make room are examined, not every running job.
            candidates = self._candidates(entry, ranking, now, slots)
            plan = self.victim_search.plan(
                job.job_id, job.request, candidates, known_not_to_fit=True
            )
            # Within budget caps the choice of victims is heuristic beyond the exact subsets,
            # ordered by lost work: such a refusal may not stand as the work grows.
            lasting = lasting and not candidates.caps_bind
            if isinstance(plan, PreemptionPlan) or complete:
                return plan, lasting
        else:
            # Larger gangs: domains chosen from the aggregates, without listing every candidate.
            spread = self.victim_search.across_domains(
                job.job_id,
                job.request,
                self._preemptible,
                lambda slots: self._verdicts(entry, ranking, now, slots),
                now,
                only_unallocated,
            )
            if spread is not None:
                return spread, lasting
        candidates = self._candidates(entry, ranking, now, only_unallocated=only_unallocated)
        plan = self.victim_search.plan(job.job_id, job.request, candidates, known_not_to_fit=True)
        return plan, lasting and not candidates.caps_bind

    def _beyond_budget_note(self, job: Job, entry: QueueEntry) -> str:
        """Under the budget rule, what a job larger than its account's whole budget should know
        (else ""): preemption cannot make room for it, only other accounts' unused budget can."""
        contract = self.contract
        if type(contract) is not Contract or contract.cross_account != "budget":
            return ""
        budget = self.budget_gpus(entry.account)
        if entry.unallocated or budget <= 0 or job.gpus <= budget:
            return ""
        return (
            f" (it asks for {_gpus_text(job.gpus)} GPUs, more than its account's whole budget "
            f"of {_gpus_text(budget)}: preemption never takes another account below its budget, "
            "so it starts only while other accounts leave part of theirs unused)"
        )

    def _only_unallocated_victims(self, entry: QueueEntry) -> bool:
        """Whether unallocated work is all that `entry` may preempt: under the budget rule its
        account runs its whole budget and holds no unprotected allocated job of lower priority
        (as of the preemptible index's last refresh). Only for the built-in contract: a
        replacement may judge otherwise."""
        contract = self.contract
        if type(contract) is not Contract or entry.unallocated:
            return False
        if contract.cross_account != "budget" or self.budget_gpus(entry.account) <= 0:
            # Without a budget the contract lets the job preempt nobody, not even unallocated
            # work: its refusal must not answer for budgeted jobs of the same shape.
            return False
        if not contract.runs_its_budget(entry.account, self):
            return False
        return not self._preemptible.holds_unprotected_below(entry.account, entry.priority)

    def _local_candidates(
        self, job: Job, now: float, only_unallocated: bool = False
    ) -> tuple[IntArray, bool, bool] | None:
        """Running jobs (slots of the preemptible index) in the innermost domains where
        evicting unprotected work could fit `job`, for gangs that fit in one such domain; None
        when that shortcut does not apply. With `only_unallocated`, the only work counted and
        listed is unallocated (all the contract lets the job take).

        Unprotected work is unallocated work and allocated jobs past their min runtime,
        whatever their standing (the contract filters later). The per-domain aggregates of free
        and unprotected GPUs bound each domain's room from above; the domains within that bound
        are taken by the work lost evicting all their unprotected jobs, cheapest first, and
        their room is counted node by node until `DOMAINS_EXAMINED` of them have room. Also
        says whether every domain that could hold the gang was included (then nothing else can
        help a gang that must fit in one domain), and whether fewer than `DOMAINS_EXAMINED` had
        room (else which were examined, and so the answer, depends on the work they hold).
        """
        request = job.request
        search = self.victim_search
        if request.is_fractional or request.gpus_per_pod == 0:
            return None
        need = request.pods * request.gpus_per_pod
        if need > search.largest_leaf_gpus:
            return None
        state, index = self.state, self._preemptible
        index.refresh(now)
        leaf_free = state.free_gpus[search.leaf_level]
        freeable = index.leaf_unallocated_freeable if only_unallocated else index.leaf_freeable
        # With each such domain, the work lost evicting every unprotected job touching it.
        possible, cost = kernels.reaching(
            leaf_free, freeable, need, index.leaf_weight, index.leaf_weighted_since, now
        )
        one_domain = search.is_one_domain(request)
        nothing = np.zeros(0, dtype=np.int64)
        if possible.size == 0:
            return (nothing, True, True) if one_domain else None
        starts = search.leaf_starts
        chosen: list[IntArray] = []
        found = examined = 0
        batch = 2 * DOMAINS_EXAMINED
        # The cheapest few first without sorting every domain: those up to the batch-th cost
        # (ties included), then, if they do not give enough domains with room, all the rest.
        cheapest: BoolArray | None = None
        if possible.size > batch:
            cheapest = cost <= np.partition(cost, batch - 1)[batch - 1]
        for stage_number in range(1 if cheapest is None else 2):
            if found >= DOMAINS_EXAMINED:
                break
            if cheapest is None:
                stage, stage_cost = possible, cost
            else:
                # The rest only when the cheapest few fall short (rarely on a busy fleet).
                kept = cheapest if stage_number == 0 else ~cheapest
                stage, stage_cost = possible[kept], cost[kept]
            ranked = stage[np.lexsort((need - leaf_free[stage], stage_cost))]
            done = 0
            while done < ranked.size and found < DOMAINS_EXAMINED:
                leaves = ranked[done : done + batch]
                done += leaves.size
                examined += leaves.size
                batch *= 2
                fits = self._leaves_with_room(leaves, request, only_unallocated)
                chosen.append(fits[: DOMAINS_EXAMINED - found])
                found += fits.size
        picked = np.concatenate(chosen)
        complete = one_domain and examined == possible.size and found <= DOMAINS_EXAMINED
        if picked.size == 0:
            return (nothing, True, True) if one_domain else None
        slots = index.slots_on(domain_nodes(starts, picked, search.leaf_size))
        if only_unallocated:
            slots = slots[index.unallocated[slots]]
        # In job-name order, so that ties between equal victim sets always break the same way.
        ordered = slots[index.ids[slots].argsort(kind="stable")]
        return ordered, complete, found < DOMAINS_EXAMINED

    def _leaves_with_room(
        self, leaves: IntArray, request: GangRequest, only_unallocated: bool = False
    ) -> IntArray:
        """Those of `leaves` (innermost domains) where free GPUs plus those of unprotected pods
        (with `only_unallocated`, of unallocated pods) give room for the gang, counted node by
        node."""
        state, topology = self.state, self.state.topology
        index = self._preemptible
        room = kernels.pods_in_domains(
            leaves,
            self.victim_search.leaf_starts,
            state.free_whole_gpus,
            index.node_unallocated_freeable if only_unallocated else index.node_freeable,
            topology.gpu_count,
            state.health,
            topology.gpu_model,
            request.model_allowed(topology),
            request.gpus_per_pod,
        )
        fits: IntArray = leaves[room >= request.pods]
        return fits

    def _carry_out(self, job: Job, plan: PreemptionPlan, now: float, result: CycleResult) -> None:
        """Evict the plan's victims with their grace period and nominate their capacity."""
        if not plan.victims:
            # Room appeared since the job's last search (a nominee started elsewhere): no one
            # needs to leave.
            self._start(job, plan.placement, now)
            result.decisions.append(Bind(job.job_id, plan.placement.allocation, job.unallocated))
            return
        victims: list[str] = []
        for victim in plan.victims:
            victims.append(victim.job_id)
            target = self.running[victim.job_id]
            self._mark_leaving(target)
            reason = f"preempted by {job.job_id} ({victim.rule})"
            target.evictions.append(
                EvictionRecord(now, job.job_id, victim.rule, reason, victim.lost_gpu_seconds)
            )
            target.record(now, reason)
            self._preemptor_of[victim.job_id] = job.job_id
            result.decisions.append(
                Evict(
                    victim.job_id,
                    job.job_id,
                    self.grace_for(target),
                    victim.rule,
                    victim.lost_gpu_seconds,
                )
            )
        self._preemptible.mark_evicting_many(victims)
        job.nomination = Nomination(set(victims), plan.nodes, now)
        lost = plan.impact[0] / 3600
        job.reason = (
            f"preempting {_victims_by_rule([v.rule for v in plan.victims])} in "
            f"{self._domain_of(plan.nodes)} ({lost:,.1f} GPU-hours of work lost); "
            "starts when they exit"
        )
        job.record(now, job.reason)

    def grace_for(self, job: Job) -> float:
        """Seconds an evicted job gets to exit: its own `grace_period` up to `max_grace_s`, or
        the cluster default `grace_s`."""
        asked = job.spec.grace_period
        return self.grace_s if asked is None else min(asked, self.max_grace_s)

    @staticmethod
    def _work_since(job: Job) -> float:
        """Since when a running job's work would be lost: its last checkpoint if it can resume
        from one, else its start."""
        assert job.start_time is not None
        if job.spec.resumable and job.last_checkpoint is not None:
            return max(job.start_time, job.last_checkpoint)
        return job.start_time

    def _movers_on(self, nodes: IntArray, now: float) -> list[Mover]:
        """Running jobs on `nodes` that may be moved: resumable and not protected."""
        movers: list[Mover] = []
        for job_id in sorted(self.owners_on(nodes)):
            job = self.running[job_id]
            assert job.start_time is not None
            if job.evicting or not job.spec.resumable:
                continue
            if not job.unallocated and now < job.start_time + job.min_runtime:
                continue
            lost = job.gpus * max(now - self._work_since(job), 0.0)
            movers.append(Mover(job_id, job.request, lost, job.gpus))
        return movers

    def _defragment_for(
        self, job: Job, reservation: Reservation, now: float, result: CycleResult
    ) -> bool:
        """Move resumable jobs so that the reserved job starts now, if that is worth it."""
        if self.defragmenter is None:
            return False
        known = self._no_defrag.get(job.job_id)
        if known is not None and known[0] == self.state.version:
            job.reason += f"; no defragmentation: {known[1]}"
            return False
        plan = self.defragmenter.for_blocked_job(
            job.job_id,
            job.request,
            wait_saved_s=max(reservation.start_time - now, 0.0),
            movers_on=lambda nodes: self._movers_on(nodes, now),
        )
        if not isinstance(plan, MovePlan):
            self._no_defrag[job.job_id] = (self.state.version, plan)
            job.reason += f"; no defragmentation: {plan}"
            return False
        self._move(plan, job, "defragmentation", now, result)
        job.reservation = None
        job.reason = (
            f"defragmenting {plan.domain}: moving {len(plan.movers)} job(s) "
            f"({plan.cost_gpu_seconds / 3600:,.1f} GPU-hours) to start "
            f"{_hours(reservation.start_time - now)} sooner"
        )
        return True

    def _move(
        self, plan: MovePlan, job: Job | None, rule: str, now: float, result: CycleResult
    ) -> None:
        preemptor = job.job_id if job is not None else ""
        for mover in plan.movers:
            target = self.running[mover.job_id]
            self._mark_leaving(target)
            self._preemptible.mark_evicting(mover.job_id)
            reason = f"moved for {rule} of {plan.domain}" + (f" ({preemptor})" if job else "")
            target.evictions.append(
                EvictionRecord(now, preemptor, rule, reason, mover.lost_gpu_seconds)
            )
            target.record(now, reason)
            if job is not None:
                self._preemptor_of[mover.job_id] = job.job_id
            result.decisions.append(
                Evict(mover.job_id, preemptor, self.grace_for(target), rule, mover.lost_gpu_seconds)
            )
        if job is not None:
            job.nomination = Nomination({m.job_id for m in plan.movers}, plan.nodes, now)

    def compact(self, now: float) -> CycleResult:
        """Background compaction: empty one partly used innermost domain by moving its
        resumable jobs into fuller ones, within `compaction_moves_per_hour`."""
        result = CycleResult(now)
        if self.defragmenter is None:
            return result
        while self._recent_moves and self._recent_moves[0] <= now - 3600:
            self._recent_moves.popleft()
        budget = self.compaction_moves_per_hour - len(self._recent_moves)
        plan = self.defragmenter.compaction(
            lambda nodes: self._movers_on(nodes, now), self.owners_on, budget
        )
        if plan is not None:
            self._move(plan, None, "compaction", now, result)
            self._recent_moves.extend([now] * len(plan.movers))
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

    def _evict_from_draining_nodes(self, now: float, result: CycleResult) -> None:
        """Jobs on draining nodes leave once their protection ends (unallocated ones at once)."""
        if self.state.nodes_by_health[Health.DRAINING] == 0:
            return
        draining = np.flatnonzero(self.state.health == Health.DRAINING)
        for job_id in sorted(self.owners_on(draining)):
            job = self.running.get(job_id)
            if job is None or job.evicting:
                continue
            assert job.start_time is not None
            if not job.unallocated and now < job.start_time + job.min_runtime:
                job.reason = "running on a draining node; leaves when its min runtime ends"
                continue
            self._mark_leaving(job)
            self._preemptible.mark_evicting(job_id)
            lost = job.gpus * max(now - self._work_since(job), 0.0)
            reason = "its node is draining and its min runtime has ended"
            job.evictions.append(EvictionRecord(now, "", "node_draining", reason, lost))
            job.record(now, f"evicted: {reason}")
            result.decisions.append(Evict(job_id, "", self.grace_for(job), "node_draining", lost))

    def _reserve(self, job: Job, now: float, fence: Fence) -> Reservation | None:
        """The earliest time the job fits (see `_earliest_fit`), from the last cycle's answer
        when nothing has changed since: same job, same epoch and the same nodes fenced."""
        memo = self._last_reservation
        fenced = fence.frozen()
        if (
            memo is not None
            and memo[0] is job
            and memo[1] is job.request
            and memo[2] == self._epoch
            and fence.equals(memo[3])
        ):
            fit = memo[4]
        else:
            # After a change, the job most likely waits for the same job to end as before: the
            # releases up to it (one more than those before it, whether or not it still runs).
            hint = None
            if memo is not None and memo[0] is job and memo[4]:
                hint = self._releases.bisect_left(memo[4].last) + 1
            fit = self._earliest_fit(job, hint)
            self._last_reservation = (job, job.request, self._epoch, fenced, fit)
        if fit is None:
            return None
        self._reserved_nodes = fit.nodes
        return Reservation(job.job_id, max(fit.release, now), int(fit.nodes.size), fit.domain)

    def _earliest_fit(self, job: Job, hint: int | None = None) -> _Fit | None:
        """Where and after which expected release the job fits, releasing running jobs in the
        order they should end: the fewest releases k after which it fits (it does not fit
        after k - 1, and more releases only free more).

        A running job is expected to end at start + expected runtime; one that declared none is
        assumed to yield when its min runtime expires (the contract then lets it be preempted).
        Placement is tried only from the fewest releases that could free enough GPUs in some
        domain of the required level (`ReleaseBounds.fewest`): fewer cannot fit. From there, on
        a statement that is always rolled back, k is found by growing steps and bisection; a
        search after k releases releases only those that can matter to it
        (`ReleaseBounds.released_for`). A `hint` (the expected k: where the job that ended
        the wait last time now stands in the release order) beyond that bound is tried right
        after the bound when whole GPUs are counted (the bound is then most often the answer
        itself), else the steps start at hint - 1: two placements when the answer did not
        move.
        """
        if not self.running:
            return None
        bounds = self._release_bounds(job.request)
        first = bounds.fewest()
        if first is None:
            return None
        count = len(self._releases)
        prefix = ReleasedPrefix(Statement(self.state), bounds)

        def place_after(released: int) -> Placement | None:
            prefix.release_for(released)
            outcome = place(self.state, job.request, self.policy, exact_reasons=False)
            return outcome if isinstance(outcome, Placement) else None

        try:
            low = first - 1  # releases known not to be enough
            if hint is not None and not first < hint <= count:
                hint = None
            # Counted per rack, the bound is most often the answer: tried first, the hint
            # next. Without counts (bound 1), the hint's neighbour first.
            start = first if bounds.counted or hint is None else hint - 1
            placed = place_after(start)
            if placed is not None:
                high = start
            else:
                low = start
                step = 1
                upto = hint if hint is not None and hint > low else None
                while placed is None:
                    if upto is None:
                        if low >= count:
                            return None
                        upto = min(count, low + step)
                        step *= 2
                    tried, upto = upto, None
                    placed = place_after(tried)
                    if placed is None:
                        low = tried
                high = tried
            # Narrow down to the fewest releases that still fit (bisection).
            while high - low > 1:
                middle = (low + high) // 2
                outcome = place_after(middle)
                if outcome is None:
                    low = middle
                else:
                    high, placed = middle, outcome
            return self._fit(placed, high)
        finally:
            prefix.statement.discard()

    def _release_bounds(self, request: GangRequest) -> ReleaseBounds:
        """The releases counted per innermost domain, in whole slices, and summed per domain
        of the gang's required level (see `ReleaseBounds`); for fractional or GPU-less pods
        whole GPUs tell nothing."""
        if request.gpus_per_pod == 0 or request.is_fractional:
            return ReleaseBounds(self._releases, self._held_by_leaves, None)
        state, leaf = self.state, self.victim_search.leaf_level
        required = request.required
        room = LeafRoom(
            free=state.free_gpus[leaf],
            domain_of_leaf=self.victim_search.domain_of_leaf(required),
            n_domains=state.topology.n_domains(required),
            gpus_per_pod=request.gpus_per_pod,
            granule=request.granule(leaf),
            pods=request.pods,
        )
        return ReleaseBounds(self._releases, self._held_by_leaves, room)

    def _held_by_leaves(self, owners: list[str]) -> list[tuple[IntArray, IntArray]]:
        """For each running job of `owners`, the innermost domains it holds GPUs in and how
        many GPU slots in each; remembered while its allocation lasts (a gang spans tens of
        thousands of nodes, and a reservation search reads hundreds of jobs)."""
        allocations, cache = self.state.allocations, self._held_cache
        if len(cache) > 2 * len(self.running) + 64:
            # Jobs that stopped running: forget them, in one sweep now and then.
            self._held_cache = cache = {
                kept: entry for kept, entry in cache.items() if kept in self.running
            }
        held: list[tuple[IntArray, IntArray]] = []
        for owner in owners:
            allocation = allocations[owner]
            cached = cache.get(owner)
            if cached is None or cached[0] is not allocation:
                cached = cache[owner] = (allocation, self._count_held(allocation))
            held.append(cached[1])
        return held

    def _count_held(self, allocation: Allocation) -> tuple[IntArray, IntArray]:
        """An allocation's innermost domains (distinct, in any order) and GPU slots in each."""
        leaf_of_pod = self.victim_search.leaf_of_node[allocation.nodes]
        width = allocation.gpus.shape[1]
        if leaf_of_pod.size <= 32:
            # A few pods: counted in a dict, cheaper than numpy's calls.
            tally: dict[int, int] = {}
            for leaf in leaf_of_pod.tolist():
                tally[leaf] = tally.get(leaf, 0) + width
            return (
                np.fromiter(tally.keys(), dtype=np.int64, count=len(tally)),
                np.fromiter(tally.values(), dtype=np.int64, count=len(tally)),
            )
        if leaf_of_pod.size * 4 >= self._n_leaves:
            # A gang over many leaves: counted over every leaf, cheaper than sorting its pods.
            pods_per_leaf = np.bincount(leaf_of_pod, minlength=self._n_leaves)
            leaves = np.flatnonzero(pods_per_leaf)
            return leaves, pods_per_leaf[leaves] * width
        leaves = np.sort(leaf_of_pod)
        first = np.flatnonzero(np.concatenate(([True], leaves[1:] != leaves[:-1])))
        pods = np.diff(np.append(first, leaves.size))
        return leaves[first], pods * width

    def _fit(self, placed: Placement, released: int) -> _Fit:
        nodes = self.state.distinct_nodes(placed.allocation.nodes)
        last = self._releases[released - 1]
        return _Fit(float(last[0]), nodes, self._domain_of(nodes), released, last)

    def _release_time(self, job: Job) -> tuple[float, str]:
        """When a running job is expected to free its GPUs: its expected end, or else its
        min-runtime expiry (from then on the contract lets it be preempted)."""
        end = job.expected_end
        if end is None:
            assert job.start_time is not None
            end = job.start_time + job.min_runtime
        return (end, job.job_id)

    def _domain_of(self, nodes: IntArray) -> str:
        """The smallest domain holding every node, as "<level> <name>"."""
        topology = self.state.topology
        for level in range(len(topology.domain_levels) - 1, 0, -1):
            domains = topology.node_domain[level][nodes]
            if (domains == domains[0]).all():
                name = topology.domain_levels[level]
                return f"{name} {topology.domain_name(level, int(domains[0]))}"
        return "cluster"

    # --- bookkeeping -------------------------------------------------------------------------
    def _enqueue(self, job: Job) -> None:
        job.state = JobState.PENDING
        job.start_time = None
        job.reason = "queued; waiting for the next cycle"
        self.queue.add(
            QueueEntry(
                job_id=job.job_id,
                # One string per account: a cycle reads every pending job's account, and one
                # shared string stays in cache where thousands of copies would not.
                account=sys.intern(job.spec.account),
                priority=job.spec.priority,
                submit_time=job.submit_time,
                unallocated=job.spec.min_runtime == 0,
            )
        )

    def _start(self, job: Job, placement: Placement, now: float) -> None:
        self.state.allocate(job.job_id, placement.allocation)
        self._epoch += 1
        self.queue.remove(job.job_id)
        spec = job.spec
        job.state = JobState.RUNNING
        job.start_time = now
        job.attempts += 1
        job.unallocated = self.contract.is_unallocated(spec.min_runtime, spec.account, self.tree)
        job.min_runtime = (
            0.0 if job.unallocated else self.contract.effective_min_runtime(spec.min_runtime)
        )
        how = " as unallocated work" if job.unallocated else ""
        cap = self.borrowed_min_runtime
        if cap is not None and job.min_runtime > cap and self._beyond_budget(job):
            job.min_runtime = cap
            how = (
                " beyond its team's budget, unprotected"
                if cap == 0
                else f" beyond its team's budget, protected for {_hours(cap)}"
            )
        job.reason = "running" + how
        job.record(now, "started" + (f" ({how.strip()})" if how else ""))
        if not job.unallocated and job.gpus > 0:
            # Usage is GPU time: pods without GPUs charge nothing.
            self.usage.start(spec.account, job.gpus, now)
        self.running[job.job_id] = job
        job.last_checkpoint = None
        self._remember_running(job)

    def _beyond_budget(self, job: Job, also: float = 0.0) -> bool:
        """Whether the team's running allocated GPUs, this job and `also` more included, exceed
        its budget."""
        account = job.spec.account
        return self.running_gpus(account) + also + job.gpus > self.budget_gpus(account) + 1e-9

    def running_gpus(self, account: str) -> float:
        """GPUs the account's allocated jobs hold now, without those already on their way out
        (the contract's `AccountLoads`): an eviction decided in one cycle counts against the
        victim's account at once, so that no later decision takes it below its budget."""
        return self.usage.running(account) - self._leaving_gpus.get(account, 0.0)

    def _mark_leaving(self, job: Job) -> None:
        """The running `job` was told to leave (evicted or moved)."""
        job.evicting = True
        if not job.unallocated and job.gpus > 0:
            account = job.spec.account
            self._leaving_gpus[account] = self._leaving_gpus.get(account, 0.0) + job.gpus
            self._leaving_version += 1

    def _owed_first(self) -> frozenset[str]:
        """The accounts whose allocated work the queue puts first."""
        return self.owed_accounts() if self.orders_owed_first else frozenset()

    def owed_accounts(self) -> frozenset[str]:
        """Accounts with pending jobs that run fewer allocated GPUs than their budget: their
        allocated work goes first in the queue, since a budget is what an account is owed."""
        tree = self.tree
        return frozenset(
            account
            for account in self.queue.accounts()
            if account in tree
            and tree.is_leaf(account)
            and self.running_gpus(account) < self.budget_gpus(account) - 1e-9
        )

    def budget_gpus(self, account: str) -> float:
        """The account's budget in GPUs: its effective share of the cluster's GPUs."""
        if self._budgets_version != self.tree.version:
            self._budgets.clear()
            self._budgets_version = self.tree.version
        budget = self._budgets.get(account)
        if budget is None:
            budget = self.tree.effective_share(account) * self.state.topology.n_gpus
            self._budgets[account] = budget
        return budget

    def _remember_running(self, job: Job) -> None:
        assert job.start_time is not None
        spec = job.spec
        view = RunningJob(
            job_id=job.job_id,
            account=spec.account,
            priority=spec.priority,
            submit_time=job.submit_time,
            start_time=job.start_time,
            min_runtime=job.min_runtime,
            resumable=spec.resumable,
            unallocated=job.unallocated,
            gpus=job.gpus,
        )
        self._contract_views[job.job_id] = view
        self._releases.add(self._release_time(job))
        allocation = self.state.allocations[job.job_id]
        self._preemptible.add(
            job.job_id,
            allocation,
            gpus=job.gpus,
            since=self._work_since(job),
            protected_until=job.start_time + job.min_runtime,
            unallocated=job.unallocated,
            account=spec.account,
            priority=spec.priority,
        )
        if job.unallocated:
            self._unallocated_running.add(job.job_id)
        else:
            self._protection.add((job.start_time + job.min_runtime, job.job_id))

    def _forget_running(self, job: Job) -> None:
        assert job.start_time is not None
        self._releases.remove(self._release_time(job))
        del self._contract_views[job.job_id]
        self._preemptible.remove(job.job_id)
        if job.unallocated:
            self._unallocated_running.discard(job.job_id)
        else:
            self._protection.remove((job.start_time + job.min_runtime, job.job_id))
        # A victim that left (evicted, finished or failed) no longer holds up its preemptor.
        preemptor = self._preemptor_of.pop(job.job_id, None)
        if preemptor is not None:
            nomination = self.jobs[preemptor].nomination
            if nomination is not None:
                nomination.victims.discard(job.job_id)
        if job.evicting and not job.unallocated and job.gpus > 0:
            account = job.spec.account
            left = self._leaving_gpus[account] - job.gpus
            if left > 1e-9:
                self._leaving_gpus[account] = left
            else:
                del self._leaving_gpus[account]
            self._leaving_version += 1
        job.evicting = False

    def _stop(self, job: Job, now: float) -> None:
        self._forget_running(job)
        self.state.release(job.job_id)
        del self.running[job.job_id]
        if not job.unallocated and job.gpus > 0:
            self.usage.stop(job.spec.account, job.gpus, now)

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

    # --- explanations ------------------------------------------------------------------------
    def is_protected(self, job_id: str, now: float) -> bool:
        """Whether a running job is inside its min runtime (unallocated work never is)."""
        job = self._running(job_id)
        assert job.start_time is not None
        return not job.unallocated and now < job.start_time + job.min_runtime

    def explain(self, job_id: str, now: float) -> str:
        """Why a job is where it is: queue position, sort key, reservation, blocking reason."""
        job = self._job(job_id)
        if job.state is not JobState.PENDING:
            return f"{job_id}: {job.state}; {job.reason}"
        explanation = self.queue.explain(job_id, now, self._owed_first())
        ahead_other = self._ahead_from_other_accounts(job, now)
        # Accounts ranked higher are further below their share: the under-served ones.
        standing = f"; {ahead_other} jobs of under-served accounts ahead" if ahead_other else ""
        return f"{explanation.describe()}{standing}; {job.reason}"

    def _ahead_from_other_accounts(self, job: Job, now: float) -> int:
        count = 0
        for entry in self.queue.ordered(now, self._owed_first()):
            if entry.job_id == job.job_id:
                break
            if entry.account != job.spec.account:
                count += 1
        return count

    def queue_rows(self, now: float) -> list[dict[str, object]]:
        """The pending queue in order: position, job, account, sort key, priority, tier, whether
        the account runs below its budget (`owed`), reason."""
        rows: list[dict[str, object]] = []
        for explanation in self.queue.explanations(now, self._owed_first()):
            job = self.jobs[explanation.entry.job_id]
            standing = explanation.standing
            rows.append(
                {
                    "position": explanation.position + 1,
                    "job": job.job_id,
                    "account": job.spec.account,
                    "standing": standing.describe() if standing is not None else "-",
                    "priority": job.spec.priority,
                    "tier": explanation.tier.name.lower(),
                    "owed": explanation.owed,
                    "reason": job.reason,
                }
            )
        return rows


def _gpus_text(gpus: float) -> str:
    """GPUs as written in reasons: whole numbers plain, fractions to a tenth."""
    return f"{gpus:,.0f}" if float(gpus).is_integer() else f"{gpus:,.1f}"
