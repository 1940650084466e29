"""Slurm's preemption for the Slurm-like baseline: a pending job of a higher partition priority
tier takes the nodes of lower-tier jobs, which are requeued after their grace time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.errors import InputError, checked_number
from toposched.cluster.state import MILLI_PER_GPU, Health
from toposched.cluster.statement import Statement
from toposched.placement.search import Placement, place
from toposched.scheduler.candidates import Candidate, PreemptionPlan
from toposched.scheduler.decisions import Decision
from toposched.scheduler.jobs import Job, JobState
from toposched.scheduler.ledger import work_since
from toposched.sim.baselines.queues import Partition

if TYPE_CHECKING:
    from toposched.sim.baselines.slurm import SlurmLike

__all__ = ["PREEMPTION_RULE", "SlurmPreemption", "preempt_for_pending"]

IntArray = NDArray[np.int64]

PREEMPTION_RULE = "partition-priority"
"""The rule evictions by the Slurm-like baseline carry."""


@dataclass(frozen=True)
class SlurmPreemption:
    """`PreemptType=preempt/partition_prio` with `PreemptMode=REQUEUE`.

    Budgeted work runs in a partition of a higher PriorityTier than work no budget pays for (a
    "scavenger" partition over the same nodes). A pending higher-tier job that does not fit
    looks at the lower-tier jobs running at least `exempt_s` (PreemptExemptTime), youngest
    first (`PreemptParameters=youngest_first`): it takes the shortest run of them, in that
    order, whose nodes with the free ones hold it, and evicts those of them on the nodes its
    placement uses. Victims get `grace_s` (GraceTime) to exit, then are requeued (resumable
    work continues from its checkpoint, other work starts again); the preemptor starts on
    their nodes, which nothing else takes meanwhile. At most `max_preemptors` jobs preempt in
    one cycle. Jobs of one tier never preempt each other.
    """

    grace_s: float = 30.0
    exempt_s: float = 0.0
    max_preemptors: int = 8

    def __post_init__(self) -> None:
        for name in ("grace_s", "exempt_s"):
            checked_number(getattr(self, name), name, "must be a number of seconds >= 0")
        count = self.max_preemptors
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InputError("max_preemptors", count, "must be a whole number >= 1")


def preempt_for_pending(
    scheduler: SlurmLike, preemption: SlurmPreemption, now: float, decisions: list[Decision]
) -> None:
    """After the cycle's starts: evict lower-tier jobs for the pending higher-tier jobs that
    did not start, in queue order, appending the evictions to `decisions`."""
    running = scheduler.ledger.running
    candidates = [
        running[job_id]
        for job_id in scheduler.ledger.unallocated
        if not running[job_id].evicting and now >= _started(running[job_id]) + preemption.exempt_s
    ]
    if not candidates:
        return
    preemptors = [
        job
        for job in (scheduler.jobs[entry.job_id] for entry in scheduler.queue.ordered(now))
        if job.nomination is None and scheduler.partition(job) is Partition.NORMAL
    ]
    if not preemptors:
        return
    candidates.sort(key=lambda job: (-_started(job), job.job_id))
    statement = Statement(scheduler.state)
    try:
        kept = [
            job.nomination.nodes
            for job in scheduler.jobs.values()
            if job.state is JobState.PENDING and job.nomination is not None
        ]
        if kept:
            # Nodes already freed for other preemptors are theirs.
            statement.set_health(np.concatenate(kept), Health.CORDONED)
        _preempt_in_order(scheduler, preemption, now, preemptors, candidates, statement, decisions)
    finally:
        statement.discard()


def _preempt_in_order(
    scheduler: SlurmLike,
    preemption: SlurmPreemption,
    now: float,
    preemptors: list[Job],
    candidates: list[Job],
    statement: Statement,
    decisions: list[Decision],
) -> None:
    left = preemption.max_preemptors
    failed: dict[tuple[object, ...], int] = {}
    room = float(scheduler.state.free_milli[0][0]) / MILLI_PER_GPU
    room += sum(c.gpus for c in candidates)
    for job in preemptors:
        smallest = failed.get(job.shape)
        if job.gpus > room + 1e-9 or (smallest is not None and job.request.pods >= smallest):
            continue
        plan = _plan(scheduler, job, candidates, statement, now)
        if plan is None:
            failed[job.shape] = min(job.request.pods, smallest or job.request.pods)
            continue
        scheduler.evictor.carry_out(job, plan, now, decisions)
        gone = {victim.job_id for victim in plan.victims}
        candidates[:] = [c for c in candidates if c.job_id not in gone]
        room -= job.gpus
        statement.set_health(plan.nodes, Health.CORDONED)
        failed.clear()  # fewer candidates and fewer nodes: nothing learnt holds any more
        left -= 1
        if left == 0 or not candidates:
            return


def _plan(
    scheduler: SlurmLike, job: Job, candidates: Sequence[Job], statement: Statement, now: float
) -> PreemptionPlan | None:
    """The victims for `job`: the shortest prefix of `candidates` whose release lets it fit,
    then those of them on the nodes of its placement (None if even all do not suffice)."""
    state, request = scheduler.state, job.request
    ids = [c.job_id for c in candidates]
    mark = statement.checkpoint()

    def placed_with(count: int) -> Placement | None:
        statement.rollback(mark)
        statement.release_many(ids[:count])
        outcome = place(state, request, scheduler.policy, exact_reasons=False)
        return outcome if isinstance(outcome, Placement) else None

    try:
        if placed_with(len(ids)) is None:
            return None
        low, high = 1, len(ids)
        while low < high:
            middle = (low + high) // 2
            if placed_with(middle) is None:
                low = middle + 1
            else:
                high = middle
        placement = placed_with(low)
        assert placement is not None
    finally:
        statement.rollback(mark)
    used = np.unique(placement.allocation.nodes)
    victims = [
        _candidate(c, state.allocations[c.job_id].nodes, now)
        for c in candidates[:low]
        if np.isin(state.allocations[c.job_id].nodes, used).any()
    ]
    lost = sum(v.lost_gpu_seconds for v in victims)
    return PreemptionPlan(job.job_id, victims, placement, (lost, float(len(victims))), False)


def _candidate(job: Job, nodes: IntArray, now: float) -> Candidate:
    request = job.request
    return Candidate(
        job_id=job.job_id,
        rule=PREEMPTION_RULE,
        lost_gpu_seconds=job.gpus * max(now - work_since(job), 0.0),
        standing=0.0,
        nodes=nodes,
        gpus_per_pod=float(request.gpus_per_pod) if not request.is_fractional else 0.0,
        gpus=job.gpus,
    )


def _started(job: Job) -> float:
    assert job.start_time is not None
    return job.start_time
