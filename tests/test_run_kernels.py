"""The compiled loops that sum changes per run of nodes (`cluster/run_kernels.py`) against the
pod-by-pod loops and plain counts, on a busy fleet with closed nodes."""

from __future__ import annotations

import copy
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from state_helpers import assert_aggregates_recomputed

from toposched.cluster import kernels, run_kernels
from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.errors import InputError
from toposched.cluster.state import MILLI_PER_GPU, Allocation, Closure, ClusterState, Health
from toposched.cluster.statement import Statement


def busy_fleet(seed: int) -> tuple[ClusterState, np.random.Generator]:
    """8 racks x 18 nodes x 4 GPUs, about half the GPUs held by one-node jobs of 1-4 GPUs
    (some sharing a GPU by fractions), some nodes down or fenced."""
    state = ClusterState(nvl72_cluster(1, 2, 4))
    rng = np.random.default_rng(seed)
    for index in range(120):
        node = int(rng.integers(state.topology.n_nodes))
        free = np.flatnonzero(state.gpu_free_milli[node] == MILLI_PER_GPU)
        if free.size == 0:
            continue
        if index % 4 == 0:
            allocation = Allocation.of([node], [[int(free[0])]], 250, 1000, 64)
        else:
            width = int(rng.integers(1, free.size + 1))
            allocation = Allocation.of([node], [free[:width].tolist()], 1000, 2000, 1024)
        state.allocate(f"j{index}", allocation)
    state.set_health(rng.choice(state.topology.n_nodes, size=6, replace=False), Health.DOWN)
    state.close(rng.choice(state.topology.n_nodes, size=6, replace=False), Closure.FENCE)
    return state, rng


def free_pods(state: ClusterState, rng: np.random.Generator, gpus: int) -> Allocation:
    """Pods of `gpus` whole GPUs each on nodes that have them free (closed nodes included,
    since a release gives back pods on nodes closed after they were taken), rack by rack."""
    nodes, rows = [], []
    for node in range(state.topology.n_nodes):
        free = np.flatnonzero(state.gpu_free_milli[node] == MILLI_PER_GPU)
        if free.size >= gpus and rng.random() < 0.8:
            nodes.append(node)
            rows.append(free[:gpus].tolist())
    return Allocation.of(nodes, rows, 1000, 500, 256)


def same_arrays(one: ClusterState, other: ClusterState) -> None:
    mine, theirs = one.snapshot(), other.snapshot()
    for name, array in mine.items():
        assert np.array_equal(array, theirs[name]), name


def pod_by_pod(
    state: ClusterState,
    nodes: np.ndarray,
    gpus: np.ndarray,
    gpu_milli: int,
    cpu_milli: int,
    memory_mib: int,
    sign: int,
    change: int,
) -> None:
    """The pods applied as few-pod changes are: each pod's node moves its domains at once."""
    figures = np.array([(nodes.size, gpus.shape[1], gpu_milli, cpu_milli, memory_mib)])
    kernels.apply_pods_of_many(
        nodes,
        np.ascontiguousarray(gpus).reshape(-1),
        figures.astype(np.int64),
        sign,
        state._kernel_arrays(),
        state._changed_at,
        change,
    )


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("gpus", [1, 2, 4])
@pytest.mark.parametrize("held_whole", [False, True])
def test_pods_applied_by_runs_change_what_pod_by_pod_does(
    seed: int, gpus: int, held_whole: bool
) -> None:
    state, rng = busy_fleet(seed)
    twin = copy.deepcopy(state)
    allocation = free_pods(state, rng, gpus)
    for sign in (-1, +1):  # taken, then given back
        args = (
            allocation.nodes,
            allocation.gpus,
            allocation.gpu_milli,
            allocation.cpu_milli,
            allocation.memory_mib,
            sign,
        )
        run_kernels.apply_pods_by_runs(
            *args, state._kernel_arrays(), state._changed_at, 1 + sign, held_whole
        )
        pod_by_pod(twin, *args, 1 + sign)
        same_arrays(state, twin)
        assert np.array_equal(state._changed_at, twin._changed_at)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("held_whole", [False, True])
def test_pods_of_a_gpu_fraction_applied_by_runs_count_whole_gpus_as_pod_by_pod(
    seed: int, held_whole: bool
) -> None:
    # Two pods of 300 milli-GPU on GPU 3 of nodes that have 600 free, some of them closed:
    # a node's whole GPUs are counted from its GPUs, not assumed.
    state, _ = busy_fleet(seed)
    twin = copy.deepcopy(state)
    nodes = np.repeat(np.flatnonzero(state.gpu_free_milli[:, 3] >= 600), 2)
    assert nodes.size > 20
    gpus = np.full((nodes.size, 1), 3)
    for sign in (-1, +1):
        args = (nodes, gpus, 300, 100, 0, sign)
        run_kernels.apply_pods_by_runs(
            *args, state._kernel_arrays(), state._changed_at, 5, held_whole
        )
        pod_by_pod(twin, *args, 5)
        same_arrays(state, twin)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("from_rows", [False, True])
