"""Pending jobs counted by what their answer depends on, so that a cycle may leave a run of the
queue once the rest of it can only be answered alike, and the answers those jobs share.

Most pending jobs of a long queue are answered alike an earlier job of their key (kind,
account, priority, declared unallocated) under the same knowledge (`Turn.answered`): such a
turn reads the answer and changes nothing a later job reads, not even the knowledge. The queue
comes in runs of one account's jobs (`PendingQueue.runs`), and a key belongs to one account.
So once every key of the run's account still ahead has an answer under what the cycle knows
now, every job left in the run would be told its key's answer and decide nothing, unless it
is a nominee or the job whose own failure answers its key (both take a turn of their own):
the walk leaves the run there, under the same knowledge, and goes on with the next one. Each
of those keys' answers is shared (`SharedAnswer`): a job the cycle did not visit reads it
until its own answer is written again. How many jobs of each key remain ahead is the queue's
count per key at the start of the cycle less those the walk passed (a job that left the
queue unvisited still counts, which only keeps the walk longer); a job joining the queue
during the walk keeps it from leaving any run.

A look at whether the walk may leave a run costs a pass over the account's keys, so it comes
once per so many jobs of the run answered alike (at least the account's keys): the walk passes
at most about that many jobs more than it must."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

import numpy as np
from numpy.typing import NDArray

from toposched.policy.queue_entry import QueueEntry
from toposched.scheduler.failures import Shape
from toposched.scheduler.jobs import AnswerBoard, Job, JobKind, JobState, Nomination, SharedAnswer
from toposched.scheduler.turn import Answer

AnswerKey = tuple[object, ...]
"""A job's kind, account, priority and whether it is declared unallocated (the key of
`Turn.answered`)."""

LOOK_EVERY = 16
"""Jobs answered alike, at least, between two looks at whether the walk may leave a run."""

SHORT_QUEUE = 256
"""A queue shorter than this is walked whole: stopping saves little there, and a cycle that
walked every job leaves what a cycle after submissions only needs (see
`toposched.scheduler.incremental`)."""


class JobKinds:
    """One `JobKind` per distinct kind, shared by its jobs (they are told apart by identity)."""

    def __init__(self) -> None:
        self._kinds: dict[tuple[object, ...], JobKind] = {}
        self._untimed: dict[JobKind, JobKind] = {}

    def untimed(self, kind: JobKind) -> JobKind:
        """The kind of the same shape and pod count without an expected runtime: what a job's
        answer depends on where its runtime is read by nothing (see `Walker.walk`)."""
        untimed = self._untimed.get(kind)
        if untimed is None:
            key = (kind.shape, kind.pods, None)
            untimed = self._kinds.get(key)
            if untimed is None:
                untimed = self._kinds[key] = JobKind(*key)
            self._untimed[kind] = untimed
        return untimed

    def of(self, job: Job) -> JobKind:
        """The job's kind, kept on the job."""
        key = (job.shape, job.request.pods, job.spec.expected_runtime)
        kind = self._kinds.get(key)
        if kind is None:
            kind = self._kinds[key] = JobKind(*key)
        job.kind = kind
        return kind


def tier_key(kinds: JobKinds, kind: JobKind, entry: QueueEntry) -> AnswerKey:
    """The key of `Turn.answered` a job of the unallocated tier shares with every job of
    that tier of its shape, pod count and declared work, whatever their accounts,
    priorities and expected runtimes: its turn reads none of them. It only tells whether the
    job may backfill behind the reservation, and unallocated work may (`backfills`); it
    neither preempts nor reserves, no admission rule reads it, and its placement reads the
    shape, the pods, the fence and the failures known. Only jobs whose tier is the
    unallocated one this cycle (`Turn.tiers`) look it up or keep answers under it, and the
    key has two parts where the others have four, so it never answers a job of another
    tier."""
    return (kinds.untimed(kind), entry.unallocated)


