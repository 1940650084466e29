"""The amount plan's compiled parts against plain numpy, and its cost bound against its work."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray
from test_placement_exact import SEEDS, medium_case

from toposched.placement import fewest
from toposched.placement.amount_kernels import (
    IMPOSSIBLE,
    convolve_tables,
    cost_runs,
    leaf_parent_tables,
    min_plus_by_runs,
)
from toposched.placement.capacity import CapacityView
from toposched.placement.fewest import FewestDomains

IntArray = NDArray[np.int64]


@st.composite
def cost_tables(draw: st.DrawFn) -> IntArray:
    """A table as the plan holds them: costs that never fall (a domain's weight, then its
    inner domains'), or any costs, with amounts off a granule impossible or not."""
    size = draw(st.integers(1, 40))
    if draw(st.booleans()):
        steps = draw(st.lists(st.integers(0, 3), min_size=size, max_size=size))
        table = np.cumsum(steps).astype(np.int64) * draw(st.sampled_from([1, 7, 100]))
    else:
        table = np.array(
            draw(st.lists(st.integers(0, 9), min_size=size, max_size=size)), dtype=np.int64
        )
    granule = draw(st.sampled_from([1, 1, 2, 3]))
    table[np.arange(size) % granule != 0] = IMPOSSIBLE
    if draw(st.booleans()):
        table[draw(st.integers(0, size - 1))] = IMPOSSIBLE
    return table


@settings(max_examples=400, deadline=None)
@given(left=cost_tables(), right=cost_tables(), limit=st.integers(0, 90))
def test_merging_by_runs_matches_every_pair(left: IntArray, right: IntArray, limit: int) -> None:
    """The least of every pair and its least share of the right side, as numpy finds them by
    trying every pair; impossible where no pair of possible costs reaches the amount."""
    best, split = convolve_tables(left, right, limit, IMPOSSIBLE, maximise=False)
    best = np.minimum(best, IMPOSSIBLE)
    merged, merged_split = min_plus_by_runs(left, right, limit, int(IMPOSSIBLE))
    assert merged.tolist() == best.tolist()
    possible = best < IMPOSSIBLE
    assert merged_split[possible].tolist() == split[possible].tolist()


@settings(max_examples=200, deadline=None)
@given(
    parents=st.lists(st.lists(st.integers(0, 9), min_size=1, max_size=8), min_size=1, max_size=5),
    need=st.integers(1, 40),
    own_weight=st.sampled_from([0, 9]),
    granule=st.sampled_from([1, 2, 4]),
)
def test_parents_of_leaves_in_one_pass(
    parents: list[list[int]], need: int, own_weight: int, granule: int
) -> None:
    """Each parent's table: for every amount up to the gang (or all it holds), the fewest of
    its leaves, largest first, that hold it, weighed; off the granule impossible."""
    capacity = np.array([c for leaves in parents for c in leaves], dtype=np.int64)
    offsets = np.cumsum([0] + [len(leaves) for leaves in parents]).astype(np.int64)
    tables, starts = leaf_parent_tables(
        capacity, offsets, need, 3, own_weight, granule, int(IMPOSSIBLE)
    )
    for i, leaves in enumerate(parents):
        reach = np.cumsum(sorted(leaves, reverse=True))
        expected = [0]
        for amount in range(1, min(int(reach[-1]), need) + 1):
            used = int(np.searchsorted(reach, amount)) + 1
            cost = 3 * used + own_weight if amount % granule == 0 else int(IMPOSSIBLE)
            expected.append(cost)
        assert tables[starts[i] : starts[i + 1]].tolist() == expected


@contextmanager
def counted_merges(cells: list[int]) -> Iterator[None]:
    """Every merge's cells as `min_plus_by_runs` reads them: its result's length times the
    fewer runs of its two sides."""
    merge = fewest._min_plus

    def counted(left: IntArray, right: IntArray, limit: int) -> tuple[IntArray, IntArray]:
        best, split = merge(left, right, limit)
        runs = min(
            cost_runs(left, best.size, int(IMPOSSIBLE)),
            cost_runs(right, best.size, int(IMPOSSIBLE)),
        )
        cells.append(best.size * runs)
        return best, split

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fewest, "_min_plus", counted)
        yield


@pytest.mark.parametrize("seed", SEEDS[:30])
def test_the_cost_bound_holds_before_any_work(seed: int) -> None:
    """`merge_cells`, read off capacities before any table, is at least the cells the merges
    then read, on the medium clusters of the exact-solver test."""
    case = medium_case(seed)
    state, request = case.state, case.request
    assert request.preferred is not None
    planner = FewestDomains(state.topology, CapacityView(state, request, False), request)
    level = request.required
    for domain in range(state.topology.n_domains(level)):
        cells: list[int] = []
        with counted_merges(cells):
            planner.cost(level, domain)
        assert sum(cells) <= planner.merge_cells(level, domain), f"{case}, domain {domain}"
