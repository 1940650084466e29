"""The gang placement search: aggregates reject, domains are chosen top-down, nodes filled last."""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np
from numpy.typing import NDArray

from toposched.cluster import kernels
from toposched.cluster.state import MILLI_PER_GPU, Allocation, ClusterState
from toposched.cluster.statement import Statement
from toposched.cluster.topology import Topology
from toposched.placement.capacity import CapacityView, pods_per_free
from toposched.placement.fewest import FewestDomains
from toposched.placement.fewest_counts import FewestByCount, Shares
from toposched.placement.fewest_nodes import UNREACHABLE, fewest_nodes, node_cover_counts
from toposched.placement.jobspec import JobSpec
from toposched.placement.leaf_kernel import fill_leaves, place_in_one_leaf
from toposched.placement.policies import BestFit, PlacementPolicy, fills_emptiest_first
from toposched.placement.request import GangRequest

IntArray = NDArray[np.int64]

_ONE_POD = np.ones(1, dtype=np.int64)
_ONE_POD.flags.writeable = False


@dataclass(frozen=True)
class Placement:
    """Where every pod of a gang runs: `allocation.nodes[p]` and `allocation.gpus[p]`."""

    request: GangRequest
    allocation: Allocation

    def domains_used(self, state: ClusterState, level: int) -> int:
        """How many distinct domains at `level` the gang touches."""
        domains = state.topology.node_domain[level][self.allocation.nodes]
        return int(np.unique(domains).size)

    def __repr__(self) -> str:
        nodes = self.allocation.nodes
        return (
            f"Placement({self.request.name!r}, pods={nodes.size}, "
            f"nodes={np.unique(nodes).size}, gpus_per_pod={self.allocation.gpus.shape[1]})"
        )

    def pod_nodes(self, state: ClusterState) -> list[str]:
        names = state.topology.node_names
        return [names[int(node)] for node in self.allocation.nodes]


class UnschedulableCode(StrEnum):
    """Why a gang does not fit, as a code."""

    CAPACITY = "capacity"
    """The cluster lacks room in total."""
    REQUIRED = "required"
    """No single domain of the required level has room."""
    SLICES = "slices"
    """Room exists, but not in whole slices."""
    NODE = "node"
    """No single node has room for `required: node`."""
    NEVER_FITS = "never_fits"
    """The gang cannot fit this cluster even empty and healthy (`placement.feasibility`)."""


@dataclass(frozen=True)
class Unschedulable:
    """Why a gang cannot be placed now: `code` for programs, `reason` in words a user can
    act on."""

    request: GangRequest
    code: UnschedulableCode
    reason: str

    def __str__(self) -> str:
        return self.reason


PlacementResult = Placement | Unschedulable


def _allocation_of(request: GangRequest, pod_nodes: IntArray, gpus: IntArray) -> Allocation:
    """The allocation of `request`'s pods on `pod_nodes`, each taking its row of `gpus`."""
    return Allocation(
        nodes=pod_nodes,
        gpus=gpus,
        gpu_milli=request.gpu_milli,
        cpu_milli=request.cpu_milli,
        memory_mib=request.memory_mib,
    )


