"""Placement failures kept through releases: a gang that needs a whole rack keeps its failure
while jobs end where no rack regains room for it, and is searched again as soon as one could
hold it; any other change of the cluster sends it back to a search."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from job_specs import job

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState, Health
from toposched.jobs.spec import JobSpec
from toposched.placement.request import GangRequest
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Bind
from toposched.scheduler.failures import Failure, FailureMemo
from toposched.scheduler.fence import Fence
from toposched.scheduler.freed import FreedCapacity

HOUR = 3600.0


def loaded(ahead: Sequence[JobSpec] = (), **settings: Any) -> Scheduler:
    """2 racks x 2 nodes x 4 GPUs: racks are nodes 0-1 and 2-3. Every node is full but node 3,
    which has 2 GPUs free; all running jobs are protected for an hour. The jobs `ahead` (each
    of 4-GPU pods) and then `wide` (2 x 4 GPUs, one rack) do not fit, and the first cycle
    searched for each."""
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))
    tree = BudgetTree.from_dict({"accounts": {"team-a": 50, "team-b": 50}})
    scheduler = Scheduler(state, tree, reserve_min_gpus=1000, **settings)
    for node, gpus in ((0, 4), (1, 4), (2, 4), (3, 2)):
        spec = job(f"on{node}", "team-b", gpus=gpus)
        allocation = Allocation.of([node], [list(range(gpus))])
        scheduler.adopt(spec, allocation, start_time=0.0, now=0.0)
    for spec in ahead:
        scheduler.submit(spec, 0)
    scheduler.submit(job("wide", "team-a", pods=2, topology={"required": "rack"}), 0)
    assert scheduler.cycle(0).searches == 1 + len(ahead)
    return scheduler


def test_a_release_no_rack_can_use_keeps_the_failure() -> None:
    scheduler = loaded(verify_kept_failures=True)
    # Node 2 frees 4 GPUs: rack 1 then has 6 free, short of the 8 wide needs in one rack.
    scheduler.finish("on2", 60)
    result = scheduler.cycle(60)
    assert result.searches == 0 and not result.bound
    assert "no domain it could use gained enough GPUs since" in scheduler.jobs["wide"].reason

    # Node 3's job ends too: rack 1 has 8 free GPUs, so wide is searched again and starts.
    scheduler.finish("on3", 120)
    result = scheduler.cycle(120)
    assert result.searches == 1
    assert [d.job_id for d in result.decisions if isinstance(d, Bind)] == ["wide"]


def test_a_release_that_leaves_no_node_room_for_a_pod_keeps_the_failure() -> None:
    # 2 racks x 4 nodes x 4 GPUs: rack 0 (nodes 0-3) full of 4-GPU jobs, each node of rack 1
    # (nodes 4-7) holding two 2-GPU jobs. `wide` (2 x 4 GPUs, one rack) does not fit.
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=4))
    tree = BudgetTree.from_dict({"accounts": {"team-a": 50, "team-b": 50}})
    scheduler = Scheduler(state, tree, reserve_min_gpus=1000, verify_kept_failures=True)
    for node in range(4):
        allocation = Allocation.of([node], [[0, 1, 2, 3]])
        scheduler.adopt(job(f"on{node}", "team-b"), allocation, start_time=0.0, now=0.0)
    for node in range(4, 8):
        for half, gpus in (("a", [0, 1]), ("b", [2, 3])):
            spec = job(f"on{node}{half}", "team-b", gpus=2)
            scheduler.adopt(spec, Allocation.of([node], [gpus]), start_time=0.0, now=0.0)
    scheduler.submit(job("wide", "team-a", pods=2, topology={"required": "rack"}), 0)
    assert scheduler.cycle(0).searches == 1

    # Half of every node of rack 1 ends: 8 GPUs free there, as many as wide needs, but no
    # node has the 4 a pod takes. Then node 4 empties: room for one pod, not two.
    for node in range(4, 8):
        scheduler.finish(f"on{node}a", 60)
    assert scheduler.cycle(60).searches == 0
    scheduler.finish("on4b", 120)
    result = scheduler.cycle(120)
    assert result.searches == 0 and not result.bound
    assert "no domain it could use gained enough GPUs since" in scheduler.jobs["wide"].reason

    # Node 5 empties too: two pods' room in rack 1, so wide is searched again and starts.
    scheduler.finish("on5b", 180)
    result = scheduler.cycle(180)
    assert result.searches == 1
    assert [d.job_id for d in result.decisions if isinstance(d, Bind)] == ["wide"]


def test_a_failure_the_release_dropped_holds_again_once_earlier_jobs_took_the_room() -> None:
    # As `loaded`, with `filler` (one 4-GPU pod) ahead of wide in the queue. Nodes 2 and 3
    # free up: rack 1 could hold wide, so its failure is dropped at the cycle's start; filler
    # takes one of the nodes first, and when wide's turn comes no rack that gained GPUs holds
    # it: answered without a search (checked by a search all the same).
    scheduler = loaded(ahead=[job("filler", "team-a")], verify_kept_failures=True)

    scheduler.finish("on2", 60)
    scheduler.finish("on3", 60)
    result = scheduler.cycle(60)
    assert [d.job_id for d in result.decisions if isinstance(d, Bind)] == ["filler"]
    assert result.searches == 1
    assert "no domain that gained GPUs since has room for it now" in scheduler.jobs["wide"].reason


def test_a_dropped_failure_is_searched_again_while_the_freed_room_is_there() -> None:
    # As `loaded`: nodes 2 and 3 free up and no job ahead takes them, so rack 1 keeps its 8
    # GPUs when wide's turn comes: its dropped failure does not hold, and wide is searched and
    # starts.
    scheduler = loaded(verify_kept_failures=True)

    scheduler.finish("on2", 60)
    scheduler.finish("on3", 60)
    result = scheduler.cycle(60)
    assert result.searches == 1
    assert [d.job_id for d in result.decisions if isinstance(d, Bind)] == ["wide"]


def test_a_dropped_failure_checked_again_is_kept_with_the_fence_of_the_check() -> None:
    # 2 racks x 2 nodes x 4 GPUs, every GPU held; a 2-pod, 4-GPU gang needing one rack did
    # not fit with nothing fenced. Rack 1 empties (its failure is dropped), then a job takes
    # node 2 and the fence reserves node 3.
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))
    for node in range(4):
        state.allocate(f"on{node}", Allocation.of([node], [[0, 1, 2, 3]]))
    rack = state.topology.level_index("rack")
    request = GangRequest("wide", 2, 4, 1000, 0, 0, None, required=rack)
    shape = ("wide-shape",)
    memo = FailureMemo()
    fence = Fence(state)
    memo.add(shape, Failure(2, "no rack", fence.seen(), "wide", 0, 1, request), fence)
    freed = np.array([2, 3], dtype=np.int64)
    state.release("on2")
    state.release("on3")
    assert memo.outlive_release(freed, state) == {shape}
    assert memo.find(shape, 2, fence, 2) is None
    # Rack 1 holds the gang: nothing to keep.
    assert memo.recheck(shape, 2, fence) is None

    state.allocate("taker", Allocation.of([2], [[0, 1, 2, 3]]))
    fence = Fence(state)
    reserved = np.array([3], dtype=np.int64)
    fence.close_block(reserved)
    renewed = memo.recheck(shape, 2, fence)
    assert renewed is not None and renewed.outlived_release
    assert renewed.fenced.nodes() == {3}
    assert memo.find(shape, 2, fence, 2) is renewed

    # With the reserved node lifted for a backfill, rack 1 has 4 free GPUs, short of 8: kept
    # again, with only what the backfill's search sees fenced (nothing).
    opened = np.zeros(state.topology.n_nodes, dtype=bool)
    opened[reserved] = True
    fence.lift()
    beyond = memo.recheck(shape, 2, fence, opened)
    assert beyond is not None and len(beyond.fenced) == 0
    assert memo.find_beyond(shape, 2, fence, opened, 2) is beyond


def test_a_dropped_failure_found_with_a_reserved_node_fenced_is_not_checked_for_a_backfill() -> (
    None
):
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))
    for node in range(4):
        state.allocate(f"on{node}", Allocation.of([node], [[0, 1, 2, 3]]))
    rack = state.topology.level_index("rack")
    request = GangRequest("wide", 2, 4, 1000, 0, 0, None, required=rack)
    shape = ("wide-shape",)
    memo = FailureMemo()
    fence = Fence(state)
    fence.close_block(np.array([1], dtype=np.int64))
    memo.add(shape, Failure(2, "no rack", fence.seen(), "wide", 0, 1, request), fence)
    state.release("on2")
    state.release("on3")
    memo.outlive_release(np.array([2, 3], dtype=np.int64), state)
    state.allocate("taker", Allocation.of([2], [[0, 1, 2, 3]]))
    opened = np.zeros(state.topology.n_nodes, dtype=bool)
    opened[1] = True
    fence.lift()
    # Node 1 was fenced when the gang failed, and the backfill's search sees it open.
    assert memo.recheck(shape, 2, fence, opened) is None
    fence.settle()
    assert memo.recheck(shape, 2, fence) is not None


def test_a_job_of_several_pod_sets_is_searched_again_after_any_release() -> None:
    # Every GPU held; `mixed` asks a 4-GPU lead and two workers on half a GPU each, which
    # the job's gang counts as three pods of 4 GPUs (12 GPUs). 6 GPUs freed hold the sets.
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))
    tree = BudgetTree.from_dict({"accounts": {"team-a": 50, "team-b": 50}})
    scheduler = Scheduler(state, tree, reserve_min_gpus=1000, verify_kept_failures=True)
    held = (("on0", 0, [0, 1, 2, 3]), ("on1", 1, [0, 1, 2, 3]), ("on2", 2, [0, 1, 2, 3]))
    for name, node, gpus in (*held, ("on3a", 3, [0, 1]), ("on3b", 3, [2, 3])):
        spec = job(name, "team-b", gpus=len(gpus))
        scheduler.adopt(spec, Allocation.of([node], [gpus]), start_time=0.0, now=0.0)
    lead = {"name": "lead", "pods": 1, "resources_per_pod": {"gpus": 4}}
    workers = {"name": "workers", "pods": 2, "resources_per_pod": {"gpus": 1, "gpu_milli": 500}}
    mixed = {"name": "mixed", "account": "team-a", "min_runtime": "1h"}
    scheduler.submit(JobSpec.from_dict({**mixed, "pod_sets": [lead, workers]}), 0)
    assert scheduler.cycle(0).searches == 1

    scheduler.finish("on0", 60)
    scheduler.finish("on3a", 60)
    result = scheduler.cycle(60)
    assert result.searches == 1
    assert [d.job_id for d in result.decisions if isinstance(d, Bind)] == ["mixed"]


def test_without_the_rule_every_release_sends_the_gang_back_to_a_search() -> None:
    scheduler = loaded(keep_failures_through_releases=False)
    scheduler.finish("on2", 60)
    result = scheduler.cycle(60)
    assert result.searches == 1 and not result.bound


def test_a_change_other_than_a_release_forgets_every_failure() -> None:
    scheduler = loaded()
    scheduler.set_health([0], Health.DRAINING, 60)
    assert scheduler.cycle(60).searches == 1


def test_a_release_after_another_change_forgets_every_failure() -> None:
    scheduler = loaded()
    scheduler.set_health([1], Health.DRAINING, 60)
    scheduler.finish("on2", 60)
    assert scheduler.cycle(60).searches == 1


@pytest.mark.parametrize("changed_before", [False, True])
def test_freed_capacity_knows_the_released_nodes_only_while_nothing_else_changed(
    changed_before: bool,
) -> None:
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))
    state.allocate("a", Allocation.of([1], [[0, 1]]))
    state.allocate("b", Allocation.of([3], [[0]]))
    freed = FreedCapacity(state)
    if changed_before:
        state.allocate("c", Allocation.of([2], [[0]]))
    for owner in ("b", "a"):
        nodes = state.allocations[owner].nodes
        freed.before_release()
        state.release(owner)
        freed.released(nodes)
    seen = freed.since_settled()
    if changed_before:
        assert seen is None
    else:
        assert seen is not None and seen.tolist() == [1, 3]
    freed.settle()
    settled = freed.since_settled()
    assert settled is not None and settled.size == 0
    assert np.array_equal(settled, np.zeros(0, dtype=np.int64))
