"""Tests of ClusterState and Statement: allocate, release, health, errors that change nothing."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from state_helpers import assert_aggregates_recomputed

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.errors import InputError
from toposched.cluster.loaders import topology_from_dict
from toposched.cluster.rows import MARKED_FROM, MARKED_SPAN, distinct_counts, marked_range
from toposched.cluster.state import (
    MILLI_PER_GPU,
    Allocation,
    Closure,
    ClusterState,
    Health,
    distinct,
    distinct_inverse,
    row_sums,
)
from toposched.cluster.statement import OperationKind, Statement, trial

# rack r0: n0 = 8 x A100, 64 cores, 256 GiB;  n1 = 4 x T4, 32 cores, 128 GiB
# rack r1: n2 = 2 x T4, 16 cores, 64 GiB;     n3 = CPU only, 8 cores, 32 GiB
# Models: A100 = 0, T4 = 1, "" = 2. Widest node 8 GPUs, so histograms have 9 bins (0..8 free).
CLUSTER: dict[str, Any] = {
    "levels": ["rack"],
    "gpu_models": {"A100": 80, "T4": 16},
    "nodes": [
        {"name": "n0", "rack": "r0", "gpus": 8, "gpu_model": "A100", "cpu": 64, "memory": "256Gi"},
        {"name": "n1", "rack": "r0", "gpus": 4, "gpu_model": "T4", "cpu": 32, "memory": "128Gi"},
        {"name": "n2", "rack": "r1", "gpus": 2, "gpu_model": "T4", "cpu": 16, "memory": "64Gi"},
        {"name": "n3", "rack": "r1", "gpus": 0, "cpu": 8, "memory": "32Gi"},
    ],
}
A100, T4, NO_GPU = 0, 1, 2
GIB = 1024


@pytest.fixture
def state() -> ClusterState:
    return ClusterState(topology_from_dict(CLUSTER))


def snapshot(state: ClusterState) -> dict[str, np.ndarray]:
    return state.snapshot()


def assert_same(before: dict[str, np.ndarray], after: dict[str, np.ndarray]) -> None:
    assert before.keys() == after.keys()
    for name in before:
        assert before[name].dtype == after[name].dtype, name
        assert before[name].shape == after[name].shape, name
        assert before[name].tobytes() == after[name].tobytes(), name


def assert_aggregates_fresh(state: ClusterState) -> None:
    """Every incremental aggregate equals the from-scratch recomputation."""
    fresh = state.compute_aggregates()
    pairs: dict[str, list[Any]] = {
        "free_hist": state.free_hist,
        "free_gpus": state.free_gpus,
        "free_milli": state.free_milli,
        "idle_nodes": state.idle_nodes,
        "cpu": state.domain_free_cpu,
        "memory": state.domain_free_memory,
    }
    for name, incremental in pairs.items():
        assert len(incremental) == len(fresh[name])
        for level, (ours, theirs) in enumerate(zip(incremental, fresh[name], strict=True)):
            assert np.array_equal(ours, theirs), f"{name}[{level}]"


def totals(state: ClusterState, level: int) -> list[tuple[int, int, int, int, int]]:
    """(free GPUs, free milli, idle nodes, free CPU milli, free memory MiB) per domain."""
    return [
        (
            int(state.free_gpus[level][d]),
            int(state.free_milli[level][d]),
            int(state.idle_nodes[level][d]),
            int(state.domain_free_cpu[level][d]),
            int(state.domain_free_memory[level][d]),
        )
        for d in range(state.topology.n_domains(level))
    ]


def test_initial_aggregates(state: ClusterState) -> None:
    # Root: 8 + 4 + 2 = 14 GPUs, 14,000 milli, 4 idle nodes,
    #       CPU 64 + 32 + 16 + 8 = 120 cores, memory 256 + 128 + 64 + 32 = 480 GiB.
    assert totals(state, 0) == [(14, 14_000, 4, 120_000, 480 * GIB)]
    # r0 = n0 + n1: 12 GPUs, 96 cores, 384 GiB; r1 = n2 + n3: 2 GPUs, 24 cores, 96 GiB.
    assert totals(state, 1) == [(12, 12_000, 2, 96_000, 384 * GIB), (2, 2_000, 2, 24_000, 96 * GIB)]
    hist = state.free_hist[1]
    assert hist.shape == (2, 3, 9)
    # r0: one A100 node with 8 free, one T4 node with 4 free; r1: a T4 node with 2, a CPU node.
    assert np.argwhere(hist).tolist() == [[0, A100, 8], [0, T4, 4], [1, T4, 2], [1, NO_GPU, 0]]
    assert state.gpu_free_milli[2].tolist() == [1000, 1000, 0, 0, 0, 0, 0, 0]
    assert state.free_whole_gpus.tolist() == [8, 4, 2, 0]
    assert state.total_free_gpus == 14
    assert_aggregates_fresh(state)


# Each case: the allocation, then per node (free whole GPUs, free milli row, CPU, memory) for the
# touched node, and the root totals afterwards.
ALLOCATIONS = [
    pytest.param(
        # Two whole A100s, 8 cores, 32 GiB on n0: 6 free GPUs, n0 no longer idle.
        Allocation.of([0], [[0, 1]], cpu_milli=8_000, memory_mib=32 * GIB),
        0,
        (6, [0, 0, 1000, 1000, 1000, 1000, 1000, 1000], 56_000, 224 * GIB),
        (12, 12_000, 3, 112_000, 448 * GIB),
        id="whole-gpus",
    ),
    pytest.param(
        # 300 milli of n1's GPU 2: that GPU is no longer whole, 13 whole GPUs, 13,700 milli.
        Allocation.of([1], [[2]], gpu_milli=300),
        1,
        (3, [1000, 1000, 700, 1000, 0, 0, 0, 0], 32_000, 128 * GIB),
        (13, 13_700, 3, 120_000, 480 * GIB),
        id="fraction",
    ),
    pytest.param(
        # Two pods of 400 milli on n2's GPU 0 (one gang sharing a GPU): 200 milli left.
        Allocation.of([2, 2], [[0], [0]], gpu_milli=400, cpu_milli=1_000),
        2,
        (1, [200, 1000, 0, 0, 0, 0, 0, 0], 14_000, 64 * GIB),
        (13, 13_200, 3, 118_000, 480 * GIB),
        id="fraction-shared-by-two-pods",
    ),
    pytest.param(
        # A whole 1,000-milli "fraction" is a whole GPU.
        Allocation.of([2], [[1]], gpu_milli=1000),
        2,
        (1, [1000, 0, 0, 0, 0, 0, 0, 0], 16_000, 64 * GIB),
        (13, 13_000, 3, 120_000, 480 * GIB),
        id="fraction-1000-is-whole",
    ),
    pytest.param(
        # CPU-only pod on n3 (no GPU columns): GPUs unchanged, n3 no longer idle.
        Allocation.of([3], np.zeros((1, 0), dtype=np.int64), cpu_milli=4_000, memory_mib=GIB),
        3,
        (0, [0, 0, 0, 0, 0, 0, 0, 0], 4_000, 31 * GIB),
        (14, 14_000, 3, 116_000, 479 * GIB),
        id="cpu-only",
    ),
    pytest.param(
        # Everything n2 has: both GPUs, all CPU and memory.
        Allocation.of([2], [[0, 1]], cpu_milli=16_000, memory_mib=64 * GIB),
        2,
        (0, [0, 0, 0, 0, 0, 0, 0, 0], 0, 0),
        (12, 12_000, 3, 104_000, 416 * GIB),
        id="exactly-full",
    ),
    pytest.param(
        # A gang over two racks: 4 A100s on n0 and 4 T4s on n1, 2 cores each pod.
        Allocation.of([0, 1], [[0, 1, 2, 3], [0, 1, 2, 3]], cpu_milli=2_000),
        1,
        (0, [0, 0, 0, 0, 0, 0, 0, 0], 30_000, 128 * GIB),
        (6, 6_000, 2, 116_000, 480 * GIB),
        id="gang",
    ),
]


@pytest.mark.parametrize(("allocation", "node", "node_after", "root_after"), ALLOCATIONS)
def test_allocate_then_release(
    state: ClusterState,
    allocation: Allocation,
    node: int,
    node_after: tuple[int, list[int], int, int],
    root_after: tuple[int, int, int, int, int],
) -> None:
    before = snapshot(state)
    state.allocate("job", allocation)
    whole, milli, cpu, memory = node_after
    assert int(state.free_whole_gpus[node]) == whole
    assert state.gpu_free_milli[node].tolist() == milli
    assert (int(state.free_cpu_milli[node]), int(state.free_memory_mib[node])) == (cpu, memory)
    assert totals(state, 0) == [root_after]
    assert state.owners_on([node]) == ["job"]
    assert_aggregates_fresh(state)
    released = state.release("job")
    assert released is allocation
    assert state.allocations == {}
    assert_same(before, snapshot(state))


def test_fractions_fill_a_gpu_exactly(state: ClusterState) -> None:
    state.allocate("a", Allocation.of([1], [[3]], gpu_milli=600))
    state.allocate("b", Allocation.of([1], [[3]], gpu_milli=400))
    # 600 + 400 = 1000: nothing left on n1's GPU 3.
    assert int(state.gpu_free_milli[1, 3]) == 0
    assert int(state.free_whole_gpus[1]) == 3
    with pytest.raises(InputError) as caught:
        state.allocate("c", Allocation.of([1], [[3]], gpu_milli=1))
    assert caught.value.rule == "needs 1 milli-GPU, 0 free"
    state.release("a")
    # 400 milli still held by b: the GPU is not whole again.
    assert int(state.gpu_free_milli[1, 3]) == 600
    assert int(state.free_whole_gpus[1]) == 3
    state.release("b")
    assert int(state.free_whole_gpus[1]) == 4
    assert_aggregates_fresh(state)


def test_free_histogram_moves_between_bins(state: ClusterState) -> None:
    # n0 (A100, r0) goes from 8 free to 5 free: bin 8 empties, bin 5 fills, at both levels.
    state.allocate("job", Allocation.of([0], [[0, 1, 2]]))
    assert state.free_hist[1][0, A100].tolist() == [0, 0, 0, 0, 0, 1, 0, 0, 0]
    assert state.free_hist[0][0, A100].tolist() == [0, 0, 0, 0, 0, 1, 0, 0, 0]
    # 10 milli of GPU 3 takes that GPU out of the whole count: 4 whole GPUs free.
    state.allocate("frac", Allocation.of([0], [[3]], gpu_milli=10))
    assert state.free_hist[0][0, A100].tolist() == [0, 0, 0, 0, 1, 0, 0, 0, 0]
    assert_aggregates_fresh(state)


def put(owner: str, allocation: Allocation) -> Callable[[ClusterState], object]:
    return lambda s: s.allocate(owner, allocation)


def health(nodes: list[int], value: Health) -> Callable[[ClusterState], object]:
    return lambda s: s.set_health(nodes, value)


def nothing(s: ClusterState) -> None:
    return None


def allocated_then_released(s: ClusterState) -> None:
    s.allocate("job", Allocation.of([0], [[0]]))
    s.release("job")


def no_gpus(pods: int) -> np.ndarray:
    return np.zeros((pods, 0), dtype=np.int64)


# Each case: setup (already applied, valid), the failing call, then field, value and rule part.
ERRORS = [
    # --- fractions outside (0, 1000] and fractions over several GPUs.
    (nothing, put("job", Allocation.of([0], [[0]], gpu_milli=0)),
     "allocation[job].gpu_milli", 0, "must be in (0, 1000]"),
    (nothing, put("job", Allocation.of([0], [[0]], gpu_milli=-250)),
     "allocation[job].gpu_milli", -250, "must be in (0, 1000]"),
    (nothing, put("job", Allocation.of([0], [[0]], gpu_milli=1001)),
     "allocation[job].gpu_milli", 1001, "must be in (0, 1000]"),
    (nothing, put("job", Allocation.of([0], [[0, 1]], gpu_milli=500)),
     "allocation[job].gpu_milli", 500, "one GPU per pod"),
    # --- indices that do not exist.
    (nothing, put("job", Allocation.of([4], [[0]])), "allocation[job].nodes", 4, "[0, 4)"),
    (nothing, put("job", Allocation.of([0, -1], [[0], [0]])),
     "allocation[job].nodes", -1, "[0, 4)"),
    (nothing, put("job", Allocation.of([2], [[2]])),
     "allocation[job].gpus[0]", [2], "node n2 has 2 GPUs"),
    (nothing, put("job", Allocation.of([0, 3], [[0], [0]])),
     "allocation[job].gpus[1]", [0], "node n3 has 0 GPUs"),
    (nothing, put("job", Allocation.of([0], [[-1]])),
     "allocation[job].gpus[0]", [-1], "node n0 has 8 GPUs"),
    (nothing, put("job", Allocation.of([0], [[0]], cpu_milli=-1)),
     "allocation[job].cpu_milli", -1, ">= 0"),
    (nothing, put("job", Allocation.of([0], [[0]], memory_mib=-1)),
     "allocation[job].memory_mib", -1, ">= 0"),
    # --- more than is free.
    (put("other", Allocation.of([0], [[0]])), put("job", Allocation.of([0], [[1, 0]])),
     "allocation[job].gpus", "n0 GPU 0", "needs 1000 milli-GPU, 0 free"),
    (put("other", Allocation.of([1], [[3]], gpu_milli=700)),
     put("job", Allocation.of([1], [[3]], gpu_milli=301)),
     "allocation[job].gpus", "n1 GPU 3", "needs 301 milli-GPU, 300 free"),
    (put("other", Allocation.of([1], [[3]], gpu_milli=1)), put("job", Allocation.of([1], [[3]])),
     "allocation[job].gpus", "n1 GPU 3", "needs 1000 milli-GPU, 999 free"),
    # The same GPU twice in one pod, and two pods sharing 600 + 600 > 1000 of one GPU.
    (nothing, put("job", Allocation.of([2], [[0, 0]])),
     "allocation[job].gpus", "n2 GPU 0", "needs 2000 milli-GPU, 1000 free"),
    (nothing, put("job", Allocation.of([2, 2], [[1], [1]], gpu_milli=600)),
     "allocation[job].gpus", "n2 GPU 1", "needs 1200 milli-GPU, 1000 free"),
    (nothing, put("job", Allocation.of([2], [[0]], cpu_milli=16_001)),
     "allocation[job].cpu_milli", 16_001, "exceeds the 16000 free on node n2"),
    # Two pods of 9 cores on n2: 18,000 > 16,000.
    (nothing, put("job", Allocation.of([2, 2], no_gpus(2), cpu_milli=9_000)),
     "allocation[job].cpu_milli", 18_000, "exceeds the 16000 free on node n2"),
    (put("other", Allocation.of([3], no_gpus(1), memory_mib=GIB)),
     put("job", Allocation.of([3], no_gpus(1), memory_mib=31 * GIB + 1)),
     "allocation[job].memory_mib", 31 * GIB + 1, f"exceeds the {31 * GIB} free on node n3"),
    # --- owners: twice, empty, release of what was never allocated or already released.
    (put("job", Allocation.of([0], [[0]])), put("job", Allocation.of([1], [[0]])),
     "owner", "job", "already holds an allocation"),
    (nothing, put("", Allocation.of([0], [[0]])), "owner", "", "non-empty job id"),
    (nothing, lambda s: s.release("ghost"), "owner", "ghost", "holds no allocation"),
    (allocated_then_released, lambda s: s.release("job"), "owner", "job", "holds no allocation"),
    # --- non-healthy nodes take no new work, even one node of a gang.
    (health([1], Health.DRAINING), put("job", Allocation.of([1], [[0]])),
     "allocation[job].nodes", "n1", "node is draining"),
    (health([1], Health.CORDONED), put("job", Allocation.of([1], no_gpus(1), cpu_milli=1)),
     "allocation[job].nodes", "n1", "node is cordoned"),
    (health([2], Health.DOWN), put("job", Allocation.of([0, 2], [[0], [0]])),
     "allocation[job].nodes", "n2", "node is down"),
    # --- health changes with bad arguments.
    (nothing, lambda s: s.set_health([1, 7], Health.DOWN), "nodes", [1, 7], "valid node indices"),
    (nothing, lambda s: s.set_health([-1], Health.DOWN), "nodes", [-1], "valid node indices"),
    (nothing, lambda s: s.set_health([1], 9), "health", 9, "healthy, draining, cordoned, down"),
]  # fmt: skip


@pytest.mark.parametrize(("setup", "call", "field", "value", "rule_part"), ERRORS)
def test_errors_change_nothing(
    state: ClusterState,
    setup: Callable[[ClusterState], object],
    call: Callable[[ClusterState], object],
    field: str,
    value: Any,
    rule_part: str,
) -> None:
    setup(state)
    before = snapshot(state)
    owners = dict(state.allocations)
    with pytest.raises(InputError) as caught:
        call(state)
    error = caught.value
    assert (error.field, error.value) == (field, value)
    assert rule_part in error.rule
    assert str(error) == f"{field}: {value!r} is invalid: {error.rule}"
    assert_same(before, snapshot(state))
    assert state.allocations == owners
    assert_aggregates_fresh(state)


@pytest.mark.parametrize("value", [Health.DRAINING, Health.CORDONED, Health.DOWN])
def test_only_healthy_nodes_count(state: ClusterState, value: Health) -> None:
    state.allocate("job", Allocation.of([1], [[0]], cpu_milli=2_000))
    before = snapshot(state)
    previous = state.set_health([0, 1], value)
    assert previous.tolist() == [Health.HEALTHY, Health.HEALTHY]
    # Only r1 (n2, n3) counts: 2 GPUs, 2 idle nodes, 24 cores, 96 GiB; r0 is all zeros.
    assert totals(state, 0) == [(2, 2_000, 2, 24_000, 96 * GIB)]
    assert totals(state, 1) == [(0, 0, 0, 0, 0), (2, 2_000, 2, 24_000, 96 * GIB)]
    assert state.free_hist[1][0].sum() == 0
    # The node arrays still hold n0's and n1's free capacity; only the aggregates drop them.
    assert state.free_whole_gpus.tolist() == [8, 3, 2, 0]
    assert_aggregates_fresh(state)
    # Back to healthy: every array as before, bit for bit.
    state.set_health([0, 1], Health.HEALTHY)
    assert_same(before, snapshot(state))
    # A job on a non-healthy node can still be released; r0 stays out of the aggregates.
    state.set_health([0, 1], value)
    state.release("job")
    assert totals(state, 1)[0] == (0, 0, 0, 0, 0)
    assert int(state.free_whole_gpus[1]) == 4
    assert_aggregates_fresh(state)
    state.set_health([0, 1], Health.HEALTHY)
    # n1 is whole again: r0 = 12 GPUs, 2 idle nodes, 96 cores, 384 GiB.
    assert totals(state, 1)[0] == (12, 12_000, 2, 96_000, 384 * GIB)
    assert_aggregates_fresh(state)


def test_health_restore_is_exact(state: ClusterState) -> None:
    state.allocate("job", Allocation.of([0], [[0, 1]], memory_mib=GIB))
    before = snapshot(state)
    previous = state.set_health([3, 0, 0], Health.DOWN)
    # Nodes are de-duplicated and sorted: previous health of n0 and n3.
    assert previous.tolist() == [0, 0]
    assert state.health.tolist() == [Health.DOWN, 0, 0, Health.DOWN]
    state.restore_health(np.array([0, 3]), previous)
    assert_same(before, snapshot(state))


@pytest.mark.parametrize("width", [1, 3, 4, 8])
@pytest.mark.parametrize("rows", [5, 500])
def test_row_sums_equal_numpy_sums(width: int, rows: int) -> None:
    values = np.random.default_rng(width * rows).integers(0, 1001, size=(rows, width))
    for array in (values.astype(np.int16), values > 500, (values > 500)[:, ::-1]):
        assert row_sums(array).tolist() == array.sum(axis=1).tolist()


def test_free_gpus_is_a_what_if_undone_exactly(state: ClusterState) -> None:
    # n0 runs `a` on GPUs 0-3 (4 cores); n1 runs `b` on GPUs 0-1 (2 of its 4); n2 is cordoned
    # and runs `c` on GPU 0.
    state.allocate("a", Allocation.of([0], [[0, 1, 2, 3]], cpu_milli=4000))
    state.allocate("b", Allocation.of([1], [[0, 1]]))
    state.allocate("c", Allocation.of([2], [[0]]))
    state.set_health([2], Health.CORDONED)
    before = snapshot(state)

    # a's GPUs 2-3, all of b's, c's: as if evicted (a keeps its CPU).
    freeing = np.zeros((3, 8), dtype=bool)
    freeing[0, [2, 3]] = freeing[1, [0, 1]] = freeing[2, 0] = True
    with trial(state) as what_if:
        what_if.free_gpus(np.array([0, 1, 2]), freeing)
        assert state.free_whole_gpus.tolist() == [6, 4, 2, 0]
        # n1 is idle now (whole again, no CPU or memory held); n0 holds a's cores.
        assert totals(state, 1)[0] == (10, 10_000, 1, 92_000, 384 * GIB)
        assert_aggregates_fresh(state)
        assert state.allocations.keys() == {"a", "b", "c"}

    assert_same(before, snapshot(state))


def test_free_parts_frees_cpu_and_memory_too(state: ClusterState) -> None:
    state.allocate("a", Allocation.of([0, 1], [[0, 1], [0, 1]], cpu_milli=2000, memory_mib=GIB))
    before = snapshot(state)
    parts = [
        Allocation.of([0, 0, 1, 1], [[0], [1], [0], [1]]),
        Allocation.of([0, 1], no_gpus(2), cpu_milli=2000, memory_mib=GIB),
    ]

    with trial(state) as what_if:
        what_if.free_parts(parts)
        # Everything of `a` is free: both nodes of r0 are idle again.
        assert totals(state, 1)[0] == (12, 12_000, 2, 96_000, 384 * GIB)
        assert_aggregates_fresh(state)

    assert_same(before, snapshot(state))


def thousands_of_nodes() -> ClusterState:
    """3,000 nodes of 4 GPUs and 8 cores in 60 racks of 50, in 6 blocks of 500."""
    nodes = [
        {"name": f"n{i}", "block": f"b{i // 500}", "rack": f"r{i // 50}", "gpus": 4, "cpu": 8}
        for i in range(3000)
    ]
    for node in nodes:
        node["gpu_model"] = "X"
    return ClusterState(topology_from_dict({"levels": ["block", "rack"], "nodes": nodes}))


def test_changes_of_thousands_of_nodes_keep_aggregates_exact() -> None:
    # A gang over 2,500 of the 3,000 nodes takes the counting path of the aggregate update.
    state = thousands_of_nodes()
    state.set_health([7, 2999], Health.DOWN)
    start = snapshot(state)
    count = 2500
    gang = Allocation.of(np.arange(count) + 100, np.tile([[0, 1, 2]], (count, 1)), cpu_milli=1)
    state.allocate("gang", gang)
    assert_aggregates_fresh(state)
    # 2,998 healthy nodes of 4 GPUs, 3 taken on each of 2,500.
    assert int(state.free_gpus[0][0]) == 4 * 2998 - 3 * 2500
    state.set_health([500], Health.DOWN)
    freeing = np.zeros((2200, 4), dtype=bool)
    freeing[:, [0, 2]] = True
    with trial(state) as what_if:
        what_if.free_gpus(np.arange(400, 2600), freeing)
        assert_aggregates_fresh(state)
    state.set_health([500], Health.HEALTHY)
    state.release("gang")
    assert_same(start, snapshot(state))


@pytest.mark.parametrize("freed_share", [0.9, 0.3])
def test_what_if_over_thousands_of_nodes_counts_idle_nodes_once(freed_share: float) -> None:
    # Of the 3,000 nodes of 4 GPUs and 8 cores, `whole` holds every GPU of
    # nodes 100-1999 and nothing else, so freeing its GPUs leaves those nodes idle; `cored`
    # holds 2 GPUs and a core on nodes 2000-2599, whose nodes stay busy. Nodes 0-99 and
    # 2600-2999 are idle already: inside a what-if over all nodes they must not count twice.
    state = thousands_of_nodes()
    state.allocate("whole", Allocation.of(np.arange(100, 2000), np.tile([[0, 1, 2, 3]], (1900, 1))))
    state.allocate(
        "cored", Allocation.of(np.arange(2000, 2600), np.tile([[0, 1]], (600, 1)), cpu_milli=1)
    )
    state.set_health([1500], Health.DOWN)
    start = snapshot(state)
    idle_before = int(totals(state, 0)[0][2])
    # Free the held GPUs of the first `freed_share` of the busy nodes (the rest stay held).
    freeing = np.zeros((3000, 4), dtype=bool)
    last = 100 + int(freed_share * 2500)
    freeing[100 : min(last, 2000)] = True
    freeing[2000:last, :2] = True
    with trial(state) as what_if:
        what_if.free_gpus(np.arange(3000), freeing)
        assert_aggregates_fresh(state)
        # Healthy nodes of `whole` whose GPUs were all freed turned idle; none of `cored`'s.
        turned_idle = min(last, 2000) - 100 - (1 if last > 1500 else 0)
        assert int(totals(state, 0)[0][2]) == idle_before + turned_idle
    assert_same(start, snapshot(state))


def test_statement_rollback_commit_and_closing(state: ClusterState) -> None:
    start = snapshot(state)
    statement = Statement(state)
    statement.allocate("a", Allocation.of([0], [[0, 1]], cpu_milli=1_000))
    mark = statement.checkpoint()
    at_mark = snapshot(state)
    statement.allocate("b", Allocation.of([2], [[0]], gpu_milli=250))
    statement.set_health([1], Health.DOWN)
    statement.evict("a")
    statement.release("b")
    assert state.allocations == {}
    statement.rollback(mark)
    assert_same(at_mark, snapshot(state))
    assert list(state.allocations) == ["a"]
    assert [op.kind for op in statement.operations] == [OperationKind.ALLOCATE]
    with pytest.raises(InputError) as caught:
        statement.rollback(2)
    assert (caught.value.field, caught.value.value) == ("mark", 2)
    operations = statement.commit()
    assert [(op.kind, op.owner) for op in operations] == [(OperationKind.ALLOCATE, "a")]
    with pytest.raises(InputError) as caught:
        statement.release("a")
    assert caught.value.field == "statement"
    # The commit kept "a"; a new statement discarding its own work leaves "a" in place.
    second = Statement(state)
    second.release("a")
    second.allocate("c", Allocation.of([1], [[0]]))
    second.discard()
    assert_same(at_mark, snapshot(state))
    state.release("a")
    assert_same(start, snapshot(state))


def test_a_closure_takes_nodes_out_of_the_aggregates_but_leaves_their_health(
    state: ClusterState,
) -> None:
    state.allocate("a", Allocation.of([0], [[0]]))
    assert state.total_free_gpus == 13
    assert state.close(np.array([2, 0]), Closure.FENCE).tolist() == [0, 2]
    assert state.health.tolist() == [Health.HEALTHY] * 4
    assert state.nodes_by_health.tolist() == [4, 0, 0, 0]
    assert state.closed.tolist() == [Closure.FENCE, 0, Closure.FENCE, 0]
    assert state.total_free_gpus == 4  # n1's alone
    assert_aggregates_fresh(state)
    # Held as a spare and down too: opening the fence leaves it closed for both reasons.
    assert state.close(np.array([2]), Closure.SPARE).tolist() == [2]
    state.set_health([2], Health.DOWN)
    state.reopen(np.array([0, 2]), Closure.FENCE)
    assert state.closed.tolist() == [0, 0, Closure.SPARE | Closure.UNHEALTHY, 0]
    assert state.total_free_gpus == 11
    assert_aggregates_fresh(state)
    state.set_health([2], Health.HEALTHY)
    state.reopen(np.array([2]), Closure.SPARE)
    assert state.closed.tolist() == [0, 0, 0, 0]
    assert state.total_free_gpus == 13
    assert_aggregates_fresh(state)


def test_allocating_on_a_closed_node_says_why_and_changes_nothing(state: ClusterState) -> None:
    state.close(np.array([1]), Closure.FENCE)
    state.close(np.array([2]), Closure.SPARE)
    before = snapshot(state)
    for node, words in ((1, "kept for other jobs"), (2, "held as a spare")):
        with pytest.raises(InputError) as caught:
            state.allocate("a", Allocation.of([node], [[0]]))
        assert caught.value.field == "allocation[a].nodes"
        assert words in caught.value.rule
    with pytest.raises(InputError) as caught:
        state.close(np.array([0]), Closure.UNHEALTHY)
    assert caught.value.field == "closure"
    assert_same(before, snapshot(state))


def test_a_statement_closure_is_undone_leaving_earlier_ones(state: ClusterState) -> None:
    state.close(np.array([1]), Closure.FENCE)
    before = snapshot(state)
    with trial(state) as what_if:
        what_if.close(np.array([2, 1, 0]))
        assert state.closed.tolist() == [Closure.FENCE] * 3 + [0]
        assert [op.kind for op in what_if.operations] == [OperationKind.CLOSE]
        assert_aggregates_fresh(state)
    assert_same(before, snapshot(state))
    assert state.closed.tolist() == [0, Closure.FENCE, 0, 0]


def test_a_trial_is_undone_when_its_block_raises(state: ClusterState) -> None:
    state.allocate("a", Allocation.of([0, 1], [[0, 1], [0, 1]], cpu_milli=1000))
    before = snapshot(state)
    with pytest.raises(RuntimeError), trial(state) as what_if:
        what_if.free_parts([state.allocations["a"]])
        assert state.total_free_gpus == 14
        raise RuntimeError("the search failed")
    assert_same(before, snapshot(state))
    assert list(state.allocations) == ["a"]


def test_statement_failed_operation_is_not_recorded(state: ClusterState) -> None:
    statement = Statement(state)
    statement.allocate("a", Allocation.of([0], [[0]]))
    before = snapshot(state)
    with pytest.raises(InputError):
        statement.allocate("b", Allocation.of([0], [[0]]))
    with pytest.raises(InputError):
        statement.set_health([9], Health.DOWN)
    assert len(statement.operations) == 1
    assert_same(before, snapshot(state))


def test_huge_cpu_request_is_rejected(state: ClusterState) -> None:
    before = snapshot(state)
    with pytest.raises(InputError) as caught:
        state.allocate("job", Allocation.of([0, 0], no_gpus(2), cpu_milli=2**62))
    assert caught.value.field == "allocation[job].cpu_milli"
    assert_same(before, snapshot(state))


def test_non_integer_fraction_is_rejected(state: ClusterState) -> None:
    with pytest.raises(InputError) as caught:
        state.allocate("job", Allocation.of([0], [[0]], gpu_milli=0.5))  # type: ignore[arg-type]
    assert caught.value.field == "allocation[job].gpu_milli"


def crowded_state(seed: int) -> tuple[ClusterState, list[str], np.random.Generator]:
    """64 racks x 18 nodes x 4 GPUs; 600 owners: whole-GPU gangs of one- or two-GPU pods over
    random nodes (with CPU and memory) and shared-GPU pods, several per GPU."""
    state = ClusterState(nvl72_cluster(1, 4, 16))
    rng = np.random.default_rng(seed)
    n_nodes = state.topology.n_nodes
    owners: list[str] = []
    for index in range(600):
        if index % 3 == 0:
            node = int(rng.integers(n_nodes))
            allocation = Allocation.of([node], [[int(rng.integers(4))]], gpu_milli=250)
        else:
            pods = int(rng.integers(1, 4))
            nodes = rng.choice(n_nodes, size=pods, replace=False)
            gpu = int(rng.integers(4))
            # Pods of one or two GPUs: bulk changes see pods of different widths.
            gpus = [[gpu]] if index % 3 == 1 else [[gpu, (gpu + 1) % 4]]
            allocation = Allocation.of(nodes, gpus * pods, 1000, 500, 64)
        try:
            state.allocate(f"o{index}", allocation)
        except InputError:
            continue  # that GPU was taken
        owners.append(f"o{index}")
    return state, owners, rng


@pytest.mark.parametrize("released", [3, 40, 400])
def test_bulk_release_and_retake_keep_every_aggregate_exact(released: int) -> None:
    # Releasing few owners takes the sorted path, many the node-mask path; both must equal a
    # recomputation, and retaking must restore the arrays bit for bit.
    state, owners, rng = crowded_state(released)
    before = state.snapshot()
    chosen = [str(owner) for owner in rng.choice(owners, size=released, replace=False)]
    allocations = state.release_many(chosen)
    assert_aggregates_recomputed(state)
    # Every node's free CPU and memory: its capacity less what the owners left hold there.
    cpu, memory = state.topology.cpu_milli.copy(), state.topology.memory_mib.copy()
    for held in state.allocations.values():
        np.subtract.at(cpu, held.nodes, held.cpu_milli)
        np.subtract.at(memory, held.nodes, held.memory_mib)
    assert np.array_equal(state.free_cpu_milli, cpu)
    assert np.array_equal(state.free_memory_mib, memory)
    state.retake_many(chosen, allocations)
    after = state.snapshot()
    assert before.keys() == after.keys()
    assert all(np.array_equal(before[key], after[key]) for key in before)


@pytest.mark.parametrize("released", [1, 3, 100, 400])
def test_a_bulk_release_on_a_statement_is_undone_from_its_kept_rows(released: int) -> None:
    # Many pods: the statement keeps copies of the rows the release changes and puts them back
    # on rollback, after undoing later changes (health, allocations) on top of it.
    state, owners, rng = crowded_state(released)
    before = state.snapshot()
    statement = Statement(state)
    chosen = [str(owner) for owner in rng.choice(owners, size=released, replace=False)]
    statement.release_many(chosen)
    # Rows are kept beyond FEW_PODS pods in all (400 owners hold about 700).
    assert (statement.operations[-1].saved_rows is not None) == (released >= 400)
    assert_aggregates_recomputed(state)
    # The same as releasing them one by one.
    one_by_one, _, _ = crowded_state(released)
    for owner in chosen:
        one_by_one.release(owner)
    bulk, single = state.snapshot(), one_by_one.snapshot()
    assert all(np.array_equal(bulk[key], single[key]) for key in bulk)
    statement.set_health(rng.choice(state.topology.n_nodes, size=30), Health.CORDONED)
    free = (state.gpu_free_milli == MILLI_PER_GPU) & (state.health == Health.HEALTHY)[:, None]
    node, gpu = np.argwhere(free)[0].tolist()
    statement.allocate("late", Allocation.of([node], [[gpu]]))
    assert_aggregates_recomputed(state)
    statement.rollback(0)
    after = state.snapshot()
    assert all(np.array_equal(before[key], after[key]) for key in before)
    assert all(owner in state.allocations for owner in chosen)
    assert_aggregates_recomputed(state)


def spread_state(
    seed: int, widths: tuple[int, ...] = (1, 2, 4)
) -> tuple[ClusterState, list[str], np.random.Generator]:
    """160 racks x 18 nodes x 4 GPUs (2,880 nodes, more than the compiled loops take);
    400 owners of whole-GPU pods (of `widths` GPUs in turn, with or without CPU and memory)
    over random nodes; then a few held nodes cordoned or down."""
    state = ClusterState(nvl72_cluster(1, 4, 40))
    rng = np.random.default_rng(seed)
    n_nodes = state.topology.n_nodes
    owners: list[str] = []
    for index in range(400):
        width = widths[index % len(widths)]
        first = int(rng.integers(4 - width + 1))
        columns = list(range(first, first + width))
        # Nodes where those GPUs are free.
        open_nodes = np.flatnonzero((state.gpu_free_milli[:, columns] == MILLI_PER_GPU).all(1))
        pods = min(int(rng.integers(1, 20)), open_nodes.size)
        if pods == 0:
            continue
        nodes = rng.choice(open_nodes, size=pods, replace=False)
        cpu, memory = (0, 0) if index % 5 == 0 else (2000, 1024)
        state.allocate(f"o{index}", Allocation.of(nodes, [columns] * pods, 1000, cpu, memory))
        owners.append(f"o{index}")
    state.set_health(rng.choice(n_nodes, size=40, replace=False), Health.CORDONED)
    state.set_health(rng.choice(n_nodes, size=40, replace=False), Health.DOWN)
    return state, owners, rng


def assert_released_and_rolled_back(
    state: ClusterState, owners: list[str], before: dict[str, np.ndarray]
) -> None:
    """Released together on a statement, `owners` leave aggregates equal to a recomputation;
    rolled back, every array is as in `before`, bit for bit."""
    statement = Statement(state)
    statement.release_many(owners)
    assert_aggregates_recomputed(state)
    statement.rollback(0)
    after = state.snapshot()
    assert all(np.array_equal(before[key], after[key]) for key in before)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("widths", [(1, 2, 4), (4,)])
def test_a_bulk_release_of_whole_gpu_pods_over_thousands_of_nodes_keeps_aggregates_exact(
    seed: int, widths: tuple[int, ...]
) -> None:
    # Many nodes of whole-GPU pods: the totals move by what the pods held, without reading
    # every node before and after; released, retaken and rolled back, all equal a
    # recomputation, and undoing restores every array bit for bit.
    state, owners, rng = spread_state(seed, widths)
    before = state.snapshot()
    chosen = [str(owner) for owner in rng.choice(owners, size=len(owners) * 9 // 10, replace=False)]
    touched = np.unique(np.concatenate([state.allocations[owner].nodes for owner in chosen]))
    assert touched.size > 2048
    allocations = state.release_many(chosen)
    assert_aggregates_recomputed(state)
    one_by_one, _, _ = spread_state(seed, widths)
    for owner in chosen:
        one_by_one.release(owner)
    bulk, single = state.snapshot(), one_by_one.snapshot()
    assert all(np.array_equal(bulk[key], single[key]) for key in bulk)
    state.retake_many(chosen, allocations)
    assert_aggregates_recomputed(state)
    after = state.snapshot()
    assert all(np.array_equal(before[key], after[key]) for key in before)
    assert_released_and_rolled_back(state, chosen, before)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("widths", [(1, 2, 4), (4,)])
def test_a_bulk_release_of_a_few_whole_gpu_jobs_keeps_aggregates_exact(
    seed: int, widths: tuple[int, ...]
) -> None:
    # A few jobs, fewer nodes than the compiled loops take (with width 4, each pod holds its
    # node's every GPU): released together and rolled back, the aggregates equal a
    # recomputation and undoing restores every array bit for bit.
    state, owners, rng = spread_state(seed, widths)
    before = state.snapshot()
    chosen = [str(owner) for owner in rng.choice(owners, size=12, replace=False)]
    touched = np.unique(np.concatenate([state.allocations[owner].nodes for owner in chosen]))
    assert 12 < touched.size <= 2048
    assert_released_and_rolled_back(state, chosen, before)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("width", [1, 2, 4])
def test_one_gang_of_whole_gpus_over_thousands_of_nodes_keeps_aggregates_exact(
    seed: int, width: int
) -> None:
    # One allocation of more pods than the compiled loops take, some nodes holding two of its
    # pods, on a busy fleet with cordoned and down nodes: allocated and released, the
    # aggregates equal a recomputation, and releasing restores every array bit for bit.
    state, owners, rng = spread_state(seed)
    state.release_many(owners[: len(owners) * 9 // 10])  # room for the gang
    before = state.snapshot()
    columns = list(range(width))
    open_gpus = (state.gpu_free_milli[:, columns] == MILLI_PER_GPU).all(1)
    open_nodes = np.flatnonzero(open_gpus & (state.health == Health.HEALTHY))
    nodes = rng.choice(open_nodes, size=2100, replace=False)
    gpus = [columns] * nodes.size
    if width <= 2:
        # A second pod on some nodes, on GPUs of its own.
        second = list(range(width, 2 * width))
        doubled = nodes[(state.gpu_free_milli[nodes][:, second] == MILLI_PER_GPU).all(1)][:300]
        nodes = np.concatenate((nodes, doubled))
        gpus = gpus + [second] * doubled.size
    cpu = 1000 if seed % 2 else 0
    state.allocate("gang", Allocation.of(nodes, gpus, 1000, cpu, 512))
    assert_aggregates_recomputed(state)
    state.release("gang")
    assert_aggregates_recomputed(state)
    after = state.snapshot()
    assert all(np.array_equal(before[key], after[key]) for key in before)


@pytest.mark.parametrize("seed", range(5))
def test_distinct_and_distinct_inverse_equal_numpys_unique(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for values in (
        rng.integers(0, 50, size=int(rng.integers(0, 200))),
        np.sort(rng.integers(0, 50, size=100)),
        np.arange(30),
        np.array([7]),
    ):
        values = values.astype(np.int64)
        assert np.array_equal(distinct(values), np.unique(values))
        expected, expected_inverse = np.unique(values, return_inverse=True)
        found, inverse = distinct_inverse(values)
        assert np.array_equal(found, expected)
        assert np.array_equal(inverse, expected_inverse.reshape(-1))


@pytest.mark.parametrize("seed", range(3))
def test_many_values_out_of_order_are_made_distinct_and_counted_as_numpy_does(seed: int) -> None:
    # Dense ranges take the mask of `marked_range`; sparse, negative or few values the sort.
    rng = np.random.default_rng(seed)
    size = MARKED_FROM + int(rng.integers(0, 20_000))
    for values in (
        rng.integers(0, size, size=size),
        rng.integers(0, MARKED_SPAN * size - 1, size=size).astype(np.int32),
        rng.integers(0, 1_000 * size, size=size),
        rng.integers(-5, size, size=size),
        rng.integers(0, 50, size=MARKED_FROM - 1),
    ):
        expected, counts = np.unique(values, return_counts=True)
        found = distinct(values)
        assert found.dtype == values.dtype and np.array_equal(found, expected)
        found, found_counts = distinct_counts(values)
        assert np.array_equal(found, expected) and np.array_equal(found_counts, counts)
    assert marked_range(rng.integers(0, size, size=size)) is not None


@pytest.mark.parametrize("duplicate", [copy.deepcopy, lambda s: pickle.loads(pickle.dumps(s))])
def test_a_copy_keeps_its_aggregates_in_step(
    state: ClusterState, duplicate: Callable[[ClusterState], ClusterState]
) -> None:
    # The per-level and per-aggregate arrays are views of stacked ones: a copy must rebuild
    # them as views, or changes after copying would miss some of them.
    state.allocate("before", Allocation.of([0], [[0, 1]]))
    copied = duplicate(state)
    copied.allocate("one-pod", Allocation.of([1], [[0]]))
    copied.allocate("gang", Allocation.of([1, 2], [[2, 3], [0, 1]], cpu_milli=1000))
    copied.release("before")
    assert_aggregates_fresh(copied)
    assert_aggregates_fresh(state)


def test_large_whole_gpu_allocations_are_checked_whatever_their_order() -> None:
    # 36 nodes of 4 GPUs; gangs of 18 pods x 4 GPUs: 72 GPU slots, beyond the few-slot path.
    state = ClusterState(nvl72_cluster(1, 1, 2))
    every_gpu = [[0, 1, 2, 3]] * 18
    state.allocate("other", Allocation.of([20], [[2]]))
    with pytest.raises(InputError) as taken:
        state.allocate("job", Allocation.of(list(range(18, 36)), every_gpu))
    assert (taken.value.field, taken.value.rule) == (
        "allocation[job].gpus",
        "needs 1000 milli-GPU, 0 free",
    )
    # The same GPU twice, the pods out of node order.
    twice = [[0, 1, 2, 3]] * 17 + [[0, 1, 2, 0]]
    with pytest.raises(InputError) as repeated:
        state.allocate("job", Allocation.of(list(range(17, -1, -1)), twice))
    assert repeated.value.rule == "needs 2000 milli-GPU, 1000 free"
    before = state.snapshot()
    # Out of node order but every GPU free and asked once: it fits.
    state.allocate("job", Allocation.of(list(range(17, -1, -1)), every_gpu))
    assert int(state.free_whole_gpus[:18].sum()) == 0
    assert int(state.free_gpus[0][0]) == int(before["free_gpus[0]"][0]) - 72


def test_large_allocations_check_cpu_and_memory_per_node_whatever_their_order() -> None:
    # 72 CPU-only pods over 36 nodes of 144 cores, listed out of node order: beyond the few-pod
    # path. Two pods of 72 cores fit each node; a third on node 5 does not, whatever its place.
    state = ClusterState(nvl72_cluster(1, 1, 2))
    order = [node for node in range(35, -1, -1) for _ in range(2)]
    crowded = [*order[:30], 5, *order[30:]]
    before = snapshot(state)
    with pytest.raises(InputError) as caught:
        state.allocate("job", Allocation.of(crowded, no_gpus(len(crowded)), cpu_milli=72_000))
    assert (caught.value.field, caught.value.value) == ("allocation[job].cpu_milli", 216_000)
    assert "node" in caught.value.rule and "144000 free" in caught.value.rule
    assert_same(before, snapshot(state))
    state.allocate("job", Allocation.of(order, no_gpus(len(order)), memory_mib=480 * 1024))
    assert int(state.free_memory_mib[:36].sum()) == 0
    assert int(state.free_cpu_milli[:36].sum()) == 36 * 144_000


@pytest.mark.parametrize("seed", range(4))
def test_a_block_cordoned_and_opened_again_and_again_keeps_aggregates_exact(seed: int) -> None:
    # A fence takes thousands of nodes out of the aggregates and puts them back many times;
    # what they add is remembered while none of them changes. In between, jobs start and end
    # on some of them, statements release and roll back, and what-ifs free GPUs for a while:
    # after every step the aggregates equal a recomputation.
    state, owners, rng = spread_state(seed)
    healthy = np.flatnonzero(state.health == Health.HEALTHY)
    block = np.sort(rng.choice(healthy, size=2300, replace=False))
    outside = np.setdiff1d(healthy, block)
    started = 0

    def step(kind: int) -> None:
        nonlocal started
        held = [owner for owner in owners if owner in state.allocations]
        if kind == 0 and held:
            state.release(str(rng.choice(held)))
        elif kind == 1:
            whole = (state.gpu_free_milli[block] == MILLI_PER_GPU).all(1)
            opened = block[whole & (state.health[block] == Health.HEALTHY)]
            if opened.size:
                node = int(rng.choice(opened))
                state.allocate(f"new-{started}", Allocation.of([node], [[0, 1]]))
                owners.append(f"new-{started}")
                started += 1
        elif kind == 2 and held:
            statement = Statement(state)
            chosen = rng.choice(held, size=min(50, len(held)), replace=False)
            statement.release_many([str(owner) for owner in chosen])
            statement.rollback(0)
        elif kind == 3 and held:
            chosen = rng.choice(held, size=min(9, len(held)), replace=False)
            with trial(state) as what_if:
                what_if.free_parts([state.allocations[str(owner)] for owner in chosen])
                assert_aggregates_recomputed(state)
        elif kind == 4 and held:
            chosen = rng.choice(held, size=min(30, len(held)), replace=False)
            state.release_many([str(owner) for owner in chosen])
        elif kind == 5 and held:
            # The block counted while jobs on it are released, then the release undone.
            statement = Statement(state)
            chosen = rng.choice(held, size=min(50, len(held)), replace=False)
            statement.release_many([str(owner) for owner in chosen])
            statement.set_health(block, Health.CORDONED)
            statement.set_health(block, Health.HEALTHY)
            assert_aggregates_recomputed(state)
            statement.rollback(0)

    for _ in range(12):
        state.set_health(block, Health.CORDONED)
        assert_aggregates_recomputed(state)
        if rng.random() < 0.5:
            step(int(rng.integers(6)))
        state.set_health(block, Health.HEALTHY)
        assert_aggregates_recomputed(state)
        if rng.random() < 0.5:
            step(int(rng.integers(6)))
            assert_aggregates_recomputed(state)
        # Changes outside the block leave what it adds as it was.
        node = int(rng.choice(outside))
        if (state.gpu_free_milli[node, :1] == MILLI_PER_GPU).all():
            state.allocate(f"out-{started}", Allocation.of([node], [[0]]))
            started += 1
    assert_aggregates_recomputed(state)


@pytest.mark.parametrize("seed", range(3))
def test_a_bulk_release_with_one_pod_per_node_keeps_aggregates_exact(seed: int) -> None:
    # Thousands of owners, no two pods on one node, listed out of node order, of mixed widths
    # and CPU and memory requests (and some of one shape): released in bulk, equal to one by
    # one and to a recomputation; retaken, every array as before.
    rng = np.random.default_rng(seed)
    state = ClusterState(nvl72_cluster(1, 4, 40))
    nodes = rng.permutation(state.topology.n_nodes)[:2600]
    owners: list[str] = []
    for index, chunk in enumerate(np.array_split(nodes, 260)):
        width = (1, 2, 4)[index % 3] if seed else 4
        cpu = 0 if seed == 2 else 1000 * (1 + index % 4)
        allocation = Allocation.of(chunk, [list(range(width))] * chunk.size, 1000, cpu, 256)
        state.allocate(f"o{index}", allocation)
        owners.append(f"o{index}")
    state.set_health(nodes[:30], Health.CORDONED)
    before = state.snapshot()
    one_by_one = copy.deepcopy(state)
    allocations = state.release_many(owners)
    assert_aggregates_recomputed(state)
    for owner in owners:
        one_by_one.release(owner)
    bulk, single = state.snapshot(), one_by_one.snapshot()
    assert all(np.array_equal(bulk[key], single[key]) for key in bulk)
    state.retake_many(owners, allocations)
    after = state.snapshot()
    assert all(np.array_equal(before[key], after[key]) for key in before)


@pytest.mark.parametrize("closed", [0, 1, 5, 400])
@pytest.mark.parametrize("asks", [(0, 0), (2000, 1024)])
def test_a_whole_node_gang_released_over_closed_nodes_keeps_every_aggregate_exact(
    closed: int, asks: tuple[int, int]
) -> None:
    # 2,880 nodes, more than the compiled loops take: a gang of whole-node pods on most of
    # them; then some of its nodes go down or are fenced (a failure under a large gang) and
    # it is released. A few closed nodes move only their own arrays, many take the general
    # path: either way the aggregates equal a recomputation and the nodes are free again.
    state = ClusterState(nvl72_cluster(1, 4, 40))
    rng = np.random.default_rng(closed)
    nodes = np.sort(rng.choice(state.topology.n_nodes, size=2500, replace=False))
    cpu, memory = asks
    state.allocate("gang", Allocation.of(nodes, [[0, 1, 2, 3]] * nodes.size, 1000, cpu, memory))
    if closed:
        down = rng.choice(nodes, size=closed, replace=False)
        state.set_health(down[: closed // 2 + 1], Health.DOWN)
        state.close(down[closed // 2 + 1 :], Closure.FENCE)
    assert_aggregates_recomputed(state)
    state.release("gang")
    assert_aggregates_recomputed(state)
    assert (state.gpu_free_milli == MILLI_PER_GPU).all()
    assert np.array_equal(state.free_cpu_milli, state.topology.cpu_milli)
    assert np.array_equal(state.free_memory_mib, state.topology.memory_mib)
