"""`preferred: node` for one request: which required domain, and which domain further out, the
plans of `fewest_nodes` are taken in."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import ClusterState
from toposched.placement.capacity import CapacityView
from toposched.placement.fewest_nodes import (
    UNREACHABLE,
    NodeCounts,
    NodePlan,
    RankDomains,
    fewest_node_counts,
    node_counts,
    pick_nodes,
    plan_nodes,
)
from toposched.placement.request import GangRequest

IntArray = NDArray[np.int64]

# Candidate required domains tied on the fewest nodes that are planned to compare their racks
# and parents; beyond it, the policy's favourite among them.
MAX_RANKED_DOMAINS = 32


class NodePlanner:
    """`preferred: node` for one request: the required domain and the plan inside it.

    Of the required domains that fit, those needing the fewest nodes (counted for all at once),
    then (up to `MAX_RANKED_DOMAINS` of them) the fewest innermost domains and parents by their
    plans, `rank`'s favourite. Then, level by level towards the parents of innermost domains,
    the one domain that holds a plan as good, where one does (`rank`'s favourite of those), and
    one parent where one holds as few nodes on as few innermost domains.
    """

    def __init__(
        self, state: ClusterState, view: CapacityView, request: GangRequest, rank: RankDomains
    ) -> None:
        self.state = state
        self.topology = state.topology
        self.view = view
        self.request = request
        self.rank = rank
        self.leaf = len(self.topology.domain_levels) - 1

    def choose(self, level: int, fits: IntArray, capacity: IntArray) -> NodePlan | None:
        """The plan for required domains `fits` at `level` (`capacity` theirs), or None when
        none holds the gang node by node."""
        bounds = self.topology.descendant_bounds(level, self.leaf)
        self.first = int(bounds[fits[0]])
        self.counts = node_counts(
            self.state, self.view, self.request, self.first, int(bounds[fits[-1] + 1])
        )
        self.running = np.zeros(
            (self.counts.counts.shape[0] + 1, self.counts.values.size), dtype=np.int64
        )
        np.cumsum(self.counts.counts, axis=0, out=self.running[1:])
        picked = self._best(level, fits, capacity, None)
        if picked is None:
            return None
        domain, plan = picked
        for outer in range(level + 1, self.leaf):
            if plan.profile[2] == 1:
                break  # one parent: one domain at every level further out too
            # Towards the parents: a domain whose plan is as good; at the parents' level, one
            # parent holding as few nodes on as few innermost domains.
            match = plan.profile if outer < self.leaf - 1 else (*plan.profile[:2], 1)
            lo, hi = self.topology.descendants(outer - 1, domain, outer)
            inner = np.arange(lo, hi, dtype=np.int64)
            held = (self._sums(outer, inner) * self.counts.values).sum(axis=1)
            better = self._best(outer, inner, held, match)
            if better is None:
                break
            domain, plan = better
        return plan

    def _sums(self, level: int, domains: IntArray) -> IntArray:
        """Nodes by capacity of each of `domains` (at `level`)."""
        bounds = self.topology.descendant_bounds(level, self.leaf) - self.first
        return self.running[bounds[domains + 1]] - self.running[bounds[domains]]

    def _best(
        self, level: int, domains: IntArray, capacity: IntArray, match: tuple[int, ...] | None
    ) -> tuple[int, NodePlan] | None:
        """The favourite of `domains` with the least plan (given `match`, of those as good on
        nodes and innermost domains and no worse on parents) and its plan; None if none has
        one."""
        need = self.request.pods
        needed = fewest_node_counts(self.counts.values, self._sums(level, domains), need)
        least = int(needed.min()) if match is None else match[0]
        tied = np.flatnonzero(needed == least)
        if least == UNREACHABLE or tied.size == 0:
            return None
        plans: dict[int, NodePlan | None] = {}
        if (level < self.leaf and tied.size > 1 and tied.size <= MAX_RANKED_DOMAINS) or match:
            if tied.size > MAX_RANKED_DOMAINS:
                return None
            cap = None if match is None else match[-1]
            plans = {int(c): self._plan(level, int(domains[c]), cap) for c in tied}
            profiles = self._one_parent_where_held(
                level, domains, {c: p.profile for c, p in plans.items() if p is not None}, match
            )
            if match is not None:
                # As few nodes on as few domains, and no more parents (a greedy choice's
                # parents may be more than a domain further in needs).
                profiles = {
                    c: p for c, p in profiles.items() if p[:2] == match[:2] and p[2] <= match[2]
                }
            wanted = min(profiles.values(), default=None)
            tied = np.array([c for c, p in profiles.items() if p == wanted], dtype=np.int64)
            if tied.size == 0:
                return None
        chosen = int(tied[0]) if tied.size == 1 else self.rank(capacity, need, tied)
        plan = plans[chosen] if chosen in plans else self._plan(level, int(domains[chosen]))
        return None if plan is None else (int(domains[chosen]), plan)

    def _one_parent_where_held(
        self,
        level: int,
        domains: IntArray,
        profiles: dict[int, tuple[int, int, int]],
        match: tuple[int, ...] | None,
    ) -> dict[int, tuple[int, int, int]]:
        """`profiles` (by position in `domains`), those on the least nodes and innermost
        domains (`match`'s if given) counted with one parent where one parent inside holds such
        a plan, when none of them has one parent already: a plan of several capacities counts
        the parents of its greedy choice, and the descent towards the parents (`choose`) finds
        that one parent only inside the domain it takes."""
        if not profiles or level >= self.leaf - 1:
            return profiles
        least = min(profiles.values()) if match is None else match
        tied = [c for c, profile in profiles.items() if profile[:2] == least[:2]]
        if any(profiles[c][2] == 1 for c in tied):
            return profiles
        counted = dict(profiles)
        for c in tied:
            counted[c] = self._fewest_parents(level, int(domains[c]), profiles[c])
        return counted

    def _fewest_parents(
        self, level: int, domain: int, profile: tuple[int, int, int]
    ) -> tuple[int, int, int]:
        """`profile` of a plan in `domain` (at `level`), with one parent when one parent of
        innermost domains inside it holds as few nodes on as few innermost domains."""
        parents = self.leaf - 1
        lo, hi = self.topology.descendants(level, domain, parents)
        inner = np.arange(lo, hi, dtype=np.int64)
        needed = fewest_node_counts(
            self.counts.values, self._sums(parents, inner), self.request.pods
        )
        for parent in inner[needed == profile[0]][:MAX_RANKED_DOMAINS].tolist():
            plan = self._plan(parents, int(parent))
            if plan is not None and plan.profile[:2] == profile[:2]:
                return (profile[0], profile[1], 1)
        return profile

    def _plan(self, level: int, domain: int, most_parents: int | None = None) -> NodePlan | None:
        lo, hi = self.topology.descendants(level, domain, self.leaf)
        inside = slice(lo - self.first, hi - self.first)
        own = NodeCounts(lo, self.counts.values, self.counts.counts[inside])
        parent_of = self.topology.domain_parent[self.leaf][lo:hi] if self.leaf - 1 > level else None
        return plan_nodes(own, parent_of, self.request.pods, self.rank, most_parents)

    def nodes_and_pods(self, plan: NodePlan) -> tuple[IntArray, IntArray]:
        """The nodes a plan takes (increasing) and the pods each holds (`pick_nodes`)."""
        starts = self.topology.domain_starts[self.leaf]
        sizes = starts[plan.leaves + 1] - starts[plan.leaves]
        offsets = np.cumsum(sizes) - sizes
        nodes = np.arange(int(sizes.sum()), dtype=np.int64) + np.repeat(
            starts[plan.leaves] - offsets, sizes
        )
        positions, pods = pick_nodes(
            self.view.node_capacity(nodes), np.repeat(plan.leaves, sizes), plan
        )
        return nodes[positions], pods
