"""Pending jobs of one kind (shape, pods and declared runtime), account and priority are
answered alike within a cycle; jobs of another runtime are answered by the known failure of
their shape, with the same reason."""

from __future__ import annotations

from job_helpers import four_gpu_gang as spec

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler
from toposched.scheduler.jobs import ReasonCode

HOUR = 3600.0


def full_cluster(reserve_min_gpus: float) -> Scheduler:
    """16 GPUs in 4 nodes, each held by a protected job of `team` that is expected to end at
    1 h, 2 h, 3 h and 4 h; every cycle a full one."""
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))
    tree = BudgetTree.from_dict({"accounts": {"team": 100}})
    scheduler = Scheduler(state, tree, incremental=False, reserve_min_gpus=reserve_min_gpus)
    for node in range(4):
        running = spec(f"run{node}", "team", expected_runtime=(node + 1) * HOUR)
        scheduler.adopt(running, Allocation.of([node], [[0, 1, 2, 3]]), start_time=0, now=0)
    return scheduler


def test_jobs_of_one_kind_are_answered_alike_and_other_runtimes_by_the_known_failure() -> None:
    scheduler = full_cluster(reserve_min_gpus=64)
    runtimes = (HOUR, 2 * HOUR, 2 * HOUR, 2 * HOUR, None, 3 * HOUR)
    for number, runtime in enumerate(runtimes):
        scheduler.submit(spec(f"wait{number}", "team", expected_runtime=runtime), 0)

    result = scheduler.cycle(60)

    assert not result.decisions
    # The first searches; wait1 is told by its failure, wait2 and wait3 as wait1 was (one
    # kind); wait4 and wait5 by the failure, each of its own kind.
    assert result.searches == 1
    assert result.alike == 2
    waiting = [scheduler.jobs[f"wait{number}"] for number in range(1, len(runtimes))]
    assert {job.reason for job in waiting} == {waiting[0].reason}
    assert {job.reason_code for job in waiting} == {ReasonCode.NO_PREEMPTION}


def test_jobs_that_may_backfill_are_searched_with_the_reserved_nodes_open() -> None:
    # `big` (2 nodes) is reserved from 2 h, when run0 and run1 have ended. The jobs behind it
    # that end before then may use the reserved nodes too.
    scheduler = full_cluster(reserve_min_gpus=8)
    scheduler.submit(spec("big", "team", pods=2, priority=10, expected_runtime=HOUR), 0)
    runtimes = (HOUR / 2, HOUR / 2, 10 * HOUR, 10 * HOUR)
    for number, runtime in enumerate(runtimes):
        scheduler.submit(spec(f"wait{number}", "team", expected_runtime=runtime), 0)

    result = scheduler.cycle(60)

    reserved = result.reservation
    assert reserved is not None and reserved.job_id == "big"
    assert reserved.start_time == 2 * HOUR
    # big searches; wait0 searches, then again with the reserved nodes open; wait1 is told by
    # wait0's failures (both, the reserved nodes open to it too). wait2 does not end in time:
    # told by the failure of its shape without the reserved nodes, and wait3 as wait2 was.
    assert result.searches == 3
    assert result.alike == 1
    assert scheduler.jobs["wait3"].reason == scheduler.jobs["wait2"].reason
