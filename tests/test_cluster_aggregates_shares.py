"""What many nodes add to the aggregates, found once and brought up to date (`_Share`,
`run_kernels.refresh_runs`): a block of whole racks closed and opened again and again while a
few of its nodes change in between leaves the aggregates equal to a recomputation."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from state_helpers import assert_aggregates_recomputed

from toposched.cluster import kernels, run_kernels
from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import MILLI_PER_GPU, Allocation, Closure, ClusterState, Health
from toposched.cluster.statement import Statement
from toposched.scheduler.fence import Fence, FenceMarks

# 140 racks of 18 nodes; the block is racks 20-139 (2,160 nodes: more than the compiled
# node-by-node loops take, so closing it goes through shares).
_RACKS, _BLOCK_FIRST_RACK = 140, 20


def fleet(seed: int) -> tuple[ClusterState, np.random.Generator, np.ndarray]:
    """The fleet with about a third of its nodes holding one-node jobs (some of a GPU
    fraction), a few nodes down, and the block's nodes."""
    state = ClusterState(nvl72_cluster(1, 2, _RACKS // 2))
    rng = np.random.default_rng(seed)
    for node in rng.choice(state.topology.n_nodes, size=state.topology.n_nodes // 3, replace=False):
        take_one(state, f"j{node}", int(node), rng)
    state.set_health(rng.choice(state.topology.n_nodes, size=5, replace=False), Health.DOWN)
    leaves = state.topology.node_domain[-1]
    block = np.flatnonzero(leaves >= _BLOCK_FIRST_RACK)
    assert block.size > kernels.COMPILED_LIMIT
    return state, rng, block


def take_one(state: ClusterState, owner: str, node: int, rng: np.random.Generator) -> bool:
    """A one-node job on `node` if it has a GPU free: 1-4 whole GPUs, or a quarter of one."""
    free = np.flatnonzero(state.gpu_free_milli[node] == MILLI_PER_GPU)
    if free.size == 0 or owner in state.allocations:
        return False
    if rng.random() < 0.25:
        allocation = Allocation.of([node], [[int(free[0])]], 250, 1000, 64)
    else:
        width = int(rng.integers(1, free.size + 1))
        allocation = Allocation.of([node], [free[:width].tolist()], 1000, 2000, 1024)
    state.allocate(owner, allocation)
    return True


def change_a_few(state: ClusterState, rng: np.random.Generator, nodes: np.ndarray) -> int:
    """Start or end jobs on a few of `nodes`; returns how many changed."""
    changed = 0
    for node in rng.choice(nodes, size=int(rng.integers(1, 6)), replace=False).tolist():
        owner = f"j{node}"
        if owner in state.allocations:
            state.release(owner)
            changed += 1
        elif state.closed[node] == 0:
            changed += take_one(state, owner, node, rng)
    return changed


def test_a_share_refreshed_after_a_few_changes_equals_one_found_anew() -> None:
    state, rng, block = fleet(0)
    share = state._share_of(block[state.closed[block] == 0], from_rows=False)
    nodes = share.nodes
    assert change_a_few(state, rng, nodes) > 0
    refreshed = share.refresh(nodes, state._changed_at, state._kernel_arrays())
    # One job at most per node, a rack each at most: as many runs read again as racks touched.
    assert 1 <= refreshed <= 5
    fresh = state._share_of(nodes, from_rows=False)
    assert np.array_equal(share.rows, fresh.rows)
    assert np.array_equal(share.sums, fresh.sums)
    assert np.array_equal(share.cells, fresh.cells)
    assert np.array_equal(share.run_sums, fresh.run_sums)
    # Other nodes (one fewer) are not the share's: nothing is read or changed.
    before = share.sums.copy()
    other = nodes[1:].copy()
    assert share.refresh(other, state._changed_at, state._kernel_arrays(), since=-1) == -1
    assert np.array_equal(share.sums, before)


def test_a_fenced_block_lifted_for_backfills_and_settled_stays_exact() -> None:
    # A cycle's fence as the scheduler drives it: the block closed, lifted for a backfill
    # search, jobs started and ended on its nodes while it is open, closed again; then the
    # next cycle's block, mostly the same racks.
    state, rng, block = fleet(1)
    marks = FenceMarks(state.topology.n_nodes)
    for cycle in range(4):
        fence = Fence(state, marks)
        nodes = block[cycle * 18 :]
        fence.close_block(nodes)
        assert_aggregates_recomputed(state)
        for _ in range(3):
            fence.lift()
            assert_aggregates_recomputed(state)
            assert change_a_few(state, rng, nodes) >= 0
            assert_aggregates_recomputed(state)
            fence.settle()
            assert_aggregates_recomputed(state)
        # Some of it changed while closed (jobs ending), and nominations fenced beside it.
        change_a_few(state, rng, nodes)
        fence.close(np.flatnonzero(state.topology.node_domain[-1] < 3))
        assert_aggregates_recomputed(state)
        fence.open_all()
        assert_aggregates_recomputed(state)
        assert not (state.closed & Closure.FENCE).any()


operations = st.lists(
    st.sampled_from(["close", "spare", "reopen", "open_spare", "change", "down", "up", "what_if"]),
    min_size=1,
    max_size=14,
)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 3), steps=operations)
def test_closures_of_a_block_with_changes_between_match_a_recomputation(
    seed: int, steps: list[str]
) -> None:
    # The block closed and opened for a fence or as spares (overlapping), its nodes' jobs
    # starting and ending, nodes failing and coming back, and a what-if of one rack's nodes
    # alone around a closure: after every step the aggregates equal a recomputation.
    state, rng, block = fleet(seed)
    part = block[: block.size * 2 // 3]
    for step in steps:
        if step == "close":
            state.close(block, Closure.FENCE)
        elif step == "spare":
            state.close(part, Closure.SPARE)
        elif step == "reopen":
            state.reopen(block, Closure.FENCE)
        elif step == "open_spare":
            state.reopen(part, Closure.SPARE)
        elif step == "change":
            change_a_few(state, rng, block)
        elif step in ("down", "up"):
            nodes = rng.choice(block, size=3, replace=False)
            state.set_health(nodes, Health.DOWN if step == "down" else Health.HEALTHY)
        else:
            rack = np.flatnonzero(state.topology.node_domain[-1] == _BLOCK_FIRST_RACK + 1)
            held = [f"j{node}" for node in rack.tolist() if f"j{node}" in state.allocations]
            statement = Statement(state)
            statement.free_on_nodes(
                [state.allocations[owner] for owner in held], int(rack[0]), int(rack[-1]) + 1
            )
            statement.close(block)
            statement.rollback()
        assert_aggregates_recomputed(state)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 3),
    whole=st.lists(st.integers(0, _RACKS - 1), max_size=40),
    some=st.floats(0.0, 1.0),
    from_rows=st.booleans(),
)
def test_runs_found_from_whole_domains_sum_as_node_by_node(
    seed: int, whole: list[int], some: float, from_rows: bool
) -> None:
    # Whole racks (passed over) among racks of which some nodes are taken, the first or last
    # node of a rack missing or present alone: the same runs and sums as found node by node.
    state, rng, _ = fleet(seed)
    leaves = state.topology.node_domain[-1]
    chosen = np.isin(leaves, whole) | (rng.random(state.topology.n_nodes) < some)
    nodes = np.flatnonzero(chosen & (state.closed == 0))
    arrays = state._kernel_arrays()
    expected = run_kernels.node_run_sums(nodes, arrays, from_rows)
    found = run_kernels.domain_run_sums(
        nodes, leaves, state.topology.domain_starts[-1], arrays, from_rows
    )
    for ours, theirs in zip(found, expected, strict=True):
        assert np.array_equal(ours, theirs)
