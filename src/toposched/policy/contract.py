"""The scheduling contract: min-runtime protection, unallocated work, and who may preempt whom."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from toposched.cluster.errors import InputError
from toposched.policy.budget import BudgetTree
from toposched.policy.fairshare import QueueEntry, Ranking

__all__ = [
    "DEFAULT_MAX_MIN_RUNTIME",
    "Contract",
    "NonresumablePolicy",
    "PreemptedFate",
    "PreemptionOutcome",
    "PreemptionRule",
    "PreemptionVerdict",
    "RunningJob",
]

DEFAULT_MAX_MIN_RUNTIME = 8 * 3600.0
"""The longest protection a job may claim, in seconds: 8 hours, as in Ai2's contract."""

NonresumablePolicy = Literal["requeue", "fail"]
_NONRESUMABLE_POLICIES: tuple[NonresumablePolicy, ...] = ("requeue", "fail")


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A running job's side of the contract, fixed when it started."""

    job_id: str
    account: str
    priority: int
    submit_time: float
    start_time: float
    min_runtime: float
    """Seconds of protection from `start_time`, after the cluster's cap."""
    resumable: bool
    unallocated: bool
    """Started as unallocated work: never protected, and not charged to its account."""


class PreemptionRule(StrEnum):
    """The rule that decided a preemption question, checked in this order."""

    SAME_JOB = "same-job"
    """A job cannot make room for itself."""
    UNALLOCATED_PREEMPTOR = "unallocated-preemptor"
    """Unallocated work preempts nobody: it only uses GPUs that are idle."""
    UNALLOCATED_VICTIM = "unallocated-victim"
    """Unallocated work is preemptible by any allocated request, at any time."""
    PROTECTED = "protected"
    """An allocated job is protected until its min runtime has elapsed."""
    HIGHER_PRIORITY = "higher-priority"
    """Same account: the preemptor has the higher priority."""
    NOT_HIGHER_PRIORITY = "not-higher-priority"
    """Same account: the preemptor's priority is not higher."""
    BETTER_FAIR_SHARE = "better-fair-share"
    """Different accounts: the preemptor's account ranks above the victim's."""
    NOT_BETTER_FAIR_SHARE = "not-better-fair-share"
    """Different accounts: the preemptor's account does not rank above the victim's."""


@dataclass(frozen=True, slots=True)
class PreemptionVerdict:
    """Whether a preemption is allowed, the rule that decided it, and that rule in words."""

    allowed: bool
    rule: PreemptionRule
    reason: str

    def __bool__(self) -> bool:
        return self.allowed


class PreemptedFate(StrEnum):
    """What becomes of a job after it is preempted."""

    RESUME = "resume"
    """Back to the queue with its identity and history; continues from its checkpoint."""
    RESTART = "restart"
    """Back to the queue with its identity and history; its progress is lost."""
    FAIL = "fail"
    """Marked preempted and finished; it does not run again."""


@dataclass(frozen=True, slots=True)
class PreemptionOutcome:
    """The fate of a preempted job and, if it goes back to the queue, its entry."""

    fate: PreemptedFate
    requeued: QueueEntry | None
    """The entry to queue again: same job id, account, priority and submit time, so the job
    keeps its place among its account's jobs. None when the job fails."""
    reason: str