class PendingTally:
    """The pending jobs of a queue by key, told as they join and leave it."""

    def __init__(self) -> None:
        self.board = AnswerBoard()
        self.kinds = JobKinds()
        self.counts: dict[AnswerKey, int] = {}
        """Pending jobs per key."""
        self.joins = 0
        """Moves whenever a job joins."""
        self.pending_gpus: dict[str, float] = {}
        """GPUs of the pending jobs not declared unallocated, per account."""
        self.demand_version = 0
        """Moves whenever `pending_gpus` does."""
        self._gpus: dict[str, tuple[str, float]] = {}
        self._keys: dict[str, AnswerKey] = {}
        self._shared: dict[AnswerKey, SharedAnswer] = {}
        self._of_shape: dict[Shape, dict[str, None]] = {}
        """The pending jobs of each shape, in the order they joined."""

    def join(self, entry: QueueEntry, job: Job) -> None:
        """`job` joined the queue as `entry`."""
        kind = job.kind if job.kind is not None else self.kinds.of(job)
        unallocated = entry.unallocated
        key = (kind, entry.account, entry.priority, unallocated)
        # A job's kind stays as first read: its tier key, kept from its first join, changes
        # only with what it declares.
        kept = job.tier_key
        if kept is None or kept[1] is not unallocated:
            job.tier_key = tier_key(self.kinds, kind, entry)
        self._keys[entry.job_id] = key
        self._of_shape.setdefault(kind.shape, {})[entry.job_id] = None
        if not unallocated and job.gpus > 0:
            self._gpus[entry.job_id] = (entry.account, job.gpus)
            pending = self.pending_gpus
            pending[entry.account] = pending.get(entry.account, 0.0) + job.gpus
            self.demand_version += 1
        counts = self.counts
        counts[key] = counts.get(key, 0) + 1
        shared = self._shared.get(key)
        if shared is None:
            shared = self._shared[key] = SharedAnswer(self.board)
        job.share(shared)
        self.joins += 1

    def leave(self, job: Job) -> None:
        """`job` left the queue: it keeps what it was told as its own."""
        key = self._keys.pop(job.job_id)
        kind = key[0]
        assert isinstance(kind, JobKind)
        of_shape = self._of_shape[kind.shape]
        del of_shape[job.job_id]
        if not of_shape:
            del self._of_shape[kind.shape]
        held = self._gpus.pop(job.job_id, None)
        if held is not None:
            account, gpus = held
            remaining = self.pending_gpus.get(account, 0.0) - gpus
            if remaining > 1e-9:
                self.pending_gpus[account] = remaining
            else:
                self.pending_gpus.pop(account, None)
            self.demand_version += 1
        job.share(None)
        left = self.counts[key] - 1
        if left:
            self.counts[key] = left
        else:
            del self.counts[key]
            del self._shared[key]

    def of_shapes(self, shapes: Iterable[Shape]) -> list[str]:
        """The pending jobs of these shapes."""
        of_shape = self._of_shape
        return [job_id for shape in shapes for job_id in of_shape.get(shape, ())]

    def nominees(self) -> list[str]:
        """The pending jobs with a nomination."""
        return [job.job_id for job, _ in self._nominations()]

    def nominated_nodes(self) -> list[NDArray[np.int64]]:
        """The nodes kept for the pending jobs with a nomination."""
        return [nomination.nodes for _, nomination in self._nominations()]

    def _nominations(self) -> Iterator[tuple[Job, Nomination]]:
        for job in self.board.nominees.values():
            nomination = job.nomination
            if job.state is JobState.PENDING and nomination is not None:
                yield job, nomination

    def tail(self, cycle: int) -> Tail:
        """The rest of the queue for a walk in cycle number `cycle`."""
        return Tail(self, cycle)

    def share(self, key: AnswerKey, answer: Answer, cycle: int) -> None:
        """Cycle `cycle` stopped before the jobs of `key` it did not visit: they read `answer`."""
        shared = self._shared.get(key)
        if shared is not None:
            shared.reason = answer.reason
            shared.code = answer.code
            shared.refusal = answer.refusal
            shared.cycle = cycle

    def account_of(self, job_id: str) -> str | None:
        """The account of a pending job's key (None: not pending)."""
        key = self._keys.get(job_id)
        return None if key is None else str(key[1])


class Tail:
    """The rest of the queue during one walk: how many jobs of each key are still ahead."""

    __slots__ = ("_keys_of", "ahead", "cycle", "joins", "tally")

    def __init__(self, tally: PendingTally, cycle: int) -> None:
        self.tally = tally
        self.cycle = cycle
        self.ahead = dict(tally.counts)
        """Jobs of each key the walk has not passed (at least: a job that left unvisited
        still counts)."""
        self.joins = tally.joins
        self._keys_of: dict[str, list[AnswerKey]] | None = None

    def keys_of(self, account: str) -> list[AnswerKey]:
        """The keys of `account`'s pending jobs."""
        keys_of = self._keys_of
        if keys_of is None:
            keys_of = self._keys_of = {}
            for key in self.ahead:
                keys_of.setdefault(str(key[1]), []).append(key)
        return keys_of.get(account, [])

    def look_every(self, account: str) -> int:
        """Jobs answered alike between two looks at whether the walk may leave a run of
        `account`'s jobs: a look costs a pass over the account's keys."""
        return max(LOOK_EVERY, len(self.keys_of(account)))

    def leave_run(
        self,
        account: str,
        answered: Mapping[AnswerKey, Answer],
        known: tuple[object, ...],
        jobs: Mapping[str, Job],
    ) -> int | None:
        """Share the answers of `account`'s keys ahead and return how many of its jobs are
        left unvisited, if every one of them would be answered alike under `known` (the walk
        is in a run of the account's jobs, which then ends); None if any would take a turn of
        its own: a key with no answer under `known`, or a nominee or a key's failed job of the
        account not visited (its own failure does not answer it alike). None too if jobs
        joined the queue since the walk began."""
        tally, cycle = self.tally, self.cycle
        if tally.joins != self.joins:
            return None
        found = []
        left = 0
        ahead = self.ahead
        for key in self.keys_of(account):
            count = ahead[key]
            if count <= 0:
                continue
            same = answered.get(key)
            if same is None or same.known != known:
                return None
            failed = jobs.get(same.failed_job)
            if (
                failed is not None
                and failed.told_at < cycle
                and tally.account_of(same.failed_job) == account
            ):
                return None
            found.append((key, same))
            left += count
        for job_id, nominee in tally.board.nominees.items():
            if nominee.told_at < cycle and tally.account_of(job_id) == account:
                return None
        for key, answer in found:
            tally.share(key, answer, cycle)
            self.ahead[key] = 0
        return left
