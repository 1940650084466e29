"""Defragmentation: moves that open a rack for a blocked gang, compaction, fragmentation metric."""

from __future__ import annotations

from job_helpers import four_gpu_gang

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import ClusterState
from toposched.jobs.spec import JobSpec
from toposched.placement.request import GangRequest
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Evict, Reserve
from toposched.scheduler.defrag import fragmentation
from toposched.scheduler.jobs import JobState

HOUR = 3600.0


def job(name: str, pods: int, **fields: object) -> JobSpec:
    return four_gpu_gang(name, "a", pods, **fields)


def checkerboard(**options: object) -> Scheduler:
    """Two racks of 18 four-GPU nodes; one team; every other node busy with a resumable
    one-node job (ends in 20 h), so each rack has 9 free nodes and neither has 18."""
    tree = BudgetTree.from_dict({"accounts": {"a": {"share": 60}, "b": {"share": 40}}})
    scheduler = Scheduler(ClusterState(nvl72_cluster(1, 1, 2)), tree, **options)  # type: ignore[arg-type]
    for i in range(36):
        scheduler.submit(job(f"s{i:02d}", 1, resumable=True, expected_runtime="20h"), 0)
    scheduler.cycle(0)
    for i in range(0, 36, 2):
        scheduler.finish(f"s{i:02d}", 100)
    return scheduler


def test_fragmentation_counts_free_gpus_no_pending_shape_can_use() -> None:
    scheduler = checkerboard()
    state = scheduler.state
    # 72 free GPUs in 18 free nodes, 9 per rack. A whole-rack gang (18 pods, required rack)
    # can use none of them; a one-node job can use all of them.
    rack_gang = GangRequest.from_spec(job("r", 18, topology={"required": "rack"}), state.topology)
    one_node = GangRequest.from_spec(job("n", 1), state.topology)
    assert fragmentation(state, [rack_gang]) == 1.0
    assert fragmentation(state, [one_node]) == 0.0
    assert fragmentation(state, [rack_gang, one_node]) == 0.0
    assert fragmentation(state, []) == 0.0


def test_moves_open_a_rack_for_a_blocked_gang_when_worth_it() -> None:
    scheduler = checkerboard()
    # Same team, equal priority: preemption is not allowed, so only moves can help. Waiting
    # would take until the first running job ends (20 h); moving 9 one-node jobs costs
    # 9 x 4 GPUs x (2 h of lost work + 300 s restart) = 75 GPU-hours, far below
    # 72 GPUs x ~18 h gained.
    scheduler.submit(
        job("rack", 18, topology={"required": "rack"}, expected_runtime="10h"), 2 * HOUR
    )
    result = scheduler.cycle(2 * HOUR)
    moved = [d for d in result.decisions if isinstance(d, Evict)]
    assert len(moved) == 9 and {d.rule for d in moved} == {"defragmentation"}
    assert not [d for d in result.decisions if isinstance(d, Reserve)]
    assert scheduler.jobs["rack"].reason.startswith("defragmenting rack ")
    for decision in moved:
        scheduler.evicted(decision.job_id, 2 * HOUR + 30)
    after = scheduler.cycle(2 * HOUR + 30)
    bound = {d.job_id for d in after.bound}
    # The rack job and every moved job run again, the movers in the other rack.
    assert "rack" in bound and {d.job_id for d in moved} <= bound
    assert scheduler.jobs["rack"].state is JobState.RUNNING
    assert list(scheduler.state.free_gpus[3]) == [0, 0]
    record = scheduler.jobs[moved[0].job_id].evictions[-1]
    assert record.rule == "defragmentation" and record.preemptor == "rack"


def test_moves_not_worth_the_gain_are_not_made() -> None:
    scheduler = checkerboard()
    # At 19 h the reservation is 1 h away (the running jobs end at 20 h): the gain is
    # 72 GPUs x 1 h = 72 GPU-hours, while 9 moves lose 9 x 4 GPUs x (19 h + 300 s) = 687.
    now = 19 * HOUR
    scheduler.submit(job("rack", 18, topology={"required": "rack"}, expected_runtime="10h"), now)
    result = scheduler.cycle(now)
    assert not [d for d in result.decisions if isinstance(d, Evict)]
    assert [d for d in result.decisions if isinstance(d, Reserve)]
    assert "not worth it" in scheduler.jobs["rack"].reason


def compaction_case(moves_per_hour: int) -> Scheduler:
    """Rack r0 holds 16 one-node unallocated jobs (2 nodes free), rack r1 holds 2: emptying r1
    takes 2 moves into r0."""
    tree = BudgetTree.from_dict({"accounts": {"a": {"share": 100}}})
    scheduler = Scheduler(
        ClusterState(nvl72_cluster(1, 1, 2)), tree, compaction_moves_per_hour=moves_per_hour
    )
    for i in range(20):
        scheduler.submit(job(f"j{i:02d}", 1, resumable=True, min_runtime=0), 0)
    scheduler.cycle(0)
    for i in range(2):
        scheduler.finish(f"j{i:02d}", 10)
    assert list(scheduler.state.free_gpus[3]) == [8, 64]
    return scheduler


def test_compaction_empties_a_partly_used_rack() -> None:
    scheduler = compaction_case(moves_per_hour=3)
    result = scheduler.compact(20)
    moved = sorted(d.job_id for d in result.decisions if isinstance(d, Evict))
    assert moved == ["j18", "j19"]
    assert {d.rule for d in result.decisions if isinstance(d, Evict)} == {"compaction"}
    for job_id in moved:
        scheduler.evicted(job_id, 50)
    scheduler.cycle(50)
    assert list(scheduler.state.free_gpus[3]) == [0, 72]  # r1 whole again
    assert scheduler.compact(60).decisions == []  # nothing partly used is left


def test_compaction_stays_within_its_moves_per_hour() -> None:
    # Emptying r1 needs 2 moves; a budget of 1 per hour allows none of it.
    scheduler = compaction_case(moves_per_hour=1)
    assert scheduler.compact(20).decisions == []
    # With 2 per hour it happens, and then the hour's budget is spent.
    scheduler = compaction_case(moves_per_hour=2)
    assert len(scheduler.compact(20).decisions) == 2
    assert len(scheduler.evictor.recent_moves) == 2
