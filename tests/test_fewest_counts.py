"""Count plans on NVL72 blocks: gangs too large for the amount plan, where greedy is not least."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from placement_helpers import assert_valid_placement

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState
from toposched.placement import fewest, fewest_counts
from toposched.placement.capacity import CapacityView
from toposched.placement.fewest import FewestDomains
from toposched.placement.policies import BestFit, PlacementPolicy, RandomFit, Spread
from toposched.placement.request import GangRequest, simple_request
from toposched.placement.search import Placement, place

ZONE, BLOCK, RACK = 1, 2, 3
NODES_PER_RACK = 18


def blocks_with_free_nodes(
    free_nodes: Sequence[Sequence[int]], racks_per_block: int = 16
) -> ClusterState:
    """One zone of blocks of NVL72 racks; rack r of block b keeps `free_nodes[b][r]` nodes
    free (the first ones) and has the others taken whole; racks not listed are taken whole."""
    state = ClusterState(
        nvl72_cluster(zones=1, blocks_per_zone=len(free_nodes), racks_per_block=racks_per_block)
    )
    starts = state.topology.domain_starts[RACK]
    taken: list[int] = []
    for block, racks in enumerate(free_nodes):
        for rack in range(racks_per_block):
            free = racks[rack] if rack < len(racks) else 0
            first = int(starts[block * racks_per_block + rack])
            taken.extend(range(first + free, first + NODES_PER_RACK))
    nodes = np.array(taken, dtype=np.int64)
    state.allocate("others", Allocation.of(nodes, np.tile(np.arange(4), (nodes.size, 1))))
    return state


def profile(state: ClusterState, placement: Placement, levels: Sequence[int]) -> list[int]:
    return [placement.domains_used(state, level) for level in levels]


def within_the_amount_plan(state: ClusterState, request: GangRequest) -> bool:
    planner = FewestDomains(state.topology, CapacityView(state, request, False), request)
    return planner.affordable(request.required, np.array([0]))


# Block 0: 16 racks of 14 free nodes (224 pods); block 1: 11 free racks (198); block 2: 12 free
# racks (216); block 3: full. 400 pods of 4 GPUs need two blocks. Greedy takes the largest block,
# 0, whole (16 racks) and block 1 for the other 176 pods (10 racks): 26 racks. Blocks 1 and 2
# hold them in 23 racks, the fewest any 400 pods can use (22 racks hold 396).
FRAGMENTED_LARGEST_BLOCK = [[14] * 16, [18] * 11, [18] * 12, []]


# Slices of 36 pods per block, fewest racks preferred. Free pods per block (rounded to whole
# slices): block 0, 16 racks of 14 (224 -> 216); 1, 8 free racks (144); 2, 9 free racks
# (162 -> 144); 3, 16 racks of 16 (256 -> 252); 4, 16 racks of 10 (160 -> 144). Greedy covers
# the blocks first: block 3's 252 pods on 16 racks and block 1's 108 on 6: 22 racks. Blocks 1 and
# 2 with 144 pods on 8 racks each and 72 pods of block 3 on 5 racks use 21, the fewest.
SLICED_BLOCKS = [[14] * 16, [18] * 8, [18] * 9, [16] * 16, [10] * 16]

# (free nodes per rack of each block, pods of 4 GPUs, preferred level, slices,
#  (blocks, racks) with the count plans, (blocks, racks) of the greedy placement alone)
BEYOND_THE_AMOUNT_PLAN = {
    "fewest racks on the fewest blocks": (
        FRAGMENTED_LARGEST_BLOCK,
        400,
        BLOCK,
        [],
        [2, 23],
        [2, 26],
    ),
    "fewest racks with block slices": (SLICED_BLOCKS, 360, RACK, [(BLOCK, 36)], [3, 21], [2, 22]),
}


@pytest.mark.parametrize("case", BEYOND_THE_AMOUNT_PLAN.values(), ids=BEYOND_THE_AMOUNT_PLAN.keys())
@pytest.mark.parametrize(
    "policy", [BestFit(), Spread(), RandomFit(seed=3)], ids=lambda policy: policy.name
)
def test_count_plans_use_fewer_racks_than_the_greedy_placement(
    case: tuple[Any, ...], policy: PlacementPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    free_nodes, pods, preferred, slices, planned, greedy_profile = case
    state = blocks_with_free_nodes(free_nodes)
    request = simple_request(pods, 4, preferred=preferred, slices=slices)
    # The amount plan, read by runs of equal cost, reaches these gangs and finds the same least
    # at the preferred level and inside it; the count plans are checked with it switched off.
    assert within_the_amount_plan(state, request)
    exact = place(state, request, policy)
    assert isinstance(exact, Placement)
    assert_valid_placement(state, request, exact)
    levels = range(preferred, RACK + 1)
    assert profile(state, exact, levels) == planned[preferred - BLOCK :]
    monkeypatch.setattr(fewest, "MAX_CELLS", 0)
    result = place(state, request, policy)
    assert isinstance(result, Placement)
    assert_valid_placement(state, request, result)
    assert profile(state, result, (BLOCK, RACK)) == planned
    for limit in ("MAX_COUNT_CELLS", "MAX_RUN_CELLS", "MAX_EVERY_COUNT_CELLS"):
        monkeypatch.setattr(fewest_counts, limit, 0)
    greedy = place(state, request, BestFit())
    assert isinstance(greedy, Placement)
    assert profile(state, greedy, (BLOCK, RACK)) == greedy_profile


@pytest.mark.parametrize("counts_first", [True, False], ids=["by rack counts", "by block slices"])
def test_both_plans_for_slices_above_find_the_fewest_racks(
    counts_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With block slices above the preferred racks, the plan over counts of racks and the plan
    over counts of block slices find the same least; in service the cheaper one runs."""
    state = blocks_with_free_nodes(SLICED_BLOCKS)
    request = simple_request(360, 4, preferred=RACK, slices=[(BLOCK, 36)])
    monkeypatch.setattr(fewest, "MAX_CELLS", 0)
    monkeypatch.setattr(fewest_counts, "_counts_cost_less", lambda *_: counts_first)
    result = place(state, request)
    assert isinstance(result, Placement)
    assert_valid_placement(state, request, result)
    assert profile(state, result, (BLOCK, RACK)) == [3, 21]


