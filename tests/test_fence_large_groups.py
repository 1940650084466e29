"""Fenced nodes of thousands of nodes per group (a reservation's block) compare as the sets
of their nodes do, whatever groups they come in."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.scheduler.fence import FencedNodes, NodeGroup

_NODES = 30_000


def split(nodes: np.ndarray, cuts: list[int]) -> tuple[NodeGroup, ...]:
    """`nodes` (sorted) as groups cut at the positions `cuts`."""
    bounds = sorted({0, nodes.size, *(cut % (nodes.size + 1) for cut in cuts)})
    return tuple(
        NodeGroup(nodes[start:end]) for start, end in zip(bounds[:-1], bounds[1:], strict=False)
    )


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    size=st.integers(4_000, 12_000),
    dropped=st.integers(0, 3),
    added=st.integers(0, 3),
    cuts=st.lists(st.integers(0, 20_000), max_size=4),
    other_cuts=st.lists(st.integers(0, 20_000), max_size=4),
)
def test_large_fenced_nodes_compare_as_sets(
    seed: int, size: int, dropped: int, added: int, cuts: list[int], other_cuts: list[int]
) -> None:
    # A block fenced now, and the nodes fenced at another moment: the same nodes but a few
    # dropped and a few others added, grouped differently.
    rng = np.random.default_rng(seed)
    block = np.sort(rng.choice(_NODES, size=size, replace=False))
    kept = np.delete(block, rng.choice(size, size=dropped, replace=False))
    others = np.setdiff1d(np.arange(_NODES), block)
    later = np.union1d(kept, rng.choice(others, size=added, replace=False))
    mine = FencedNodes(split(block, cuts))
    theirs = FencedNodes(split(later, other_cuts))
    block_set, later_set = set(block.tolist()), set(later.tolist())
    assert (mine <= theirs) == (block_set <= later_set)
    assert (theirs <= mine) == (later_set <= block_set)
    assert (mine == theirs) == (block_set == later_set)
    # Sharing a group, the rest of the nodes compared.
    shared = FencedNodes((*mine.groups[:1], NodeGroup(later[later > block[-1]])))
    expected = set(mine.groups[0].nodes.tolist()) | set(later[later > block[-1]].tolist())
    assert (shared <= theirs) == (expected <= later_set)
    assert mine <= mine
