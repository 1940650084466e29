"""The baselines' pending queues: submit order (FIFO, kube-like) and Slurm's multifactor
priority (Slurm-like), behind the queue interface `Scheduler` uses."""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator
from enum import IntEnum
from typing import Any

from sortedcontainers import SortedList

from toposched.cluster.errors import InputError, ToposchedError
from toposched.policy.budget import ROOT, BudgetTree
from toposched.policy.fairshare import JobExplanation
from toposched.policy.queue_entry import QueueEntry, QueueTier
from toposched.policy.ranking import Ranking
from toposched.policy.usage import UsageTracker

__all__ = [
    "SLURM_MAX_AGE",
    "SLURM_RECALC_INTERVAL",
    "MultifactorQueue",
    "Partition",
    "SubmitOrderQueue",
]

DAY = 86400.0

# Slurm's multifactor plugin: PriorityMaxAge defaults to 7 days and PriorityCalcPeriod to
# 5 minutes; the weights are a common site configuration (fair share dominates, age and size
# break ties among accounts in similar standing).
SLURM_MAX_AGE = 7 * DAY
SLURM_RECALC_INTERVAL = 300.0
SLURM_WEIGHT_AGE = 1000.0
SLURM_WEIGHT_FAIRSHARE = 10000.0
SLURM_WEIGHT_JOB_SIZE = 1000.0


class Partition(IntEnum):
    """The Slurm partition (or QOS) a job runs in when preemption is on, by priority tier:
    budgeted work in `NORMAL`, work no budget pays for (min runtime 0, or an account without a
    budget) in `SCAVENGER`, which jobs of the higher tier preempt."""

    NORMAL = 0
    SCAVENGER = 1


class _BaselineQueue:
    """The queue interface `Scheduler` uses, over one sorted list of (key, job id).

    Every job is in one tier (`ALLOCATED`): baselines order all work alike, so the `owed`
    accounts `Scheduler` may name are not told apart (their schedulers name none).
    """

    def __init__(self) -> None:
        self._entries: dict[str, QueueEntry] = {}
        self._keys: dict[str, tuple[object, ...]] = {}
        self._order: SortedList = SortedList()
        self.clock = 0.0
        """The latest time the scheduler told the queue about (keys of new entries use it)."""

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._entries

    def key(self, entry: QueueEntry, now: float) -> tuple[object, ...]:
        raise NotImplementedError

    def get(self, job_id: str) -> QueueEntry:
        if job_id not in self._entries:
            raise InputError("job_id", job_id, "is not in the pending queue")
        return self._entries[job_id]

    def add(self, entry: QueueEntry) -> None:
        if entry.job_id in self._entries:
            raise InputError("job_id", entry.job_id, "is already in the pending queue")
        key = self.key(entry, self.clock)
        self._entries[entry.job_id] = entry
        self._keys[entry.job_id] = key
        self._order.add(key)

    def remove(self, job_id: str) -> QueueEntry:
        entry = self.get(job_id)
        self._order.remove(self._keys.pop(job_id))
        del self._entries[job_id]
        return entry

    def accounts(self) -> list[str]:
        return sorted({entry.account for entry in self._entries.values()})

    def ordered(self, now: float, owed: Collection[str] = ()) -> Iterator[QueueEntry]:
        """Every pending job, first to run first (a copy: the queue may change meanwhile)."""
        self.clock = max(self.clock, now)
        entries = self._entries
        # Every key ends with its job's id, and every key has its entry.
        return iter([entries[str(key[-1])] for key in self._order])

    def head(self, now: float) -> QueueEntry | None:
        """The pending job first to run (None: none), as `ordered` would give it first."""
        self.clock = max(self.clock, now)
        return self._entries[str(self._order[0][-1])] if self._order else None

    def ranking(self, now: float) -> Ranking:
        raise ToposchedError("a baseline's queue ranks no accounts: baselines never preempt")

    def tier(self, entry: QueueEntry, ranking: object = None) -> QueueTier:
        return QueueTier.ALLOCATED

    def position(self, job_id: str, now: float, owed: Collection[str] = ()) -> int:
        self.get(job_id)
        return int(self._order.index(self._keys[job_id]))

    def explain(self, job_id: str, now: float, owed: Collection[str] = ()) -> JobExplanation:
        return self._explanation(self.get(job_id), self.position(job_id, now), now)

    def explanations(self, now: float, owed: Collection[str] = ()) -> Iterator[JobExplanation]:
        for position, entry in enumerate(self.ordered(now)):
            yield self._explanation(entry, position, now)

    def _explanation(self, entry: QueueEntry, position: int, now: float) -> JobExplanation:
        key: Any = self._keys[entry.job_id]
        waiting = max(now - entry.submit_time, 0.0)
        return JobExplanation(entry, position, QueueTier.ALLOCATED, None, key, False, waiting)