def test_the_plan_over_slices_runs_where_rack_counts_pass_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A count plan over racks too costly for the limit, over 10 block slices cheap: the least
    placement still comes, from the slices."""
    state = blocks_with_free_nodes(SLICED_BLOCKS)
    request = simple_request(360, 4, preferred=RACK, slices=[(BLOCK, 36)])
    costs: list[tuple[int, int]] = []

    def cheaper(count_cells: int, slice_cells: int) -> bool:
        costs.append((count_cells, slice_cells))
        return count_cells <= slice_cells

    monkeypatch.setattr(fewest, "MAX_CELLS", 0)
    monkeypatch.setattr(fewest_counts, "_counts_cost_less", cheaper)
    monkeypatch.setattr(fewest_counts, "MAX_COUNT_CELLS", 1_000)
    result = place(state, request)
    assert isinstance(result, Placement)
    assert costs and all(slices <= 1_000 < counts for counts, slices in costs)
    assert profile(state, result, (BLOCK, RACK)) == [3, 21]


# 16 blocks of 150 racks, free nodes per rack: 14 on all; 18 on 60; 18 on 70; 16 on all; 10 on
# all; 18 on 50 and 9 on 100; 14 on 120; 17 on all (twice over). 7,020 pods of 4 GPUs in block
# slices of 18 need at least 392 racks: the 360 racks of 18 free nodes hold 6,480 pods, and 32
# racks of 17 the other 540 (no 391 racks hold more). Both plans cost over 400,000 cells.
LARGE_SLICED_BLOCKS = [
    [14] * 150,
    [18] * 60,
    [18] * 70,
    [16] * 150,
    [10] * 150,
    [18] * 50 + [9] * 100,
    [14] * 120,
    [17] * 150,
] * 2


def test_plans_for_slices_above_run_past_their_former_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Small block slices on blocks of many racks: the plans for a slice layer above L cost more
    than 400,000 cells (the limit they had), run within `MAX_COUNT_CELLS` and find the least
    racks, where the greedy placement takes more (the amount plan off; on, it finds as few)."""
    state = blocks_with_free_nodes(LARGE_SLICED_BLOCKS, racks_per_block=150)
    request = simple_request(7_020, 4, preferred=RACK, slices=[(BLOCK, 18)])
    exact = place(state, request)  # the amount plan, in steps of a block slice, reaches it
    assert isinstance(exact, Placement) and exact.domains_used(state, RACK) == 392
    monkeypatch.setattr(fewest, "MAX_CELLS", 0)
    costs: list[tuple[int, int]] = []
    cheaper = fewest_counts._counts_cost_less

    def noted(count_cells: int, slice_cells: int) -> bool:
        costs.append((count_cells, slice_cells))
        return cheaper(count_cells, slice_cells)

    monkeypatch.setattr(fewest_counts, "_counts_cost_less", noted)
    result = place(state, request)
    assert isinstance(result, Placement)
    assert_valid_placement(state, request, result)
    assert result.domains_used(state, RACK) == 392
    assert costs and all(400_000 < min(cells) <= fewest_counts.MAX_COUNT_CELLS for cells in costs)
    for counts_first in (True, False):
        monkeypatch.setattr(fewest_counts, "_counts_cost_less", lambda *_, f=counts_first: f)
        both = place(state, request)
        assert isinstance(both, Placement) and both.domains_used(state, RACK) == 392
    monkeypatch.setattr(fewest_counts, "MAX_COUNT_CELLS", 400_000)
    greedy = place(state, request)
    assert isinstance(greedy, Placement) and greedy.domains_used(state, RACK) == 439


