"""The count plans' compiled running sums (`count_kernels.running_sums`) against numpy: each
domain's largest children in a stable sort's order (ties by position), their running sums, and
the runs of equal capacity; small capacities are counted, large or negative ones sorted."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.placement.count_kernels import SMAWK_RUNS, running_sums


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 40), min_size=1, max_size=6),
    st.sampled_from([3, 20, 1_000_000]),
    st.booleans(),
    st.integers(0, 2**32 - 1),
)
def test_running_sums_match_a_stable_sort(
    sizes: list[int], high: int, negative: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    counts = np.array(sizes, dtype=np.int64)
    offsets = np.cumsum(counts) - counts
    children = rng.integers(-high if negative else 0, high + 1, int(counts.sum()))
    widths = np.array([int(rng.integers(1, n + 2)) for n in sizes], dtype=np.int64)
    sums, starts, picks, runs = running_sums(children, offsets, counts, widths)
    expected_runs = 0
    for i, (first, count, width) in enumerate(zip(offsets, counts, widths, strict=True)):
        own = children[first : first + count]
        pick = np.argsort(-own, kind="stable")[: width - 1]
        assert picks[starts[i] - i : starts[i + 1] - i - 1].tolist() == pick.tolist()
        kernel = np.concatenate(([0], np.cumsum(own[pick])))
        assert sums[starts[i] : starts[i + 1]].tolist() == kernel.tolist()
        ranked = own[pick]
        expected_runs += min(int(np.count_nonzero(ranked[1:] != ranked[:-1])) + 1, SMAWK_RUNS)
    assert runs == expected_runs
