"""The compiled count of the fewest children of each domain that hold a gang."""

from __future__ import annotations

import numpy as np
import pytest

from toposched.placement.count_kernels import NOT_REACHED
from toposched.placement.cover_kernels import fewest_children, greedy_cover

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


def _cover(capacity: np.ndarray, need: int, emptiest: bool) -> tuple[list[int], list[int]] | None:
    """The cover written out: the k largest (lowest index on ties) short of `need`, then the
    fullest (or emptiest) of the domains after them in that order holding the rest alone."""
    order = sorted(range(capacity.size), key=lambda d: (-int(capacity[d]), d))
    if int(capacity.sum()) < need:
        return None
    picked: list[int] = []
    shares: list[int] = []
    left = need
    while int(capacity[order[len(picked)]]) < left:
        picked.append(order[len(picked)])
        shares.append(int(capacity[picked[-1]]))
        left -= shares[-1]
    holding = [d for d in order[len(picked) :] if capacity[d] >= left]
    key = (lambda d: -int(capacity[d])) if emptiest else (lambda d: int(capacity[d]))
    picked.append(min(holding, key=key))  # the first of the best, in cover order
    shares.append(left)
    return picked, shares


@pytest.mark.parametrize("seed", range(60))
def test_greedy_cover_takes_the_largest_then_the_policys_favourite(seed: int) -> None:
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 60))
    top = int(rng.choice([3, 18, 1000, 200_000]))
    capacity = rng.integers(0, top, size=size).astype(np.int64)
    if rng.random() < 0.5:
        capacity = capacity // 18 * 18  # rack slices: many equal capacities
    for need in {1, int(capacity.max(initial=0)) + 1, int(capacity.sum()), int(capacity.sum()) + 1}:
        if need < 1:
            continue
        for emptiest in (False, True):
            expected = _cover(capacity, need, emptiest)
            picked, shares = greedy_cover(capacity, need, emptiest)
            if expected is None:
                assert picked.size == 0 and shares.size == 0
            else:
                assert (picked.tolist(), shares.tolist()) == expected
