"""Exact `preferred` placements: fewest domains at the preferred level, then at each inner one."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import distinct
from toposched.cluster.topology import Topology
from toposched.placement.amount_kernels import (
    IMPOSSIBLE,
    leaf_parent_tables,
    min_plus_by_runs,
)
from toposched.placement.capacity import CapacityView
from toposched.placement.count_kernels import fewest_node_counts
from toposched.placement.fewest_inside import Planned, least_inside_by_counts
from toposched.placement.fewest_three import least_three_levels
from toposched.placement.request import GangRequest

IntArray = NDArray[np.int64]

# Work a plan may cost before the search keeps its greedy answer instead: table cells (a
# merge reads its result's length times the runs of equal cost of one side, `merge_cells`;
# about 1-2 ns each, compiled) and domains given a table (a compiled call or two each).
# About a millisecond or two on one core at the limits.
MAX_CELLS = 1_000_000
MAX_TABLES = 256
# Domains the plans over counts compare at once (each within its own limits): beyond it, the
# policy ranks them as before.
MAX_COUNTED_DOMAINS = 32
# Parents times capacities up to which innermost domains are counted by capacity, not sorted.
_COUNTED_CELLS = 1 << 20


@dataclass(frozen=True)
class _Merged:
    """How a domain's table was built: its children's range and, per merge, the child's share."""

    level: int
    first_child: int
    step: int  # the children's granule in units: amounts below count in steps of it
    splits: list[IntArray]  # splits[i][a]: steps child i takes when children 0..i hold a steps


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
        # Domains planned by counts (`affordable`): leaves and pods per leaf.
        self._counted: dict[tuple[int, int], Planned] = {}
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
        """Whether least plans for these domains stay within the limits: the amount plan's
        (MAX_CELLS, MAX_TABLES), or, where the innermost level lies two inside the preferred
        one, the plans over counts, run here: in a preferred domain, the count plan one level
        further in (`least_inside_by_counts`); above, over three levels (`least_three_levels`)."""
        if self.weights is None or level >= self.leaf_level:
            return False
        if self._amounts_affordable(level, domains):
            for domain in domains.tolist():
                self._counted.pop((level, domain), None)  # planned by amounts, as it always was
            return True
        if self.preferred != self.leaf_level - 2 or domains.size > MAX_COUNTED_DOMAINS:
            return False
        topology, view, request = self.topology, self.view, self.request
        for domain in domains.tolist():
            if (level, domain) in self._counted:
                continue
            if level == self.preferred:
                plan = least_inside_by_counts(topology, view, request, domain)
            else:
                plan = least_three_levels(topology, view, request, level, domain)
            if plan is None:
                return False
            self._counted[(level, domain)] = plan
        return True

    def _amounts_affordable(self, level: int, domains: IntArray) -> bool:
        """Whether amount plans for these domains stay within MAX_CELLS and MAX_TABLES."""
        topology = self.topology
        tables = domains.size
        for inner in range(level + 1, self.leaf_level):
            bounds = topology.descendant_bounds(level, inner)
            tables += int((bounds[domains + 1] - bounds[domains]).sum())
        if tables > MAX_TABLES:
            return False
        cells = 0
        for domain in domains.tolist():
            cells += self.merge_cells(level, domain)
            if cells > MAX_CELLS:
                return False
        return True

    def merge_cells(self, level: int, domain: int) -> int:
        """A bound, before any work, on the cells `min_plus_by_runs` reads building `domain`'s
        table: every merge of a child into its parent costs the parent's table length times the
        child's runs of equal cost.

        Children merge on multiples of their granule only, so a child has at most one run per
        such multiple; and without slices inside it (below its own level), its table never
        falls as the amount grows, so its runs are at most its distinct costs: the product, over
        the weighted levels inside it, of one more than the domains it may use there (those with
        room; for innermost domains, the most that any amount up to the gang takes)."""
        topology, need, leaf_parent = self.topology, self.need, self.leaf_level - 1
        if leaf_parent <= level:
            return 0
        parents_lo, parents_hi = topology.descendants(level, domain, leaf_parent)
        leaves_used = self._leaves_used(parents_lo, parents_hi)
        cells = 0
        for child_level in range(level + 1, self.leaf_level):
            lo, hi = topology.descendants(level, domain, child_level)
            width = np.minimum(self.view.at(child_level, lo, hi) // self.unit, need) + 1
            granule = self.request.granule(child_level) // self.unit
            runs = (width - 1) // granule + 1
            if self.request.granule(child_level + 1) == self.unit:
                offsets = topology.descendant_bounds(child_level, leaf_parent)[lo:hi] - parents_lo
                product = np.add.reduceat(leaves_used, offsets) + 1
                for inner in range(max(child_level + 1, self.preferred), self.leaf_level):
                    inner_lo, inner_hi = topology.descendants(level, domain, inner)
                    room = (self.view.at(inner, inner_lo, inner_hi) > 0).astype(np.int64)
                    offsets = topology.descendant_bounds(child_level, inner)[lo:hi] - inner_lo
                    product = np.minimum(product * (np.add.reduceat(room, offsets) + 1), runs)
                runs = np.minimum(product, runs)
            cells += self._merged_cells(level, domain, child_level, runs)
        return cells

    def _merged_cells(self, level: int, domain: int, child_level: int, runs: IntArray) -> int:
        """Cells of merging the children at `child_level` under `domain` (their `runs` each)
        into their parents: each parent's table length, in steps of the children's granule,
        times the runs of all but its first."""
        topology, parent_level = self.topology, child_level - 1
        step = self.request.granule(child_level) // self.unit  # merged in steps of it
        lo, hi = topology.descendants(level, domain, child_level)
        parents_lo, parents_hi = topology.descendants(level, domain, parent_level)
        capacity = self.view.at(parent_level, parents_lo, parents_hi) // self.unit
        starts = topology.descendant_bounds(parent_level, child_level)[parents_lo:parents_hi]
        width = np.minimum(capacity, self.need) // step + 1
        merged = np.repeat(width, np.diff(np.append(starts, hi)))
        merged *= runs
        merged[starts - lo] = 0  # each parent's first child is copied, not merged
        return int(merged.sum())

    def _leaves_used(self, lo: int, hi: int) -> IntArray:
        """For parents of innermost domains `lo:hi`, the most innermost domains their table
        uses for any amount: the fewest, largest first, that reach the gang or all they hold."""
        leaf = self.leaf_level
        bounds = self.topology.descendant_bounds(leaf - 1, leaf)
        counts = np.diff(bounds[lo : hi + 1])
        capacity = self.view.at(leaf, int(bounds[lo]), int(bounds[hi])) // self.unit
        offsets = bounds[lo:hi] - bounds[lo]
        room = np.add.reduceat((capacity > 0).astype(np.int64), offsets)
        total = np.add.reduceat(capacity, offsets)
        largest = int(capacity.max()) if capacity.size else 0
        if not (total > self.need).any() or (hi - lo) * (largest + 1) > _COUNTED_CELLS:
            return room
        segment = np.repeat(np.arange(hi - lo, dtype=np.int64), counts)
        by_capacity = np.bincount(
            segment * (largest + 1) + capacity, minlength=(hi - lo) * (largest + 1)
        ).reshape(hi - lo, largest + 1)[:, 1:]
        values = np.arange(1, largest + 1, dtype=np.int64)
        fewest = fewest_node_counts(values, by_capacity, self.need)
        used: IntArray = np.where(total > self.need, fewest, room)
        return used

    def cost(self, level: int, domain: int) -> int:
        """Least cost of holding the whole gang in `domain` (IMPOSSIBLE if it cannot)."""
        if (level, domain) in self._counted:
            return self.weighted(self._counted[(level, domain)].profile)
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
            self._leaf_parent_tables(domain, domain + 1)
            return self._tables[key]
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

    def _leaf_parent_tables(self, lo: int, hi: int) -> None:
        """Tables of parents of leaf domains `lo:hi`, in one compiled pass: the fewest leaves
        that hold `a` are the largest ones (any split of `a` fits)."""
        level, leaf = self.leaf_level - 1, self.leaf_level
        bounds = self.topology.descendant_bounds(level, leaf)
        capacity = self.view.at(leaf, int(bounds[lo]), int(bounds[hi])) // self.unit
        tables, starts = leaf_parent_tables(
            capacity,
            bounds[lo : hi + 1] - bounds[lo],
            self.need,
            self._weight(leaf),
            self._weight(level) if level >= self.preferred else 0,
            self.request.granule(level) // self.unit,
            int(IMPOSSIBLE),
        )
        for i in range(hi - lo):
            self._tables[(level, lo + i)] = tables[starts[i] : starts[i + 1]]

    def _merge_children(self, level: int, domain: int) -> IntArray:
        child_level = level + 1
        lo, hi = self.topology.descendants(level, domain, child_level)
        if child_level == self.leaf_level - 1 and (child_level, lo) not in self._tables:
            self._leaf_parent_tables(lo, hi)
        # Children hold multiples of their granule only: their tables merge on those alone.
        step = self.request.granule(child_level) // self.unit
        limit = self.need // step
        table = np.zeros(1, dtype=np.int64)
        splits: list[IntArray] = []
        for child in range(lo, hi):
            child_table = self._table(child_level, child)[::step]
            if child == lo:  # the first child alone: it holds every amount itself
                table = child_table[: limit + 1].copy()
                split = np.arange(table.size, dtype=np.int64)
            else:
                table, split = _min_plus(table, child_table, limit)
            splits.append(split)
        self._merged[(level, domain)] = _Merged(child_level, lo, step, splits)
        if step == 1:
            return table
        spread = np.full((table.size - 1) * step + 1, IMPOSSIBLE, dtype=np.int64)
        spread[::step] = table
        return spread

    # --- the plan ------------------------------------------------------------------------------
    def plan(self, level: int, domain: int) -> tuple[IntArray, IntArray]:
        """Leaf domains and pods per leaf of a least-cost placement, in depth-first order."""
        if (level, domain) in self._counted:
            return self._counted[(level, domain)].layout()
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
            amounts[child] = int(merged.splits[child][amount // merged.step]) * merged.step
            amount -= amounts[child]
        for child, child_amount in enumerate(amounts):
            self._collect(merged.level, merged.first_child + child, child_amount, leaves, shares)


def _min_plus(left: IntArray, right: IntArray, limit: int) -> tuple[IntArray, IntArray]:
    """(min, +) convolution of two cost tables, up to `limit` units: `convolve_tables`'s
    least and split, compiled and read by runs of equal cost (`min_plus_by_runs`)."""
    best, split = min_plus_by_runs(left, right, limit, int(IMPOSSIBLE))
    return best, split