class _Search:
    """One placement decision: holds the capacity view and the policy for its helpers."""

    def __init__(self, state: ClusterState, request: GangRequest, policy: PlacementPolicy) -> None:
        self.state = state
        self.topology = state.topology
        self.request = request
        self.policy = policy
        self.leaf_level = len(self.topology.domain_levels) - 1
        self.fewest: FewestDomains | None = None
        # Whether the policy fills nodes emptiest first (None: an order compiled loops lack).
        self.emptiest = fills_emptiest_first(policy)
        # Whether `fill_leaves` may fill this request's nodes (pods of whole GPUs).
        self.compiled_fill = (
            self.emptiest is not None
            and request.gpus_per_pod > 0
            and not request.is_fractional
            and _node_slices_in_gpus(request)
        )

    def run(self, exact: bool) -> PlacementResult | None:
        """A placement, an Unschedulable, or None when aggregates over-promised."""
        self.view = CapacityView(self.state, self.request, exact)
        request = self.request
        if request.on_one_node:
            return self._one_node()
        total = self.view.total()
        if total < request.pods:
            return self._explain_total(total)
        level = request.required
        if level == 0:
            capacity = np.array([total], dtype=np.int64)  # the cluster: `total` already says
        else:
            capacity = self.view.at(level, 0, self.topology.n_domains(level))
        fits = (capacity >= request.pods).nonzero()[0]
        if request.within is not None:
            outer, domain = request.within
            lo, hi = self.topology.descendants(outer, domain, level)
            fits = fits[(fits >= lo) & (fits < hi)]
            if fits.size == 0:
                inside = np.full(capacity.size, -1, dtype=np.int64)
                inside[lo:hi] = capacity[lo:hi]
                return self._explain_required(level, inside)
        if fits.size == 0:
            return self._explain_required(level, capacity)
        if request.preferred_node and not request.slices:
            return self._fewest_nodes(level, fits, capacity[fits])
        self.fewest = None  # the exact planner, built on first use for this view
        # Count plans by (level, domain, greedy profile): ranking the required domains may
        # already have planned the chosen one.
        self.count_plans: dict[tuple[int, int, tuple[int, ...]], Shares | None] = {}
        domain = self._choose_required(level, fits, capacity[fits])
        chosen = self._fill(level, domain, request.pods)
        if chosen is None:
            return None
        if request.preferred is not None and request.preferred > level:
            chosen = self._least_preferred(level, domain, *chosen)
            if chosen is None:
                return None
        allocation = self._assign(*_in_rank_order(self.topology, *chosen))
        if allocation is None:
            return None
        return Placement(request, allocation)

    def _fewest_nodes(self, level: int, fits: IntArray, capacity: IntArray) -> Placement | None:
        """`preferred: node` (no domain slices): of the required domains that fit, those needing
        the fewest nodes, the policy's favourite; in it, the fewest nodes (`fewest_nodes`).
        None when the aggregates over-promised (no candidate holds the gang node by node)."""
        topology, request = self.topology, self.request
        starts = topology.domain_starts[level]
        counts = starts[fits + 1] - starts[fits]
        offsets = np.cumsum(counts) - counts
        nodes = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(
            starts[fits] - offsets, counts
        )
        node_room = self.view.node_capacity(nodes)
        if fits.size == 1:
            chosen = 0  # one candidate (e.g. the whole cluster): no count to compare
        else:
            candidate_of = np.repeat(np.arange(fits.size, dtype=np.int64), counts)
            needed = node_cover_counts(node_room, candidate_of, fits.size, request.pods)
            least = int(needed.min())
            if least == UNREACHABLE:
                return None
            chosen = self._best(np.where(needed == least, capacity, -1), request.pods)
        inside = slice(int(offsets[chosen]), int(offsets[chosen] + counts[chosen]))
        leaf_of = topology.node_domain[self.leaf_level][nodes[inside]].astype(np.int64)
        picked = fewest_nodes(node_room[inside], leaf_of, request.pods)
        if picked is None:
            return None
        positions, pods = picked
        return Placement(request, self._allocation(nodes[inside][positions], pods))

    # --- choosing domains ---------------------------------------------------------------------
    def _best(self, capacity: IntArray, need: int, candidates: IntArray | None = None) -> int:
        """Index (into `capacity`) of the policy's favourite among domains that hold `need`."""
        if candidates is None:
            candidates = (capacity >= need).nonzero()[0]
        scores = self.policy.domain_scores(capacity[candidates], need)
        return int(candidates[scores.argmin()])

    def _planner(self) -> FewestDomains:
        if self.fewest is None:
            self.fewest = FewestDomains(self.topology, self.view, self.request)
        return self.fewest

    def _least_preferred(
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
            return leaves, shares  # one preferred domain: the unconstrained descent inside it
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
        """`_fill` of every domain of `shares` with its pods, in order."""
        if shares.level == self.leaf_level:
            return shares.domains, shares.pods
        if shares.level == self.leaf_level - 1:
            return self._fill_leaf_parents(shares.domains, shares.pods)
        return self._concatenated(
            [
                self._fill(shares.level, int(d), int(p))
                for d, p in zip(shares.domains, shares.pods, strict=True)
            ]
        )

    def _choose_required(self, level: int, candidates: IntArray, capacity: IntArray) -> int:
        preferred = self.request.preferred
        if preferred is None or preferred <= level or candidates.size == 1:
            return int(candidates[self._best(capacity, self.request.pods)])
        # Prefer the required domain needing the fewest preferred-level domains; then policy.
        preferred_capacity = self.view.at(preferred, 0, self.topology.n_domains(preferred))
        bounds = self.topology.descendant_bounds(level, preferred)
        counts = np.empty(candidates.size, dtype=np.int64)
        for i, domain in enumerate(candidates):
            inside = preferred_capacity[bounds[domain] : bounds[domain + 1]]
            counts[i] = _cover_count(inside, self.request.pods)
        fewest = counts == counts.min()
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
        best = self._best(np.where(fewest, capacity, -1), self.request.pods)
        return int(candidates[best])

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
            least[i] = _cover_count(self.view.at(counted_level, lo, hi), self.request.pods)
        best = np.iinfo(np.int64).max
        for i in np.argsort(least, kind="stable").tolist():
            if least[i] > best:
                break  # this bound and every later one exceed the least found
            domain = int(domains[i])
            greedy = self._fill(level, domain, self.request.pods)
            if greedy is None:
                least[i] = np.iinfo(np.int64).max  # capacities over-promised: ranked last
                continue
            profile = planner.profile(greedy[0])
            better = self._count_plan(level, domain, profile)
            least[i] = profile[counted] if better is None else better.domains.size
            best = min(best, int(least[i]))
        return least

    def _fill(self, level: int, domain: int, need: int) -> tuple[IntArray, IntArray] | None:
        """Leaf domains under `domain` and the pods each takes; None if capacity over-promised."""
        if level == self.leaf_level:
            return np.array([domain], dtype=np.int64), np.array([need], dtype=np.int64)
        topology, request = self.topology, self.request
        preferred = request.preferred
        target = preferred if preferred is not None and preferred > level else level + 1
        lo, hi = topology.descendants(level, domain, target)
        capacity = self.view.at(target, lo, hi)
        candidates = (capacity >= need).nonzero()[0]
        if candidates.size:
            return self._fill(target, lo + self._best(capacity, need, candidates), need)
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
            [self._fill(split, lo + int(p), int(s)) for p, s in zip(picked, shares, strict=True)]
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
        """`_fill` of each parent of leaf domains, in order; those taken whole all at once.

        A parent whose need is all its leaves hold (every parent but the last, for a large gang)
        gives each leaf with room its whole capacity, largest first: what `_cover` returns, found
        here with one pass over all such parents instead of a few numpy calls per parent.
        """
        leaf = self.leaf_level
        bounds = self.topology.descendant_bounds(leaf - 1, leaf)
        first, counts = bounds[parents], bounds[parents + 1] - bounds[parents]
        span_lo = int(first.min())
        span = self.view.at(leaf, span_lo, int((first + counts).max()))
        offsets = np.cumsum(counts) - counts
        index = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(
            first - span_lo - offsets, counts
        )
        capacity = span[index]
        # Parents are never empty, so no reduceat segment is.
        whole = np.add.reduceat(capacity, offsets) == needs
        if not whole.any():
            return self._concatenated(
                [self._fill(leaf - 1, int(p), int(s)) for p, s in zip(parents, needs, strict=True)]
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
                parts.append(self._fill(leaf - 1, parent, need))
        return self._concatenated(parts)

    def _cover(self, capacity: IntArray, need: int) -> tuple[IntArray, IntArray] | None:
        """Fewest domains whose capacities reach `need`: the largest ones, then a best fit.

        Taking the k-1 largest and then the policy's favourite among those that hold the rest
        uses the minimum number of domains k, and leaves the larger remaining domains whole.
        """
        order = np.argsort(-capacity, kind="stable")
        ranked = capacity[order]
        cumulative = np.cumsum(ranked)
        if cumulative.size == 0 or cumulative[-1] < need:
            return None
        k = int(np.searchsorted(cumulative, need))
        remainder = need - (int(cumulative[k - 1]) if k else 0)
        # The domains after the k largest that hold the rest come first in `ranked`.
        holding = k + int(np.count_nonzero(ranked[k:] >= remainder))
        scores = self.policy.domain_scores(ranked[k:holding], remainder)
        picked = order[: k + 1].copy()
        picked[k] = order[k + int(np.argmin(scores))]
        shares = ranked[: k + 1].copy()
        shares[k] = remainder
        return picked, shares

    # --- filling nodes ------------------------------------------------------------------------
    def _assign(
        self, leaves: IntArray, shares: IntArray, capacity: IntArray | None = None
    ) -> Allocation | None:
        """Spread each leaf domain's share over its nodes in policy order, all leaves at once.
        `capacity`: the leaves' node capacities, when the caller has them already."""
        state, request = self.state, self.request
        starts = self.topology.domain_starts[self.leaf_level]
        if capacity is None and self.compiled_fill:
            nodes_in_leaves = int((starts[leaves + 1] - starts[leaves]).sum())
            if nodes_in_leaves <= kernels.COMPILED_LIMIT:
                # A few racks: their nodes ranked and filled in one compiled pass.
                pod_nodes, gpus = fill_leaves(
                    leaves,
                    shares,
                    starts,
                    state.free_whole_gpus,
                    state.free_cpu_milli,
                    state.free_memory_mib,
                    state.closed,
                    self.topology.gpu_model,
                    state.gpu_free_milli,
                    request.model_allowed(self.topology),
                    self.view.pods_per_free,
                    request.gpus_per_pod,
                    request.cpu_milli,
                    request.memory_mib,
                    bool(self.emptiest),
                )
                if pod_nodes.size == 0:
                    return None
                return _allocation_of(request, pod_nodes, gpus)
        if leaves.size == 1 and shares[0] == 1:
            return self._assign_one_pod(int(starts[leaves[0]]), int(starts[leaves[0] + 1]))
        first_nodes = starts[leaves]
        counts = starts[leaves + 1] - first_nodes
        offsets = counts.cumsum() - counts
        if leaves.size == 1:
            nodes = np.arange(int(first_nodes[0]), int(first_nodes[0] + counts[0]), dtype=np.int64)
        else:
            nodes = np.arange(int(offsets[-1] + counts[-1]), dtype=np.int64) + np.repeat(
                first_nodes - offsets, counts
            )
        if capacity is None:
            capacity = self.view.node_capacity(nodes)
        # Leaf domains are never empty, so no reduceat segment is; nodes without room add 0.
        leaf_total = np.add.reduceat(capacity, offsets)
        if (leaf_total < shares).any():
            return None
        usable = capacity > 0
        if not usable.all():
            # Nodes without room take no pod. Every leaf keeps one node at least, since each
            # share is positive and covered.
            counts = np.add.reduceat(usable, offsets).astype(np.int64)
            offsets = np.cumsum(counts) - counts
            nodes, capacity = nodes[usable], capacity[usable]
        scores = self.policy.node_scores(state, nodes, capacity, request)
        # Nodes are grouped by leaf, in index order within each: policy order is a stable sort
        # by score within leaves, which the empty racks a large gang takes already satisfy.
        in_order = scores[1:] >= scores[:-1]
        in_order[offsets[1:] - 1] = True  # a new leaf may start at any score
        if not in_order.all():
            leaf_of = np.repeat(np.arange(leaves.size, dtype=np.int64), counts)
            order = np.lexsort((scores, leaf_of))
            nodes, capacity = nodes[order], capacity[order]
        if (leaf_total == shares).all():
            # Whole leaves (the large-gang case): every node is filled to its capacity.
            return self._allocation(nodes, capacity)
        before_leaf = np.cumsum(leaf_total) - leaf_total
        before_node = np.cumsum(capacity) - capacity - np.repeat(before_leaf, counts)
        take = np.minimum(np.maximum(np.repeat(shares, counts) - before_node, 0), capacity)
        used = take > 0
        return self._allocation(nodes[used], take[used])

    def _assign_one_pod(self, first: int, last: int) -> Allocation | None:
        """One pod in one leaf domain: the policy's favourite node that holds it."""
        capacity = self.view.node_capacity_in(first, last)
        usable = (capacity > 0).nonzero()[0]
        if usable.size == 0:
            return None
        nodes = usable + first
        scores = self.policy.node_scores(self.state, nodes, capacity[usable], self.request)
        best = int(scores.argmin())
        node = nodes[best : best + 1]
        request = self.request
        # `_allocation` of one pod on one node, without its checks for several pods per node.
        return _allocation_of(request, node, self._pick_gpus(node, _ONE_POD, node))

    def _allocation(self, nodes: IntArray, pods_per_node: IntArray) -> Allocation:
        request = self.request
        if (
            request.gpus_per_pod
            and not request.is_fractional
            and nodes.size <= kernels.COMPILED_LIMIT
        ):
            # A few nodes: their free GPUs picked in one compiled pass, not a dozen numpy calls.
            pod_nodes, gpus = kernels.pick_free_gpus(
                nodes, pods_per_node, request.gpus_per_pod, self.state.gpu_free_milli
            )
            return _allocation_of(request, pod_nodes, gpus)
        one_pod_each = pods_per_node.size == 0 or bool((pods_per_node == 1).all())
        pod_nodes = nodes if one_pod_each else np.repeat(nodes, pods_per_node)
        return _allocation_of(request, pod_nodes, self._pick_gpus(nodes, pods_per_node, pod_nodes))

    def _pick_gpus(self, nodes: IntArray, pods_per_node: IntArray, pod_nodes: IntArray) -> IntArray:
        request, state = self.request, self.state
        per_pod = request.gpus_per_pod
        if per_pod == 0:
            return np.zeros((pod_nodes.size, 0), dtype=np.int64)
        if request.is_fractional:
            return self._pick_shared_gpus(nodes, pods_per_node)
        if pod_nodes.size == 1:
            node = int(nodes[0])
            free_gpus: IntArray = (state.gpu_free_milli[node] == MILLI_PER_GPU).nonzero()[0]
            return free_gpus[:per_pod].reshape(1, per_pod).astype(np.int64)
        # Pod p is the rank[p]-th pod on its node and takes that node's free GPUs
        # rank*per_pod .. rank*per_pod+per_pod-1. Built flat: numpy's broadcasting over a short
        # last axis costs a loop call per row.
        if pod_nodes.size == nodes.size:
            # Repeated copies, not a modulo: integer division costs ~30x more on a large gang.
            columns = np.tile(np.arange(per_pod, dtype=np.int64), nodes.size)
        else:
            rank = np.arange(pod_nodes.size, dtype=np.int64) - np.repeat(
                np.cumsum(pods_per_node) - pods_per_node, pods_per_node
            )
            columns = np.repeat(rank * per_pod, per_pod) + np.tile(
                np.arange(per_pod, dtype=np.int64), pod_nodes.size
            )
        topology = self.topology
        partly_used = (state.free_whole_gpus[nodes] != topology.gpu_count[nodes]).nonzero()[0]
        if partly_used.size == 0:
            # Every chosen node is empty (the large-gang case): GPU i is column i.
            return columns.reshape(pod_nodes.size, per_pod)
        # Free GPUs first, in index order; empty nodes keep the identity order.
        width = state.gpu_free_milli.shape[1]
        gpu_order = np.tile(np.arange(width, dtype=np.int64), (nodes.size, 1))
        free = state.gpu_free_milli[nodes[partly_used]] == MILLI_PER_GPU
        gpu_order[partly_used] = np.argsort(~free, axis=1, kind="stable")
        row = np.repeat(np.arange(nodes.size, dtype=np.int64), pods_per_node * per_pod)
        picked: IntArray = gpu_order.reshape(-1)[row * width + columns]
        return picked.reshape(pod_nodes.size, per_pod)

    def _pick_shared_gpus(self, nodes: IntArray, pods_per_node: IntArray) -> IntArray:
        """Fractional pods: the policy picks a GPU per pod (gangs of shared GPUs are small)."""
        state, request = self.state, self.request
        picked: list[int] = []
        for node, pods in zip(nodes.tolist(), pods_per_node.tolist(), strict=True):
            count = int(self.topology.gpu_count[node])
            free = state.gpu_free_milli[node, :count].astype(np.int64)
            for _ in range(pods):
                gpu = self.policy.gpu_choice(state, node, free, request)
                free[gpu] -= request.gpu_milli
                picked.append(gpu)
        return np.array(picked, dtype=np.int64).reshape(-1, 1)

    def _one_node(self) -> PlacementResult:
        request = self.request
        capacity = self.view.node_capacity()
        if request.within is not None:
            first, last = self.topology.domain_range(*request.within)
            inside = np.zeros_like(capacity)
            inside[first:last] = capacity[first:last]
            capacity = inside
        candidates = np.flatnonzero(capacity >= request.pods)
        if candidates.size == 0:
            best = int(np.argmax(capacity))
            return Unschedulable(
                request,
                UnschedulableCode.NODE,
                f"required node: needs {request.pods} pods of {request.describe_pod(self.topology)}"
                f" on one node; the best node ({self.topology.node_names[best]}) has room for "
                f"{_pods(int(capacity[best]))}",
            )
        scores = self.policy.node_scores(self.state, candidates, capacity[candidates], request)
        best = int(np.argmin(scores))
        node = candidates[best : best + 1]
        pods = np.array([request.pods], dtype=np.int64)
        return Placement(request, self._allocation(node, pods))

    # --- explanations -------------------------------------------------------------------------
    def _needs(self) -> str:
        return describe_needs(self.request, self.topology)

    def _explain_total(self, total: int) -> Unschedulable:
        request = self.request
        free = int(self.view.free_gpu_equivalent(0, 0, 1)[0])
        counted = self.view.exact and (request.cpu_milli or request.memory_mib)
        limit = " (with CPU and memory counted node by node)" if counted else ""
        code = UnschedulableCode.CAPACITY
        if request.slices or request.node_slice > 1:
            unsliced = CapacityView(
                self.state, replace(request, slices=(), node_slice=1), self.view.exact
            )
            if unsliced.total() >= request.pods:
                code = UnschedulableCode.SLICES
        return Unschedulable(
            request,
            code,
            f"needs {self._needs()}; the cluster has room for {total:,} such "
            f"pod{'' if total == 1 else 's'}{limit} "
            f"({free:,} free GPUs)",
        )

    def _explain_required(self, level: int, capacity: IntArray) -> Unschedulable:
        best = int(np.argmax(capacity))
        name = self.topology.domain_levels[level]
        free = int(self.view.free_gpu_equivalent(level, best, best + 1)[0])
        return Unschedulable(
            self.request,
            UnschedulableCode.REQUIRED,
            f"required {name}: needs {self._needs()} in one {name}; the best {name} "
            f"({self.topology.domain_name(level, best)}) has room for "
            f"{_pods(int(capacity[best]))} ({free:,} free GPUs)",
        )


def _in_rank_order(
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


def describe_needs(request: GangRequest, topology: Topology) -> str:
    """What a gang asks for, e.g. "36 pods of 4 GPUs (144 GPUs) in slices of 18 pods per rack"."""
    pod = request.describe_pod(topology)
    text = f"{request.pods:,} pod{'s' if request.pods > 1 else ''} of {pod}"
    if request.gpus_per_pod and not request.is_fractional and request.pods > 1:
        text += f" ({request.pods * request.gpus_per_pod:,} GPUs)"
    names = topology.domain_levels
    layers = [f"{pods} pods per {names[level]}" for level, pods in request.slices]
    if request.node_slice > 1:
        layers.append(f"{request.node_slice} pods per node")
    if layers:
        text += " in slices of " + ", ".join(layers)
    return text


def _pods(count: int) -> str:
    return f"{count:,} pod{'' if count == 1 else 's'}"


def _cover_count(capacity: IntArray, need: int) -> int:
    """Fewest domains whose capacities sum to `need` (a large number if impossible)."""
    if capacity.size and capacity.max() >= need:
        return 1  # the common case, without sorting
    cumulative = np.cumsum(np.sort(capacity)[::-1])
    if cumulative.size == 0 or cumulative[-1] < need:
        return np.iinfo(np.int64).max
    return int(np.searchsorted(cumulative, need)) + 1


def allocate_on(
    state: ClusterState,
    request: GangRequest,
    policy: PlacementPolicy,
    nodes: IntArray,
    pods_per_node: IntArray,
) -> Allocation:
    """The allocation of `pods_per_node[i]` of `request`'s pods on `nodes[i]` (nodes in
    increasing order, each with room for its pods), GPUs picked as `place` picks them: for a
    placement that chose its nodes by other rules."""
    return _Search(state, request, policy)._allocation(nodes, pods_per_node)


def place(
    state: ClusterState,
    request: GangRequest,
    policy: PlacementPolicy | None = None,
    exact_reasons: bool = True,
) -> PlacementResult:
    """Find where every pod of `request` runs, or say precisely why it cannot run now.

    Aggregates first (O(1) rejection, then domains top-down); if the aggregates over-promised
    because CPU or memory bind on some nodes, the search repeats with exact node capacities.
    The state is not changed: commit a placement with `commit_placement`.

    Aggregate capacities bound exact ones from above, so a gang they reject does not fit; the
    exact pass after such a rejection only makes the reason's figures exact. Callers that
    only ask whether a gang fits pass `exact_reasons=False` to skip it (an O(nodes) pass).
    """
    policy = policy or BestFit()
    compiled = _placed_in_one_leaf(state, request, policy)
    if compiled is not None:
        return compiled
    search = _Search(state, request, policy)
    result = search.run(exact=False)
    if isinstance(result, Placement) or search.view.exact:
        if result is None:
            raise AssertionError("exact capacities over-promised: a bug in CapacityView")
        return result
    if result is not None and not exact_reasons:
        return result
    if result is None or request.cpu_milli or request.memory_mib:
        # Aggregates over-promised, or CPU/memory may bind: the exact pass gives the right
        # placement, or a reason whose figures are exact.
        exact_result = search.run(exact=True)
        if exact_result is None:
            raise AssertionError("exact capacities over-promised: a bug in CapacityView")
        return exact_result
    return result


def _node_slices_in_gpus(request: GangRequest) -> bool:
    """Whether the compiled passes count `request`'s node slices: when it has none, or when
    GPUs alone bound its pods per node (their table of pods by free GPUs is in whole slices)."""
    return request.node_slice == 1 or not (request.cpu_milli or request.memory_mib)


# Gangs up to this many pods try the compiled search for one innermost domain first.
_COMPILED_PODS = 64
# From this many domains at the first level searched, numpy ranks them for the compiled search.
_COMPILED_DOMAINS = 2048


def _placed_in_one_leaf(
    state: ClusterState, request: GangRequest, policy: PlacementPolicy
) -> Placement | None:
    """`place`'s placement for a small gang of whole GPUs without slices that one domain holds
    at every level, found by one compiled pass (`leaf_kernel`); None when the gang or the
    policy is of another kind, or the search would split the gang or need exact capacities:
    `_Search` then decides. The same answer as `_Search` either way."""
    emptiest = fills_emptiest_first(policy)
    if (
        emptiest is None
        or request.pods > _COMPILED_PODS
        or request.gpus_per_pod == 0
        or request.is_fractional
        or request.slices
        or request.on_one_node
        or request.preferred_node
        or request.within is not None
        or not _node_slices_in_gpus(request)
    ):
        return None
    preferred = request.preferred or 0
    if preferred <= request.required:
        preferred = 0  # no level inside the required one is preferred: level by level
    elif request.required > 0:
        return None  # required domains are ranked by the preferred domains they need
    topology = state.topology
    hist, totals, level_offsets = state.stacked_aggregates()
    child_first, child_last = topology.child_rows()
    width = hist.shape[2]
    chosen_row = -1
    first_level = request.required or preferred
    if first_level and topology.n_domains(first_level) >= _COMPILED_DOMAINS:
        # Many domains compete at the first level (e.g. every rack): numpy's column sums
        # count them faster than the compiled loop's walk of each row's histogram.
        capacity = CapacityView(state, request, exact=False).at(
            first_level, 0, topology.n_domains(first_level)
        )
        fits = (capacity >= request.pods).nonzero()[0]
        if fits.size == 0:
            return None
        best = int(fits[policy.domain_scores(capacity[fits], request.pods).argmin()])
        chosen_row = int(level_offsets[first_level]) + best
    pod_nodes, gpus = place_in_one_leaf(
        hist,
        totals,
        level_offsets,
        child_first,
        child_last,
        request.required,
        preferred,
        chosen_row,
        topology.domain_starts[-1],
        state.free_whole_gpus,
        state.free_cpu_milli,
        state.free_memory_mib,
        state.closed,
        topology.gpu_model,
        state.gpu_free_milli,
        request.model_allowed(topology),
        pods_per_free(width, request.gpus_per_pod, request.node_slice),
        request.pods,
        request.gpus_per_pod,
        request.cpu_milli,
        request.memory_mib,
        request.gpus_per_pod == 1 and request.allowed_models is None,
        emptiest,
    )
    if pod_nodes.size == 0:
        return None
    allocation = _allocation_of(request, pod_nodes, gpus)
    return Placement(request, allocation)


def place_in_leaf(
    state: ClusterState, request: GangRequest, leaf: int, policy: PlacementPolicy | None = None
) -> Placement | None:
    """Place every pod of `request` inside innermost domain `leaf`, or None if it has no room.

    Reads the leaf's node arrays alone, never a domain aggregate, with exact capacities (GPUs,
    CPU, memory): valid inside `Statement.free_on_nodes` over the leaf's nodes. Meant for
    gangs bound to one innermost domain (a `required` innermost level, or one pod), which every
    other constraint then holds for.
    """
    if request.on_one_node and request.pods > 1:
        # Not bound to one innermost domain but to one node: `place` searches those.
        raise ValueError("place_in_leaf places gangs bound to one innermost domain, not node")
    search = _Search(state, request, policy or BestFit())
    search.view = CapacityView(state, request, exact=True)
    leaves = np.array([leaf], dtype=np.int64)
    shares = np.array([request.pods], dtype=np.int64)
    capacity: IntArray | None = None
    if not search.compiled_fill:
        # Not for the compiled node fill (which counts the nodes' room itself): count here.
        first, last = state.topology.domain_range(search.leaf_level, leaf)
        capacity = search.view.node_capacity_in(first, last)
        if int(capacity.sum()) < request.pods:
            return None
    assigned = search._assign(leaves, shares, capacity)
    return None if assigned is None else Placement(request, assigned)


def place_job(
    state: ClusterState, spec: JobSpec, policy: PlacementPolicy | None = None
) -> PlacementResult:
    """`place` for a validated job spec (level and model names resolved against the cluster)."""
    return place(state, GangRequest.from_spec(spec, state.topology), policy)


def commit_placement(statement: Statement, owner: str, placement: Placement) -> None:
    """Record a placement's allocation in a statement (validated again by the state)."""
    statement.allocate(owner, placement.allocation)
