"""Fewest domains inside one preferred domain, by counts: the count plan one level further in.

When one domain at the preferred level L holds the gang and the innermost level lies two levels
inside L (`preferred: zone` over blocks of racks), the least placement in it, level by level,
is the fewest L+1 domains and, among placements on that many, the fewest innermost domains:
the count plan's question with L+1 as the preferred level (`FewestByCount.fewer_inside`), whose
tables are as long as the innermost domains used, not as the gang. It answers where the amount
plan's tables would pass their limits.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.topology import Topology
from toposched.placement.capacity import CapacityView
from toposched.placement.fewest_counts import FewestByCount, Shares
from toposched.placement.request import GangRequest

IntArray = NDArray[np.int64]


def least_inside_by_counts(
    topology: Topology, view: CapacityView, request: GangRequest, domain: int
) -> Shares | None:
    """Pods per innermost domain of the least placement in preferred `domain`: the fewest
    domains one level inside it, then the fewest innermost ones. None when `domain` cannot
    hold the gang, the innermost level is not two levels inside the preferred one, or the
    count plan would pass its limits."""
    preferred = request.preferred
    assert preferred is not None
    inner = preferred + 1
    if inner + 1 != len(topology.domain_levels) - 1:
        return None
    lo, hi = topology.descendants(preferred, domain, inner)
    capacity = view.at(inner, lo, hi)
    ranked = np.sort(capacity)[::-1]
    reach = np.cumsum(ranked)
    if reach.size == 0 or int(reach[-1]) < request.pods:
        return None
    count = int(np.searchsorted(reach, request.pods)) + 1  # the fewest inner domains
    # The largest inner domains filled in turn, each with its largest innermost domains.
    order = np.argsort(-capacity, kind="stable")
    taken = capacity[order]
    amounts = np.maximum(np.minimum(taken, request.pods - (np.cumsum(taken) - taken)), 0)
    first = largest_first(topology, view, lo + order, amounts)
    leaf_lo, leaf_hi = topology.descendants(preferred, domain, inner + 1)
    if first.domains.size == cover_count(view.at(inner + 1, leaf_lo, leaf_hi), request.pods):
        return first  # no placement in `domain` uses fewer innermost domains
    shifted = replace(request, preferred=inner)
    return FewestByCount(topology, view, shifted).fewer_inside(
        preferred, domain, count, first.domains.size + 1
    )


def largest_first(
    topology: Topology, view: CapacityView, parents: IntArray, amounts: IntArray
) -> Shares:
    """The placement that puts `amounts[i]` pods in parent of innermost domains `parents[i]`,
    each on its largest innermost domains: pods per innermost domain, in depth-first order."""
    leaf = len(topology.domain_levels) - 1
    bounds = topology.descendant_bounds(leaf - 1, leaf)
    leaves: list[IntArray] = []
    pods: list[IntArray] = []
    for parent, amount in zip(parents.tolist(), amounts.tolist(), strict=True):
        if amount <= 0:
            continue
        lo = int(bounds[parent])
        own = view.at(leaf, lo, int(bounds[parent + 1]))
        order = np.argsort(-own, kind="stable")
        taken = own[order]
        share = np.minimum(taken, np.maximum(amount - (np.cumsum(taken) - taken), 0))
        leaves.append(lo + order[share > 0])
        pods.append(share[share > 0])
    flat, shares = np.concatenate(leaves), np.concatenate(pods)
    order = np.argsort(flat, kind="stable")
    return Shares(leaf, flat[order], shares[order])


def cover_count(capacity: IntArray, need: int) -> int:
    """Fewest domains whose capacities, largest first, reach `need` (all of them if none do)."""
    reach = np.cumsum(np.sort(capacity)[::-1])
    return int(np.searchsorted(reach, need)) + 1
