"""Exact `preferred` placements: fewest domains at the preferred level, then at each inner one."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from numpy.typing import NDArray

from toposched.cluster.state import distinct
from toposched.cluster.topology import Topology
from toposched.placement.capacity import CapacityView
from toposched.placement.request import GangRequest

IntArray = NDArray[np.int64]

# Cost of an impossible amount; twice it still fits in int64, so sums need no overflow check.
IMPOSSIBLE = np.int64(1) << 61
# Work a plan may cost before the search keeps its greedy answer instead: table cells
# (amount pairs tried when merging two domains) and domains given a table (a few numpy calls
# each). About a millisecond or two on one core.
MAX_CELLS = 400_000
MAX_TABLES = 256


@dataclass(frozen=True)
class _Merged:
    """How a domain's table was built: its children's range and, per merge, the child's share."""

    level: int
    first_child: int
    splits: list[IntArray]  # splits[i][a]: units child i takes when children 0..i hold a


class FewestDomains:
    """The lexicographically least (domains at L, at L+1, ..., at the leaf level) placement.

    A dynamic programme over amounts: for every domain under the required one, the least cost
    of holding exactly `a` slice units (a = 0 .. the gang), where the cost weighs the number of
    domains used at each level from the preferred one down, every level outweighing all levels
    inside it together. Children merge by (min, +) convolution; a domain then keeps only the
    amounts its slice granule allows, so slices at any level, above the preferred one included,
    hold by construction. Exact for the capacities the view reports; its cost grows with the
    gang's size in units times the number of domains, hence `affordable` before use.
    """

    def __init__(self, topology: Topology, view: CapacityView, request: GangRequest) -> None:
        assert request.preferred is not None
        self.topology = topology
        self.view = view
        self.request = request
        self.preferred = request.preferred
        self.leaf_level = len(topology.domain_levels) - 1
        self.unit = request.granule(self.leaf_level)
        self.need = request.pods // self.unit
        self._tables: dict[tuple[int, int], IntArray] = {}
        self._merged: dict[tuple[int, int], _Merged] = {}
        self.weights = self._weights()

    def _weights(self) -> dict[int, int] | None:
        """Cost of one domain per level: each level outweighs every level inside it together."""
        weights: dict[int, int] = {}
        weight = 1
        for level in range(self.leaf_level, self.preferred - 1, -1):
            weights[level] = weight
            weight *= self.topology.n_domains(level) + 1
        return weights if weight < int(IMPOSSIBLE) else None

    # --- cost ----------------------------------------------------------------------------------
    def affordable(self, level: int, domains: IntArray) -> bool:
        """Whether plans for these domains stay within MAX_CELLS and MAX_TABLES."""
        if self.weights is None or level >= self.leaf_level:
            return False
        topology, width = self.topology, self.need + 1
        tables = domains.size
        cells = 0
        for inner in range(level + 1, self.leaf_level):
            bounds = topology.descendant_bounds(level, inner)
            counts = bounds[domains + 1] - bounds[domains]
            tables += int(counts.sum())
            # Every domain at `inner` merges into its parent's table: at most `width` long.
            if tables > MAX_TABLES or tables * width > MAX_CELLS:
                return False
            for domain in domains.tolist():
                capacity = self.view.at(inner, int(bounds[domain]), int(bounds[domain + 1]))
                cells += width * int((np.minimum(capacity // self.unit, self.need) + 1).sum())
            if cells > MAX_CELLS:
                return False
        return tables <= MAX_TABLES

    def cost(self, level: int, domain: int) -> int:
        """Least cost of holding the whole gang in `domain` (IMPOSSIBLE if it cannot)."""
        table = self._table(level, domain)
        return int(table[self.need]) if table.size > self.need else int(IMPOSSIBLE)

    def cover_is_exact(self, level: int) -> bool:
        """Whether the greedy cover's count of preferred domains under `level` is the least.

        It is when no slice layer between the two levels asks for coarser multiples than the
        preferred level's own granule: the search then covers at the preferred level directly.
        """
        return self.request.granule(level + 1) == self.request.granule(self.preferred)

    def profile(self, leaves: IntArray) -> tuple[int, ...]:
        """Domains a placement on these leaf domains uses at the preferred level and inside it."""
        topology = self.topology
        first_nodes = topology.domain_starts[self.leaf_level][leaves]
        return tuple(
            int(distinct(topology.node_domain[level][first_nodes].astype(np.int64)).size)
            for level in range(self.preferred, self.leaf_level + 1)
        )

    def lower_bounds(self, level: int, domain: int) -> tuple[int, ...]:
        """Per level from the preferred one, the fewest domains whose capacities reach the gang.

        Counted inside `domain`: no placement there uses fewer, whatever the levels above ask.
        """
        bounds = []
        for inner in range(self.preferred, self.leaf_level + 1):
            lo, hi = self.topology.descendants(level, domain, inner)
            reach = np.cumsum(np.sort(self.view.at(inner, lo, hi))[::-1])
            bounds.append(int(np.searchsorted(reach, self.request.pods)) + 1)
        return tuple(bounds)

    def weighted(self, profile: tuple[int, ...]) -> int:
        """A profile as the cost `cost` compares it with."""
        assert self.weights is not None
        return sum(
            self.weights[level] * count
            for level, count in zip(
                range(self.preferred, self.leaf_level + 1), profile, strict=True
            )
        )

    def _table(self, level: int, domain: int) -> IntArray:
        key = (level, domain)
        cached = self._tables.get(key)
        if cached is not None:
            return cached
        if level == self.leaf_level - 1:
            table = self._leaf_parent_table(level, domain)
        else:
            table = self._merge_children(level, domain)
        granule = self.request.granule(level) // self.unit
        if granule > 1:
            table[np.arange(table.size) % granule != 0] = IMPOSSIBLE
        if level >= self.preferred:
            table[1:] = np.minimum(table[1:] + self._weight(level), IMPOSSIBLE)
        self._tables[key] = table
        return table

    def _weight(self, level: int) -> int:
        assert self.weights is not None
        return self.weights.get(level, 0)

    def _leaf_parent_table(self, level: int, domain: int) -> IntArray:
        """Leaf children: the fewest that hold `a` are the largest ones (any split of `a` fits)."""
        lo, hi = self.topology.descendants(level, domain, self.leaf_level)
        ranked = np.sort(self.view.at(self.leaf_level, lo, hi) // self.unit)[::-1]
        reach = np.cumsum(ranked)
        width = min(int(reach[-1]) if reach.size else 0, self.need) + 1
        amounts = np.arange(width, dtype=np.int64)
        leaves_used = np.searchsorted(reach, amounts) + 1
        leaves_used[0] = 0
        table: IntArray = leaves_used.astype(np.int64) * self._weight(self.leaf_level)
        return table

    def _merge_children(self, level: int, domain: int) -> IntArray:
        child_level = level + 1
        lo, hi = self.topology.descendants(level, domain, child_level)
        table = np.zeros(1, dtype=np.int64)
        splits: list[IntArray] = []
        for child in range(lo, hi):
            child_table = self._table(child_level, child)
            if child == lo:  # the first child alone: it holds every amount itself
                table = child_table[: self.need + 1].copy()
                split = np.arange(table.size, dtype=np.int64)
            else:
                table, split = _min_plus(table, child_table, self.need)
            splits.append(split)
        self._merged[(level, domain)] = _Merged(child_level, lo, splits)
        return table

    # --- the plan ------------------------------------------------------------------------------
    def plan(self, level: int, domain: int) -> tuple[IntArray, IntArray]:
        """Leaf domains and pods per leaf of a least-cost placement, in depth-first order."""
        if self.cost(level, domain) >= IMPOSSIBLE:
            raise AssertionError("plan asked for a domain that cannot hold the gang")
        leaves: list[IntArray] = []
        shares: list[IntArray] = []
        self._collect(level, domain, self.need, leaves, shares)
        return np.concatenate(leaves), np.concatenate(shares) * self.unit

    def _collect(
        self, level: int, domain: int, amount: int, leaves: list[IntArray], shares: list[IntArray]
    ) -> None:
        if amount == 0:
            return
        if level == self.leaf_level - 1:
            lo, hi = self.topology.descendants(level, domain, self.leaf_level)
            capacity = self.view.at(self.leaf_level, lo, hi) // self.unit
            order = np.argsort(-capacity, kind="stable")
            reach = np.cumsum(capacity[order])
            used = int(np.searchsorted(reach, amount)) + 1
            taken = capacity[order[:used]].copy()
            taken[-1] -= int(reach[used - 1]) - amount  # the last one takes what is left
            depth_first = np.argsort(order[:used])
            leaves.append(lo + order[:used][depth_first])
            shares.append(taken[depth_first])
            return
        merged = self._merged[(level, domain)]
        amounts = [0] * len(merged.splits)
        for child in range(len(merged.splits) - 1, -1, -1):
            amounts[child] = int(merged.splits[child][amount])
            amount -= amounts[child]
        for child, child_amount in enumerate(amounts):
            self._collect(merged.level, merged.first_child + child, child_amount, leaves, shares)


def convolve_tables(
    left: IntArray, right: IntArray, limit: int, missing: np.int64, maximise: bool
) -> tuple[IntArray, IntArray]:
    """(min, +) or, with `maximise`, (max, +) convolution of two tables indexed 0..`limit`, and
    the right side's share: `best[a] = min (max) over b of left[a - b] + right[b]`, `split[a]`
    the least b that reaches it. `missing` fills the entries beyond `left`'s end."""
    width = min(left.size + right.size - 1, limit + 1)
    padded = np.full(right.size - 1 + width, missing, dtype=np.int64)
    kept = min(left.size, width)
    padded[right.size - 1 : right.size - 1 + kept] = left[:kept]
    # pairs[a, b] = left[a - b] + right[b]
    pairs = sliding_window_view(padded, right.size)[:width, ::-1] + right
    split = np.argmax(pairs, axis=1) if maximise else np.argmin(pairs, axis=1)
    best: IntArray = pairs[np.arange(width), split]
    return best, split.astype(np.int64)


def _min_plus(left: IntArray, right: IntArray, limit: int) -> tuple[IntArray, IntArray]:
    """(min, +) convolution of two cost tables, up to `limit` units (see `convolve_tables`)."""
    best, split = convolve_tables(left, right, limit, IMPOSSIBLE, maximise=False)
    return np.minimum(best, IMPOSSIBLE), split
