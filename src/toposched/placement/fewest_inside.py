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
    bound = _largest_first_count(topology, view, request.pods, lo, capacity, count)
    shifted = replace(request, preferred=inner)
    return FewestByCount(topology, view, shifted).fewer_inside(preferred, domain, count, bound + 1)


def _largest_first_count(
    topology: Topology, view: CapacityView, need: int, lo: int, capacity: IntArray, count: int
) -> int:
    """Innermost domains a placement uses that fills the `count` largest inner domains (first
    at `lo`, with capacities `capacity`) largest first, each with its largest innermost
    domains: a count the least placement on `count` inner domains never exceeds."""
    leaf = len(topology.domain_levels) - 1
    order = np.argsort(-capacity, kind="stable")[:count]
    taken = capacity[order]
    amounts = np.minimum(taken, need - (np.cumsum(taken) - taken))  # the last takes the rest
    bounds = topology.descendant_bounds(leaf - 1, leaf)
    used = 0
    for child, amount in zip((lo + order).tolist(), amounts.tolist(), strict=True):
        leaves = np.sort(view.at(leaf, int(bounds[child]), int(bounds[child + 1])))[::-1]
        used += int(np.searchsorted(np.cumsum(leaves), amount)) + 1
    return used