def test_the_knapsack_over_every_count_runs_past_its_former_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """4,000 pods in block slices of 40, preferring blocks, on `LARGE_SLICED_BLOCKS`: two
    blocks. Racks of 18 free nodes are only in blocks 1, 2 and 5; with the largest other block
    (2,520 pods in whole slices) blocks 1 and 2 cannot reach 4,000, and block 5 must then hold
    1,480 or more, on 115 racks (its 50 of 18 and 65 of 9), the other block 2,200 or more on
    racks of at most 17, 130 more. Without them racks hold at most 17 pods: 236 racks at least,
    which the two blocks of 17-node racks give (2,000 pods on 118 racks each). Racks hold no
    whole number of slices, so the knapsack over every count of racks runs: over 1M cells (the
    amount plan off; on, it finds the same)."""
    state = blocks_with_free_nodes(LARGE_SLICED_BLOCKS, racks_per_block=150)
    request = simple_request(4_000, 4, preferred=BLOCK, slices=[(BLOCK, 40)])
    exact = place(state, request)  # the amount plan, in steps of a block slice, reaches it
    assert isinstance(exact, Placement) and profile(state, exact, (BLOCK, RACK)) == [2, 236]
    monkeypatch.setattr(fewest, "MAX_CELLS", 0)
    cells: list[int] = []
    knapsack = fewest_counts._knapsack

    def noted(kernels: list[np.ndarray], k: int, limit: int, need: int) -> list[int] | None:
        cells.append(k * (limit + 1) * sum(kernel.size for kernel in kernels))
        return knapsack(kernels, k, limit, need)

    monkeypatch.setattr(fewest_counts, "_knapsack", noted)
    result = place(state, request)
    assert isinstance(result, Placement)
    assert_valid_placement(state, request, result)
    assert profile(state, result, (BLOCK, RACK)) == [2, 236]
    assert cells and all(400_000 < count <= fewest_counts.MAX_EVERY_COUNT_CELLS for count in cells)
    monkeypatch.setattr(fewest_counts, "MAX_EVERY_COUNT_CELLS", 400_000)
    greedy = place(state, request)
    assert isinstance(greedy, Placement)
    assert profile(state, greedy, (BLOCK, RACK)) == [2, 297]


