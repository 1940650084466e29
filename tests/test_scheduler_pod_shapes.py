"""Jobs whose pod sets ask different resources per pod (a CPU launcher and GPU workers; 4-GPU
trainers and 2-GPU rollout workers) in the scheduler: held as one allocation of each set's
pods, all or nothing, charged for every set, released and evicted whole, and preempting for
the whole job."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from job_helpers import four_gpu_gang
from test_scheduler_pod_sets import cluster, team

from toposched.cluster.batch_allocate import allocate_many
from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation, ClusterState
from toposched.cluster.statement import Statement
from toposched.jobs.spec import JobSpec
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Bind, Evict, Reserve
from toposched.scheduler.jobs import JobState, job_sets

# 1 zone x 2 blocks x 2 racks x 2 nodes x 4 GPUs = 32 GPUs, 144 cores a node; block z0-b0 is
# nodes 0-3, z0-b1 nodes 4-7.
HOUR = 3600.0
CORES = 144_000


def launcher_and_workers(workers: int, name: str = "launch", **fields: Any) -> JobSpec:
    """A CPU-only launcher (8 cores) and 4-GPU workers, all in one block."""
    data: dict[str, Any] = {
        "name": name,
        "account": "team",
        "min_runtime": "1h",
        "topology": {"required": "block"},
        "pod_sets": [
            {"name": "launcher", "pods": 1, "resources_per_pod": {"cpu": 8}},
            {"name": "workers", "pods": workers, "resources_per_pod": {"gpus": 4}},
        ],
    }
    return JobSpec.from_dict(data | fields)


def trainer_and_rollout(trainers: int, rollouts: int, **fields: Any) -> JobSpec:
    """Trainers of 4 GPUs (one node each) and rollout workers of 2 GPUs, in one block."""
    data: dict[str, Any] = {
        "name": "rl",
        "account": "team",
        "min_runtime": "1h",
        "topology": {"required": "block"},
        "pod_sets": [
            {"name": "trainer", "pods": trainers, "resources_per_pod": {"gpus": 4}},
            {"name": "rollout", "pods": rollouts, "resources_per_pod": {"gpus": 2}},
        ],
    }
    return JobSpec.from_dict(data | fields)


def blocks_of(state: ClusterState, nodes: np.ndarray) -> set[int]:
    return set(state.topology.node_domain[2][nodes].tolist())


def test_a_launcher_and_workers_start_together_in_one_block_and_leave_together() -> None:
    state = cluster()
    empty = state.snapshot()
    scheduler = Scheduler(state, team())
    job = scheduler.submit(launcher_and_workers(3), now=0)
    result = scheduler.cycle(0)
    (bind,) = [d for d in result.decisions if isinstance(d, Bind)]
    assert job.state is JobState.RUNNING
    held = state.allocations["launch"]
    assert bind.allocation is held
    launcher, workers = held.sets
    assert (launcher.pods, launcher.gpus.shape[1], launcher.cpu_milli) == (1, 0, 8000)
    assert (workers.pods, workers.gpus.shape[1]) == (3, 4)
    assert held.pods == 4 and held.gpu_milli_total == 12_000
    assert len(blocks_of(state, held.nodes)) == 1
    # The launcher's node gives 8 cores; the workers' GPUs are taken.
    assert int(state.free_cpu_milli[launcher.nodes[0]]) == CORES - 8000
    assert state.total_free_gpus == 32 - 12
    assert job.gpus == 12.0 and scheduler.running_gpus("team") == 12.0
    scheduler.finish("launch", now=60)
    assert scheduler.running_gpus("team") == 0
    for name, array in state.snapshot().items():
        assert np.array_equal(array, empty[name]), name


def test_trainers_and_rollout_workers_share_nodes_where_they_fit() -> None:
    state = cluster()
    scheduler = Scheduler(state, team())
    scheduler.submit(four_gpu_gang("filler", "team", 3, topology={"required": "block"}), now=0)
    scheduler.cycle(0)
    # One block has a free node (4 GPUs); the other is empty. Two trainers and two rollout
    # workers need 12 GPUs in one block: only the empty block holds them.
    scheduler.submit(trainer_and_rollout(2, 2), now=0)
    scheduler.cycle(0)
    held = state.allocations["rl"]
    trainer, rollout = held.sets
    assert blocks_of(state, held.nodes) == blocks_of(state, state.allocations["filler"].nodes) ^ {
        0,
        1,
    }
    # The rollout's two pods of 2 GPUs fill one node between them.
    assert np.unique(rollout.nodes).size == 1
    assert not set(trainer.nodes.tolist()) & set(rollout.nodes.tolist())
    assert scheduler.running_gpus("team") == 12 + 12


def test_a_job_whose_sets_do_not_fit_together_holds_nothing() -> None:
    state = cluster()
    scheduler = Scheduler(state, team(), reserve_min_gpus=10**6)
    scheduler.submit(four_gpu_gang("a", "team", 3, topology={"required": "block"}), now=0)
    scheduler.submit(four_gpu_gang("b", "team", 3, topology={"required": "block"}), now=0)
    scheduler.cycle(0)
    before = state.snapshot()
    # Each block has one free node: the trainer fits either, and so do the rollout workers,
    # but not both in one block.
    job = scheduler.submit(trainer_and_rollout(1, 1), now=0)
    result = scheduler.cycle(0)
    assert not [d for d in result.decisions if isinstance(d, Bind)]
    assert job.state is JobState.PENDING and "rl" not in state.allocations
    assert "the roles share one block" in job.reason
    for name, array in before.items():
        assert np.array_equal(array, state.snapshot()[name]), name


def test_a_victim_of_several_shapes_frees_every_set() -> None:
    state = cluster()
    scheduler = Scheduler(state, team())
    scheduler.submit(launcher_and_workers(4, priority=-1), now=0)
    scheduler.cycle(0)
    scheduler.submit(
        four_gpu_gang("filler", "team", 4, priority=-1, topology={"required": "block"}), now=0
    )
    scheduler.cycle(0)
    assert state.total_free_gpus == 0
    launcher_node = int(state.allocations["launch"].sets[0].nodes[0])
    scheduler.submit(
        four_gpu_gang("urgent", "team", 4, priority=5, topology={"required": "block"}), now=0
    )
    result = scheduler.cycle(2 * HOUR)  # past the victims' min runtime
    evicted = [d.job_id for d in result.decisions if isinstance(d, Evict)]
    assert len(evicted) == 1
    scheduler.evicted(evicted[0], now=2 * HOUR)
    assert state.total_free_gpus == 16 and evicted[0] not in state.allocations
    if evicted == ["launch"]:
        assert int(state.free_cpu_milli[launcher_node]) == CORES
    scheduler.cycle(2 * HOUR + 1)
    assert state.allocations["urgent"].pods == 4
    assert scheduler.running_gpus("team") == 32


def test_a_job_of_several_shapes_preempts_for_every_set() -> None:
    state = cluster()
    scheduler = Scheduler(state, team(), reserve_min_gpus=10**6)
    for name in ("low-a", "low-b"):
        scheduler.submit(
            four_gpu_gang(name, "team", 4, priority=-1, topology={"required": "block"}), now=0
        )
    scheduler.cycle(0)
    assert state.total_free_gpus == 0
    job = scheduler.submit(trainer_and_rollout(2, 4, priority=5), now=0)
    result = scheduler.cycle(2 * HOUR)
    evicted = [d.job_id for d in result.decisions if isinstance(d, Evict)]
    # The job's 16 GPUs are one block's: one victim.
    assert len(evicted) == 1
    victim_nodes = set(state.allocations[evicted[0]].nodes.tolist())
    scheduler.evicted(evicted[0], now=2 * HOUR)
    scheduler.cycle(2 * HOUR + 1)
    assert job.state is JobState.RUNNING
    held = state.allocations["rl"]
    assert [part.pods for part in held.sets] == [2, 4]
    assert set(held.nodes.tolist()) == victim_nodes
    assert state.total_free_gpus == 0


def test_an_allocation_of_sets_is_taken_all_or_nothing_and_undone_exactly() -> None:
    state = cluster()
    empty = state.snapshot()
    workers = Allocation.of([0, 1], [[0, 1, 2, 3], [0, 1, 2, 3]])
    launcher = Allocation.of([0], [], cpu_milli=8000)
    both = Allocation.of_sets([workers, launcher])
    statement = Statement(state)
    statement.allocate("job", both)
    assert state.total_free_gpus == 24 and int(state.free_cpu_milli[0]) == CORES - 8000
    statement.rollback()
    for name, array in state.snapshot().items():
        assert np.array_equal(array, empty[name]), name
    # A second set asking a GPU the first holds: refused, and the first given back.
    clash = Allocation.of_sets([workers, Allocation.of([1], [[3, 0]], cpu_milli=1000)])
    with pytest.raises(InputError) as caught:
        state.allocate("clash", clash)
    assert caught.value.field.startswith("allocation[clash].sets[1]")
    assert "clash" not in state.allocations
    for name, array in state.snapshot().items():
        assert np.array_equal(array, empty[name]), name


def test_many_released_at_once_free_every_set() -> None:
    state = cluster()
    empty = state.snapshot()
    launcher = Allocation.of([0], [], cpu_milli=2000)
    state.allocate("a", Allocation.of_sets([Allocation.of([0], [[0]]), launcher]))
    state.allocate(
        "b",
        Allocation.of_sets(
            [Allocation.of([1, 2], [[0, 1], [0, 1]]), Allocation.of([3], [[0]], 500)]
        ),
    )
    state.allocate("c", Allocation.of([4], [[0, 1, 2, 3]]))
    statement = Statement(state)
    statement.release_many(["a", "b", "c"])
    assert state.total_free_gpus == 32
    statement.rollback()
    # a: 1 GPU; b: 4 GPUs and half of one more; c: 4 GPUs.
    assert state.total_free_gpus == 32 - 1 - 5 - 4
    state.release_many(["a", "b", "c"])
    for name, array in state.snapshot().items():
        assert np.array_equal(array, empty[name]), name


def test_the_job_as_one_gang_asks_its_gpus_in_pods_dividing_every_set() -> None:
    topology = cluster().topology
    trainer_rollout = job_sets(trainer_and_rollout(2, 4), topology)
    assert trainer_rollout is not None and not trainer_rollout.one_shape
    job = Scheduler(cluster(), team()).submit(trainer_and_rollout(2, 4), now=0)
    # 2 x 4 + 4 x 2 = 16 GPUs: 8 pods of 2 GPUs.
    assert (job.request.pods, job.request.gpus_per_pod) == (8, 2)
    assert job.gpus == 16.0
    launcher = Scheduler(cluster(), team()).submit(launcher_and_workers(3), now=0)
    # 12 GPUs in 4-GPU pods; the launcher's 8 cores spread over them.
    assert (launcher.request.pods, launcher.request.gpus_per_pod) == (3, 4)
    assert launcher.request.cpu_milli == -(-8000 // 3)
    shared = JobSpec.from_dict(
        {
            "name": "shared",
            "account": "team",
            "pod_sets": [
                {"name": "a", "pods": 2, "resources_per_pod": {"gpus": 1, "gpu_milli": 500}},
                {"name": "b", "pods": 1, "resources_per_pod": {"gpus": 2}},
            ],
        }
    )
    fractional = Scheduler(cluster(), team()).submit(shared, now=0)
    # A set of shared GPUs: every pod asks the most any set asks.
    assert (fractional.request.pods, fractional.request.gpus_per_pod) == (3, 2)
    assert fractional.gpus == 3.0


def test_a_launcher_and_workers_preempt_for_the_whole_job() -> None:
    state = cluster()
    scheduler = Scheduler(state, team(), reserve_min_gpus=10**6)
    for name in ("low-a", "low-b"):
        scheduler.submit(
            four_gpu_gang(name, "team", 4, priority=-1, topology={"required": "block"}), now=0
        )
    scheduler.cycle(0)
    job = scheduler.submit(launcher_and_workers(4, priority=5), now=0)
    result = scheduler.cycle(2 * HOUR)
    evicted = [d.job_id for d in result.decisions if isinstance(d, Evict)]
    assert len(evicted) == 1
    scheduler.evicted(evicted[0], now=2 * HOUR)
    scheduler.cycle(2 * HOUR + 1)
    assert job.state is JobState.RUNNING
    launcher, workers = state.allocations["launch"].sets
    assert blocks_of(state, launcher.nodes) == blocks_of(state, workers.nodes)
    assert scheduler.running_gpus("team") == 32


def test_a_batch_of_allocations_with_several_shapes_is_taken_all_or_nothing() -> None:
    state = cluster()
    empty = state.snapshot()
    plain = Allocation.of([4], [[0, 1, 2, 3]])
    several = Allocation.of_sets([Allocation.of([0], [[0, 1]]), Allocation.of([0], [], 0, 4000)])
    allocate_many(state, ["plain", "several"], [plain, several])
    assert state.total_free_gpus == 32 - 6 and int(state.free_cpu_milli[0]) == CORES - 4000
    state.release_many(["plain", "several"])
    # The second set of "clash" asks a GPU "plain" holds: nothing of the batch is kept.
    clash = Allocation.of_sets([Allocation.of([1], [[0, 1]]), Allocation.of([4], [[0]], 500)])
    with pytest.raises(InputError):
        allocate_many(state, ["plain", "clash"], [plain, clash])
    assert not state.allocations
    for name, array in state.snapshot().items():
        assert np.array_equal(array, empty[name]), name


def test_a_large_job_of_several_shapes_is_reserved_and_starts_when_room_is_freed() -> None:
    state = cluster()
    scheduler = Scheduler(state, team(), reserve_min_gpus=8)
    scheduler.submit(four_gpu_gang("long", "team", 6, expected_runtime="2h"), now=0)
    scheduler.cycle(0)
    job = scheduler.submit(trainer_and_rollout(2, 4), now=0)
    result = scheduler.cycle(0)
    assert [d.job_id for d in result.decisions if isinstance(d, Reserve)] == ["rl"]
    assert job.reason.startswith("waiting for reservation")
    scheduler.finish("long", now=HOUR)
    scheduler.cycle(HOUR)
    assert job.state is JobState.RUNNING
    assert [part.pods for part in state.allocations["rl"].sets] == [2, 4]
