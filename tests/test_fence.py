"""The cycle's fence: which nodes are fenced, which a search sees, and the state it leaves."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Closure, ClusterState, Health
from toposched.scheduler.fence import Fence, FencedNodes, FenceMarks, NodeGroup

NODES = 8  # 2 racks x 4 nodes


def cluster() -> ClusterState:
    return ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=4))


def nodes(*indices: int) -> np.ndarray:
    return np.array(indices, dtype=np.int64)


def node_set(fenced: FencedNodes) -> set[int]:
    return set(fenced.nodes())


def cordoned(state: ClusterState) -> set[int]:
    """Nodes the state holds closed by the fence; the fence never changes a node's health."""
    assert not (state.health == np.uint8(Health.CORDONED)).any()
    return set(np.flatnonzero(state.closed & np.uint8(Closure.FENCE)).tolist())


def test_a_lifted_block_is_open_to_searches_but_still_counts_as_fenced() -> None:
    state = cluster()
    fence = Fence(state)
    fence.close(nodes(0))
    fence.close_block(nodes(4, 5, 6))
    before = fence.frozen()
    generation = fence.generation
    fence.lift()
    assert cordoned(state) == {0}
    assert fence.frozen() is before and fence.generation == generation
    assert node_set(fence.seen()) == {0}
    assert node_set(fence.fenced) == {0, 4, 5, 6}
    fence.lift()  # a second backfill in a row: nothing to do
    assert cordoned(state) == {0}
    fence.settle()
    assert cordoned(state) == {0, 4, 5, 6}
    assert fence.seen() == before
    fence.open_all()
    assert cordoned(state) == set()


def test_opening_a_node_of_the_block_keeps_the_rest_fenced() -> None:
    state = cluster()
    fence = Fence(state)
    fence.close_block(nodes(4, 5, 6))
    fence.lift()
    fence.open(nodes(5))
    assert cordoned(state) == {4, 6}
    assert node_set(fence.frozen()) == {4, 6}
    fence.open_all()
    assert cordoned(state) == set()


def group(*indices: int) -> NodeGroup:
    return NodeGroup(nodes(*indices))


def marks(*indices: int) -> np.ndarray:
    marked = np.zeros(NODES, dtype=bool)
    marked[list(indices)] = True
    return marked


def test_fenced_nodes_compare_as_sets_whatever_their_groups() -> None:
    block = group(4, 5, 6)
    with_block = FencedNodes((group(0), block))
    one_group = FencedNodes((group(0, 4, 5, 6),))
    copied_block = FencedNodes((group(0), group(4, 5, 6)))
    split = FencedNodes((group(0, 4), group(5), group(6)))
    assert with_block == one_group == copied_block == split
    assert FencedNodes((block,)) <= with_block
    assert FencedNodes((group(4),)) <= with_block
    assert not with_block <= FencedNodes((group(0),))
    assert not FencedNodes((group(1), block)) <= with_block
    assert FencedNodes() <= FencedNodes() == FencedNodes()
    assert with_block != FencedNodes((group(0, 4, 5, 7),))
    assert with_block.misses(marks(1, 2), {})
    assert not with_block.misses(marks(5), {})
    assert len(with_block) == 4


def test_a_fence_holds_nodes_another_fence_took_when_it_fences_them_all() -> None:
    # The failure memo keeps failures across cycles, each cycle with a fence of its own.
    state = cluster()
    earlier = Fence(state)
    earlier.close(nodes(0, 1))
    earlier.close(nodes(5))
    taken = earlier.frozen()
    earlier.open_all()
    later = Fence(state)
    later.close(nodes(5, 2))
    assert not later.holds(taken) and not later.equals(taken)
    later.close(nodes(1, 0))
    assert later.holds(taken) and not later.equals(taken)
    later.open(nodes(2))
    assert later.holds(taken) and later.equals(taken)
    later.open(nodes(0))
    assert not later.holds(taken)
    later.open_all()


operations = st.lists(
    st.tuples(
        st.sampled_from(["close", "close_block", "open", "lift", "settle", "down"]),
        st.lists(st.integers(0, NODES - 1), max_size=NODES),
    ),
    max_size=25,
)