def test_count_tables_convolve_by_max_plus() -> None:
    """`_max_plus` keeps, for every count, the most pods and the right side's share."""
    left = np.array([0, 5, 7], dtype=np.int64)  # domains of 5 and 2 pods
    right = np.array([0, 6, 6], dtype=np.int64)  # one domain of 6 pods (and an empty one)
    best, split = fewest_counts._max_plus(left, right, limit=3)
    assert best.tolist() == [0, 6, 11, 13]
    assert split.tolist() == [0, 1, 1, 1]


@settings(max_examples=300, deadline=None)
@given(
    domains=st.lists(
        st.lists(st.integers(1, 5), min_size=1, max_size=5).map(lambda c: sorted(c, reverse=True)),
        min_size=1,
        max_size=4,
    ),
    data=st.data(),
)
def test_both_knapsacks_match_a_brute_force_over_children_counts(
    domains: list[list[int]], data: st.DataObject
) -> None:
    """For children's capacities per domain (largest first), the most pods on at most k
    domains and j children, every j, by enumeration; and each knapsack's least placement."""
    k = data.draw(st.integers(1, len(domains)), label="k")
    limit = sum(len(children) for children in domains)
    kernels = [np.concatenate(([0], np.cumsum(children))).astype(np.int64) for children in domains]
    most = [0] * (limit + 1)
    for counts in itertools.product(*(range(len(children) + 1) for children in domains)):
        if sum(1 for count in counts if count) <= k:
            pods = sum(int(kernel[count]) for kernel, count in zip(kernels, counts, strict=True))
            for j in range(sum(counts), limit + 1):
                most[j] = max(most[j], pods)
    # By runs for every domain, then by SMAWK for every domain.
    tables = fewest_counts.knapsack_over_runs(kernels, k, limit, smawk_runs=limit + 1)
    assert tables[-1][k].tolist() == most
    assert (fewest_counts.knapsack_over_runs(kernels, k, limit, smawk_runs=0) == tables).all()
    need = data.draw(st.integers(1, most[-1]), label="need")
    starts = np.cumsum([0] + [kernel.size for kernel in kernels]).astype(np.int64)
    least = next(j for j, pods in enumerate(most) if pods >= need)
    for taken in (
        fewest_counts._backtrack_runs(tables, np.concatenate(kernels), starts, k, need),
        fewest_counts._knapsack([kernel.copy() for kernel in kernels], k, limit, need),
    ):
        assert taken is not None
        assert sum(taken) == least and sum(1 for count in taken if count) <= k
        assert sum(int(kernel[count]) for kernel, count in zip(kernels, taken, strict=True)) >= need


def test_every_tied_required_domain_is_ranked_by_count_plans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """19 zones of two blocks of two racks, 20 pods of 4 GPUs in one zone, fewest blocks then
    racks, the amount plan switched off. Zones 0-17 keep 9 free nodes in every rack: two
    blocks, three racks (18 + 2 pods). Zone 18 keeps one whole rack free in each block: two
    blocks, two racks. Best fit alone takes zone 0 (equal free capacity, lower index)."""
    zones = 19
    state = ClusterState(nvl72_cluster(zones=zones, blocks_per_zone=2, racks_per_block=2))
    starts = state.topology.domain_starts[RACK]
    taken: list[int] = []
    for rack in range(zones * 4):
        free = 9 if rack < (zones - 1) * 4 else (NODES_PER_RACK if rack % 2 == 0 else 0)
        first = int(starts[rack])
        taken.extend(range(first + free, first + NODES_PER_RACK))
    nodes = np.array(taken, dtype=np.int64)
    state.allocate("others", Allocation.of(nodes, np.tile(np.arange(4), (nodes.size, 1))))
    request = simple_request(20, 4, required=ZONE, preferred=BLOCK)
    monkeypatch.setattr(FewestDomains, "affordable", lambda *_: False)
    result = place(state, request, BestFit())
    assert isinstance(result, Placement)
    assert_valid_placement(state, request, result)
    assert profile(state, result, (ZONE, BLOCK, RACK)) == [1, 2, 2]
    assert int(state.topology.node_domain[ZONE][result.allocation.nodes[0]]) == zones - 1
