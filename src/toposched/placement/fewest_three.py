"""Fewest domains at L, L+1 and L+2 by counts, for gangs spanning several preferred domains.

Where the innermost level lies two inside the preferred level L (`preferred: zone` over blocks
of racks) and no slice layer asks for coarser multiples than the innermost domains' between
the required level and the innermost one, the least placement level by level is found over
counts, in three steps, each fixing the least of the one before:

1. the fewest L-domains, k: those whose capacities, largest first, reach the gang;
2. among placements on k of them, the fewest L+1 domains, m: the count plan's knapsack over
   (L-domains used, L+1 domains used) -> most pods (`count_kernels.knapsack_by_runs`);
3. among placements on k L-domains and m L+1 domains, the fewest innermost domains: each
   L-domain's own table over (L+1 domains, innermost domains) -> most pods (the same
   knapsack, one level in), then a knapsack over L-domains of those tables
   (`count_kernels.knapsack_of_tables`).

Amounts split freely inside the domains chosen, so each table is a sum of the largest
capacities, and the tables are as long as the counts to beat (the innermost domains of a
placement found in step 2), not as the gang.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.topology import Topology
from toposched.placement.capacity import CapacityView
from toposched.placement.count_kernels import (
    SMAWK_RUNS,
    backtrack_by_runs,
    backtrack_of_tables,
    knapsack_by_runs,
    knapsack_of_tables,
    running_sums,
    shares_largest_first,
)
from toposched.placement.fewest_counts import Shares
from toposched.placement.fewest_inside import (
    Planned,
    cover_count,
    largest_first,
    leaves_to_reach,
    planned,
)
from toposched.placement.request import GangRequest

IntArray = NDArray[np.int64]

# Work the plan may cost before it gives up: domains taking part, knapsack cells by runs (as
# `fewest_counts.MAX_RUN_CELLS`) and cells of the knapsack over L-domains' tables (about 1 ns
# each, compiled: a few milliseconds at the limit).
MAX_THREE_LEVEL_DOMAINS = 256
MAX_THREE_LEVEL_RUN_CELLS = 4_000_000
MAX_THREE_LEVEL_CELLS = 4_000_000


@dataclass(frozen=True)
class _Children:
    """The children of some domains, flattened: domain i's at `offsets[i]:offsets[i] +
    counts[i]`, their indices (at the child level) and capacities."""

    index: IntArray
    capacity: IntArray
    offsets: IntArray
    counts: IntArray


def least_three_levels(
    topology: Topology, view: CapacityView, request: GangRequest, level: int, domain: int
) -> Planned | None:
    """The least placement in `domain` (at `level`, above the preferred one), level by level
    from L to the innermost: its profile, and its layout when asked. None where the plan does
    not apply (see the module), the gang needs one L-domain or none fits it, or the plan would
    pass its limits."""
    preferred = request.preferred
    assert preferred is not None
    leaf = len(topology.domain_levels) - 1
    if preferred != leaf - 2 or level >= preferred:
        return None
    unit = request.granule(leaf)
    if any(request.granule(lv) != unit for lv in range(level + 1, leaf)):
        return None
    need = request.pods
    lo, hi = topology.descendants(level, domain, preferred)
    capacity = view.at(preferred, lo, hi)
    ranked = np.sort(capacity)[::-1]
    reach = np.cumsum(ranked)
    if reach.size == 0 or int(reach[-1]) < need:
        return None
    k = int(np.searchsorted(reach, need)) + 1
    if k < 2:
        return None
    # Only L-domains that reach the gang with the k-1 largest others can be in a cover.
    top_before, top_k = int(ranked[: k - 1].sum()), int(ranked[:k].sum())
    others = np.where(capacity >= ranked[k - 1], top_k - capacity, top_before)
    candidates = lo + np.flatnonzero((capacity > 0) & (capacity + others >= need))
    if candidates.size > MAX_THREE_LEVEL_DOMAINS:
        return None
    middle = _children(topology, view, preferred, candidates)
    inner = _children(topology, view, preferred + 1, middle.index)
    return _Plan(topology, view, k, need, candidates, middle, inner).least()


class _Plan:
    """The three steps for one required domain's candidate L-domains."""

    def __init__(
        self,
        topology: Topology,
        view: CapacityView,
        k: int,
        need: int,
        candidates: IntArray,
        middle: _Children,
        inner: _Children,
    ) -> None:
        self.topology = topology
        self.view = view
        self.k = k
        self.need = need
        self.candidates = candidates
        self.middle = middle
        self.inner = inner

    def least(self) -> Planned | None:
        fewest = self._fewest_middle()
        if fewest is None:
            return None
        m, shares = fewest
        middle, inner = self.middle, self.inner
        bound = leaves_to_reach(self.topology, self.view, middle.index, shares)
        lower = cover_count(inner.capacity, self.need)
        if bound == lower:  # no placement on these L-domains uses fewer innermost ones
            topology, view = self.topology, self.view

            def layout() -> tuple[IntArray, IntArray]:
                kept = largest_first(topology, view, middle.index, shares)
                return kept.domains, kept.pods

            return Planned((self.k, m, bound), layout)
        if _least_cells(self.k, m, lower) > MAX_THREE_LEVEL_CELLS:
            return None  # the last step would pass its limit whatever the tables hold
        # Every middle domain's running sums over its largest innermost domains, up to `bound`.
        widths = np.minimum(np.add.reduceat(inner.capacity > 0, inner.offsets), bound) + 1
        sums, starts, picks, _ = running_sums(inner.capacity, inner.offsets, inner.counts, widths)
        own, own_tables, rows = self._own_tables(sums, starts, m, bound)
        if own is None:
            return None
        width = bound + 1
        flat = np.concatenate([table.ravel() for table in own])
        offsets = np.concatenate(([0], np.cumsum([table.size for table in own]))).astype(np.int64)
        merged = knapsack_of_tables(flat, offsets, rows, width, self.k, m)
        held = merged[-1, self.k, m]
        least = int(np.searchsorted(held, self.need))
        taken = backtrack_of_tables(merged, flat, offsets, rows, self.k, m, least)
        counts = np.zeros(middle.index.size, dtype=np.int64)
        for i, (children, grandchildren) in enumerate(taken.tolist()):
            if children:
                first, last = middle.offsets[i], middle.offsets[i] + middle.counts[i]
                block = starts[first : last + 1]
                counts[first:last] = backtrack_by_runs(
                    own_tables[i],
                    sums[block[0] : block[-1]],
                    block - block[0],
                    children,
                    grandchildren,
                )
        amounts = _trimmed(sums[starts[:-1] + counts], self.need)
        positions, pods = shares_largest_first(
            inner.capacity, inner.offsets, picks, starts, counts, amounts
        )
        leaf = len(self.topology.domain_levels) - 1
        return planned(self.topology, leaf - 2, Shares(leaf, inner.index[positions], pods))

    def _fewest_middle(self) -> tuple[int, IntArray] | None:
        """Step 2: the fewest middle domains on k L-domains, and the pods of each middle domain
        in one such placement (filled with its largest innermost domains, the count to beat)."""
        middle = self.middle
        limit = int(np.add.reduceat(middle.capacity > 0, middle.offsets).sum())
        widths = np.minimum(np.add.reduceat(middle.capacity > 0, middle.offsets), limit) + 1
        sums, starts, picks, runs = running_sums(
            middle.capacity, middle.offsets, middle.counts, widths
        )
        if self.k * (limit + 1) * runs > MAX_THREE_LEVEL_RUN_CELLS:
            return None
        tables = knapsack_by_runs(sums, starts, self.k, limit, SMAWK_RUNS)
        held = tables[-1][self.k]
        if int(held[-1]) < self.need:
            return None
        m = int(np.searchsorted(held, self.need))
        counts = backtrack_by_runs(tables, sums, starts, self.k, m)
        amounts = _trimmed(sums[starts[:-1] + counts], self.need)
        positions, pods = shares_largest_first(
            middle.capacity, middle.offsets, picks, starts, counts, amounts
        )
        shares = np.zeros(middle.index.size, dtype=np.int64)
        shares[positions] = pods
        return m, shares

    def _own_tables(
        self, sums: IntArray, starts: IntArray, m: int, bound: int
    ) -> tuple[list[IntArray] | None, list[IntArray], IntArray]:
        """Step 3's own tables: per candidate L-domain, the most pods on at most a of its middle
        domains and b innermost ones (a <= m, b <= bound), with the knapsack's tables kept for
        the way back; None where the work would pass the limits."""
        middle = self.middle
        candidates = self.candidates.size
        own: list[IntArray] = []
        kept: list[IntArray] = []
        rows = np.empty(candidates, dtype=np.int64)
        run_cells, cells = 0, 0
        for i in range(candidates):
            first, last = middle.offsets[i], middle.offsets[i] + middle.counts[i]
            block = starts[first : last + 1]
            most = min(m, int(middle.counts[i]))
            rows[i] = most + 1
            run_cells += most * (bound + 1) * int(middle.counts[i]) * SMAWK_RUNS
            cells += self.k * (m + 1) * (bound + 1) * most * (bound + 1) // 2
            if run_cells > MAX_THREE_LEVEL_RUN_CELLS or cells > MAX_THREE_LEVEL_CELLS:
                return None, kept, rows
            tables = knapsack_by_runs(
                sums[block[0] : block[-1]], block - block[0], most, bound, SMAWK_RUNS
            )
            kept.append(tables)
            own.append(np.ascontiguousarray(tables[-1]))
        return own, kept, rows


def _least_cells(k: int, middle: int, leaves: int) -> int:
    """Cells the knapsack over L-domains' tables takes at least, on k of them, `middle` middle
    domains and tables as long as `leaves` innermost domains."""
    return k * (middle + 1) * (leaves + 1) * (leaves + 1) // 2


def _trimmed(amounts: IntArray, need: int) -> IntArray:
    """`amounts` less what they hold beyond `need`, taken off the last ones first (each a
    multiple of the innermost granule, as the excess is)."""
    amounts = amounts.copy()
    excess = int(amounts.sum()) - need
    for i in range(amounts.size - 1, -1, -1):
        cut = min(excess, int(amounts[i]))
        amounts[i] -= cut
        excess -= cut
    return amounts


def _children(topology: Topology, view: CapacityView, level: int, parents: IntArray) -> _Children:
    """The children of `parents` (at `level`, in order), flattened."""
    bounds = topology.descendant_bounds(level, level + 1)
    first, last = bounds[parents], bounds[parents + 1]
    span_lo = int(first.min())
    span = view.at(level + 1, span_lo, int(last.max()))
    counts = (last - first).astype(np.int64)
    offsets = (np.cumsum(counts) - counts).astype(np.int64)
    local = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(
        first - span_lo - offsets, counts
    )
    return _Children(local + span_lo, span[local], offsets, counts)
