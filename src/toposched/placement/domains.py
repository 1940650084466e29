"""Choosing a gang's domains top-down: the required domain, then the domains inside it at
each level down to the innermost, with the fewest domains at the preferred level."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.topology import Topology
from toposched.placement.capacity import CapacityView
from toposched.placement.cover_kernels import fewest_children, greedy_cover
from toposched.placement.fewest import FewestDomains
from toposched.placement.fewest_counts import FewestByCount, Shares
from toposched.placement.policies import PlacementPolicy, fills_emptiest_first
from toposched.placement.request import GangRequest

__all__ = ["DomainChoice", "cover_count", "in_rank_order"]

IntArray = NDArray[np.int64]

# Domains times their children's widest capacity plus one up to which a domain whose children
# do not reach a gang counts `NOT_REACHED`, and beyond which the number of its children
# (`cover_kernels.fewest_children`).
_COUNTED_CELLS = 1 << 20


class DomainChoice:
    """The innermost domains a gang's pods go to and the pods each takes, for one capacity view.

    Chosen domains come as `(leaves, shares)`: innermost domain indices and the pods each
    holds. Methods return None where the view's capacities over-promised (aggregates that CPU or
    memory bind on some nodes).
    """

    def __init__(
        self,
        topology: Topology,
        view: CapacityView,
        request: GangRequest,
        policy: PlacementPolicy,
    ) -> None:
        self.topology = topology
        self.view = view
        self.request = request
        self.policy = policy
        # Whether the policy fills emptiest first (None: another order, asked of the policy).
        self.emptiest = fills_emptiest_first(policy)
        self.leaf_level = len(topology.domain_levels) - 1
        self.fewest: FewestDomains | None = None  # the exact planner, built on first use
        # Count plans by (level, domain, greedy profile): ranking the required domains may
        # already have planned the chosen one.
        self.count_plans: dict[tuple[int, int, tuple[int, ...]], Shares | None] = {}

    def best(self, capacity: IntArray, need: int, candidates: IntArray | None = None) -> int:
        """Index (into `capacity`) of the policy's favourite among domains that hold `need`."""
        if candidates is None:
            candidates = (capacity >= need).nonzero()[0]
        scores = self.policy.domain_scores(capacity[candidates], need)
        return int(candidates[scores.argmin()])

    def _planner(self) -> FewestDomains:
        if self.fewest is None:
            self.fewest = FewestDomains(self.topology, self.view, self.request)
        return self.fewest

    def least_preferred(
        self, level: int, domain: int, leaves: IntArray, shares: IntArray
    ) -> tuple[IntArray, IntArray] | None:
        """The greedy placement, or a least one where that uses fewer domains (when cheap).

        None when capacities over-promised while filling the replacement.
        """
        topology, preferred = self.topology, self.request.preferred
        assert preferred is not None
        in_preferred = topology.node_domain[preferred][
            topology.domain_starts[self.leaf_level][leaves]
        ]
        if (in_preferred == in_preferred[0]).all():
            return self._least_inside_one(preferred, int(in_preferred[0]), leaves, shares)
        planner = self._planner()
        if planner.cover_is_exact(level) and preferred == self.leaf_level:
            return leaves, shares  # the fewest preferred domains, and no level inside them
        profile = planner.profile(leaves)
        if planner.affordable(level, np.array([domain])):
            if profile == planner.lower_bounds(level, domain):
                return leaves, shares  # no level can do with fewer domains
            if planner.weighted(profile) > planner.cost(level, domain):
                return planner.plan(level, domain)
            return leaves, shares
        # Beyond the amount plan's limits: count plans, for one level each.
        better = self._count_plan(level, domain, profile)
        return (leaves, shares) if better is None else self._fill_shares(better)

    def _least_inside_one(
        self, preferred: int, domain: int, leaves: IntArray, shares: IntArray
    ) -> tuple[IntArray, IntArray]:
        """The descent's placement inside one preferred `domain`, or, where levels lie deeper
        than the one inside it and the amount plan is within its limits for `domain` alone,
        its least placement there, level by level (the descent's count one level inside the
        preferred one is already the least, so the plan keeps it)."""
        if preferred >= self.leaf_level - 1:
            return leaves, shares
        planner = self._planner()
        if not planner.affordable(preferred, np.array([domain])):
            return leaves, shares
        if planner.weighted(planner.profile(leaves)) > planner.cost(preferred, domain):
            return planner.plan(preferred, domain)
        return leaves, shares

    def _least_cost(self, preferred: int, domains: IntArray) -> NDArray[np.bool_]:
        """Which of `domains` (preferred ones, each holding the gang on the fewest children)
        hold it at the amount plan's least cost, level by level inside them: all of them where
        no level lies deeper than their children or the plan is beyond its limits."""
        every = np.ones(domains.size, dtype=np.bool_)
        if domains.size == 1 or preferred >= self.leaf_level - 1:
            return every
        planner = self._planner()
        if not planner.affordable(preferred, domains):
            return every
        cost = np.array([planner.cost(preferred, int(d)) for d in domains], dtype=np.int64)
        least: NDArray[np.bool_] = cost == cost.min()
        return least

    def _count_plan(self, level: int, domain: int, profile: tuple[int, ...]) -> Shares | None:
        """A placement in `domain` using fewer domains than the greedy one's `profile`, by a
        count plan: one level inside the preferred one when the cover's count of preferred
        domains is the least (no slice layer between), else at the preferred level."""
        key = (level, domain, profile)
        if key in self.count_plans:
            return self.count_plans[key]
        counting = FewestByCount(self.topology, self.view, self.request)
        if self._planner().cover_is_exact(level):
            plan = counting.fewer_inside(level, domain, profile[0], profile[1])
        else:
            plan = counting.fewer_preferred(level, domain, profile[0])
        self.count_plans[key] = plan
        return plan

    def _fill_shares(self, shares: Shares) -> tuple[IntArray, IntArray] | None:
        """`fill` of every domain of `shares` with its pods, in order."""
        if shares.level == self.leaf_level:
            return shares.domains, shares.pods
        if shares.level == self.leaf_level - 1:
            return self._fill_leaf_parents(shares.domains, shares.pods)
        return self._concatenated(
            [
                self.fill(shares.level, int(d), int(p))
                for d, p in zip(shares.domains, shares.pods, strict=True)
            ]
        )

    def choose_required(self, level: int, candidates: IntArray, capacity: IntArray) -> int:
        preferred = self.request.preferred
        if preferred is None or preferred <= level or candidates.size == 1:
            return int(candidates[self.best(capacity, self.request.pods)])
        # Prefer the required domain needing the fewest preferred-level domains; then policy.
        preferred_capacity = self.view.at(preferred, 0, self.topology.n_domains(preferred))
        bounds = self.topology.descendant_bounds(level, preferred)
        counts = np.empty(candidates.size, dtype=np.int64)
        for i, domain in enumerate(candidates):
            inside = preferred_capacity[bounds[domain] : bounds[domain + 1]]
            counts[i] = cover_count(inside, self.request.pods)
        fewest = counts == counts.min()
        if (
            counts.min() == 1
            and preferred < self.leaf_level
            and int(fewest.sum()) > 1
            and not self.children_alike(preferred)
        ):
            # One preferred domain holds the gang: rank by the fewest children one needs.
            fewest &= self._inner_least(level, candidates, preferred_capacity, bounds)
        # The exact planner only when no candidate holds the gang in one preferred domain.
        planner = self._planner() if counts.min() > 1 else None
        if planner is not None and not (
            planner.cover_is_exact(level) and preferred == self.leaf_level
        ):
            # No single preferred domain holds the gang, and the cover counts may be loose
            # (slices above the preferred level) or tie on levels inside it: rank by exact
            # least cost when cheap.
            tied = candidates if not planner.cover_is_exact(level) else candidates[fewest]
            if tied.size > 1 and planner.affordable(level, tied):
                cost = np.array([planner.cost(level, int(d)) for d in tied], dtype=np.int64)
                fewest = np.isin(candidates, tied[cost == cost.min()])
            elif tied.size > 1:
                # Beyond the amount plan, by count plans: with exact cover counts, candidates
                # tied on the fewest preferred domains are told apart one level inside them;
                # else the preferred domains each candidate needs are counted afresh.
                least = self._least_counts(level, tied)
                fewest = np.isin(candidates, tied[least == least.min()])
        best = self.best(np.where(fewest, capacity, -1), self.request.pods)
        return int(candidates[best])

    def _inner_least(
        self, level: int, candidates: IntArray, preferred_capacity: IntArray, bounds: IntArray
    ) -> NDArray[np.bool_]:
        """Of required domains `candidates`, those holding the gang in a preferred domain that
        needs the fewest children over all of them (`bounds`: their preferred domains)."""
        need = self.request.pods
        holders = [
            bounds[d] + np.flatnonzero(preferred_capacity[bounds[d] : bounds[d + 1]] >= need)
            for d in candidates.tolist()
        ]
        owner = np.repeat(np.arange(candidates.size), [h.size for h in holders])
        assert self.request.preferred is not None
        inner = self._inner_cover_counts(self.request.preferred, np.concatenate(holders), need)
        least = np.full(candidates.size, np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(least, owner, inner)
        tied: NDArray[np.bool_] = least == least.min()
        return tied

    def children_alike(self, level: int) -> bool:
        """Whether every domain one level inside `level` holds either no pod or exactly one
        granule of them (pods of whole GPUs; capacities there are whole granules): none has
        nodes enough for two. Then every domain at `level` that holds a gang needs as many
        children as any other, the gang's granules, so counting them ranks nothing; a gang of
        whole-rack slices on racks of one slice's nodes is so."""
        request = self.request
        if request.gpus_per_pod == 0 or request.is_fractional:
            return False
        inner = level + 1
        most_pods = self.topology.most_nodes(inner) * int(self.view.pods_per_free.max())
        return most_pods < 2 * request.granule(inner)

    def _inner_cover_counts(self, level: int, domains: IntArray, need: int) -> IntArray:
        """For each of `domains` (at `level`, each holding `need`), the fewest children whose
        capacities reach `need`, largest first (`cover_kernels.fewest_children`). Where a child
        of some domain holds it all, 1 for those domains and 2 for the others: only the least
        counts."""
        bounds = self.topology.descendant_bounds(level, level + 1)
        first, last = bounds[domains], bounds[domains + 1]
        span_lo = int(first.min())
        span = self.view.at(level + 1, span_lo, int(last.max()))
        return fewest_children(span, first - span_lo, last - span_lo, need, _COUNTED_CELLS)

    def _least_counts(self, level: int, domains: IntArray) -> IntArray:
        """For each of `domains` (at `level`), the count `_count_plan` minimises (domains one
        level inside the preferred one, or preferred domains): its plan's, or the greedy
        placement's where the plan finds no fewer or would pass its limits.

        Candidates are planned in the order of a lower bound (the fewest domains at the counted
        level whose capacities reach the gang, whatever else is asked), and not at all once
        their bound exceeds the least count found: such a candidate keeps its bound, which
        ranks it behind."""
        planner = self._planner()
        counted = 1 if planner.cover_is_exact(level) else 0
        assert self.request.preferred is not None
        counted_level = self.request.preferred + counted
        least = np.empty(domains.size, dtype=np.int64)
        for i, domain in enumerate(domains.tolist()):
            lo, hi = self.topology.descendants(level, domain, counted_level)
            least[i] = cover_count(self.view.at(counted_level, lo, hi), self.request.pods)
        best = np.iinfo(np.int64).max
        for i in np.argsort(least, kind="stable").tolist():
            if least[i] > best:
                break  # this bound and every later one exceed the least found
            domain = int(domains[i])
            greedy = self.fill(level, domain, self.request.pods)
            if greedy is None:
                least[i] = np.iinfo(np.int64).max  # capacities over-promised: ranked last
                continue
            profile = planner.profile(greedy[0])
            better = self._count_plan(level, domain, profile)
            least[i] = profile[counted] if better is None else better.domains.size
            best = min(best, int(least[i]))
        return least

    def fill(self, level: int, domain: int, need: int) -> tuple[IntArray, IntArray] | None:
        """Leaf domains under `domain` and the pods each takes; None if capacity over-promised."""
        if level == self.leaf_level:
            return np.array([domain], dtype=np.int64), np.array([need], dtype=np.int64)
        topology, request = self.topology, self.request
        preferred = request.preferred
        target = preferred if preferred is not None and preferred > level else level + 1
        lo, hi = topology.descendants(level, domain, target)
        capacity = self.view.at(target, lo, hi)
        candidates = (capacity >= need).nonzero()[0]
        if candidates.size > 1 and target == preferred and target < self.leaf_level:
            # Preferred domains that hold the gang: those needing the fewest children.
            if not self.children_alike(target):
                inner = self._inner_cover_counts(target, lo + candidates, need)
                candidates = candidates[inner == inner.min()]
            candidates = candidates[self._least_cost(target, lo + candidates)]
        if candidates.size:
            return self.fill(target, lo + self.best(capacity, need, candidates), need)
        # No single domain holds it: split where the domain count is minimised. Skipping
        # intermediate levels is only sound when they impose no coarser slices.
        split = target if request.granule(level + 1) == request.granule(target) else level + 1
        if split != target:
            lo, hi = topology.descendants(level, domain, split)
            capacity = self.view.at(split, lo, hi)
        cover = self._cover(capacity, need)
        if cover is None:
            return None
        picked, shares = cover
        if split == self.leaf_level:
            return lo + picked, shares
        if split == self.leaf_level - 1:
            return self._fill_leaf_parents(lo + picked, shares)
        return self._concatenated(
            [self.fill(split, lo + int(p), int(s)) for p, s in zip(picked, shares, strict=True)]
        )

    @staticmethod
    def _concatenated(
        parts: list[tuple[IntArray, IntArray] | None],
    ) -> tuple[IntArray, IntArray] | None:
        if any(part is None for part in parts):
            return None
        return (
            np.concatenate([part[0] for part in parts if part is not None]),
            np.concatenate([part[1] for part in parts if part is not None]),
        )

    def _fill_leaf_parents(
        self, parents: IntArray, needs: IntArray
    ) -> tuple[IntArray, IntArray] | None:
        """`fill` of each parent of leaf domains, in order; those taken whole all at once.

        A parent whose need is all its leaves hold (every parent but the last, for a large gang)
        gives each leaf with room its whole capacity, largest first: what `_cover` returns, found
        here with one pass over all such parents instead of a few numpy calls per parent.
        """
        leaf = self.leaf_level
        bounds = self.topology.descendant_bounds(leaf - 1, leaf)
        first, counts = bounds[parents], bounds[parents + 1] - bounds[parents]
        span_lo = int(first.min())
        span = self.view.at(leaf, span_lo, int((first + counts).max()))
        offsets = counts.cumsum() - counts
        index = np.arange(int(counts.sum()), dtype=np.int64) + (first - span_lo - offsets).repeat(
            counts
        )
        capacity = span[index]
        # Parents are never empty, so no reduceat segment is.
        whole = np.add.reduceat(capacity, offsets) == needs
        if not whole.any():
            return self._concatenated(
                [self.fill(leaf - 1, int(p), int(s)) for p, s in zip(parents, needs, strict=True)]
            )
        taken = (capacity > 0) & np.repeat(whole, counts)
        positive = capacity[taken]
        if positive.size and positive.min() != positive.max():
            # Largest first within each parent (stable), as `_cover` ranks them.
            segment = np.repeat(np.arange(parents.size, dtype=np.int64), counts)
            order = np.lexsort((-capacity, segment))
            order = order[taken[order]]
        else:
            order = np.flatnonzero(taken)
        leaves, shares = span_lo + index[order], capacity[order]
        ends = np.cumsum(np.add.reduceat(taken, offsets))
        parts: list[tuple[IntArray, IntArray] | None] = []
        for i, (parent, need) in enumerate(zip(parents.tolist(), needs.tolist(), strict=True)):
            if whole[i]:
                start = int(ends[i - 1]) if i else 0
                part = (leaves[start : ends[i]], shares[start : ends[i]])
                # The one candidate for the last leaf, as `_cover` asks the policy (which keeps a
                # random policy's draws the same).
                self.policy.domain_scores(part[1][-1:], int(part[1][-1]))
                parts.append(part)
            else:
                parts.append(self.fill(leaf - 1, parent, need))
        return self._concatenated(parts)

    def _cover(self, capacity: IntArray, need: int) -> tuple[IntArray, IntArray] | None:
        """Fewest domains whose capacities reach `need`: the largest ones, then a best fit.

        Taking the k-1 largest and then the policy's favourite among those that hold the rest
        uses the minimum number of domains k, and leaves the larger remaining domains whole.
        """
        if self.emptiest is not None:
            picked, shares = greedy_cover(capacity, need, self.emptiest)
            return (picked, shares) if picked.size else None
        # Array methods rather than numpy's functions: the same calls without their wrappers,
        # which weigh on arrays this small.
        order = (-capacity).argsort(kind="stable")
        ranked = capacity[order]
        cumulative = ranked.cumsum()
        if cumulative.size == 0 or cumulative[-1] < need:
            return None
        k = int(cumulative.searchsorted(need))
        remainder = need - (int(cumulative[k - 1]) if k else 0)
        # The domains after the k largest that hold the rest come first in `ranked`.
        holding = k + int(np.count_nonzero(ranked[k:] >= remainder))
        scores = self.policy.domain_scores(ranked[k:holding], remainder)
        picked = order[: k + 1].copy()
        picked[k] = order[k + int(scores.argmin())]
        shares = ranked[: k + 1].copy()
        shares[k] = remainder
        return picked, shares


def in_rank_order(
    topology: Topology, leaves: IntArray, shares: IntArray
) -> tuple[IntArray, IntArray]:
    """Leaf domains reordered so that the pods of every domain at every level are consecutive
    ranks: grouped under each ancestor, groups in the order the search chose their first leaf
    (a search's order, largest first, is kept where it already groups). Slices stay whole: each
    domain of a slice level holds a multiple of its slice, so every one begins on a boundary."""
    if leaves.size < 2 or bool((leaves[1:] > leaves[:-1]).all()):
        return leaves, shares  # index order: depth-first, grouped at every level
    first_nodes = topology.domain_starts[-1][leaves]
    keys: list[IntArray] = [np.arange(leaves.size, dtype=np.int64)]
    for level in range(len(topology.domain_levels) - 2, 0, -1):  # inner levels first
        ancestors = topology.node_domain[level][first_nodes]
        _, first_seen, inverse = np.unique(ancestors, return_index=True, return_inverse=True)
        keys.append(first_seen[inverse].astype(np.int64))
    order = np.lexsort(keys)  # the last key, the outermost level, sorts first
    return leaves[order], shares[order]


def cover_count(capacity: IntArray, need: int) -> int:
    """Fewest domains whose capacities sum to `need` (a large number if impossible)."""
    if capacity.size and capacity.max() >= need:
        return 1  # the common case, without sorting
    cumulative = np.cumsum(np.sort(capacity)[::-1])
    if cumulative.size == 0 or cumulative[-1] < need:
        return np.iinfo(np.int64).max
    return int(np.searchsorted(cumulative, need)) + 1
