"""Tests of PreemptibleIndex: who holds each GPU, per-rack aggregates, what-if pieces."""

from __future__ import annotations

import numpy as np

from toposched.cluster.loaders import topology_from_dict
from toposched.cluster.state import Allocation, ClusterState
from toposched.cluster.statement import Statement, trial
from toposched.scheduler import preemptible_kernels
from toposched.scheduler.domain_nodes import domain_nodes, uniform_size
from toposched.scheduler.preemptible import Holdings, PreemptibleIndex
from toposched.scheduler.victim_release import whole_gpu_parts

# Two racks of two nodes, 4 GPUs, 16 cores and 64 GiB each: n0, n1 in r0; n2, n3 in r1.
CLUSTER = {
    "levels": ["rack"],
    "nodes": [
        {"name": f"n{i}", "rack": f"r{i // 2}", "gpus": 4, "gpu_model": "X", "cpu": 16}
        | {"memory": "64Gi"}
        for i in range(4)
    ],
}


def setup() -> tuple[ClusterState, PreemptibleIndex]:
    state = ClusterState(topology_from_dict(CLUSTER))
    index = PreemptibleIndex(state)
    jobs = {
        # `a`: 2 pods of 2 GPUs (1 core, 512 MiB each) on n0 and n2, unallocated, since 100 s.
        "a": (Allocation.of([0, 2], [[0, 1], [2, 3]], cpu_milli=1000, memory_mib=512), 100, 0),
        # `b`: 1 pod of 4 GPUs (2 cores) on n1, allocated, protected until 5000 s, since 0 s.
        "b": (Allocation.of([1], [[0, 1, 2, 3]], cpu_milli=2000), 0, 5000),
        # `c`: a shared quarter of GPU 0 of n3, unallocated, since 300 s.
        "c": (Allocation.of([3], [[0]], gpu_milli=250), 300, 0),
    }
    for job_id, (allocation, since, until) in jobs.items():
        state.allocate(job_id, allocation)
        gpus = allocation.gpus.size * allocation.gpu_milli / 1000
        index.add(job_id, allocation, gpus, since, until, until == 0, "team", 0)
    return state, index


def test_owners_and_aggregates_follow_protection_and_eviction() -> None:
    state, index = setup()
    a, b = index.slot_of["a"], index.slot_of["b"]
    assert index.gpu_owner[:, :4].tolist() == [
        [a, a, -1, -1],
        [b, b, b, b],
        [-1, -1, a, a],
        [-1, -1, -1, -1],
    ]
    index.refresh(1000)
    # r0: a's pod on n0 (2 GPUs; b is protected); r1: a's pod on n2 and c's shared pod.
    assert index.leaf_freeable.tolist() == [2, 3]
    assert index.node_freeable[:4].tolist() == [2, 0, 2, 1]
    # All of it unallocated work (a and c).
    assert index.leaf_unallocated_freeable.tolist() == [2, 3]
    assert index.node_unallocated_freeable.tolist() == [2, 0, 2, 1]
    # Lost at 1000 s: a = 4 x 900 in each rack; c = 0.25 x 700 in r1.
    bound = index.leaf_cost_bound(np.array([0, 1]), 1000)
    assert bound.tolist() == [3600.0, 3600.0 + 175.0]
    index.refresh(5000)
    assert index.leaf_freeable.tolist() == [6, 3]
    assert index.node_freeable[:4].tolist() == [2, 4, 2, 1]
    # b, now past its protection, is allocated work.
    assert index.leaf_unallocated_freeable.tolist() == [2, 3]
    index.mark_evicting("a")
    assert index.leaf_freeable.tolist() == [4, 1]
    assert index.node_freeable[:4].tolist() == [0, 4, 0, 1]
    assert index.leaf_unallocated_freeable.tolist() == [0, 1]
    assert index.node_unallocated_freeable.tolist() == [0, 0, 0, 1]
    index.remove("b")
    assert index.leaf_freeable.tolist() == [0, 1]
    assert (index.gpu_owner[1] == -1).all()


def test_a_job_weighs_once_on_each_rack_it_touches() -> None:
    state = ClusterState(topology_from_dict(CLUSTER))
    index = PreemptibleIndex(state)
    # 3 pods of 1 GPU, unallocated since 100 s: two in r0 (listed out of order), one in r1.
    allocation = Allocation.of([1, 0, 2], [[0], [0], [0]])
    state.allocate("d", allocation)
    index.add("d", allocation, 3.0, 100, 0, True, "team", 0)
    assert index.leaf_freeable.tolist() == [2, 1]
    assert index.node_freeable.tolist() == [1, 1, 1, 0]
    # Evicting either rack's pods stops the whole job: 3 GPUs x 900 s lost, on each rack.
    assert index.leaf_cost_bound(np.array([0, 1]), 1000).tolist() == [2700.0, 2700.0]
    index.remove("d")
    assert index.leaf_freeable.tolist() == [0, 0]
    assert index.leaf_cost_bound(np.array([0, 1]), 1000).tolist() == [0.0, 0.0]


