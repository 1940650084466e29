"""Pending jobs of one kind (shape, pods and declared runtime), account and priority are
answered alike within a cycle; jobs of another runtime are answered by the known failure of
their shape, with the same reason; unallocated work of one shape is answered alike whatever
its runtime, account and priority."""

from __future__ import annotations

from job_helpers import four_gpu_gang as spec

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler
from toposched.scheduler.jobs import ReasonCode
from toposched.scheduler.turn import CycleResult

HOUR = 3600.0


def full_cluster(reserve_min_gpus: float, unbudgeted: tuple[str, ...] = ("guests",)) -> Scheduler:
    """16 GPUs in 4 nodes, each held by a protected job of `team` that is expected to end at
    1 h, 2 h, 3 h and 4 h; every cycle a full one. The `unbudgeted` accounts have no budget:
    their jobs are unallocated work."""
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))
    tree = BudgetTree.from_dict({"accounts": {"team": 100, **dict.fromkeys(unbudgeted, 0)}})
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


def test_unallocated_work_is_answered_alike_whatever_its_runtime() -> None:
    # Unallocated work may backfill behind any reservation and neither preempts nor reserves:
    # its runtime changes nothing in its answer, so jobs of one shape share it.
    scheduler = full_cluster(reserve_min_gpus=64)
    runtimes = (HOUR, 2 * HOUR, 3 * HOUR, None, 5 * HOUR)
    for number, runtime in enumerate(runtimes):
        name = f"spare{number}"
        scheduler.submit(spec(name, "guests", expected_runtime=runtime), 0)

    result = scheduler.cycle(60)

    assert not result.decisions
    # spare0 searches, spare1 is told by its failure, the others as spare1 was.
    assert result.searches == 1
    assert result.alike == 3
    waiting = [scheduler.jobs[f"spare{number}"] for number in range(1, len(runtimes))]
    assert {job.reason for job in waiting} == {waiting[0].reason}
    assert {job.reason_code for job in waiting} == {ReasonCode.DOES_NOT_FIT}


def test_unallocated_work_of_other_accounts_and_priorities_is_answered_alike() -> None:
    # Neither `guests` nor `visitors` has a budget: all their jobs are unallocated work, whose
    # turn reads no account or priority, so one answer serves every job of the shape.
    scheduler = full_cluster(reserve_min_gpus=64, unbudgeted=("guests", "visitors"))
    waiting = [
        spec("spare0", "guests", expected_runtime=HOUR),
        spec("spare1", "visitors", priority=5, expected_runtime=2 * HOUR),
        spec("spare2", "guests", expected_runtime=3 * HOUR),
        spec("spare3", "visitors", expected_runtime=None),
    ]
    for job in waiting:
        scheduler.submit(job, 0)

    result = scheduler.cycle(60)

    assert not result.decisions
    # One search, one job told by its failure, the two others (each the first of its account,
    # priority and runtime after it) as that one was.
    assert result.searches == 1
    assert result.alike == 2
    told = [scheduler.jobs[job.name] for job in waiting if job.name != "spare0"]
    assert {job.reason for job in told} == {told[0].reason}
    assert {job.reason_code for job in told} == {ReasonCode.DOES_NOT_FIT}


def test_unallocated_work_shares_answers_behind_the_reservation_but_budgeted_work_not() -> None:
    # `big` is reserved from 2 h. Unallocated work may use the reserved nodes whatever its
    # runtime; budgeted jobs only if they end before 2 h, so theirs still tells them apart.
    runtimes = (HOUR / 2, 10 * HOUR, HOUR / 4, 20 * HOUR)

    def cycle(with_guests: bool) -> tuple[Scheduler, CycleResult]:
        scheduler = full_cluster(reserve_min_gpus=8)
        scheduler.submit(spec("big", "team", pods=2, priority=10, expected_runtime=HOUR), 0)
        for number, runtime in enumerate(runtimes):
            scheduler.submit(spec(f"wait{number}", "team", expected_runtime=runtime), 0)
            if with_guests:
                scheduler.submit(spec(f"spare{number}", "guests", expected_runtime=runtime), 0)
        return scheduler, scheduler.cycle(60)

    budgeted, alone = cycle(with_guests=False)
    scheduler, result = cycle(with_guests=True)

    reserved = result.reservation
    assert reserved is not None and reserved.job_id == "big"
    assert result.decisions == alone.decisions
    # The budgeted jobs are answered as without the guests; the guests' jobs take no search:
    # spare0 is told by wait0's failure with the reserved nodes open (one pod shape), and
    # spare1 to spare3 as spare0 was, whatever their runtimes.
    assert result.searches == alone.searches
    assert result.alike == alone.alike + 3
    for number in range(len(runtimes)):
        name = f"wait{number}"
        assert scheduler.jobs[name].reason == budgeted.jobs[name].reason
    spares = [scheduler.jobs[f"spare{number}"] for number in range(len(runtimes))]
    assert {job.reason for job in spares} == {spares[0].reason}
