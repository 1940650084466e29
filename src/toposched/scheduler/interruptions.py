"""Gangs a node failure interrupted: restarted on their surviving nodes and a spare, or put
at the head of the next cycle when they ran within their account's budget."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import Allocation, ClusterState
from toposched.policy.fairshare import QueueEntry
from toposched.scheduler.jobs import Job, Nomination, ReasonCode
from toposched.scheduler.ledger import Ledger
from toposched.scheduler.spares import SparePool

IntArray = NDArray[np.int64]


class Interruptions:
    """What happens to gangs requeued because nodes under them went down.

    With spares, a gang is nominated its surviving nodes plus a spare of the failed node's
    domain, and restarts there in the next cycle. Otherwise, with `failed_first`, a gang that
    ran within its account's budget heads the next cycle's order, so that its surviving nodes
    are not handed to the queue while it waits to take back unallocated work elsewhere.
    """

    def __init__(
        self, state: ClusterState, ledger: Ledger, spares: SparePool | None, failed_first: bool
    ) -> None:
        self.state = state
        self.ledger = ledger
        self.spares = spares
        self.failed_first = failed_first
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
        # `unallocated` is still what the job ran as.
        if self.failed_first and job.nomination is None and not job.unallocated:
            self._put_first_if_within_budget(job)

    def first(self, runs: Iterable[Iterable[QueueEntry]]) -> Iterable[Iterable[QueueEntry]]:
        """The queue's `runs` with the gangs a node failure interrupted within their budget
        moved to the front (in the queue's order among themselves), for this cycle only, as
        one run; read only if there are such gangs."""
        first = self._restart_first
        if not first:
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