def test_whole_gpu_parts_free_what_their_jobs_hold() -> None:
    state, index = setup()
    nodes = np.arange(4)
    held = index.gpu_owner[nodes] >= 0
    statement = Statement(state)
    statement.release_many(["a", "b"])
    released = state.snapshot()
    statement.discard()
    before = state.snapshot()

    with trial(state) as what_if:
        what_if.free_parts(whole_gpu_parts(index, nodes, held))
        inside = state.snapshot()

    for name, array in released.items():
        assert np.array_equal(inside[name], array), name
    for name, array in before.items():
        assert np.array_equal(state.snapshot()[name], array), name


def test_marking_many_victims_at_once_equals_one_by_one() -> None:
    _, one_by_one = setup()
    _, at_once = setup()
    for index in (one_by_one, at_once):
        index.refresh(6000)
    for job_id in ("a", "c"):
        one_by_one.mark_evicting(job_id)
    at_once.mark_evicting_many(["a", "c"])
    assert at_once.leaf_freeable.tolist() == one_by_one.leaf_freeable.tolist() == [4, 0]
    assert at_once.leaf_unallocated_freeable.tolist() == [0, 0]
    assert one_by_one.leaf_unallocated_freeable.tolist() == [0, 0]
    assert at_once.node_unallocated_freeable.tolist() == [0, 0, 0, 0]
    assert np.allclose(at_once.leaf_weight, one_by_one.leaf_weight)
    assert np.allclose(at_once.leaf_weighted_since, one_by_one.leaf_weighted_since)
    assert at_once.evicting.tolist() == one_by_one.evicting.tolist()


def test_holders_on_name_gpu_shared_and_gpuless_pods() -> None:
    state, index = setup()
    # `d`: a CPU-only pod on n3, beside c's shared GPU.
    cpu_only = Allocation.of([3], np.zeros((1, 0), dtype=np.int64), cpu_milli=2000)
    state.allocate("d", cpu_only)
    index.add("d", cpu_only, 0.0, 0, 0, True, "team", 0)
    slot = index.slot_of
    assert index.holders_on(np.array([3])).tolist() == sorted([slot["c"], slot["d"]])
    assert index.slots_on(np.array([3])).tolist() == [slot["c"]]  # GPU holders only
    assert index.holders_on(np.array([0, 1])).tolist() == sorted([slot["a"], slot["b"]])
    index.remove("d")
    index.remove("c")
    assert index.holders_on(np.array([3])).tolist() == []
    assert index.gpuless_on_node == {} and index.shared_on_node == {}


def test_domain_nodes_lists_each_domain_in_turn_with_or_without_a_uniform_size() -> None:
    alike = np.array([0, 3, 6, 9, 12])  # four domains of three nodes
    picked = np.array([2, 0, 3])
    expected = [6, 7, 8, 0, 1, 2, 9, 10, 11]
    assert uniform_size(alike) == 3
    assert domain_nodes(alike, picked).tolist() == expected
    assert domain_nodes(alike, picked, uniform_size(alike)).tolist() == expected
    uneven = np.array([0, 2, 5, 6])
    assert uniform_size(uneven) == 0
    assert domain_nodes(uneven, np.array([1, 2, 0])).tolist() == [2, 3, 4, 5, 0, 1]


AGGREGATES = (
    "gpu_owner",
    "shared_in_leaf",
    "leaf_freeable",
    "node_freeable",
    "leaf_unallocated_freeable",
    "node_unallocated_freeable",
    "leaf_weight",
    "leaf_weighted_since",
    "unprotected_in_pair",
    "protected_until",
    "counted",
)


Holding = tuple[str, Allocation, float, float, float, bool, str, int]
"""`PreemptibleIndex.add`'s arguments."""


