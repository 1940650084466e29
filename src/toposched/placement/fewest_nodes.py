"""`preferred: node`: the fewest nodes that hold a gang, found from node capacities in arrays.

The fewest nodes is the least k whose k largest node capacities reach the gang. Of the nodes
that do it, ties in capacity are broken towards innermost domains (racks) with the most room
among the candidates, then lower indices, so equal nodes are taken rack by rack; the nodes
are returned in index order, so consecutive pods share a node, then a rack, and so on.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

IntArray = NDArray[np.int64]

UNREACHABLE = np.iinfo(np.int64).max


def node_cover_counts(
    capacity: IntArray, domain_of: IntArray, n_domains: int, need: int
) -> IntArray:
    """For each domain 0..n_domains-1, the fewest of its nodes whose capacities reach `need`
    (`UNREACHABLE` where all of them do not). `domain_of[i]` is node i's domain; one sort of
    the nodes by (domain, capacity descending), no loop over domains."""
    order = np.lexsort((-capacity, domain_of))
    ranked, domains = capacity[order], domain_of[order]
    cumulative = np.cumsum(ranked)
    starts = np.searchsorted(domains, np.arange(n_domains, dtype=np.int64))
    ends = np.searchsorted(domains, np.arange(n_domains, dtype=np.int64), side="right")
    before_domain = np.where(starts > 0, cumulative[np.maximum(starts - 1, 0)], 0)
    within = cumulative - before_domain[domains] - ranked  # room of the larger nodes before
    counted = np.bincount(domains, weights=(within < need) & (ranked > 0), minlength=n_domains)
    totals = np.where(ends > starts, cumulative[np.maximum(ends - 1, 0)] - before_domain, 0)
    return np.where(totals >= need, counted.astype(np.int64), UNREACHABLE)


def fewest_nodes(
    capacity: IntArray, leaf_of: IntArray, need: int
) -> tuple[IntArray, IntArray] | None:
    """Positions (into `capacity`, increasing) of the fewest nodes that hold `need` pods and the
    pods each takes, or None when all of them together do not. `leaf_of[i]` is node i's
    innermost domain, for the tie-break between nodes of equal capacity."""
    usable = (capacity > 0).nonzero()[0]
    room, leaves = capacity[usable], leaf_of[usable]
    if int(room.sum()) < need:
        return None
    first = int(leaves.min())
    leaf_room = np.bincount(leaves - first, weights=room).astype(np.int64)
    order = np.lexsort((usable, leaves, -leaf_room[leaves - first], -room))
    ranked = room[order]
    cumulative = np.cumsum(ranked)
    k = int(np.searchsorted(cumulative, need))  # the (k+1)-th largest completes the gang
    shares = ranked[: k + 1].copy()
    shares[k] = need - (int(cumulative[k - 1]) if k else 0)
    picked = usable[order[: k + 1]]
    in_index_order = np.argsort(picked, kind="stable")
    return picked[in_index_order], shares[in_index_order]
