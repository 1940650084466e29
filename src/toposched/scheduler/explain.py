"""Why a job is where it is, as typed values: the queue's rows and one job's explanation."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from toposched.policy.fairshare import JobExplanation, JobSortKey
from toposched.scheduler.jobs import Job, JobState, ReasonCode
from toposched.scheduler.queueing import JobQueue
from toposched.scheduler.refusals import Refusal


@dataclass(frozen=True, slots=True)
class QueueRow:
    """One pending job in the queue's order."""

    position: int
    """1 for the job that goes first."""
    job: str
    account: str
    standing: str
    """The account's standing at each level of the budget tree, in words ("-" if detached)."""
    priority: int
    tier: str
    """"allocated", "unallocated" or "detached"."""
    owed: bool
    """Allocated work of an account running below its budget: it goes first."""
    reason: str
    code: ReasonCode


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why a job is where it is: its state, its place in the queue, the reason and history."""

    job_id: str
    state: JobState
    code: ReasonCode
    reason: str
    """The reason in words."""
    history: tuple[tuple[float, str], ...]
    queue: JobExplanation | None = None
    """For a pending job: its position, tier, account standing and sort key."""
    position_in_account: int | None = None
    """For a pending job: 1 for the first of its account's pending jobs."""
    ahead_from_other_accounts: int = 0
    """Pending jobs of other accounts ahead of it (accounts further below their share)."""
    reservation_start: float | None = None
    reservation_domain: str | None = None
    refusal: Refusal | None = None
    """For a pending job, why no preemption made room for it in the last cycle."""

    @property
    def position(self) -> int | None:
        """For a pending job: 1 for the job that goes first."""
        return None if self.queue is None else self.queue.position + 1

    @property
    def sort_key(self) -> JobSortKey | None:
        return None if self.queue is None else self.queue.sort_key

    @property
    def text(self) -> str:
        """The explanation in one line of words."""
        if self.queue is None:
            return f"{self.job_id}: {self.state}; {self.reason}"
        ahead = self.ahead_from_other_accounts
        standing = f"; {ahead} jobs of under-served accounts ahead" if ahead else ""
        return f"{self.queue.describe()}{standing}; {self.reason}"

    def __str__(self) -> str:
        return self.text


def explain(job: Job, queue: JobQueue, now: float, owed: Collection[str]) -> Explanation:
    """`job`'s explanation; `owed`: the accounts whose allocated work the queue puts first."""
    history = tuple(job.history)
    if job.state is not JobState.PENDING:
        return Explanation(job.job_id, job.state, job.reason_code, job.reason, history)
    ahead_other = 0
    in_account = 1
    account = job.spec.account
    for entry in queue.ordered(now, owed):
        if entry.job_id == job.job_id:
            break
        if entry.account != account:
            ahead_other += 1
        else:
            in_account += 1
    reservation = job.reservation
    return Explanation(
        job.job_id,
        job.state,
        job.reason_code,
        job.reason,
        history,
        queue=queue.explain(job.job_id, now, owed),
        position_in_account=in_account,
        ahead_from_other_accounts=ahead_other,
        reservation_start=None if reservation is None else reservation.start_time,
        reservation_domain=None if reservation is None else reservation.domain,
        refusal=job.refusal,
    )


def queue_rows(
    queue: JobQueue, jobs: Mapping[str, Job], now: float, owed: Collection[str]
) -> list[QueueRow]:
    """The pending queue in order, one row per job."""
    rows: list[QueueRow] = []
    for explanation in queue.explanations(now, owed):
        job = jobs[explanation.entry.job_id]
        standing = explanation.standing
        rows.append(
            QueueRow(
                position=explanation.position + 1,
                job=job.job_id,
                account=job.spec.account,
                standing=standing.describe() if standing is not None else "-",
                priority=job.spec.priority,
                tier=explanation.tier.name.lower(),
                owed=explanation.owed,
                reason=job.reason,
                code=job.reason_code,
            )
        )
    return rows
