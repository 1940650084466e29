"""Fenced capacity in a cycle: unallocated work may backfill onto reserved nodes, and a
nominee's nodes return to the queue when it starts elsewhere."""

from __future__ import annotations

from test_preemption_scenarios import racks, run, scheduler, spec
from test_scheduler_cycle import adopt_on, job, small_cluster, two_teams

from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Evict


def test_unallocated_work_fills_reserved_nodes_until_the_reserved_job_needs_them() -> None:
    # Rack r0 = nodes 0-1, rack r1 = nodes 2-3. x0 (node 0) ends at 1000, x1 (node 1) at 3000,
    # x2 and x3 hold rack r1 until 6000 and 8000. `big` (2 pods, one rack) is reserved rack r0
    # for 3000. At 1000 x0 ends: `scavenger` (min runtime 0, expected 10,000 s) is unallocated,
    # so it may take reserved node 0 although it would end long after 3000; `long` (allocated,
    # 5,000 s) may not. At 3000 `big` preempts the scavenger and starts after its grace period.
    scheduler = Scheduler(small_cluster(), two_teams(), grace_s=30.0)
    adopt_on(scheduler, job("x0", "team-a", expected_runtime=1000), 0, range(4))
    adopt_on(scheduler, job("x1", "team-a", expected_runtime=3000), 1, range(4))
    adopt_on(scheduler, job("x2", "team-a", expected_runtime=6000), 2, range(4))
    adopt_on(scheduler, job("x3", "team-a", expected_runtime=8000), 3, range(4))
    rack = {"required": "rack"}
    scheduler.submit(job("big", "team-a", pods=2, expected_runtime=2000, topology=rack), 0)
    first = scheduler.cycle(0)
    assert first.reservation is not None and first.reservation.start_time == 3000.0

    scheduler.finish("x0", 1000)
    scheduler.submit(job("long", "team-a", expected_runtime=5000), 1000)
    scheduler.submit(job("scavenger", "team-b", min_runtime=0, expected_runtime=10_000), 1000)
    at_1000 = scheduler.cycle(1000)
    assert [(d.job_id, d.allocation.nodes.tolist(), d.backfilled) for d in at_1000.bound] == [
        ("scavenger", [0], True)
    ]
    assert at_1000.reservation is not None and at_1000.reservation.start_time == 3000.0

    scheduler.finish("x1", 3000)
    at_3000 = scheduler.cycle(3000)
    assert at_3000.bound == []
    assert [d for d in at_3000.decisions if isinstance(d, Evict)] == [
        Evict("scavenger", "big", 30.0, "unallocated-victim", 4 * 2000.0)
    ]
    scheduler.evicted("scavenger", 3030)
    at_3030 = scheduler.cycle(3030)
    assert [(d.job_id, sorted(d.allocation.nodes.tolist())) for d in at_3030.bound] == [
        ("big", [0, 1])
    ]


def test_a_nominee_that_starts_elsewhere_leaves_its_nominated_node_to_the_next_job() -> None:
    # One rack of 3 nodes x 4 GPUs. Node 0: `keep` (protected). Node 1: unallocated `u`.
    # Node 2: `fin` (GPUs 0-1) and `stay` (GPUs 2-3), both protected. At 100 `p` (2 GPUs)
    # preempts `u` and is nominated node 1. At 110 `u` is gone and `fin` ends, so node 2 has 2
    # free GPUs. The cycle at 110 considers `a` (2 pods x 2 GPUs, priority 10) first: node 1
    # is fenced for `p`, so `a` does not fit. Then `p` starts on node 2 (best fit), leaving
    # node 1 free. `b` (same shape as `a`) must be searched again, not refused because `a`
    # was: it takes node 1 ahead of the requeued unallocated `u`.
    sched = scheduler(racks(1, 3))
    run(sched, spec("keep", "team-b", min_runtime="8h"), [0], 0)
    run(sched, spec("u", "scratch", min_runtime=0), [1], 0)
    run(sched, spec("fin", "team-b", gpus=2, min_runtime="8h"), [2], 0, [0, 1])
    run(sched, spec("stay", "team-b", gpus=2, min_runtime="8h"), [2], 0, [2, 3])
    sched.submit(spec("p", "team-a", gpus=2, priority=5), 100)
    assert [d.job_id for d in sched.cycle(100).decisions if isinstance(d, Evict)] == ["u"]
    sched.evicted("u", 110)
    sched.finish("fin", 110)
    sched.submit(spec("a", "team-a", pods=2, gpus=2, priority=10), 110)
    sched.submit(spec("b", "team-a", pods=2, gpus=2, priority=0), 110)
    result = sched.cycle(110)
    assert {d.job_id: d.allocation.nodes.tolist() for d in result.bound} == {
        "p": [2],
        "b": [1, 1],
    }
    assert sched.jobs["u"].state == "pending"
