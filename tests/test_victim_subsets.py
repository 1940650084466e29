"""The victim search's subset tables against plain enumeration."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from toposched.scheduler.victim_arrays import all_subsets, one_node_subsets, subset_sums

# Candidates (rows) by nodes (columns): the whole GPUs each frees on each node.
freed_tables = st.integers(1, 12).flatmap(
    lambda count: st.integers(1, 8).flatmap(
        lambda nodes: arrays(np.int64, (count, nodes), elements=st.sampled_from([0, 0, 1, 2, 4]))
    )
)


@settings(max_examples=200, deadline=None)
@given(freed_tables)
def test_one_node_subsets_are_the_subsets_whose_candidates_share_a_node(freed: np.ndarray) -> None:
    count, nodes = freed.shape
    expected = [
        index
        for index, subset in enumerate(all_subsets(count).tolist())
        if not any(subset)
        or any(
            all(freed[row, node] > 0 for row in range(count) if subset[row])
            for node in range(nodes)
        )
    ]
    assert one_node_subsets(freed).tolist() == expected


@settings(max_examples=100, deadline=None)
@given(freed_tables)
def test_subset_sums_add_up_each_subsets_rows(freed: np.ndarray) -> None:
    assert np.array_equal(subset_sums(freed), all_subsets(freed.shape[0]) @ freed)