def test_run_sums_add_up_each_runs_node_values(seed: int, from_rows: bool) -> None:
    # Every open node of racks 1, 2 and 5 (read from their rows when allowed), and some of
    # the others (read from their nodes).
    state, rng = busy_fleet(seed)
    leaves = state.topology.node_domain[-1]
    whole_racks = np.isin(leaves, [1, 2, 5])
    some = rng.random(state.topology.n_nodes) < 0.4
    nodes = np.flatnonzero((whole_racks | some) & (state.closed == 0))
    first, sums, cells = run_kernels.node_run_sums(nodes, state._kernel_arrays(), from_rows)
    assert first.tolist() == np.flatnonzero(np.diff(leaves[nodes], prepend=-1)).tolist()
    values = kernels.node_values(nodes, state._kernel_arrays())
    ends = [*first[1:].tolist(), nodes.size]
    width = state.free_hist[0].shape[2]
    for run, (start, end) in enumerate(zip(first.tolist(), ends, strict=True)):
        assert sums[run].tolist() == values[start:end].sum(axis=0).tolist()
        expected = np.zeros(cells.shape[1], dtype=np.int64)
        for node in nodes[start:end].tolist():
            model = int(state.topology.gpu_model[node])
            expected[model * width + int(state.free_whole_gpus[node])] += 1
        assert cells[run].tolist() == expected.tolist()


def assert_aggregates_match_nodes_but_rack(state: ClusterState, rack: int) -> None:
    """The aggregates of the racks but `rack` sum their nodes (inside a what-if of `rack`'s
    nodes alone)."""
    fresh = state.compute_aggregates()
    leaf = len(state.free_hist) - 1
    others = np.arange(state.topology.n_domains(leaf)) != rack
    assert np.array_equal(state.free_hist[leaf][others], fresh["free_hist"][leaf][others])
    assert np.array_equal(state.free_gpus[leaf][others], fresh["free_gpus"][leaf][others])


@pytest.mark.parametrize("seed", range(3))
def test_whole_racks_closed_inside_a_what_if_of_their_nodes_alone_leave_aggregates_exact(
    seed: int,
) -> None:
    # Freed in the node arrays alone, rack 3's nodes differ from what its row sums; a fence
    # over thousands of nodes, rack 3 among them, closed and opened inside that what-if must
    # read rack 3 from its nodes, or the aggregates drift once the what-if is undone.
    state = ClusterState(nvl72_cluster(1, 2, 70))
    rng = np.random.default_rng(seed)
    held = [f"j{node}" for node in range(0, state.topology.n_nodes, 3)]
    for owner in held:
        node = int(owner[1:])
        state.allocate(owner, Allocation.of([node], [[0, 1]], 1000, 1000, 64))
    leaves = state.topology.node_domain[-1]
    rack = np.flatnonzero(leaves == 3)
    block = np.sort(np.concatenate([rack, rng.choice(np.flatnonzero(leaves > 3), 2200, False)]))
    statement = Statement(state)
    mark = statement.checkpoint()
    parts = [state.allocations[f"j{node}"] for node in rack.tolist() if node % 3 == 0]
    statement.free_on_nodes(parts, int(rack[0]), int(rack[-1]) + 1)
    assert state.unsummed_changes == 1
    statement.close(block)
    # A job on the block ends while it is closed: what the block adds is found anew when it
    # opens again, from its nodes (rack 3's row no longer counts them).
    ending = next(f"j{node}" for node in block.tolist() if node % 3 == 0 and leaves[node] > 3)
    statement.release(ending)
    statement.rollback(mark + 1)  # the fence opens again, the what-if stays
    assert_aggregates_match_nodes_but_rack(state, 3)
    statement.rollback(mark)
    assert state.unsummed_changes == 0
    assert_aggregates_recomputed(state)
    statement.close(block)
    assert_aggregates_recomputed(state)


@st.composite
def pods_on_a_small_fleet(draw: st.DrawFn) -> tuple[int, list[int], list[list[int]], int, int, int]:
    seed = draw(st.integers(0, 3))
    pods = draw(st.integers(1, 12))
    per_pod = draw(st.integers(0, 3))
    # Nodes and GPUs mostly valid, sometimes out of range; repeats allowed.
    nodes = draw(st.lists(st.integers(-1, 145), min_size=pods, max_size=pods))
    gpus = draw(
        st.lists(
            st.lists(st.integers(-1, 4), min_size=per_pod, max_size=per_pod),
            min_size=pods,
            max_size=pods,
        )
    )
    milli = draw(st.sampled_from([1000, 1000, 500, 250])) if per_pod <= 1 else 1000
    cpu = draw(st.sampled_from([0, 1000, 70_000, 144_000]))
    memory = draw(st.sampled_from([0, 1024, 500 * 1024]))
    return seed, nodes, gpus, milli, cpu, memory