def holdings() -> list[Holding]:
    """Whole-GPU pods (one and two per job), shared and CPU-only ones, allocated jobs ending
    their protection at different times, unallocated ones, two accounts and priorities."""
    pieces = [
        Allocation.of([0], [[0]]),
        Allocation.of([0, 2], [[1, 2], [0, 1]]),
        Allocation.of([1], [[0, 1, 2, 3]]),
        Allocation.of([3], [[0]], gpu_milli=250),
        Allocation.of([3], np.zeros((1, 0), dtype=np.int64), cpu_milli=2000),
        Allocation.of([2, 3], [[2], [1]], cpu_milli=500, memory_mib=128),
    ]
    return [
        (
            f"j{index}",
            allocation,
            allocation.gpus.size * allocation.gpu_milli / 1000,
            10.0 * index + 0.1,  # since
            1000.0 * (index % 3) + index,  # protected until
            index % 3 == 0,  # unallocated
            f"team-{index % 2}",
            index % 4,  # priority
        )
        for index, allocation in enumerate(pieces)
    ]


def test_adding_many_at_once_equals_adding_one_by_one() -> None:
    state = ClusterState(topology_from_dict(CLUSTER))
    one_by_one, at_once = PreemptibleIndex(state), PreemptibleIndex(state)
    for index in (one_by_one, at_once):
        # A job added and removed first: its slot is taken again.
        index.add("gone", Allocation.of([1], [[0]]), 1.0, 0.0, 0.0, True, "team-1", 0)
        index.remove("gone")
    for holding in holdings():
        one_by_one.add(*holding)
    at_once.add_many(Holdings(*(list(column) for column in zip(*holdings(), strict=True))))
    assert at_once.slot_of == one_by_one.slot_of
    assert at_once.ids.tolist() == one_by_one.ids.tolist()
    assert (at_once.accounts, at_once.pairs) == (one_by_one.accounts, one_by_one.pairs)
    assert at_once.shared_on_node == one_by_one.shared_on_node == {3: {at_once.slot_of["j3"]}}
    assert at_once.gpuless_on_node == one_by_one.gpuless_on_node
    # Protections end one at a time in one index, all at once in the other.
    for time in sorted(holding[4] for holding in holdings()):
        one_by_one.refresh(time)
    at_once.refresh(3000.0)
    for name in AGGREGATES:
        assert np.array_equal(getattr(at_once, name), getattr(one_by_one, name)), name
    assert at_once.counted[: len(holdings())].all()
    at_once.mark_evicting_many(["j1", "j3"])
    for job_id in ("j1", "j3"):
        one_by_one.mark_evicting(job_id)
    for name in AGGREGATES:
        assert np.array_equal(getattr(at_once, name), getattr(one_by_one, name)), name


def test_a_checkpoint_moves_the_work_at_stake_as_counting_the_job_out_and_in() -> None:
    """Bit for bit: a checkpoint makes the float sums that counting its job out of the index,
    then in again with its new since, would make (`count_job` twice)."""
    state = ClusterState(topology_from_dict(CLUSTER))
    index = PreemptibleIndex(state)
    # Sums that round: thirds of GPU-seconds, on both racks, the job listed out of rack order.
    other = Allocation.of([1], [[0, 1]])
    job = Allocation.of([2, 0, 3], [[0], [2], [1]])
    for name, allocation, since in (("other", other, 1.0 / 3.0), ("job", job, 0.1)):
        state.allocate(name, allocation)
        index.add(name, allocation, float(allocation.gpus.size), since, 0.0, True, "team", 0)
    weight = index.leaf_weight.copy()
    weighted_since = index.leaf_weighted_since.copy()
    freeable = index.leaf_freeable.copy(), index.node_freeable.copy()
    for before, after in ((0.1, 7.0 / 3.0), (7.0 / 3.0, 1e6 / 7.0)):
        index.checkpoint("job", after)
        for sign, since in ((-1, before), (1, after)):
            preemptible_kernels.count_job(
                job.nodes,
                index.leaf_of_node,
                0,
                False,
                sign * 3.0,
                sign * 3.0 * since,
                np.zeros_like(index.leaf_freeable),
                np.zeros_like(index.node_freeable),
                np.zeros_like(index.leaf_freeable),
                np.zeros_like(index.node_freeable),
                weight,
                weighted_since,
                np.zeros(index.leaf_weight.size, dtype=bool),
            )
        assert index.leaf_weight.tobytes() == weight.tobytes()
        assert index.leaf_weighted_since.tobytes() == weighted_since.tobytes()
        assert index.since[index.slot_of["job"]] == after
    assert np.array_equal(index.leaf_freeable, freeable[0])
    assert np.array_equal(index.node_freeable, freeable[1])
    # A job not counted yet (protected) only takes its new since.
    protected = Allocation.of([1], [[3]])
    state.allocate("protected", protected)
    index.add("protected", protected, 1.0, 0.0, 500.0, False, "team", 0)
    index.checkpoint("protected", 50.0)
    assert index.leaf_weighted_since.tobytes() == weighted_since.tobytes()
    index.refresh(500.0)
    assert index.leaf_weighted_since[0] == weighted_since[0] + 50.0


