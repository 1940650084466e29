"""Gangs a node failure interrupted: restarted on their surviving nodes and a spare, put at
the head of the next cycle when they ran within their account's budget, and, with `keep`,
their nodes kept for them until they restart."""

from __future__ import annotations

from collections.abc import Collection, Iterable, KeysView, Mapping
from enum import StrEnum

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import Allocation, ClusterState
from toposched.policy.queue_entry import QueueEntry, QueueTier
from toposched.scheduler.fence import Fence
from toposched.scheduler.jobs import Job, JobState, Nomination, ReasonCode
from toposched.scheduler.ledger import Ledger
from toposched.scheduler.spares import SparePool
from toposched.scheduler.turn import Turn

IntArray = NDArray[np.int64]


class KeptFrom(StrEnum):
    """Whom an interrupted gang's nodes are kept from."""

    ALL = "all"
    """Every other job: they are its nomination."""
    UNALLOCATED = "unallocated"
    """Unallocated work (the queue's unallocated tier and its backfill): budgeted jobs the
    queue ranks first may still take them."""
    ALL_BUT_OWED = "all-but-owed"
    """Every job but the allocated work of teams running below their budget, which the queue
    puts first (owed GPU-time): those may still take them; teams at or beyond their budget and
    unallocated work may not."""


def _fence_apart(fence: Fence, nodes: IntArray) -> None:
    """Fence `nodes` as a group of their own: taken out of the reservation's block, which
    backfill may use, if they are in it."""
    fence.settle()
    fence.open(nodes)
    fence.close(nodes)


