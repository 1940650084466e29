"""Evictions the cycle decides: a preemption's victims, jobs moved by defragmentation or
compaction, and jobs leaving draining nodes; each with its grace period and record."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import ClusterState, Health
from toposched.scheduler.decisions import Decision, Evict
from toposched.scheduler.defrag import Defragmenter, MovePlan, Mover
from toposched.scheduler.jobs import EvictionRecord, Job, Nomination, ReasonCode, Reservation
from toposched.scheduler.ledger import Ledger, work_since
from toposched.scheduler.preemption import PreemptionPlan
from toposched.scheduler.refusals import Refusal
from toposched.scheduler.settings import SchedulerSettings
from toposched.scheduler.wording import domain_of, hours, no_defragmentation, victims_by_rule

IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class _NotHelped:
    """Defragmentation could not help a job at this version of the cluster state."""

    version: int
    refusal: Refusal


class Evictor:
    """Tells running jobs to leave and keeps the records: who left for whom, by which rule,
    with how much work lost; the GPUs they leave are nominated to the job they leave for."""

    def __init__(self, state: ClusterState, ledger: Ledger, settings: SchedulerSettings) -> None:
        self.state = state
        self.ledger = ledger
        self.settings = settings
        self.defragmenter = Defragmenter(state, settings.policy) if settings.defragment else None
        self.recent_moves: deque[float] = deque()
        """When each compaction move of the last hour was decided."""
        # A job that defragmentation could not help stays so until the cluster changes: the
        # state's version then, and the refusal.
        self._no_defrag: dict[str, _NotHelped] = {}

    def grace_for(self, job: Job) -> float:
        """Seconds an evicted job gets to exit: its own `grace_period` up to `max_grace_s`, or
        the cluster default `grace_s`."""
        asked = job.spec.grace_period
        settings = self.settings
        return settings.grace_s if asked is None else min(asked, settings.max_grace_s)

    def carry_out(
        self, job: Job, plan: PreemptionPlan, now: float, decisions: list[Decision]
    ) -> None:
        """Evict the plan's victims (there is at least one) with their grace period and
        nominate their capacity to `job`."""
        ledger = self.ledger
        victims: list[str] = []
        for victim in plan.victims:
            victims.append(victim.job_id)
            target = ledger.running[victim.job_id]
            ledger.mark_leaving(target)
            reason = f"preempted by {job.job_id} ({victim.rule})"
            target.evictions.append(
                EvictionRecord(now, job.job_id, victim.rule, reason, victim.lost_gpu_seconds)
            )
            target.record(now, reason)
            ledger.preemptor_of[victim.job_id] = job.job_id
            decisions.append(
                Evict(
                    victim.job_id,
                    job.job_id,
                    self.grace_for(target),
                    victim.rule,
                    victim.lost_gpu_seconds,
                )
            )
        ledger.preemptible.mark_evicting_many(victims)
        job.nomination = Nomination(set(victims), plan.nodes, now)
        lost = plan.impact[0] / 3600
        job.reason_code = ReasonCode.PREEMPTING
        job.reason = (
            f"preempting {victims_by_rule([v.rule for v in plan.victims])} in "
            f"{domain_of(self.state.topology, plan.nodes)} ({lost:,.1f} GPU-hours of work "
            "lost); starts when they exit"
        )
        job.record(now, job.reason)

    def movers_on(self, nodes: IntArray, now: float) -> list[Mover]:
        """Running jobs on `nodes` that may be moved: resumable and not protected."""
        movers: list[Mover] = []
        running = self.ledger.running
        for job_id in sorted(self.ledger.owners_on(nodes)):
            job = running[job_id]
            assert job.start_time is not None
            if job.evicting or not job.spec.resumable:
                continue
            if not job.unallocated and now < job.start_time + job.min_runtime:
                continue
            lost = job.gpus * max(now - work_since(job), 0.0)
            movers.append(Mover(job_id, job.request, lost, job.gpus))
        return movers

    def defragment_for(
        self, job: Job, reservation: Reservation, now: float, decisions: list[Decision]
    ) -> bool:
        """Move resumable jobs so that the reserved job starts now, if that is worth it."""
        if self.defragmenter is None:
            return False
        known = self._no_defrag.get(job.job_id)
        if known is not None and known.version == self.state.version:
            job.reason = no_defragmentation(job.reason, known.refusal)
            return False
        plan = self.defragmenter.for_blocked_job(
            job.job_id,
            job.request,
            wait_saved_s=max(reservation.start_time - now, 0.0),
            movers_on=lambda nodes: self.movers_on(nodes, now),
        )
        if not isinstance(plan, MovePlan):
            self._no_defrag[job.job_id] = _NotHelped(self.state.version, plan)
            job.reason = no_defragmentation(job.reason, plan)
            return False
        self.move(plan, job, "defragmentation", now, decisions)
        job.reservation = None
        job.reason_code = ReasonCode.DEFRAGMENTING
        job.reason = (
            f"defragmenting {plan.domain}: moving {len(plan.movers)} job(s) "
            f"({plan.cost_gpu_seconds / 3600:,.1f} GPU-hours) to start "
            f"{hours(reservation.start_time - now)} sooner"
        )
        return True

    def move(
        self, plan: MovePlan, job: Job | None, rule: str, now: float, decisions: list[Decision]
    ) -> None:
        """Tell the plan's movers to leave, for `job` (None: for compaction)."""
        ledger = self.ledger
        preemptor = job.job_id if job is not None else ""
        for mover in plan.movers:
            target = ledger.running[mover.job_id]
            ledger.mark_leaving(target)
            ledger.preemptible.mark_evicting(mover.job_id)
            reason = f"moved for {rule} of {plan.domain}" + (f" ({preemptor})" if job else "")
            target.evictions.append(
                EvictionRecord(now, preemptor, rule, reason, mover.lost_gpu_seconds)
            )
            target.record(now, reason)
            if job is not None:
                ledger.preemptor_of[mover.job_id] = job.job_id
            decisions.append(
                Evict(mover.job_id, preemptor, self.grace_for(target), rule, mover.lost_gpu_seconds)
            )
        if job is not None:
            job.nomination = Nomination({m.job_id for m in plan.movers}, plan.nodes, now)

    def compact(self, now: float, decisions: list[Decision]) -> None:
        """Empty one partly used innermost domain by moving its resumable jobs into fuller
        ones, within `compaction_moves_per_hour`."""
        if self.defragmenter is None:
            return
        recent = self.recent_moves
        while recent and recent[0] <= now - 3600:
            recent.popleft()
        budget = self.settings.compaction_moves_per_hour - len(recent)
        plan = self.defragmenter.compaction(
            lambda nodes: self.movers_on(nodes, now), self.ledger.owners_on, budget
        )
        if plan is not None:
            self.move(plan, None, "compaction", now, decisions)
            recent.extend([now] * len(plan.movers))

    def evict_from_draining_nodes(self, now: float, decisions: list[Decision]) -> None:
        """Jobs on draining nodes leave once their protection ends (unallocated ones at once)."""
        if self.state.nodes_by_health[Health.DRAINING] == 0:
            return
        ledger = self.ledger
        draining = np.flatnonzero(self.state.health == Health.DRAINING)
        for job_id in sorted(ledger.owners_on(draining)):
            job = ledger.running.get(job_id)
            if job is None or job.evicting:
                continue
            assert job.start_time is not None
            if not job.unallocated and now < job.start_time + job.min_runtime:
                job.reason = "running on a draining node; leaves when its min runtime ends"
                job.reason_code = ReasonCode.RUNNING_ON_DRAINING
                continue
            ledger.mark_leaving(job)
            ledger.preemptible.mark_evicting(job_id)
            lost = job.gpus * max(now - work_since(job), 0.0)
            reason = "its node is draining and its min runtime has ended"
            job.evictions.append(EvictionRecord(now, "", "node_draining", reason, lost))
            job.record(now, f"evicted: {reason}")
            decisions.append(Evict(job_id, "", self.grace_for(job), "node_draining", lost))
