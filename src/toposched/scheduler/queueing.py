"""The pending queue as the scheduler reads it: Fair Tree's `PendingQueue`, or another order
with the same methods (a baseline's own); Fair Tree's counted by key as jobs join and leave."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping
from typing import Protocol

from toposched.policy.fairshare import JobExplanation, JobSortKey, PendingQueue, Segment
from toposched.policy.queue_entry import QueueEntry, QueueTier
from toposched.policy.ranking import Ranking
from toposched.scheduler.jobs import Job
from toposched.scheduler.tally import PendingTally


class JobQueue(Protocol):
    """Pending jobs in the order they are considered; see `PendingQueue` for the meaning of
    each method. `owed` names the accounts whose allocated work goes first."""

    def __len__(self) -> int: ...
    def __contains__(self, job_id: object) -> bool: ...
    def get(self, job_id: str) -> QueueEntry: ...
    def add(self, entry: QueueEntry) -> None: ...
    def remove(self, job_id: str) -> QueueEntry: ...
    def accounts(self) -> list[str]: ...
    def ordered(self, now: float, owed: Collection[str] = ()) -> Iterator[QueueEntry]: ...
    def ranking(self, now: float) -> Ranking:
        """The accounts' standings at `now` (what preemption decisions read)."""
        ...

    def tier(self, entry: QueueEntry, ranking: Ranking | None = None) -> QueueTier: ...
    def explain(self, job_id: str, now: float, owed: Collection[str] = ()) -> JobExplanation: ...
    def explanations(self, now: float, owed: Collection[str] = ()) -> Iterator[JobExplanation]: ...


class TalliedQueue:
    """A queue whose jobs are counted by key as they join and leave it (`PendingTally`), so
    that a cycle may stop walking it early; otherwise the queue it wraps."""

    def __init__(self, queue: PendingQueue, jobs: Mapping[str, Job], tally: PendingTally) -> None:
        self.inner = queue
        self.jobs = jobs
        self.tally = tally

    def __len__(self) -> int:
        return len(self.inner)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self.inner

    def get(self, job_id: str) -> QueueEntry:
        return self.inner.get(job_id)

    def add(self, entry: QueueEntry) -> None:
        self.inner.add(entry)
        self.tally.join(entry, self.jobs[entry.job_id])

    def add_again(self, entry: QueueEntry, job: Job) -> None:
        """`PendingQueue.add_again` of `job`'s entry."""
        self.inner.add_again(entry)
        self.tally.join(entry, job)

    def remove(self, job_id: str) -> QueueEntry:
        entry = self.inner.remove(job_id)
        self.tally.leave(self.jobs[job_id])
        return entry

    def accounts(self) -> list[str]:
        return self.inner.accounts()

    def ordered(self, now: float, owed: Collection[str] = ()) -> Iterator[QueueEntry]:
        return self.inner.ordered(now, owed)

    def runs(self, now: float, owed: Collection[str] = ()) -> Iterator[Iterator[QueueEntry]]:
        """`ordered` in runs of one account's jobs (see `PendingQueue.runs`)."""
        return self.inner.runs(now, owed)

    def runs_after(
        self, after: JobSortKey, ranking: Ranking, owed: Collection[str] = ()
    ) -> Iterator[Iterator[QueueEntry]]:
        """`runs` from the first job whose sort key follows `after` (see
        `PendingQueue.runs_after`)."""
        return self.inner.runs_after(after, ranking, owed)

    def segments(self, ranking: Ranking, owed: Collection[str] = ()) -> list[Segment]:
        return self.inner.segments(ranking, owed)

    def sort_keys(
        self, job_ids: Iterable[str], ranking: Ranking, owed: Collection[str] = ()
    ) -> dict[str, JobSortKey]:
        return self.inner.sort_keys(job_ids, ranking, owed)

    def ranking(self, now: float) -> Ranking:
        return self.inner.ranking(now)

    def tier(self, entry: QueueEntry, ranking: Ranking | None = None) -> QueueTier:
        return self.inner.tier(entry, ranking)

    def explain(self, job_id: str, now: float, owed: Collection[str] = ()) -> JobExplanation:
        return self.inner.explain(job_id, now, owed)

    def explanations(self, now: float, owed: Collection[str] = ()) -> Iterator[JobExplanation]:
        return self.inner.explanations(now, owed)


def queue_runs(
    queue: JobQueue, now: float, owed: Collection[str] = ()
) -> Iterable[Iterable[QueueEntry]]:
    """The queue's order in runs of one account's jobs where it is counted (`TalliedQueue`),
    else as one run."""
    if isinstance(queue, TalliedQueue):
        return queue.runs(now, owed)
    return (queue.ordered(now, owed),)