class Interruptions:
    """What happens to gangs requeued because nodes under them went down.

    With spares, a gang is nominated its surviving nodes plus a spare of the failed node's
    domain, and restarts there in the next cycle. Otherwise, with `failed_first`, a gang that
    ran within its account's budget heads the next cycle's order, so that its surviving nodes
    are not handed to the queue while it waits to take back unallocated work elsewhere.

    With `keep` (seconds), a budgeted gang without a spare keeps the nodes it ran on, the
    failed ones included (closed while down, its own again once repaired), until it restarts,
    for at most `keep` seconds: from every other job (`KeptFrom.ALL`: they are nominated to
    it), or fenced before the cycle's first turn of a job they are kept from: unallocated work
    (`KeptFrom.UNALLOCATED`), or every job but the allocated work of accounts running below
    their budget (`KeptFrom.ALL_BUT_OWED`). They are opened for its own turn of each cycle
    (where it starts on them and what is free, or preempts the least it needs around them)
    and kept again after it for the nodes still free. The bound gives them back to the queue
    when the gang can neither fit nor preempt for long (other teams' protected runs hold the
    room it lacks).
    """

    def __init__(
        self,
        state: ClusterState,
        ledger: Ledger,
        spares: SparePool | None,
        failed_first: bool,
        keep: float | None = None,
        kept_from: KeptFrom | None = None,
        jobs: Mapping[str, Job] | None = None,
    ) -> None:
        self.state = state
        self.ledger = ledger
        self.spares = spares
        self.failed_first = failed_first
        self.keep = keep
        self.kept_from = KeptFrom.ALL if kept_from is None else kept_from
        self.jobs: Mapping[str, Job] = {} if jobs is None else jobs
        # The nodes kept for each gang, by job id (with `KeptFrom.ALL`, its nomination), the
        # cycle in which they were last fenced (`fence_before`), and the accounts whose
        # allocated work the cycle's queue puts first.
        self._kept: dict[str, Nomination] = {}
        self._fenced_in = -1
        self._owed: Collection[str] = frozenset()
        self._restart_first: set[str] = set()
        # Per node failure: spare nodes taken per domain, and GPUs of each account's gangs
        # put first.
        self._taken: dict[int, int] = {}
        self._restarting: dict[str, float] = {}

    def new_failure(self) -> None:
        """Nodes just went down: the gangs requeued next belong to this failure."""
        self._taken = {}
        self._restarting = {}

    def requeued(self, job: Job, allocation: Allocation, down: IntArray, now: float) -> None:
        """`job`, which ran on `allocation`, was requeued because the nodes `down` failed."""
        if self.spares is not None:
            self._nominate_spare(job, allocation, down, now)
        on_spare = job.nomination is not None
        # `unallocated` is still what the job ran as.
        if self.failed_first and not on_spare and not job.unallocated:
            self._put_first_if_within_budget(job)
        if self.keep is not None and not on_spare and not job.unallocated:
            self._keep_nodes(job, allocation.nodes, now)

    def is_kept(self, job: Job) -> bool:
        """Whether nodes are kept for the job after a node failure (from everyone: they are
        its nomination; by the fence: it has no nomination of its own)."""
        kept = self._kept.get(job.job_id)
        if kept is None:
            return False
        return job.nomination is kept if self.kept_from is KeptFrom.ALL else job.nomination is None

    @property
    def kept_ids(self) -> KeysView[str]:
        """The jobs nodes are kept for (or will be again, once their nomination falls
        through): each takes a turn of its own, never answered alike another job."""
        return self._kept.keys()

    def open_kept(self, job: Job, fence: Fence) -> Nomination | None:
        """At the job's turn: if nodes are kept for it, open them for its own searches
        (placement, preemption, reservation) and return what was kept; None otherwise."""
        if not self.is_kept(job):
            return None
        kept = self._kept[job.job_id]
        fence.settle()
        fence.open(kept.nodes)
        if self.kept_from is KeptFrom.ALL:
            job.nomination = None
        return kept

    def keep_again(self, job: Job, kept: Nomination, turn: Turn) -> None:
        """After the job's turn: keep its nodes still free for it again, unless it started
        or preempts (its own nomination then keeps what it needs) or they were kept for
        `keep` seconds already."""
        nodes = self._still_kept(job, kept, turn.now)
        if nodes is None:
            return
        if self.kept_from is KeptFrom.ALL:
            job.nomination = self._kept[job.job_id]
        elif self._fenced_in != turn.number:
            return  # no job they are kept from has had its turn yet in this cycle
        _fence_apart(turn.fence, nodes)

    def owed_first(self, owed: Collection[str]) -> None:
        """The cycle's queue puts the allocated work of the `owed` accounts (those running
        below their budget) first: with `KeptFrom.ALL_BUT_OWED` they may take the kept nodes."""
        self._owed = owed

    def fence_before(self, turn: Turn, entry: QueueEntry, tier: QueueTier) -> None:
        """At the start of a job's turn: if the nodes are kept from it by the fence (see
        `KeptFrom`) and this cycle has not fenced them yet, fence them now, but the job's own.
        The queue puts the jobs they are not kept from first (budgeted work before unallocated
        work, owed accounts' before the others'), so they stay fenced for the rest of the
        cycle."""
        if self._fenced_in == turn.number or not self._kept or not self._kept_from(entry, tier):
            return
        self._fenced_in = turn.number
        kept = [
            nodes
            for job_id, nomination in list(self._kept.items())
            if job_id != entry.job_id
            and (nodes := self._still_kept(self.jobs[job_id], nomination, turn.now)) is not None
        ]
        if kept:
            _fence_apart(turn.fence, np.concatenate(kept))

    def _kept_from(self, entry: QueueEntry, tier: QueueTier) -> bool:
        """Whether the fence keeps the nodes from the job of `entry` (`tier`: its tier)."""
        kept_from = self.kept_from
        if kept_from is KeptFrom.ALL:
            return False  # nominated: fenced with every nominee's nodes
        if tier is not QueueTier.ALLOCATED:
            return True
        return kept_from is KeptFrom.ALL_BUT_OWED and entry.account not in self._owed

    def _still_kept(self, job: Job, kept: Nomination, now: float) -> IntArray | None:
        """The job's kept nodes still free, kept again for it; None when nothing is kept for
        it now: it started or preempts, the bound ran out, or no node is free.

        A preempting job's nomination keeps what it needs. Kept by the fence, its nodes are
        kept again if that nomination falls through before it starts (a nominated node failed
        while its victims left): otherwise the nodes it did not need would be open to the
        work it takes back once it plans again."""
        job_id = job.job_id
        if job.state is not JobState.PENDING:
            del self._kept[job_id]
            return None
        if job.nomination is not None and job.nomination is not kept:
            if self.kept_from is KeptFrom.ALL:
                del self._kept[job_id]
            return None
        assert self.keep is not None
        if now - kept.decided_at >= self.keep:
            del self._kept[job_id]
            if job.nomination is kept:
                job.nomination = None
            job.record(now, "its nodes are no longer kept for it: it did not restart in time")
            return None
        nodes = self._still_free(kept.nodes)
        if not nodes.size:
            del self._kept[job_id]
            if job.nomination is kept:
                job.nomination = None
            return None
        if nodes.size != kept.nodes.size:
            renewed = self._kept[job_id] = Nomination(set(), nodes, kept.decided_at)
            if job.nomination is kept:
                job.nomination = renewed
        return nodes

    def forget(self, job: Job) -> bool:
        """The job left the queue (cancelled): nothing is kept for it any more. Returns whether
        nodes were kept for it (`is_kept`)."""
        kept = self.is_kept(job)
        self._kept.pop(job.job_id, None)
        return kept

    def _keep_nodes(self, job: Job, nodes: IntArray, now: float) -> None:
        kept = self._kept[job.job_id] = Nomination(set(), np.unique(nodes), now)
        if self.kept_from is KeptFrom.ALL:
            job.nomination = kept
        if job.reason_code is not ReasonCode.RESTARTING_FIRST:
            job.reason_code = ReasonCode.QUEUED
            job.reason = "interrupted by a node failure: its nodes are kept for it"
        else:
            job.reason += "; its nodes are kept for it"
        job.record(now, "its nodes are kept for it until it restarts")

    def _still_free(self, nodes: IntArray) -> IntArray:
        """The nodes of `nodes` that hold no work (down ones included)."""
        state, topology = self.state, self.state.topology
        idle: NDArray[np.bool_] = (state.free_whole_gpus[nodes] == topology.gpu_count[nodes]) & (
            state.free_cpu_milli[nodes] == topology.cpu_milli[nodes]
        )
        free: IntArray = nodes[idle]
        return free

    @property
    def puts_gangs_first(self) -> bool:
        """Whether the next cycle's queue puts gangs first (see `first`)."""
        return bool(self._restart_first)

    def first(self, runs: Iterable[Iterable[QueueEntry]]) -> Iterable[Iterable[QueueEntry]]:
        """The queue's `runs` with the gangs a node failure interrupted within their budget
        moved to the front (in the queue's order among themselves), for this cycle only, as
        one run; read only if there are such gangs. While the fence keeps nodes for gangs,
        the runs as they are, as another object: a walk leaves no run early (see
        `toposched.scheduler.tally`), so each such gang takes its own turn."""
        first = self._restart_first
        if not first:
            if self._kept and self.kept_from is not KeptFrom.ALL:
                return (run for run in runs)
            return runs
        self._restart_first = set()
        entries = [entry for run in runs for entry in run]
        ahead = [entry for entry in entries if entry.job_id in first]
        if not ahead:
            return (entries,)
        return (ahead + [entry for entry in entries if entry.job_id not in first],)

    def _put_first_if_within_budget(self, job: Job) -> None:
        """Put the gang at the head of the next cycle if it runs within its account's budget
        again, counting the account's other gangs put first by the same failure."""
        account = job.spec.account
        put_first = self._restarting.get(account, 0.0)
        if self.ledger.beyond_budget(job, put_first):
            return
        self._restarting[account] = put_first + job.gpus
        self._restart_first.add(job.job_id)
        job.reason_code = ReasonCode.RESTARTING_FIRST
        job.reason = (
            "interrupted by a node failure within its team's budget: first in the next cycle"
        )

    def _nominate_spare(self, job: Job, allocation: Allocation, down: IntArray, now: float) -> None:
        spares = self.spares
        assert spares is not None
        moved = spares.replacement(job.request, allocation, down, self._taken)
        if moved is None:
            job.record(now, f"no spare node of the failed node's {spares.level_name}")
            return
        spare_nodes = np.setdiff1d(moved.nodes, allocation.nodes)
        job.nomination = Nomination(set(), np.unique(moved.nodes), now, moved)
        names = ", ".join(self.state.topology.node_names[n] for n in spare_nodes.tolist())
        job.reason_code = ReasonCode.RESTARTING_ON_SPARE
        job.reason = f"restarting on its surviving nodes and spare node(s) {names}"
        job.record(now, job.reason)
