"""Jobs of several pod sets in the scheduler: placed all or nothing, every set charged and
released, preemption for the whole job or refused with its reason, reservations."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from job_helpers import four_gpu_gang

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation, ClusterState
from toposched.jobs.spec import JobSpec
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Bind, Evict, Reserve
from toposched.scheduler.jobs import JobState, ReasonCode
from toposched.scheduler.refusals import RefusalCode

# 1 zone x 2 blocks x 2 racks x 2 nodes x 4 GPUs = 32 GPUs; block z0-b0 is nodes 0-3.
BLOCK = 16
HOUR = 3600.0


def cluster() -> ClusterState:
    return ClusterState(nvl72_cluster(1, 2, 2, nodes_per_rack=2))


def team() -> BudgetTree:
    return BudgetTree.from_dict({"accounts": {"team": 100}})


def trainer_and_rollout(
    trainer: int, rollout: int, rollout_topology: dict[str, Any] | None = None, **fields: Any
) -> JobSpec:
    """Trainer and rollout sets of 4-GPU pods held in one block."""
    rollout_set: dict[str, Any] = {
        "name": "rollout",
        "pods": rollout,
        "resources_per_pod": {"gpus": 4},
    }
    if rollout_topology is not None:
        rollout_set["topology"] = rollout_topology
    data: dict[str, Any] = {
        "name": "rl",
        "account": "team",
        "min_runtime": "1h",
        "topology": {"required": "block"},
        "pod_sets": [
            {"name": "trainer", "pods": trainer, "resources_per_pod": {"gpus": 4}},
            rollout_set,
        ],
    }
    return JobSpec.from_dict(data | fields)


def blocks_held(scheduler: Scheduler, job_id: str) -> set[str]:
    topology = scheduler.state.topology
    nodes = scheduler.state.allocations[job_id].nodes
    return {topology.domain_name(2, int(d)) for d in topology.node_domain[2][nodes]}


def test_every_set_starts_in_one_block_and_is_charged_then_released() -> None:
    state = cluster()
    scheduler = Scheduler(state, team())
    scheduler.submit(four_gpu_gang("small", "team", 1), now=0)
    scheduler.cycle(0)
    scheduler.submit(trainer_and_rollout(2, 2, {"required": "rack"}), now=0)
    result = scheduler.cycle(0)
    (bind,) = [d for d in result.decisions if isinstance(d, Bind)]
    assert bind.job_id == "rl"
    assert bind.allocation.pods == 4
    # Block z0-b0 has 12 free GPUs beside "small": the 16 GPUs of both sets go to z0-b1.
    assert blocks_held(scheduler, "rl") == {"z0-b1"}
    rollout_nodes = bind.allocation.nodes[2:]  # ranks: the trainer's, then the rollout's
    racks = scheduler.state.topology.node_domain[3][rollout_nodes]
    assert np.unique(racks).size == 1
    assert scheduler.running_gpus("team") == 4 + 16
    assert state.total_free_gpus == 32 - 20
    scheduler.finish("rl", now=60)
    assert state.total_free_gpus == 32 - 4
    assert scheduler.running_gpus("team") == 4
    assert "rl" not in state.allocations


def test_a_job_whose_sets_fit_alone_but_not_together_waits_and_holds_nothing() -> None:
    state = cluster()
    scheduler = Scheduler(state, team(), reserve_min_gpus=10**6)
    scheduler.submit(four_gpu_gang("in-b0", "team", 2, topology={"required": "block"}), now=0)
    scheduler.cycle(0)
    scheduler.submit(four_gpu_gang("in-b1", "team", 3, topology={"required": "block"}), now=0)
    scheduler.cycle(0)
    # Free GPUs: 8 in z0-b0, 4 in z0-b1. The trainer (8 GPUs) fits z0-b0 and the rollout
    # (4 GPUs) either block, but no block holds the 12 GPUs of both.
    before = state.snapshot()
    job = scheduler.submit(trainer_and_rollout(2, 1), now=0)
    result = scheduler.cycle(0)
    assert not [d for d in result.decisions if isinstance(d, Bind)]
    assert job.state is JobState.PENDING
    assert "the roles share one block" in job.reason
    for name, array in before.items():
        assert np.array_equal(array, state.snapshot()[name]), name


def test_sets_of_the_jobs_shape_only_preempt_for_the_whole_job() -> None:
    state = cluster()
    scheduler = Scheduler(state, team())
    for name in ("low-a", "low-b"):
        scheduler.submit(
            four_gpu_gang(name, "team", 4, topology={"required": "block"}, priority=-1), now=0
        )
    scheduler.cycle(0)
    assert state.total_free_gpus == 0
    scheduler.submit(trainer_and_rollout(3, 1, priority=5), now=0)
    result = scheduler.cycle(2 * 3600)  # past the victims' min runtime
    evicted = [d.job_id for d in result.decisions if isinstance(d, Evict)]
    assert len(evicted) == 1  # one block frees the 16 GPUs both sets need
    scheduler.evicted(evicted[0], now=2 * 3600)
    result = scheduler.cycle(2 * 3600 + 1)
    assert [d.job_id for d in result.decisions if isinstance(d, Bind)] == ["rl"]
    assert state.allocations["rl"].pods == 4


def test_a_victim_of_several_sets_frees_every_set() -> None:
    state = cluster()
    scheduler = Scheduler(state, team())
    scheduler.submit(trainer_and_rollout(2, 2, priority=-1), now=0)
    scheduler.submit(four_gpu_gang("filler", "team", 4, priority=-1), now=0)
    scheduler.cycle(0)
    assert state.total_free_gpus == 0
    scheduler.submit(
        four_gpu_gang("urgent", "team", 4, topology={"required": "block"}, priority=5), now=0
    )
    result = scheduler.cycle(2 * 3600)
    evicted = [d.job_id for d in result.decisions if isinstance(d, Evict)]
    assert evicted in (["rl"], ["filler"])
    scheduler.evicted(evicted[0], now=2 * 3600)
    assert state.total_free_gpus == BLOCK
    assert evicted[0] not in state.allocations
    assert scheduler.running_gpus("team") == BLOCK


def test_sets_with_topology_of_their_own_preempt_when_the_room_holds_every_set() -> None:
    state = cluster()
    scheduler = Scheduler(state, team(), reserve_min_gpus=10**6)
    for name in ("low-a", "low-b"):
        scheduler.submit(
            four_gpu_gang(name, "team", 4, topology={"required": "block"}, priority=-1), now=0
        )
    scheduler.cycle(0)
    scheduler.submit(trainer_and_rollout(2, 2, {"required": "rack"}, priority=5), now=0)
    result = scheduler.cycle(2 * HOUR)
    evicted = [d.job_id for d in result.decisions if isinstance(d, Evict)]
    assert len(evicted) == 1
    victim_nodes = set(state.allocations[evicted[0]].nodes.tolist())
    scheduler.evicted(evicted[0], now=2 * HOUR)
    scheduler.cycle(2 * HOUR + 1)
    assert set(state.allocations["rl"].nodes.tolist()) == victim_nodes
    rollout_racks = state.topology.node_domain[3][state.allocations["rl"].nodes[2:]]
    assert np.unique(rollout_racks).size == 1


def test_sets_the_victims_room_cannot_hold_refuse_preemption_and_say_why() -> None:
    # Every node runs two one-pod jobs of 2 GPUs; four of them are past their protection:
    # both on z0-b0-r0-n0, one on z0-b0-r0-n1, one on z0-b0-r1-n0. Evicting them makes room
    # for the job's 4 pods in block z0-b0, but its sets each need their 2 pods on one node,
    # and only z0-b0-r0-n0 would hold two.
    state = cluster()
    scheduler = Scheduler(state, team(), reserve_min_gpus=10**6)
    past_protection = {(0, 0), (0, 1), (1, 0), (2, 0)}
    for node in range(state.topology.n_nodes):
        for half in (0, 1):
            start = 0.0 if (node, half) in past_protection else 2.5 * HOUR
            spec = four_gpu_gang(
                f"low-{node}-{half}", "team", 1, priority=-1, resources_per_pod={"gpus": 2}
            )
            gpus = [[2 * half, 2 * half + 1]]
            scheduler.adopt(spec, Allocation.of([node], gpus), start_time=start, now=2.5 * HOUR)
    pair = {"pods": 2, "resources_per_pod": {"gpus": 2}, "topology": {"required": "node"}}
    spec = JobSpec.from_dict(
        {
            "name": "pairs",
            "account": "team",
            "priority": 5,
            "topology": {"required": "block"},
            "pod_sets": [{"name": "a", **pair}, {"name": "b", **pair}],
        }
    )
    job = scheduler.submit(spec, now=3 * HOUR)
    result = scheduler.cycle(3 * HOUR)
    assert not [d for d in result.decisions if isinstance(d, Evict)]
    assert job.reason_code is ReasonCode.NO_PREEMPTION
    assert job.refusal is not None and job.refusal.code is RefusalCode.TOPOLOGY
    assert (
        "no preemption: the room its best victims make does not hold every pod set "
        "(role b: required node" in job.reason
    )
    assert len(state.allocations) == 16


def test_a_large_job_of_several_sets_gets_a_reservation() -> None:
    state = cluster()
    scheduler = Scheduler(state, team(), reserve_min_gpus=8)
    scheduler.submit(four_gpu_gang("long", "team", 6, expected_runtime="2h"), now=0)
    scheduler.cycle(0)
    job = scheduler.submit(trainer_and_rollout(2, 2, {"required": "rack"}), now=0)
    result = scheduler.cycle(0)
    reserves = [d for d in result.decisions if isinstance(d, Reserve)]
    assert [d.job_id for d in reserves] == ["rl"]
    assert job.reason_code is ReasonCode.RESERVED
    scheduler.finish("long", now=3600)
    scheduler.cycle(3600)
    assert job.state is JobState.RUNNING
    assert state.allocations["rl"].pods == 4


def test_a_set_naming_an_unknown_level_is_refused_at_submit() -> None:
    scheduler = Scheduler(cluster(), team())
    with pytest.raises(InputError) as caught:
        scheduler.submit(trainer_and_rollout(2, 2, {"required": "spine"}), now=0)
    assert (caught.value.field, caught.value.value) == ("pod_sets[1].topology.required", "spine")
    assert "unknown level" in caught.value.rule
