"""The contract's cost/benefit rule applied to a victim set the search chose."""

from __future__ import annotations

from collections import deque

from toposched.policy.contract import PreemptionRule
from toposched.policy.worth import LOSS_WINDOW, EvictionWorth, VictimCost, WorthScope
from toposched.scheduler.candidates import PreemptionPlan
from toposched.scheduler.jobs import Job
from toposched.scheduler.ledger import Ledger
from toposched.scheduler.refusals import Refusal, RefusalCode

__all__ = ["WorthGate", "victim_costs"]


def victim_costs(
    plan: PreemptionPlan, ledger: Ledger, now: float, scope: WorthScope = WorthScope.ALL
) -> list[VictimCost]:
    """The plan's allocated victims as the rule weighs them: GPUs, work lost, seconds to
    their expected end (None without an expected runtime) and seconds run. Unallocated
    victims are left out, with `WorthScope.OWN_ACCOUNT` those of other accounts, and with
    `WorthScope.CANNOT_RESUME` those that can resume."""
    costs: list[VictimCost] = []
    running = ledger.running
    for victim in plan.victims:
        if victim.rule == PreemptionRule.UNALLOCATED_VICTIM:
            continue
        if scope is WorthScope.OWN_ACCOUNT and victim.rule != PreemptionRule.HIGHER_PRIORITY:
            continue
        job = running[victim.job_id]
        if scope is WorthScope.CANNOT_RESUME and job.spec.resumable:
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
            )
        )
    return costs


class WorthGate:
    """The rule with what it remembers: what the evictions it let through in the last
    `LOSS_WINDOW` destroyed (work lost and restarts), which `EvictionWorth.loss_budget`
    limits. Each plan it lets through is counted as carried out (the preemptor's caller
    evicts every plan it is given)."""

    def __init__(self, worth: EvictionWorth) -> None:
        self.worth = worth
        self._spending: deque[tuple[float, float]] = deque()
        self._spent = 0.0

    def spent(self, now: float) -> float:
        """GPU-seconds the evictions of allocated work let through since `now - LOSS_WINDOW`
        destroyed."""
        spending = self._spending
        while spending and spending[0][0] <= now - LOSS_WINDOW:
            self._spent -= spending.popleft()[1]
        if not spending:
            self._spent = 0.0
        return max(self._spent, 0.0)

    def refusal(self, job: Job, plan: PreemptionPlan, ledger: Ledger, now: float) -> Refusal | None:
        """A refusal when evicting the plan's victims for `job` does not pay under the rule,
        else None (and what the plan destroys counts against the loss budget)."""
        worth = self.worth
        account = job.spec.account
        budget, running = ledger.budget_gpus(account), ledger.running_gpus(account)
        credit = worth.credit(budget, running)
        gpus = min(job.gpus, max(budget - running, 0.0)) if worth.owed_only else job.gpus
        spent = self.spent(now) if worth.loss_budget is not None else 0.0
        verdict = worth.judge(gpus, victim_costs(plan, ledger, now, worth.scope), credit, spent)
        if verdict.worth_it:
            cost = verdict.cost_gpu_seconds
            if cost > 0:
                self._spending.append((now, cost))
                self._spent += cost
            return None
        figures = {
            "victims": float(verdict.victims),
            "lost_gpu_seconds": verdict.lost_gpu_seconds,
            "gained_gpu_seconds": verdict.gained_gpu_seconds,
        }
        if verdict.restart_gpu_seconds > 0:
            figures["restart_gpu_seconds"] = verdict.restart_gpu_seconds
        return Refusal(RefusalCode.NOT_WORTH_IT, verdict.reason, figures)