@dataclass(frozen=True)
class Contract:
    """The cluster's side of the scheduling contract.

    Every job declares a min runtime, capped at `max_min_runtime`, during which it is protected
    from preemption, and whether it can resume. A min runtime of 0, or an account with no budget,
    makes a job unallocated: it fills idle GPUs, is never protected, is preemptible by any
    allocated request, and is not charged. `nonresumable_preempted` says whether a preempted job
    that cannot resume is queued again from scratch ("requeue") or fails ("fail").
    """

    max_min_runtime: float = DEFAULT_MAX_MIN_RUNTIME
    nonresumable_preempted: NonresumablePolicy = "requeue"

    def __post_init__(self) -> None:
        if (
            isinstance(self.max_min_runtime, bool)
            or not isinstance(self.max_min_runtime, int | float)
            or not math.isfinite(self.max_min_runtime)
            or self.max_min_runtime <= 0
        ):
            raise InputError(
                "max_min_runtime", self.max_min_runtime, "must be a number of seconds > 0"
            )
        if self.nonresumable_preempted not in _NONRESUMABLE_POLICIES:
            raise InputError(
                "nonresumable_preempted",
                self.nonresumable_preempted,
                "must be 'requeue' (start again from scratch) or 'fail'",
            )

    def effective_min_runtime(self, requested: float) -> float:
        """The protection a job gets: what it asked for, at most `max_min_runtime`."""
        return min(_seconds("min_runtime", requested), float(self.max_min_runtime))

    def is_unallocated(self, min_runtime: float, account: str, tree: BudgetTree) -> bool:
        """Whether a job is unallocated work: min runtime 0, or no budget for its account."""
        return _seconds("min_runtime", min_runtime) == 0 or not tree.has_budget(account)

    def protected_until(self, start_time: float, min_runtime: float) -> float:
        """When a job started at `start_time` stops being protected (if it is allocated)."""
        return _time("start_time", start_time) + self.effective_min_runtime(min_runtime)

    def is_protected(self, job: RunningJob, now: float) -> bool:
        """Whether the job is still inside its min runtime; unallocated jobs never are."""
        if job.unallocated:
            return False
        return _time("now", now) < self.protected_until(job.start_time, job.min_runtime)

    def running_job(
        self,
        *,
        job_id: str,
        account: str,
        priority: int,
        submit_time: float,
        start_time: float,
        min_runtime: float,
        resumable: bool,
        tree: BudgetTree,
    ) -> RunningJob:
        """The contract a job holds from `start_time`: capped min runtime, allocated or not."""
        return RunningJob(
            job_id=job_id,
            account=account,
            priority=priority,
            submit_time=_time("submit_time", submit_time),
            start_time=_time("start_time", start_time),
            min_runtime=self.effective_min_runtime(min_runtime),
            resumable=resumable,
            unallocated=self.is_unallocated(min_runtime, account, tree),
        )

    def may_preempt(
        self, preemptor: QueueEntry, victim: RunningJob, now: float, ranking: Ranking
    ) -> PreemptionVerdict:
        """Whether the pending `preemptor` may take the running `victim`'s GPUs at `now`.

        `ranking` is the fair-share ranking at `now` (e.g. `PendingQueue.ranking(now)`), in which
        the victim's account already carries the usage of its running jobs.
        """
        if preemptor.job_id == victim.job_id:
            return _forbid(PreemptionRule.SAME_JOB, f"{victim.job_id} cannot preempt itself")
        if preemptor.unallocated:
            return _forbid(
                PreemptionRule.UNALLOCATED_PREEMPTOR,
                f"{preemptor.job_id} is unallocated (min_runtime 0) and preempts nobody",
            )
        if not ranking.is_ranked_leaf(preemptor.account) or not (
            ranking.standings[preemptor.account].budgeted
        ):
            return _forbid(
                PreemptionRule.UNALLOCATED_PREEMPTOR,
                f"{preemptor.job_id} is unallocated (account {preemptor.account} has no budget) "
                "and preempts nobody",
            )
        if victim.unallocated:
            return _allow(
                PreemptionRule.UNALLOCATED_VICTIM,
                f"{victim.job_id} is unallocated work, preemptible by any allocated request",
            )
        until = self.protected_until(victim.start_time, victim.min_runtime)
        if _time("now", now) < until:
            return _forbid(
                PreemptionRule.PROTECTED,
                f"{victim.job_id} is protected by its min runtime until {until:g} s "
                f"({until - now:g} s from now)",
            )
        if preemptor.account == victim.account:
            if preemptor.priority > victim.priority:
                return _allow(
                    PreemptionRule.HIGHER_PRIORITY,
                    f"same account {victim.account}: priority {preemptor.priority} > "
                    f"{victim.priority}",
                )
            return _forbid(
                PreemptionRule.NOT_HIGHER_PRIORITY,
                f"same account {victim.account}: priority {preemptor.priority} is not above "
                f"{victim.priority}",
            )
        if ranking.prefers(preemptor.account, victim.account):
            return _allow(
                PreemptionRule.BETTER_FAIR_SHARE,
                f"account {preemptor.account} ranks above {victim.account} in fair share",
            )
        return _forbid(
            PreemptionRule.NOT_BETTER_FAIR_SHARE,
            f"account {preemptor.account} does not rank above {victim.account} in fair share",
        )

    def after_preemption(self, job: RunningJob) -> PreemptionOutcome:
        """What happens to `job` once preempted: resume, restart from scratch, or fail."""
        requeued = QueueEntry(
            job_id=job.job_id,
            account=job.account,
            priority=job.priority,
            submit_time=job.submit_time,
            unallocated=job.min_runtime == 0,
        )
        if job.resumable:
            return PreemptionOutcome(
                PreemptedFate.RESUME, requeued, "resumable: requeued, continues from checkpoint"
            )
        if self.nonresumable_preempted == "requeue":
            return PreemptionOutcome(
                PreemptedFate.RESTART, requeued, "not resumable: requeued to start from scratch"
            )
        return PreemptionOutcome(
            PreemptedFate.FAIL, None, "not resumable: marked preempted and failed, per policy"
        )


def _allow(rule: PreemptionRule, reason: str) -> PreemptionVerdict:
    return PreemptionVerdict(True, rule, reason)


def _forbid(rule: PreemptionRule, reason: str) -> PreemptionVerdict:
    return PreemptionVerdict(False, rule, reason)


def _seconds(field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(field, value, "must be a number of seconds >= 0")
    if not math.isfinite(value) or value < 0:
        raise InputError(field, value, "must be a number of seconds >= 0")
    return float(value)


def _time(field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(field, value, "must be a finite number of seconds")
    return float(value)
