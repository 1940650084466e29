"""The contract's checkpoint wait applied to a victim set the search chose: a refusal that
says how long the preemptor waits for its victims to checkpoint, or None to evict now
(`CheckpointGate`, which also remembers since when each preemptor waits)."""

from __future__ import annotations

from toposched.cluster.units import HOUR
from toposched.policy.checkpoint_wait import CheckpointWait, VictimCadence
from toposched.scheduler.candidates import PreemptionPlan
from toposched.scheduler.jobs import Job
from toposched.scheduler.ledger import Ledger, work_since
from toposched.scheduler.refusals import Refusal, RefusalCode
from toposched.scheduler.wording import hours as duration_text

__all__ = ["CheckpointGate", "checkpoint_refusal", "victim_cadences"]


def victim_cadences(
    plan: PreemptionPlan, ledger: Ledger, rule: CheckpointWait, now: float
) -> list[VictimCadence]:
    """Each victim's GPUs, when its work at stake began, and its checkpoint cadence when it
    can resume and has reported one (or, under `rule.first_checkpoint`, is due its first)."""
    running = ledger.running
    cadences = []
    for victim in plan.victims:
        job = running[victim.job_id]
        since = work_since(job)
        every = rule.cadence(job.spec.resumable, job.checkpoint_every, since, now)
        cadences.append(VictimCadence(job.gpus, since, every))
    return cadences


def checkpoint_refusal(
    rule: CheckpointWait, job: Job, plan: PreemptionPlan, ledger: Ledger, now: float
) -> Refusal | None:
    """A refusal when `job` should wait for the plan's victims to checkpoint, else None."""
    if not rule.applies_to(job.spec.priority):
        return None
    account = job.spec.account
    gpus = rule.costed_gpus(job.gpus, ledger.budget_gpus(account), ledger.running_gpus(account))
    verdict = rule.judge(gpus, victim_cadences(plan, ledger, rule, now), now)
    if not verdict.wait:
        return None
    victims = len(plan.victims)
    whose = "its team's owed GPU-time delayed" if rule.owed_only else "this job's wait"
    jobs = f"{victims} job" + ("s" if victims != 1 else "")
    reason = (
        f"would evict {jobs} losing {_hours(verdict.lost_now_gpu_seconds)} GPU-hours now; "
        f"they checkpoint within {duration_text(verdict.until - now)}, which saves "
        f"{_hours(verdict.saved_gpu_seconds)} GPU-hours for "
        f"{_hours(verdict.cost_gpu_seconds)} GPU-hours of {whose}: waiting"
    )
    return Refusal(
        RefusalCode.WAITING_FOR_CHECKPOINTS,
        reason,
        {
            "victims": float(victims),
            "until": verdict.until,
            "lost_gpu_seconds": verdict.lost_now_gpu_seconds,
            "saved_gpu_seconds": verdict.saved_gpu_seconds,
            "cost_gpu_seconds": verdict.cost_gpu_seconds,
        },
    )


class CheckpointGate:
    """The rule with what it remembers: since when each pending job has been told to wait.

    Under `max_total_wait` the waits of one pending spell of a job (until it starts) end by
    `max_total_wait` after the first: a wait that would end later is not taken, and the job
    evicts now."""

    def __init__(self, rule: CheckpointWait) -> None:
        self.rule = rule
        self._since: dict[str, tuple[int, float]] = {}
        """Per job: its start count (`Job.attempts`) when first told to wait, and when."""

    def refusal(self, job: Job, plan: PreemptionPlan, ledger: Ledger, now: float) -> Refusal | None:
        """`checkpoint_refusal`, with the waits of a pending spell bounded by `max_total_wait`."""
        rule = self.rule
        waiting = checkpoint_refusal(rule, job, plan, ledger, now)
        bound = rule.max_total_wait
        if waiting is None or bound is None:
            return waiting
        known = self._since.get(job.job_id)
        if known is None or known[0] != job.attempts:
            known = (job.attempts, now)
            self._since[job.job_id] = known
        if waiting.figures["until"] > known[1] + bound:
            return None
        return waiting


def _hours(gpu_seconds: float) -> str:
    hours = gpu_seconds / HOUR
    return f"{hours:,.0f}" if hours >= 10 else f"{hours:,.1f}"
