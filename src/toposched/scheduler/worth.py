"""The contract's cost/benefit rule applied to a victim set the search chose."""

from __future__ import annotations

from toposched.policy.contract import PreemptionRule
from toposched.policy.worth import EvictionWorth, VictimCost
from toposched.scheduler.candidates import PreemptionPlan
from toposched.scheduler.jobs import Job
from toposched.scheduler.ledger import Ledger
from toposched.scheduler.refusals import Refusal, RefusalCode

__all__ = ["not_worth_it", "victim_costs"]


def victim_costs(plan: PreemptionPlan, ledger: Ledger, now: float) -> list[VictimCost]:
    """The plan's allocated victims as the rule weighs them: GPUs, work lost, and seconds to
    their expected end (None without an expected runtime). Unallocated victims are left out."""
    costs: list[VictimCost] = []
    running = ledger.running
    for victim in plan.victims:
        if victim.rule == PreemptionRule.UNALLOCATED_VICTIM:
            continue
        job = running[victim.job_id]
        end = job.expected_end
        costs.append(
            VictimCost(
                victim.job_id,
                job.gpus,
                victim.lost_gpu_seconds,
                None if end is None else end - now,
            )
        )
    return costs


def not_worth_it(
    worth: EvictionWorth, job: Job, plan: PreemptionPlan, ledger: Ledger, now: float
) -> Refusal | None:
    """A refusal when evicting the plan's victims for `job` destroys more work than `worth`
    allows, else None."""
    account = job.spec.account
    credit = worth.credit(ledger.budget_gpus(account), ledger.running_gpus(account))
    verdict = worth.judge(job.gpus, victim_costs(plan, ledger, now), credit)
    if verdict.worth_it:
        return None
    return Refusal(
        RefusalCode.NOT_WORTH_IT,
        verdict.reason,
        {
            "victims": float(verdict.victims),
            "lost_gpu_seconds": verdict.lost_gpu_seconds,
            "gained_gpu_seconds": verdict.gained_gpu_seconds,
        },
    )
