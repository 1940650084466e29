"""The scheduling contract: min-runtime protection, unallocated work, and who may preempt whom."""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal, Protocol

from toposched.cluster.errors import InputError
from toposched.cluster.units import HOUR
from toposched.policy.budget import BudgetTree
from toposched.policy.checkpoint_wait import CheckpointWait
from toposched.policy.queue_entry import QueueEntry
from toposched.policy.ranking import Ranking
from toposched.policy.worth import DEFAULT_EVICTION_WORTH, EvictionWorth

__all__ = [
    "DEFAULT_MAX_MIN_RUNTIME",
    "AccountLoads",
    "BorrowingPreempts",
    "Contract",
    "CrossAccountRule",
    "NonresumablePolicy",
    "PreemptedFate",
    "PreemptionOutcome",
    "PreemptionRule",
    "PreemptionVerdict",
    "RunningJob",
]

DEFAULT_MAX_MIN_RUNTIME = 8 * HOUR
"""The longest protection a job may claim, in seconds: 8 hours, as in Ai2's contract."""

NonresumablePolicy = Literal["requeue", "fail"]
_NONRESUMABLE_POLICIES: tuple[NonresumablePolicy, ...] = ("requeue", "fail")
CrossAccountRule = Literal["budget", "fair_share"]
_CROSS_ACCOUNT_RULES: tuple[CrossAccountRule, ...] = ("budget", "fair_share")
_GPU_SLACK = 1e-9
"""Shared-GPU pods make loads fractional: comparisons allow for rounding."""


class AccountLoads(Protocol):
    """What the budget rule reads: each account's allocated GPUs running now and its budget."""

    def running_gpus(self, account: str) -> float:
        """GPUs the account's allocated jobs hold now (unallocated work is not counted)."""
        ...

    def budget_gpus(self, account: str) -> float:
        """The account's budget in GPUs: its effective share of the cluster."""
        ...


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
    gpus: float = 0.0
    """GPUs the job holds (a shared pod counts its fraction); the budget rule reads it."""


class BorrowingPreempts(StrEnum):
    """Whom a job that would take its account beyond its budget may preempt."""

    ANY = "any"
    """Whomever the other rules allow: unallocated work too."""
    OWN_ACCOUNT = "own-account"
    """Only its own account's lower-priority jobs: borrowed GPUs come from idle capacity,
    never from unallocated work or another account, so borrowers do not displace borrowers."""


