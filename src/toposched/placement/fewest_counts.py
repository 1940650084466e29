"""Exact `preferred` placements by counting domains, for gangs too large for the amount plan."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.topology import Topology
from toposched.placement.amount_kernels import IMPOSSIBLE, convolve_tables
from toposched.placement.capacity import CapacityView
from toposched.placement.count_kernels import (
    SMAWK_RUNS,
    backtrack_by_runs,
    knapsack_by_runs,
    knapsack_every_count,
    running_sums,
    shares_largest_first,
)
from toposched.placement.request import GangRequest

IntArray = NDArray[np.int64]

# An amount no choice reaches: below every real one; adding any amount to it stays negative.
UNREACHABLE = -(np.int64(1) << 61)
# Work a count plan may cost before the search keeps its greedy answer: table cells (pairs of
# counts tried) and domains given a table (a few numpy calls each). Each merge is one numpy
# pass over many cells, about 2-3 ns each: placements near the limit took 11-14 ms on the
# 1M-GPU fleet, a few MB at peak (docs/placement.md).
MAX_COUNT_CELLS = 4_000_000
MAX_COUNT_TABLES = 256
# The same for the compiled knapsack (`knapsack_over_runs`): table cells times each domain's
# runs of equal children, at most SMAWK_RUNS; about 5 ns each, 20 ms at the limit.
MAX_RUN_CELLS = 4_000_000
# The same for the compiled knapsack over every count of children (`_knapsack`): table cells
# times the children each domain may take, about 1-2 ns each (12 ms or so at the limit); and
# the choices it keeps for the way back, one per domain and cell (5 bytes each).
MAX_EVERY_COUNT_CELLS = 12_000_000
MAX_EVERY_COUNT_CHOICES = 4_000_000


@dataclass(frozen=True)
class Shares:
    """Pods per domain of one level: a placement down to `level`, to be filled inside."""

    level: int
    domains: IntArray
    pods: IntArray


@dataclass(frozen=True)
class _Merged:
    """How a domain's count table was built: its children's range and, per merge, their share."""

    level: int
    first_child: int
    splits: list[IntArray]  # splits[i][j]: domains child i counts when children 0..i count j
    tables: list[IntArray]  # each child's own table


class FewestByCount:
    """Fewest domains found by dynamic programmes over domain counts rather than pod amounts.

    A count table gives, for every count `j` of domains at the level minimised, the most pods a
    domain can hold using at most `j` of them. Its length follows the count to beat (the greedy
    placement's, less one), not the gang's size, so gangs of thousands of slices cost no more
    than the domains they need. Two cases, by what lies between the required and the preferred
    level L:

    - no slice layer (`inside`): the greedy cover already uses the fewest L-domains, k; among
      choices of k of them, the fewest domains one level inside L. Every L-domain's table is the
      running sum of its children's capacities, largest first, and L-domains combine as a
      knapsack over (L-domains used, children used).
    - a slice layer (`preferred`): the fewest L-domains, honouring every granule above L. A
      domain at the innermost slice level above L reads its table off its L-descendants'
      capacities, largest first; outer domains combine their children by (max, +) convolution
      over counts, each rounding down to its granule. When the gang holds few slices of that
      innermost slice level, tables indexed by slices are shorter (`_SliceUnits`): the same
      least, by (min, +) convolution of the fewest preferred domains per count of slices.

    Both are exact for the capacities the view reports; `None` means the greedy count is
    already the least, or finding out would cost more than the limits.
    """

    def __init__(self, topology: Topology, view: CapacityView, request: GangRequest) -> None:
        assert request.preferred is not None
        self.topology = topology
        self.view = view
        self.request = request
        self.preferred = request.preferred
        self.leaf_level = len(topology.domain_levels) - 1
        self.need = request.pods

    # --- no slice layer between required and preferred ----------------------------------------
    def fewer_inside(
        self, level: int, domain: int, preferred_count: int, inside_count: int
    ) -> Shares | None:
        """On `preferred_count` preferred domains, the fewest domains one level inside them.

        A placement using fewer than `inside_count` of those, the least such, as pods per inner
        domain; None when none uses fewer or the search would pass the limits. Assumes no slice
        layer between `level` and the preferred level, and `preferred_count` the least count.
        """
        topology, view, need = self.topology, self.view, self.need
        outer, inner = self.preferred, self.preferred + 1
        limit = inside_count - 1
        inner_lo, inner_hi = topology.descendants(level, domain, inner)
        inner_capacity = view.at(inner, inner_lo, inner_hi)
        if not _fewer_may_reach(inner_capacity, limit, need, quick=True):
            return None  # no choice of preferred domains does better (the large-gang case)
        lo, hi = topology.descendants(level, domain, outer)
        capacity = view.at(outer, lo, hi)
        # Only domains that reach the gang with the k-1 largest others can be in a cover.
        k = preferred_count
        ranked = np.sort(capacity)[::-1]
        top_before, top_k = int(ranked[: k - 1].sum()), int(ranked[:k].sum())
        # Beside one of the k-1 largest, the rest of the k largest; beside any other, the k-1
        # largest (for one as large as the k-th, both are the same).
        others = np.where(capacity >= ranked[k - 1], top_k - capacity, top_before)
        candidates = np.flatnonzero((capacity > 0) & (capacity + others >= need))
        if candidates.size > MAX_COUNT_TABLES:
            return None
        bounds = topology.descendant_bounds(outer, inner)
        first, last = bounds[lo + candidates], bounds[lo + candidates + 1]
        span_lo = int(first[0])
        span = inner_capacity[span_lo - inner_lo : int(last[-1]) - inner_lo]
        counts = last - first
        offsets = np.cumsum(counts) - counts
        index = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(
            first - span_lo - offsets, counts
        )
        children = span[index]
        if not _fewer_may_reach(children, limit, need):
            return None
        # Domains are never empty, so no reduceat segment is.
        widths = np.minimum(np.add.reduceat(children > 0, offsets), limit) + 1
        granule = self.request.granule(outer)
        sums, starts, flat_picks, runs = running_sums(children, offsets, counts, widths)
        kernels = [sums[starts[i] : starts[i + 1]] for i in range(offsets.size)]
        # When every child holds whole granules, each domain's running sum is linear over every
        # run of children of equal capacity, and the knapsack merges it run by run.
        linear = bool((children % granule == 0).all())
        if linear and k * (limit + 1) * runs <= MAX_RUN_CELLS:
            tables = knapsack_by_runs(sums, starts, k, limit, SMAWK_RUNS)
            taken_counts = _backtrack_runs(tables, sums, starts, k, need)
        elif (
            k * (limit + 1) * int(widths.sum()) <= MAX_EVERY_COUNT_CELLS
            and k * (limit + 1) * widths.size <= MAX_EVERY_COUNT_CHOICES
        ):
            for kernel in kernels:
                kernel[1:] = kernel[1:] // granule * granule
            taken_counts = _knapsack(kernels, k, limit, need)
        else:
            return None
        if taken_counts is None:
            return None
        amounts = [int(kernels[i][m]) for i, m in enumerate(taken_counts)]
        _trim(amounts, sum(amounts) - need)
        taken = np.array(taken_counts, dtype=np.int64)
        positions, pods = shares_largest_first(
            children, offsets, flat_picks, starts, taken, np.array(amounts, dtype=np.int64)
        )
        return Shares(inner, index[positions] + span_lo, pods)

    # --- a slice layer between required and preferred ----------------------------------------
    def fewer_preferred(self, level: int, domain: int, preferred_count: int) -> Shares | None:
        """The fewest preferred domains, if fewer than `preferred_count`, honouring all slices.

        Pods per preferred domain of a least placement; None when none uses fewer or both plans
        would pass the limits. Of the two plans, the one with the shorter tables runs: indexed by
        preferred domains (up to the count to beat) or by slices of the innermost slice level
        above L (up to the gang's count of them).
        """
        topology, view, request, need = self.topology, self.view, self.request, self.need
        outer = self.preferred
        limit = preferred_count - 1
        granule = request.granule(outer)
        # The innermost level above the preferred one with a coarser granule: inside it, amounts
        # split freely between preferred domains.
        flat = next(lv for lv in range(outer - 1, level, -1) if request.granule(lv) > granule)
        slice_pods = request.granule(flat)
        slices = need // slice_pods
        lo, hi = topology.descendants(level, domain, outer)
        capacity = view.at(outer, lo, hi)
        if not _fewer_may_reach(capacity, limit, need, quick=True):
            return None
        positive = (capacity > 0).astype(np.int64)
        tables, count_cells, slice_cells = 1, 0, 0
        for inner in range(level + 1, flat + 1):
            inner_lo, inner_hi = topology.descendants(level, domain, inner)
            offsets = topology.descendant_bounds(inner, outer)[inner_lo:inner_hi] - lo
            tables += offsets.size
            if tables > MAX_COUNT_TABLES:
                return None
            count_widths = np.minimum(np.add.reduceat(positive, offsets), limit) + 1
            count_cells += (limit + 1) * int(count_widths.sum())
            held = np.add.reduceat(capacity, offsets) // slice_pods
            slice_cells += (slices + 1) * int((np.minimum(held, slices) + 1).sum())
        if min(count_cells, slice_cells) > MAX_COUNT_CELLS:
            return None
        if not _fewer_may_reach(capacity, limit, need):
            return None
        domains: list[IntArray] = []
        pods: list[IntArray] = []
        if _counts_cost_less(count_cells, slice_cells):
            planner = _SlicedCounts(self, flat, limit, lo, capacity)
            reach = planner.table(level, domain)
            if reach[-1] < need:
                return None
            least = int(np.searchsorted(reach, need))
            planner.collect(level, domain, least, need, domains, pods)
        else:
            units = _SliceUnits(self, flat, slices, lo, capacity)
            fewest = units.table(level, domain)
            if fewest.size <= slices or int(fewest[slices]) > limit:
                return None
            units.collect(level, domain, slices, domains, pods)
        return Shares(outer, np.concatenate(domains), np.concatenate(pods))


class _SlicePlan:
    """What both plans for a slice layer above L read: the preferred domains' capacities inside
    the required domain, and the innermost slice level above L (`flat`)."""

    def __init__(self, owner: FewestByCount, flat: int, first: int, capacity: IntArray) -> None:
        self.topology = owner.topology
        self.request = owner.request
        self.preferred = owner.preferred
        self.flat = flat
        self.first = first  # index of the first preferred domain in `capacity`
        self.capacity = capacity

    def _own(self, level: int, domain: int) -> tuple[int, IntArray]:
        """The first preferred domain under `domain` and the capacities of all of them."""
        lo, hi = self.topology.descendants(level, domain, self.preferred)
        return lo, self.capacity[lo - self.first : hi - self.first]


class _SlicedCounts(_SlicePlan):
    """Count tables of the domains between the required level and the innermost slice above L."""

    def __init__(
        self, owner: FewestByCount, flat: int, limit: int, first: int, capacity: IntArray
    ) -> None:
        super().__init__(owner, flat, first, capacity)
        self.limit = limit
        self.merged: dict[tuple[int, int], _Merged] = {}

    def table(self, level: int, domain: int) -> IntArray:
        """Most pods `domain` holds on at most j preferred domains, j = 0 .. the limit."""
        if level == self.flat:
            _, own = self._own(level, domain)
            ranked = np.sort(own)[::-1][: self.limit]
            table = np.zeros(int(np.count_nonzero(ranked)) + 1, dtype=np.int64)
            table[1:] = np.cumsum(ranked[: table.size - 1])
        else:
            lo, hi = self.topology.descendants(level, domain, level + 1)
            tables = [self.table(level + 1, child) for child in range(lo, hi)]
            table = tables[0]
            splits = [np.arange(table.size, dtype=np.int64)]
            for child_table in tables[1:]:
                table, split = _max_plus(table, child_table, self.limit)
                splits.append(split)
            self.merged[(level, domain)] = _Merged(level + 1, lo, splits, tables)
        granule = self.request.granule(level)
        if granule > 1:
            table = table // granule * granule
        return table

    def collect(
        self,
        level: int,
        domain: int,
        count: int,
        amount: int,
        domains: list[IntArray],
        pods: list[IntArray],
    ) -> None:
        """Append `amount` pods on at most `count` preferred domains of `domain`, depth-first."""
        if amount == 0:
            return
        if level == self.flat:
            lo, own = self._own(level, domain)
            chosen = np.sort(np.argsort(-own, kind="stable")[:count])
            # Largest first keeps the count; depth-first order keeps slices of outer levels whole.
            share = _fill_largest_first(own[chosen], amount)
            domains.append(lo + chosen[share > 0])
            pods.append(share[share > 0])
            return
        merged = self.merged[(level, domain)]
        child_counts = [0] * len(merged.splits)
        for child in range(len(merged.splits) - 1, -1, -1):
            child_counts[child] = int(merged.splits[child][count])
            count -= child_counts[child]
        amounts = [int(table[c]) for table, c in zip(merged.tables, child_counts, strict=True)]
        _trim(amounts, sum(amounts) - amount)
        for child, (child_count, child_amount) in enumerate(
            zip(child_counts, amounts, strict=True)
        ):
            self.collect(
                merged.level, merged.first_child + child, child_count, child_amount, domains, pods
            )


class _SliceUnits(_SlicePlan):
    """Least preferred domains per count of slices, for the domains between the required level
    and the innermost slice level above L, in that level's slices (min, +).

    For a domain at the innermost slice level, holding `s` slices takes the fewest of its
    preferred domains whose capacities, largest first, reach s slices' pods; further out,
    children merge by (min, +) convolution over slices, and a domain keeps only the counts its
    own granule allows. Tables are as long as the gang in slices: short when slices are large.
    """

    def __init__(
        self, owner: FewestByCount, flat: int, slices: int, first: int, capacity: IntArray
    ) -> None:
        super().__init__(owner, flat, first, capacity)
        self.slices = slices
        self.slice_pods = owner.request.granule(flat)
        self.merged: dict[tuple[int, int], list[IntArray]] = {}

    def table(self, level: int, domain: int) -> IntArray:
        """Fewest preferred domains `domain` needs to hold s slices, s = 0 .. the gang's slices
        (IMPOSSIBLE where it cannot)."""
        if level == self.flat:
            _, own = self._own(level, domain)
            reach = np.cumsum(np.sort(own)[::-1])
            most = min(self.slices, int(reach[-1]) // self.slice_pods)
            table = np.zeros(most + 1, dtype=np.int64)
            wanted = self.slice_pods * np.arange(1, most + 1, dtype=np.int64)
            table[1:] = np.searchsorted(reach, wanted) + 1
            return table
        lo, hi = self.topology.descendants(level, domain, level + 1)
        tables = [self.table(level + 1, child) for child in range(lo, hi)]
        table = tables[0]
        splits = [np.arange(table.size, dtype=np.int64)]
        for child_table in tables[1:]:
            table, split = convolve_tables(
                table, child_table, self.slices, IMPOSSIBLE, maximise=False
            )
            table = np.minimum(table, IMPOSSIBLE)
            splits.append(split)
        self.merged[(level, domain)] = splits
        ratio = self.request.granule(level) // self.slice_pods
        if ratio > 1:
            table = table.copy()
            table[np.arange(table.size) % ratio != 0] = IMPOSSIBLE
        return table

    def collect(
        self, level: int, domain: int, slices: int, domains: list[IntArray], pods: list[IntArray]
    ) -> None:
        """Append `slices` slices on the fewest preferred domains of `domain`, depth-first."""
        if slices == 0:
            return
        if level == self.flat:
            lo, own = self._own(level, domain)
            count = int(self.table(level, domain)[slices])
            chosen = np.sort(np.argsort(-own, kind="stable")[:count])
            # Largest first keeps the count; depth-first order keeps slices of outer levels whole.
            share = _fill_largest_first(own[chosen], slices * self.slice_pods)
            domains.append(lo + chosen[share > 0])
            pods.append(share[share > 0])
            return
        splits = self.merged[(level, domain)]
        shares = [0] * len(splits)
        for child in range(len(splits) - 1, -1, -1):
            shares[child] = int(splits[child][slices])
            slices -= shares[child]
        first_child = self.topology.descendants(level, domain, level + 1)[0]
        for child, child_slices in enumerate(shares):
            self.collect(level + 1, first_child + child, child_slices, domains, pods)


def _knapsack(kernels: list[IntArray], k: int, limit: int, need: int) -> list[int] | None:
    """Children taken in each domain of a least placement on at most `k` domains and `limit`
    children holding `need` pods (None if none), a domain taking m children holding
    `kernel[m]`: (max, +) over every m, one domain at a time (`knapsack_every_count`)."""
    sizes = np.array([kernel.size for kernel in kernels], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    table, used, taken = knapsack_every_count(
        np.concatenate(kernels), offsets, k, limit, int(UNREACHABLE)
    )
    reach = table[k]
    if reach[limit] < need:
        return None
    taken_counts = [0] * len(kernels)
    d, j = k, int(np.searchsorted(reach, need))
    for i in range(len(kernels) - 1, -1, -1):
        if d and used[i, d - 1, j]:
            taken_counts[i] = int(taken[i, d - 1, j])
            d, j = d - 1, j - taken_counts[i]
    return taken_counts


def knapsack_over_runs(
    kernels: list[IntArray], k: int, limit: int, smawk_runs: int = SMAWK_RUNS
) -> IntArray:
    """`_knapsack`'s tables before each domain and after the last (`tables[i][d, j]`), for
    kernels that are running sums of children's capacities, largest first: a compiled pass
    over each run of children of equal capacity, or SMAWK for a domain of more than
    `smawk_runs` runs (`count_kernels.knapsack_by_runs`)."""
    sizes = np.array([kernel.size for kernel in kernels], dtype=np.int64)
    offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    tables: IntArray = knapsack_by_runs(np.concatenate(kernels), offsets, k, limit, smawk_runs)
    return tables


def _backtrack_runs(
    tables: IntArray, sums: IntArray, starts: IntArray, k: int, need: int
) -> list[int] | None:
    """Children taken in each domain of a least placement, from `knapsack_by_runs` over the
    running sums `sums` (domain i's at `starts[i]:starts[i + 1]`)."""
    reach = tables[-1][k]
    if reach[-1] < need:
        return None
    taken: list[int] = backtrack_by_runs(
        tables, sums, starts, k, int(np.searchsorted(reach, need))
    ).tolist()
    return taken


def backtrack_runs(
    tables: IntArray, kernels: list[IntArray], domains: int, children: int
) -> list[int]:
    """Children taken in each domain by a choice reaching `tables[-1][domains, children]` (the
    most pods on at most that many domains and children, from `knapsack_over_runs`)."""
    sizes = np.array([kernel.size for kernel in kernels], dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    taken: list[int] = backtrack_by_runs(
        tables, np.concatenate(kernels), starts, domains, children
    ).tolist()
    return taken


def _counts_cost_less(count_cells: int, slice_cells: int) -> bool:
    """Whether the plan over preferred-domain counts is the cheaper of the two (ties: it)."""
    return count_cells <= slice_cells


def _fewer_may_reach(capacity: IntArray, limit: int, need: int, quick: bool = False) -> bool:
    """Whether `limit` of these domains may hold `need`: the largest ones, cheapest test first.

    `quick` stops after the test against the largest capacity (no partition of the array).
    """
    if limit <= 0 or capacity.size == 0 or limit * int(capacity.max()) < need:
        return False
    if quick:
        return True
    if limit >= capacity.size:
        return int(capacity.sum()) >= need
    largest = np.partition(capacity, capacity.size - limit)[capacity.size - limit :]
    return int(largest.sum()) >= need


def _trim(amounts: list[int], excess: int) -> None:
    """Take `excess` pods off the last amounts (each a multiple of what the excess is)."""
    for i in range(len(amounts) - 1, -1, -1):
        if excess <= 0:
            return
        cut = min(excess, amounts[i])
        amounts[i] -= cut
        excess -= cut


def _fill_largest_first(capacity: IntArray, amount: int) -> IntArray:
    """Pods per domain, in the given order, when `amount` fills these domains largest first."""
    order = np.argsort(-capacity, kind="stable")
    ranked = capacity[order]
    before = np.cumsum(ranked) - ranked
    result: IntArray = np.empty_like(ranked)
    result[order] = np.minimum(np.maximum(amount - before, 0), ranked)
    return result


def _max_plus(left: IntArray, right: IntArray, limit: int) -> tuple[IntArray, IntArray]:
    """(max, +) convolution of two count tables, up to `limit` domains (see `convolve_tables`)."""
    return convolve_tables(left, right, limit, UNREACHABLE, maximise=True)
