"""The compiled count of the fewest children of each domain that hold a gang."""

from __future__ import annotations

import numpy as np
import pytest

from toposched.placement.count_kernels import NOT_REACHED
from toposched.placement.cover_kernels import fewest_children

CELLS = 1 << 20


def _counts(children: list[list[int]], need: int, cells: int = CELLS) -> list[int]:
    span = np.array([c for domain in children for c in domain], dtype=np.int64)
    sizes = np.array([len(domain) for domain in children], dtype=np.int64)
    last = np.cumsum(sizes)
    return fewest_children(span, last - sizes, last, need, cells).tolist()


@pytest.mark.parametrize(
    ("children", "need", "counts"),
    [
        # A child holds the gang alone somewhere: 1 there, 2 elsewhere (however many it needs).
        ([[18, 0, 18], [36, 0], [1, 1, 1, 1]], 36, [2, 1, 2]),
        # Largest first: 18 + 18 reach 36, where the 10s would need more.
        ([[10, 18, 10, 18], [18, 18, 18]], 36, [2, 2]),
        ([[10, 10, 10, 10, 5], [12, 12, 12, 1]], 36, [4, 3]),
        # Rack slices of a full fleet: capacities are 0 or a whole slice.
        ([[0, 18, 0, 18, 18], [18, 0, 0, 18, 18, 18]], 54, [3, 3]),
        # Equal children, the last one taken in part.
        ([[7, 7, 7, 7, 7]], 30, [5]),
    ],
)
def test_fewest_children_largest_first(
    children: list[list[int]], need: int, counts: list[int]
) -> None:
    assert _counts(children, need) == counts


def test_children_short_of_the_need_by_table_or_by_their_number() -> None:
    children = [[5, 5], [10, 10, 10]]
    # Counted by a table of children per capacity: the first domain never reaches 25.
    assert _counts(children, 25) == [NOT_REACHED, 3]
    # More cells than allowed: counted as by sorting, the domain takes all its children.
    assert _counts(children, 25, cells=10) == [2, 3]


def test_wide_capacities_are_sorted_with_the_same_counts() -> None:
    # Capacities beyond the tally's width: each domain's children are sorted instead.
    children = [[100_000, 250_000, 90_000], [300_000, 1, 2, 3]]
    assert _counts(children, 300_005) == [2, 3]
    assert _counts(children, 400_000) == [3, NOT_REACHED]