class PreemptionRule(StrEnum):
    """The rule that decided a preemption question, checked in this order."""

    SAME_JOB = "same-job"
    """A job cannot make room for itself."""
    UNALLOCATED_PREEMPTOR = "unallocated-preemptor"
    """Unallocated work preempts nobody: it only uses GPUs that are idle."""
    BORROWING = "borrowing"
    """With `BorrowingPreempts.OWN_ACCOUNT`: the preemptor would take its account beyond its
    budget, and the victim is unallocated work or another account's job."""
    UNALLOCATED_VICTIM = "unallocated-victim"
    """Unallocated work is preemptible by any allocated request, at any time."""
    PROTECTED = "protected"
    """An allocated job is protected until its min runtime has elapsed."""
    HIGHER_PRIORITY = "higher-priority"
    """Same account: the preemptor has the higher priority."""
    NOT_HIGHER_PRIORITY = "not-higher-priority"
    """Same account: the preemptor's priority is not higher."""
    RECLAIM_BUDGET = "reclaim-budget"
    """Different accounts (budget rule): the preemptor's account runs below its budget, and the
    victim's account stays at or above its own without the victim."""
    NO_BUDGET_RECLAIM = "no-budget-reclaim"
    """Different accounts (budget rule): the preemptor's account already runs its budget, or
    the victim's account would fall below its own."""
    BETTER_FAIR_SHARE = "better-fair-share"
    """Different accounts (fair-share rule): the preemptor's account ranks above the victim's."""
    NOT_BETTER_FAIR_SHARE = "not-better-fair-share"
    """Different accounts (fair-share rule): the preemptor's account does not rank above."""


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

    `cross_account` says when a job may evict another account's job past its min runtime.
    "budget" (the default): only to reclaim a budget, that is when the preemptor's account runs
    below its budget and the victim's account stays at or above its own without the victim;
    work beyond a budget is borrowed, and fair share only orders the queue. No account is ever
    pushed below its budget by another, so evictions cannot bounce between two accounts.
    "fair_share": whenever the preemptor's account ranks above the victim's in fair share.

    `borrowing_preempts` says whom a job may preempt when its start would take its account
    beyond its budget (its GPUs and those the account runs above the budget): anyone the rules
    allow (`ANY`), or only the account's own lower-priority jobs (`OWN_ACCOUNT`), so that work
    borrowed beyond a budget starts on idle GPUs (or at its reservation) and never displaces
    unallocated work or another account's.
    """

    max_min_runtime: float = DEFAULT_MAX_MIN_RUNTIME
    nonresumable_preempted: NonresumablePolicy = "requeue"
    cross_account: CrossAccountRule = "budget"
    worth: EvictionWorth | None = DEFAULT_EVICTION_WORTH
    """The cost/benefit rule an eviction must also pass: by default, a budgeted job that cannot
    resume is evicted past its min runtime only when the preemptor's earlier start gains at
    least the GPU-hours it loses (None: no rule, every eviction the rules above allow may
    happen). See `toposched.policy.worth`."""
    checkpoint_wait: CheckpointWait | None = None
    """When to wait for the victims' next checkpoints rather than evict now (None: never
    wait). See `toposched.policy.checkpoint_wait`."""
    borrowing_preempts: BorrowingPreempts = BorrowingPreempts.ANY
    """Whom a job whose start would take its account beyond its budget may preempt (see
    above; `BorrowingPreempts.ANY` by default)."""

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
        if self.worth is not None and not isinstance(self.worth, EvictionWorth):
            raise InputError("worth", self.worth, "must be an EvictionWorth or None")
        wait = self.checkpoint_wait
        if wait is not None and not isinstance(wait, CheckpointWait):
            raise InputError("checkpoint_wait", wait, "must be a CheckpointWait or None")
        if not isinstance(self.borrowing_preempts, BorrowingPreempts):
            raise InputError(
                "borrowing_preempts", self.borrowing_preempts, "must be a BorrowingPreempts"
            )
        if self.cross_account not in _CROSS_ACCOUNT_RULES:
            raise InputError(
                "cross_account",
                self.cross_account,
                "must be 'budget' (evict another account's job only to reclaim a budget) or "
                "'fair_share' (whenever the preemptor's account ranks above in fair share)",
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
        gpus: float = 0.0,
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
            gpus=gpus,
        )

    def may_preempt(
        self,
        preemptor: QueueEntry,
        victim: RunningJob,
        now: float,
        ranking: Ranking,
        loads: AccountLoads | None = None,
    ) -> PreemptionVerdict:
        """Whether the pending `preemptor` may take the running `victim`'s GPUs at `now`.

        `ranking` is the fair-share ranking at `now` (e.g. `PendingQueue.ranking(now)`), in which
        the victim's account already carries the usage of its running jobs. `loads` gives each
        account's running GPUs and budget; the budget rule needs it for a pair of accounts.
        """
        if preemptor.job_id == victim.job_id:
            return _forbid(PreemptionRule.SAME_JOB, f"{victim.job_id} cannot preempt itself")
        if preemptor.unallocated:
            return _forbid(
                PreemptionRule.UNALLOCATED_PREEMPTOR,
                f"{preemptor.job_id} is unallocated (min_runtime 0) and preempts nobody",
            )
        if not ranking.is_ranked_leaf(preemptor.account) or not (
            ranking.budgeted(preemptor.account)
        ):
            return _forbid(
                PreemptionRule.UNALLOCATED_PREEMPTOR,
                f"{preemptor.job_id} is unallocated (account {preemptor.account} has no budget) "
                "and preempts nobody",
            )
        if self.borrowing_preempts is BorrowingPreempts.OWN_ACCOUNT and (
            victim.unallocated or victim.account != preemptor.account
        ):
            borrowing = self._borrowing(preemptor, loads)
            if borrowing is not None:
                return borrowing
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
        if self.cross_account == "budget":
            return self._reclaim(preemptor, victim, loads)
        if ranking.prefers(preemptor.account, victim.account):
            return _allow(
                PreemptionRule.BETTER_FAIR_SHARE,
                f"account {preemptor.account} ranks above {victim.account} in fair share",
            )
        return _forbid(
            PreemptionRule.NOT_BETTER_FAIR_SHARE,
            f"account {preemptor.account} does not rank above {victim.account} in fair share",
        )

    def borrows(self, preemptor: QueueEntry, loads: AccountLoads) -> bool:
        """Whether starting the pending `preemptor` (its `gpus`) would take its account beyond
        its budget."""
        running = loads.running_gpus(preemptor.account)
        return running + preemptor.gpus > loads.budget_gpus(preemptor.account) + _GPU_SLACK

    def _borrowing(
        self, preemptor: QueueEntry, loads: AccountLoads | None
    ) -> PreemptionVerdict | None:
        """`BorrowingPreempts.OWN_ACCOUNT`'s verdict for a victim outside the preemptor's own
        allocated work: forbidden when the preemptor borrows (None: it does not)."""
        if loads is None:
            raise ValueError(
                "the borrowing rule compares an account's running GPUs with its budget: pass loads"
            )
        if not self.borrows(preemptor, loads):
            return None
        running = loads.running_gpus(preemptor.account)
        budget = loads.budget_gpus(preemptor.account)
        return _forbid(
            PreemptionRule.BORROWING,
            f"{preemptor.job_id} would take account {preemptor.account} beyond its "
            f"{budget:g}-GPU budget ({running:g} running + {preemptor.gpus:g}); a job that "
            "borrows preempts only its own account's lower-priority jobs",
        )

    def runs_its_budget(self, account: str, loads: AccountLoads) -> bool:
        """Whether `account` already runs its whole budget: then, under the budget rule, its
        jobs evict no other account's allocated work (only unallocated work, and within the
        account, lower priorities)."""
        return loads.running_gpus(account) >= loads.budget_gpus(account) - _GPU_SLACK

    def reclaim_limit(
        self, preemptor_account: str, victim_account: str, loads: AccountLoads
    ) -> float:
        """Under the budget rule, the most GPUs one job of `victim_account` may hold and still be
        evicted for a job of `preemptor_account`: what the victim's account runs beyond its
        budget, or -inf when the preemptor's account already runs its own."""
        if self.runs_its_budget(preemptor_account, loads):
            return -math.inf
        return loads.running_gpus(victim_account) - loads.budget_gpus(victim_account) + _GPU_SLACK

    def _reclaim(
        self, preemptor: QueueEntry, victim: RunningJob, loads: AccountLoads | None
    ) -> PreemptionVerdict:
        """The budget rule for a pair of accounts."""
        if loads is None:
            raise ValueError(
                "the budget rule compares accounts' running GPUs with their budgets: pass loads"
            )
        running = loads.running_gpus(preemptor.account)
        budget = loads.budget_gpus(preemptor.account)
        limit = self.reclaim_limit(preemptor.account, victim.account, loads)
        if limit == -math.inf:
            return _forbid(
                PreemptionRule.NO_BUDGET_RECLAIM,
                f"account {preemptor.account} already runs {running:g} GPUs of its "
                f"{budget:g}-GPU budget; beyond it, it only borrows idle GPUs",
            )
        victim_running = loads.running_gpus(victim.account)
        victim_budget = loads.budget_gpus(victim.account)
        if victim.gpus > limit:
            return _forbid(
                PreemptionRule.NO_BUDGET_RECLAIM,
                f"account {victim.account} would fall to {victim_running - victim.gpus:g} GPUs, "
                f"below its {victim_budget:g}-GPU budget",
            )
        return _allow(
            PreemptionRule.RECLAIM_BUDGET,
            f"account {preemptor.account} runs {running:g} of its {budget:g}-GPU budget; "
            f"{victim.account} runs {victim_running:g} of {victim_budget:g} and keeps its budget "
            f"without {victim.job_id}",
        )

    def after_preemption(self, job: RunningJob) -> PreemptionOutcome:
        """What happens to `job` once preempted: resume, restart from scratch, or fail."""
        fate, reason = self.preempted_fate(job.resumable)
        if fate is PreemptedFate.FAIL:
            return PreemptionOutcome(fate, None, reason)
        requeued = QueueEntry(
            job_id=job.job_id,
            account=job.account,
            priority=job.priority,
            submit_time=job.submit_time,
            unallocated=job.min_runtime == 0,
            gpus=job.gpus,
        )
        return PreemptionOutcome(fate, requeued, reason)

    def preempted_fate(self, resumable: bool) -> tuple[PreemptedFate, str]:
        """`after_preemption`'s fate and reason, which depend on whether the job can resume
        alone: for a caller that queues the job again with an entry of its own."""
        if resumable:
            return _RESUMED
        if self.nonresumable_preempted == "requeue":
            return _RESTARTED
        return _FAILED


_RESUMED = (PreemptedFate.RESUME, "resumable: requeued, continues from checkpoint")
_RESTARTED = (PreemptedFate.RESTART, "not resumable: requeued to start from scratch")
_FAILED = (PreemptedFate.FAIL, "not resumable: marked preempted and failed, per policy")
"""A preempted job's fate and its reason, by `Contract.preempted_fate`."""


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