@settings(max_examples=200, deadline=None)
@given(operations)
def test_the_fence_matches_a_set_model(steps: list[tuple[str, list[int]]]) -> None:
    """After any sequence the fenced nodes, those a search sees and the cluster's health and
    aggregates are what one set of fenced nodes says; `open_all` leaves the cluster as it
    was, but for nodes that went down. Whether the fence still holds the nodes fenced (or
    seen) at any earlier step, and whether those it holds now lie among them, is what the sets
    say."""
    state = cluster()
    check_against_model(state, Fence(state), steps, set())


@settings(max_examples=100, deadline=None)
@given(st.lists(operations, min_size=2, max_size=4))
def test_fences_of_consecutive_cycles_sharing_marks_match_the_set_model(
    cycles: list[list[tuple[str, list[int]]]],
) -> None:
    """A scheduler's fences reuse one set of marks, each clearing what the last one marked:
    every cycle's fence behaves as a new one, and the marks it leaves unused are clear."""
    state = cluster()
    shared = FenceMarks(NODES)
    down: set[int] = set()
    for steps in cycles:
        fence = Fence(state, shared)
        assert not shared.fenced.any() and not shared.fenced_at.any()
        check_against_model(state, fence, steps, down)
        assert not shared.scratch.any()


def check_against_model(
    state: ClusterState, fence: Fence, steps: list[tuple[str, list[int]]], down: set[int]
) -> None:
    """Run `steps` on a new `fence`, checking it against the set model after each, then open
    it all; `down`: the nodes down before, and after (nodes the steps took down)."""
    fenced: set[int] = set()
    block: set[int] = set()
    lifted = False
    taken: list[tuple[FencedNodes, set[int]]] = [(fence.frozen(), set())]
    for operation, chosen in steps:
        picked = nodes(*chosen)
        healthy = {n for n in chosen if n not in down}
        generation = fence.generation
        if operation == "close":
            fenced |= healthy
        elif operation == "close_block":
            lifted = False
            fenced |= block
            block = healthy - fenced
            fenced |= block
        elif operation == "open":
            fenced -= set(chosen)
            if block & set(chosen):
                lifted = False
                block = set()
        elif operation == "lift":
            lifted = bool(block)
        elif operation == "settle":
            lifted = False
        else:
            # A node going down outside the fence (between cycles it cannot, but the fence must
            # not fence a node that is not healthy).
            free = [n for n in chosen if n not in fenced]
            if not free:
                continue
            state.set_health(nodes(*free), Health.DOWN)
            down |= set(free)
            continue
        if operation in ("close", "close_block", "open"):
            getattr(fence, operation)(picked)
        else:
            getattr(fence, operation)()
            assert fence.generation == generation  # what a search sees changed, not the fence
        assert node_set(fence.frozen()) == fenced
        seen = fenced - block if lifted else fenced
        assert node_set(fence.seen()) == seen
        assert cordoned(state) == seen
        taken += [(fence.frozen(), set(fenced)), (fence.seen(), set(seen))]
        for earlier, earlier_nodes in taken:
            assert fence.holds(earlier) == (earlier_nodes <= fenced)
            assert fence.within(earlier) == (fenced <= earlier_nodes)
            assert fence.equals(earlier) == (earlier_nodes == fenced)
        assert fence.seen().misses(marks(*chosen), {}) == seen.isdisjoint(chosen)
    fence.open_all()
    last, last_nodes = taken[-2] if len(taken) > 1 else taken[0]
    assert fence.holds(taken[0][0]) and fence.holds(last) == (not last_nodes)
    assert all(fence.within(earlier) for earlier, _ in taken)
    assert cordoned(state) == set()
    fresh = state.compute_aggregates()
    for level, (ours, theirs) in enumerate(zip(state.free_gpus, fresh["free_gpus"], strict=True)):
        assert np.array_equal(ours, theirs), level
    for level, (hist, fresh_hist) in enumerate(
        zip(state.free_hist, fresh["free_hist"], strict=True)
    ):
        assert np.array_equal(hist, fresh_hist), level