class SubmitOrderQueue(_BaselineQueue):
    """First come, first served: by submit time (a requeued job keeps its original time)."""

    def key(self, entry: QueueEntry, now: float) -> tuple[object, ...]:
        return (entry.submit_time, entry.job_id)


class MultifactorQueue(_BaselineQueue):
    """Slurm's multifactor priority, recomputed every `recalc_interval` seconds.

    priority = w_age * min(age / max_age, 1)
             + w_fairshare * 2 ** (-U / S)
             + w_size * gpus / cluster GPUs

    U is the account's share of all usage in the scheduler's sliding window (every job it ran,
    allocated or not), S its effective budget share of the cluster (classic fair share; an
    account without a share gets factor 0). Larger jobs score higher (PriorityFavorSmall=NO).
    No QOS or partition factor; the job's own priority field is not used. A new (or requeued)
    job is scored when it arrives, with its account's fair-share factor from the last
    recalculation; the whole queue is re-scored every `recalc_interval`, as Slurm's
    PriorityCalcPeriod does. Ties: earlier submission, then job id.

    With `partitions`, jobs are first ordered by their `Partition`'s priority tier, as Slurm
    evaluates pending jobs of a higher PriorityTier partition before any of a lower one.
    """

    def __init__(
        self,
        tree: BudgetTree,
        usage: UsageTracker,
        capacity_gpus: int,
        gpus_of: dict[str, float],
        recalc_interval: float = SLURM_RECALC_INTERVAL,
        max_age: float = SLURM_MAX_AGE,
        weights: tuple[float, float, float] = (
            SLURM_WEIGHT_AGE,
            SLURM_WEIGHT_FAIRSHARE,
            SLURM_WEIGHT_JOB_SIZE,
        ),
        partitions: bool = False,
    ) -> None:
        super().__init__()
        self.tree = tree
        self.usage = usage
        self.capacity_gpus = max(capacity_gpus, 1)
        self.gpus_of = gpus_of
        self.recalc_interval = recalc_interval
        self.max_age = max_age
        self.weights = weights
        self.partitions = partitions
        self._scored_at = -math.inf
        self._fairshare: dict[str, float] = {}

    def fairshare_factor(self, account: str, now: float) -> float:
        """2 ** (-U / S): 1 for an idle account, 0.5 at exactly its share, towards 0 above."""
        share = self.tree.effective_share(account) if account in self.tree else 0.0
        if share <= 0:
            return 0.0
        total = self.usage.usage(ROOT, now)
        used = self.usage.usage(account, now) / total if total > 0 else 0.0
        return float(2.0 ** (-used / share))

    def priority(self, entry: QueueEntry, now: float) -> float:
        w_age, w_fairshare, w_size = self.weights
        fairshare = self._fairshare.get(entry.account)
        if fairshare is None:
            fairshare = self._fairshare[entry.account] = self.fairshare_factor(entry.account, now)
        age = min(max(now - entry.submit_time, 0.0) / self.max_age, 1.0)
        size = min(self.gpus_of.get(entry.job_id, 0.0) / self.capacity_gpus, 1.0)
        return w_age * age + w_fairshare * fairshare + w_size * size

    def partition(self, entry: QueueEntry) -> Partition:
        """The partition of a pending job: scavenger for work no budget pays for."""
        budgeted = entry.account in self.tree and self.tree.has_budget(entry.account)
        return Partition.NORMAL if budgeted and not entry.unallocated else Partition.SCAVENGER

    def tier(self, entry: QueueEntry, ranking: object = None) -> QueueTier:
        """With partitions, scavenger jobs are the cycle's unallocated tier: they get no
        reservation and may backfill onto reserved nodes, since the reserved job can preempt
        them when its time comes."""
        if self.partitions and self.partition(entry) is Partition.SCAVENGER:
            return QueueTier.UNALLOCATED
        return QueueTier.ALLOCATED

    def key(self, entry: QueueEntry, now: float) -> tuple[object, ...]:
        order = (-self.priority(entry, now), entry.submit_time, entry.job_id)
        return (int(self.partition(entry)), *order) if self.partitions else order

    def ordered(self, now: float, owed: Collection[str] = ()) -> Iterator[QueueEntry]:
        if now >= self._scored_at + self.recalc_interval:
            self.rescore(now)
        return super().ordered(now)

    def rescore(self, now: float) -> None:
        """Recompute every pending job's priority at `now`."""
        self.clock = max(self.clock, now)
        self._scored_at = now
        self._fairshare = {}
        self._keys = {job_id: self.key(entry, now) for job_id, entry in self._entries.items()}
        self._order = SortedList(self._keys.values())
