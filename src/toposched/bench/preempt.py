"""Preemption benchmarks on the 1,000,080-GPU fleet full of mixed work."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from toposched.bench.cycle import busy_scheduler, gang_spec, team_name
from toposched.bench.harness import Measurement, measure
from toposched.cluster.state import Health
from toposched.placement.jobspec import JobSpec
from toposched.placement.search import Placement, place
from toposched.scheduler.core import Scheduler
from toposched.scheduler.jobs import JobState
from toposched.scheduler.preemption import PreemptionPlan, Refusal


@dataclass
class _FailingGang:
    """The gang whose node the failure benchmark takes down, that node, and when."""

    gang: str = ""
    node: int = -1
    time: float = 0.0


def _decide(scheduler: Scheduler, job_id: str, now: float) -> PreemptionPlan | Refusal:
    """The preemption decision alone: candidates under the contract, then the victim search."""
    job = scheduler.jobs[job_id]
    entry = scheduler.queue.get(job_id)
    return scheduler.preemptor.plan(job, entry, scheduler.queue.ranking(now), now)


def frontier_job() -> JobSpec:
    """The 200,016-GPU training run: 2,778 rack slices of 18 pods x 4 GPUs, fewest blocks."""
    return gang_spec(
        "frontier-job",
        team_name(1),
        2778 * 18,
        4,
        preferred="block",
        slices=[{"level": "rack", "pods": 18}],
    )


def run_preempt_benchmarks(quick: bool = False) -> list[Measurement]:
    # 40% of the racks hold unallocated work, so that evictions can open 2,778 racks.
    scheduler = busy_scheduler(106_000, unallocated_share=0.4)
    now = 1.0
    running = len(scheduler.running)
    unallocated = len(scheduler.ledger.unallocated)
    setting = f"{running:,} running, {unallocated:,} of them unallocated"
    rack_job = gang_spec("rack-job", team_name(0), 18, 4, required="rack")
    scheduler.submit(rack_job, now)
    # Nothing fits without preemption: no rack of the busy fleet has 18 free nodes.
    assert not isinstance(place(scheduler.state, scheduler.jobs["rack-job"].request), Placement)
    results = [
        measure(
            f"preemption decision, one-rack job (18 x 4 GPUs; {setting})",
            lambda: _decide(scheduler, "rack-job", now),
            runs=5 if quick else 30,
            target_s=1e-3,
        )
    ]
    plan = _decide(scheduler, "rack-job", now)
    results[-1].extra = (
        {"victims": len(plan.victims), "exact": plan.exact}
        if isinstance(plan, PreemptionPlan)
        else {"no_plan": plan.reason}
    )
    scheduler.cancel("rack-job", now)
    scheduler.submit(frontier_job(), now)
    results.append(
        measure(
            f"preemption decision, 200,016-GPU job (2,778 rack slices; {setting})",
            lambda: _decide(scheduler, "frontier-job", now),
            runs=2 if quick else 5,
            target_s=20e-3,
        )
    )
    plan = _decide(scheduler, "frontier-job", now)
    results[-1].extra = (
        {"victims": len(plan.victims)}
        if isinstance(plan, PreemptionPlan)
        else {"no_plan": plan.reason[:80]}
    )
    scheduler.cancel("frontier-job", now)
    # A node fails under a resumable 6-node gang; the gang is requeued and re-placed at once.
    gangs = iter(
        [
            job.job_id
            for job in scheduler.running.values()
            if job.request.pods == 6 and job.spec.resumable
        ]
    )
    failing = _FailingGang()
    clock = itertools.count(2.0)

    def pick_gang() -> None:
        if failing.node >= 0:
            scheduler.set_health([failing.node], Health.HEALTHY, failing.time)
        failing.gang = next(gangs)
        failing.node = int(scheduler.state.allocations[failing.gang].nodes[0])

    def fail_and_replace() -> None:
        when = float(next(clock))
        failing.time = when
        scheduler.set_health([failing.node], Health.DOWN, when)
        cycle = scheduler.cycle(when)
        assert failing.gang in {b.job_id for b in cycle.bound}
        assert scheduler.jobs[failing.gang].state is JobState.RUNNING

    results.append(
        measure(
            "node failure + re-placement of its 6-node gang (set_health + cycle)",
            fail_and_replace,
            setup=pick_gang,
            runs=5 if quick else 30,
            target_s=1e-3,
        )
    )
    return results