def test_a_job_taking_a_slot_again_moves_its_own_leaves_at_a_checkpoint() -> None:
    """The innermost domains a checkpoint kept for a job go when it stops: the job that takes
    its slot next, on another rack, moves its own rack's sums."""
    state = ClusterState(topology_from_dict(CLUSTER))
    index = PreemptibleIndex(state)
    first = Allocation.of([0], [[0]])  # rack r0
    state.allocate("first", first)
    index.add("first", first, 1.0, 0.0, 0.0, True, "team", 0)
    index.checkpoint("first", 10.0)
    assert index.leaf_weighted_since.tolist() == [10.0, 0.0]
    slot = index.slot_of["first"]
    index.remove("first")
    state.release("first")
    second = Allocation.of([3], [[0]])  # rack r1
    state.allocate("second", second)
    index.add("second", second, 1.0, 0.0, 0.0, True, "team", 0)
    assert index.slot_of["second"] == slot
    index.checkpoint("second", 20.0)
    index.checkpoint("second", 30.0)
    assert index.leaf_weight.tolist() == [0.0, 1.0]
    assert index.leaf_weighted_since.tolist() == [0.0, 30.0]


def test_pods_of_reads_each_job_s_nodes_through_starts_stops_and_slots_taken_again() -> None:
    """Against the jobs' allocations read one by one, while jobs start and stop in random
    order (freed slots taken again, the copied nodes' array dropping stopped jobs' and
    growing), asked in random order, some slots twice."""
    state = ClusterState(topology_from_dict(CLUSTER))
    index = PreemptibleIndex(state)
    rng = np.random.default_rng(7)
    running: dict[str, Allocation] = {}
    for step in range(3000):
        if running and rng.random() < 0.45:
            job_id = str(rng.choice(sorted(running)))
            index.remove(job_id)
            del running[job_id]
        else:
            nodes = rng.integers(0, 4, int(rng.integers(1, 6)))
            allocation = Allocation.of(nodes.tolist(), [[]] * nodes.size)
            job_id = f"j{step}"
            index.add(job_id, allocation, 0.0, 0.0, 0.0, True, "team", 0)
            running[job_id] = allocation
        if step % 7 == 0 and running:
            asked = rng.choice(sorted(running), int(rng.integers(1, len(running) + 1)))
            slots = np.array([index.slot_of[str(job_id)] for job_id in asked], dtype=np.int64)
            starts, nodes = index.pods_of(slots)
            expected = [running[str(job_id)].nodes.tolist() for job_id in asked]
            assert np.diff(starts).tolist() == [len(pods) for pods in expected]
            assert nodes.tolist() == [node for pods in expected for node in pods]
    assert index.pods_of(np.zeros(0, dtype=np.int64))[0].tolist() == [0]


def test_many_protections_ending_at_once_are_counted_as_one_at_a_time() -> None:
    """Hundreds of protections end by one `refresh` (as after a restart): the jobs counted,
    in the order their protections end, are those a refresh at each end in turn counts, bit
    for bit; jobs gone, in slots taken again, or being evicted are left out alike."""
    racks = {
        "levels": ["rack"],
        "nodes": [
            {"name": f"n{i}", "rack": f"r{i // 8}", "gpus": 4, "gpu_model": "X", "cpu": 16}
            for i in range(64)
        ],
    }
    state = ClusterState(topology_from_dict(racks))
    rng = np.random.default_rng(3)
    ends = np.round(rng.uniform(0.0, 100.0, 250), 0).tolist()  # ties: the slot decides
    since = rng.uniform(-500.0, 0.0, 250).tolist()  # float sums: the order shows
    at_once, in_turn = PreemptibleIndex(state), PreemptibleIndex(state)
    for index in (at_once, in_turn):
        for job in range(250):
            allocation = Allocation.of([job // 4], [[job % 4]])
            index.add(f"j{job}", allocation, 1.0, since[job], ends[job], False, "t", 0)
        for job in range(0, 250, 7):
            index.remove(f"j{job}")
        index.add("again", Allocation.of([0], [[0]]), 1.0, -3.5, 200.0, False, "t", 0)
        index.mark_evicting("j3")
    for time in sorted(set(ends)):
        in_turn.refresh(time)
    at_once.refresh(100.0)
    assert int(at_once.counted.sum()) == 250 - len(range(0, 250, 7)) - 1
    for name in AGGREGATES:
        assert np.array_equal(getattr(at_once, name), getattr(in_turn, name)), name
    assert not at_once.counted[at_once.slot_of["again"]]
    at_once.refresh(200.0)
    assert at_once.counted[at_once.slot_of["again"]]
