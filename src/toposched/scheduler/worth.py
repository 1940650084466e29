"""The contract's cost/benefit rule applied to a victim set the search chose."""

from __future__ import annotations

from collections import deque

from toposched.policy.contract import PreemptionRule
from toposched.policy.worth import LOSS_WINDOW, EvictionWorth, VictimCost, WorthScope
from toposched.scheduler.candidates import PreemptionPlan
from toposched.scheduler.jobs import Job
from toposched.scheduler.ledger import Ledger
from toposched.scheduler.refusals import Refusal, RefusalCode

__all__ = ["LossWindow", "WorthGate", "victim_costs", "weighed"]


def victim_costs(
    plan: PreemptionPlan, ledger: Ledger, now: float, worth: EvictionWorth, account: str
) -> list[VictimCost]:
    """The plan's victims as `worth` weighs them for a preemptor of `account`: GPUs, work
    lost, seconds to their expected end (None without an expected runtime) and seconds run."""
    costs: list[VictimCost] = []
    running = ledger.running
    for victim in plan.victims:
        job = running[victim.job_id]
        if not weighed(worth, victim.rule, job, account):
            continue
        end = job.expected_end
        start = job.start_time
        costs.append(
            VictimCost(
                victim.job_id,
                job.gpus,
                victim.lost_gpu_seconds,
                None if end is None else end - now,
                0.0 if start is None else max(now - start, 0.0),
                job.spec.account,
            )
        )
    return costs


def weighed(worth: EvictionWorth, rule: str, victim: Job, account: str) -> bool:
    """Whether `worth` weighs `victim`, evicted under `rule` for a preemptor of `account`.
    Unallocated victims only with `EvictionWorth.unallocated`; with `WorthScope.OWN_ACCOUNT`
    only the preemptor's own account's (its lower-priority jobs, its unallocated work); with
    `WorthScope.CANNOT_RESUME` only those that cannot resume."""
    scope = worth.scope
    if rule == PreemptionRule.UNALLOCATED_VICTIM:
        if not worth.unallocated:
            return False
        if scope is WorthScope.OWN_ACCOUNT and victim.spec.account != account:
            return False
    elif scope is WorthScope.OWN_ACCOUNT and rule != PreemptionRule.HIGHER_PRIORITY:
        return False
    return not (scope is WorthScope.CANNOT_RESUME and victim.spec.resumable)


class LossWindow:
    """GPU-seconds destroyed by evictions, each at its time, summed over the last
    `LOSS_WINDOW`."""

    def __init__(self) -> None:
        self._entries: deque[tuple[float, float]] = deque()
        self._sum = 0.0

    def add(self, now: float, cost: float) -> None:
        self._entries.append((now, cost))
        self._sum += cost

    def total(self, now: float) -> float:
        """What was added since `now - LOSS_WINDOW`."""
        entries = self._entries
        while entries and entries[0][0] <= now - LOSS_WINDOW:
            self._sum -= entries.popleft()[1]
        if not entries:
            self._sum = 0.0
        return max(self._sum, 0.0)


class WorthGate:
    """The rule with what it remembers: what the evictions it let through in the last
    `LOSS_WINDOW` destroyed (work lost and restarts), in all and by the victims' accounts,
    which `EvictionWorth.loss_budget` and `account_loss_budget` limit. Each plan it lets
    through is counted as carried out (the preemptor's caller evicts every plan it is
    given)."""

    def __init__(self, worth: EvictionWorth) -> None:
        self.worth = worth
        self._spending = LossWindow()
        self._by_account: dict[str, LossWindow] = {}

    def spent(self, now: float) -> float:
        """GPU-seconds the evictions let through since `now - LOSS_WINDOW` destroyed, counting
        the victims the rule weighs."""
        return self._spending.total(now)

    def spent_by_account(self, now: float) -> dict[str, float]:
        """`spent`, by the victims' accounts (accounts with nothing spent left out)."""
        spent = {account: window.total(now) for account, window in self._by_account.items()}
        for account in [account for account, total in spent.items() if total <= 0]:
            del self._by_account[account], spent[account]
        return spent

    def refusal(self, job: Job, plan: PreemptionPlan, ledger: Ledger, now: float) -> Refusal | None:
        """A refusal when evicting the plan's victims for `job` does not pay under the rule,
        else None (and what the plan destroys counts against the loss budgets)."""
        worth = self.worth
        account = job.spec.account
        budget, running = ledger.budget_gpus(account), ledger.running_gpus(account)
        credit = worth.credit(budget, running)
        gpus = min(job.gpus, max(budget - running, 0.0)) if worth.owed_only else job.gpus
        spent = self.spent(now) if worth.loss_budget is not None else 0.0
        by_account = self.spent_by_account(now) if worth.per_account else {}
        victims = victim_costs(plan, ledger, now, worth, account)
        verdict = worth.judge(gpus, victims, credit, spent, by_account)
        if verdict.worth_it:
            self._count(victims, now)
            return None
        figures = {
            "victims": float(verdict.victims),
            "lost_gpu_seconds": verdict.lost_gpu_seconds,
            "gained_gpu_seconds": verdict.gained_gpu_seconds,
        }
        if verdict.restart_gpu_seconds > 0:
            figures["restart_gpu_seconds"] = verdict.restart_gpu_seconds
        return Refusal(RefusalCode.NOT_WORTH_IT, verdict.reason, figures)

    def _count(self, victims: list[VictimCost], now: float) -> None:
        """What the victims of a plan let through destroy, in all and by account."""
        restart = self.worth.restart_cost
        by_account = self.worth.per_account
        total = 0.0
        for victim in victims:
            cost = victim.destroyed(restart)
            if cost > 0:
                total += cost
                if by_account:
                    self._by_account.setdefault(victim.account, LossWindow()).add(now, cost)
        if total > 0:
            self._spending.add(now, total)