def fits_by_counting(
    nodes: list[int], gpus: list[list[int]], milli: int, cpu: int, memory: int, state: ClusterState
) -> bool:
    """The oracle: every node valid and open, every GPU one of its node's, and each GPU's and
    node's free resources covering the sum of the pods' requests there, counted in Python."""
    count = state.topology.gpu_count
    on_gpu: Counter[tuple[int, int]] = Counter()
    on_node: Counter[int] = Counter()
    for node, row in zip(nodes, gpus, strict=True):
        if not 0 <= node < count.size or state.closed[node] != 0:
            return False
        for gpu in row:
            if not 0 <= gpu < count[node]:
                return False
            on_gpu[node, gpu] += 1
        on_node[node] += 1
    return all(
        pods * milli <= state.gpu_free_milli[node, gpu] for (node, gpu), pods in on_gpu.items()
    ) and all(
        pods * cpu <= state.free_cpu_milli[node] and pods * memory <= state.free_memory_mib[node]
        for node, pods in on_node.items()
    )


@settings(max_examples=300, deadline=None)
@given(case=pods_on_a_small_fleet())
def test_fits_in_place_answers_as_counting_does_and_changes_nothing(
    case: tuple[int, list[int], list[list[int]], int, int, int],
) -> None:
    seed, nodes, gpus, milli, cpu, memory = case
    state, _ = busy_fleet(seed)
    node_array = np.array(nodes, dtype=np.int64)
    gpu_array = np.array(gpus, dtype=np.int64).reshape(len(nodes), -1)
    arrays = (
        state.topology.gpu_count,
        state.closed,
        state.gpu_free_milli,
        state.free_cpu_milli,
        state.free_memory_mib,
    )
    before = state.snapshot()
    expected = fits_by_counting(nodes, gpus, milli, cpu, memory, state)
    found = run_kernels.fits_in_place(node_array, gpu_array, milli, cpu, memory, *arrays)
    assert found == expected
    same = state.snapshot()
    assert all(np.array_equal(before[name], same[name]) for name in before)


def test_a_gang_of_thousands_of_pods_asking_a_gpu_twice_is_refused_and_changes_nothing() -> None:
    # More pods than the compiled loops of a few take: the quick check finds the repeat, and
    # the full checks name it; nothing changes.
    state = ClusterState(nvl72_cluster(1, 2, 70))
    count = state.topology.n_nodes
    assert count > kernels.COMPILED_LIMIT
    gpus = np.tile([[0, 1, 2, 3]], (count, 1))
    gpus[count // 2] = [0, 1, 2, 2]
    before = state.snapshot()
    with pytest.raises(InputError) as caught:
        state.allocate("gang", Allocation.of(np.arange(count), gpus))
    assert caught.value.field == "allocation[gang].gpus"
    assert caught.value.rule == "needs 2000 milli-GPU, 1000 free"
    after = state.snapshot()
    assert all(np.array_equal(before[name], after[name]) for name in before)
    # The same gang, every GPU asked once, fits and leaves no GPU free.
    gpus[count // 2] = [0, 1, 2, 3]
    state.allocate("gang", Allocation.of(np.arange(count), gpus))
    assert int(state.free_gpus[0][0]) == 0


def test_nodes_coming_back_beside_as_many_open_ones_of_their_rack_are_read_from_themselves() -> (
    None
):
    # Half of rack 0 is fenced with thousands of other nodes; a job on one of them ends
    # while fenced, so what they add is found anew when they open: rack 0's row then counts
    # its other 9 nodes, as many as come back, and must not be taken for theirs.
    state = ClusterState(nvl72_cluster(1, 2, 70))
    leaves = state.topology.node_domain[-1]
    half = np.flatnonzero(leaves == 0)[:9]
    block = np.concatenate([half, np.flatnonzero(leaves >= 20)])
    state.allocate("busy", Allocation.of(np.flatnonzero(leaves == 0)[9:], [[0, 1, 2, 3]] * 9))
    state.allocate("ending", Allocation.of([int(half[0])], [[0]]))
    state.close(block, Closure.FENCE)
    state.release("ending")
    state.reopen(block, Closure.FENCE)
    assert_aggregates_recomputed(state)


@pytest.mark.parametrize("seed", range(3))
def test_open_nodes_answer_as_numpy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    closed = (rng.random(500) < 0.3).astype(np.uint8) * rng.integers(1, 8, 500).astype(np.uint8)
    nodes = np.sort(rng.choice(500, size=300, replace=False)).astype(np.int64)
    kept = run_kernels.open_nodes(nodes, closed)
    assert kept.tolist() == nodes[closed[nodes] == 0].tolist()
    assert kept is not nodes
