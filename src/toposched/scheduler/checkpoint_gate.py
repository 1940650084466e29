"""The contract's checkpoint wait applied to a victim set the search chose: a refusal that
says how long the preemptor waits for its victims to checkpoint, or None to evict now
(`CheckpointGate`, which also remembers since when each preemptor waits and whom it waits
for)."""

from __future__ import annotations

from dataclasses import dataclass

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


@dataclass(frozen=True, slots=True)
class AwaitedPlan:
    """A plan whose victims a pending job was told to wait for."""

    attempts: int
    """The job's start count (`Job.attempts`) when told: a start ends the wait."""
    plan: PreemptionPlan
    starts: tuple[float, ...]
    """Each victim's start when the plan was made: a victim that left and started again is
    another run."""


class CheckpointGate:
    """The rule with what it remembers: since when each pending job has been told to wait, and
    the victims it waits for.

    Under `max_total_wait` the waits of one pending spell of a job (until it starts) end by
    `max_total_wait` after the first: a wait that would end later is not taken, and the job
    evicts now.

    A job told to wait keeps its victims (`awaited`): a wait is a commitment to those
    victims. Its next turns judge the same victims at their time instead of searching again,
    while every one of them still runs the same run and is not on its way out. Once the rule
    no longer says wait for them (they checkpointed, or the wait would end too late), or one
    of them left, the search runs again and finds the cheapest victims then."""

    def __init__(self, rule: CheckpointWait) -> None:
        self.rule = rule
        self._since: dict[str, tuple[int, float]] = {}
        """Per job: its start count (`Job.attempts`) when first told to wait, and when."""
        self._awaited: dict[str, AwaitedPlan] = {}
        """Per pending job told to wait: the plan whose victims it waits for."""

    def refusal(self, job: Job, plan: PreemptionPlan, ledger: Ledger, now: float) -> Refusal | None:
        """`checkpoint_refusal`, with the waits of a pending spell bounded by `max_total_wait`;
        a wait keeps the plan for `awaited`."""
        waiting = self._judged(job, plan, ledger, now)
        if waiting is None:
            self._awaited.pop(job.job_id, None)
            return None
        starts = _starts(plan, ledger)
        assert starts is not None, "a plan's victims are running"
        self._awaited[job.job_id] = AwaitedPlan(job.attempts, plan, starts)
        return waiting

    def awaited(self, job: Job, ledger: Ledger, now: float) -> Refusal | None:
        """The wait for the victims `job` was told to wait for, judged at `now`, while they
        all still run the same runs, none on its way out, and the rule still says wait for
        them; else None (forgotten: the job's victims are searched again)."""
        kept = self._awaited.get(job.job_id)
        if kept is None:
            return None
        waiting = None
        if kept.attempts == job.attempts and _starts(kept.plan, ledger) == kept.starts:
            waiting = self._judged(job, kept.plan, ledger, now)
        if waiting is None:
            del self._awaited[job.job_id]
        return waiting

    def _judged(self, job: Job, plan: PreemptionPlan, ledger: Ledger, now: float) -> Refusal | None:
        """`checkpoint_refusal` within `max_total_wait` of the pending spell's first wait."""
        rule = self.rule
        waiting = checkpoint_refusal(rule, job, plan, ledger, now)
        bound = rule.max_total_wait
        if waiting is None or bound is None:
            return waiting
        known = self._since.get(job.job_id)
        if known is None or known[0] != job.attempts:
            known = (job.attempts, now)
            self._since[job.job_id] = known
        return None if waiting.figures["until"] > known[1] + bound else waiting

    def forget(self, job_id: str) -> None:
        """Drop what is kept for a job whose pending spell ended (it started, or left the
        queue)."""
        self._awaited.pop(job_id, None)
        self._since.pop(job_id, None)


def _starts(plan: PreemptionPlan, ledger: Ledger) -> tuple[float, ...] | None:
    """The start of each of the plan's victims, or None when one no longer runs or is on its
    way out (evicted or moved)."""
    running, leaving = ledger.running, ledger.preemptor_of
    starts = []
    for victim in plan.victims:
        job = running.get(victim.job_id)
        if job is None or victim.job_id in leaving or job.start_time is None:
            return None
        starts.append(job.start_time)
    return tuple(starts)


def _hours(gpu_seconds: float) -> str:
    hours = gpu_seconds / HOUR
    return f"{hours:,.0f}" if hours >= 10 else f"{hours:,.1f}"
