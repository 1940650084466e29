"""The plans of `preferred: node` (`placement.fewest_nodes`) against enumeration on random
racks: the fewest nodes, then racks, then blocks, as docs/placement.md's table states."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.placement.fewest_nodes import NodeCounts, plan_nodes


def first_candidate(capacity: np.ndarray, need: int, candidates: np.ndarray) -> int:
    return int(candidates[0])


@st.composite
def racks(draw: st.DrawFn, one_value: bool) -> tuple[list[list[int]], list[int]]:
    """Node capacities per rack (2-6 racks of 0-3 nodes) and each rack's block (1-3 blocks)."""
    n = draw(st.integers(2, 6))
    values = st.just(2) if one_value else st.integers(1, 4)
    nodes = [draw(st.lists(values, min_size=0, max_size=3)) for _ in range(n)]
    blocks = sorted(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    return nodes, blocks


def counts_of(nodes: list[list[int]]) -> NodeCounts:
    values = np.array(sorted({v for rack in nodes for v in rack} or {1}), dtype=np.int64)
    table = np.array([[rack.count(int(v)) for v in values] for rack in nodes], dtype=np.int64)
    return NodeCounts(0, values, table)


def least_profile(nodes: list[list[int]], blocks: list[int], need: int) -> tuple[int, ...] | None:
    """The least (nodes, racks, blocks) over every choice of nodes holding `need` pods."""
    every = [(rack, capacity) for rack, own in enumerate(nodes) for capacity in own]
    for count in range(1, len(every) + 1):
        profiles = [
            (count, len({r for r, _ in chosen}), len({blocks[r] for r, _ in chosen}))
            for chosen in itertools.combinations(every, count)
            if sum(c for _, c in chosen) >= need
        ]
        if profiles:
            return min(profiles)
    return None


@settings(max_examples=600, deadline=None)
@given(data=st.data(), one_value=st.booleans())
def test_plan_against_enumeration(data: st.DataObject, one_value: bool) -> None:
    """Nodes and racks always the fewest; blocks too when every node holds the same count."""
    nodes, blocks = data.draw(racks(one_value))
    total = sum(sum(rack) for rack in nodes)
    need = data.draw(st.integers(2, max(total, 2)))
    plan = plan_nodes(counts_of(nodes), np.array(blocks, dtype=np.int64), need, first_candidate)
    least = least_profile(nodes, blocks, need)
    if least is None:
        assert plan is None
        return
    assert plan is not None
    exact = 3 if one_value else 2
    assert plan.profile[:exact] == least[:exact], f"{plan.profile} > {least}"
    # The plan's racks give their largest nodes and hold the gang with its excess.
    held = sum(
        sum(sorted(nodes[int(rack)], reverse=True)[: int(taken)])
        for rack, taken in zip(plan.leaves, plan.taken, strict=True)
    )
    if plan.fit:
        assert plan.profile == (1, 1, 1) and plan.fit - plan.excess == need
    else:
        assert held - plan.excess == need and int(plan.taken.sum()) == plan.profile[0]
        assert len({blocks[int(rack)] for rack in plan.leaves}) == plan.profile[2]
