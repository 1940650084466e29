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
    innermost domain, for the tie-break between nodes of equal capacity.

    With v the capacity of the k-th largest node, every node above v is taken whole, then nodes
    of capacity v, and the last share goes to the smallest node (best fit) that holds it. No
    sort of all nodes: capacities are counted by value, and the few nodes taken of one value
    are picked by a partial sort of a single key.
    """
    usable = (capacity > 0).nonzero()[0]
    room = capacity[usable]
    if int(room.sum()) < need:
        return None
    first_leaf = int(leaf_of[usable].min())
    leaves = leaf_of[usable] - first_leaf
    leaf_room = np.bincount(leaves, weights=room)

    def key(chosen: IntArray) -> IntArray:
        """Ranks nodes (positions into `room`) of equal room: fuller racks first, then index."""
        ranked: IntArray = -leaf_room[leaves[chosen]].astype(np.int64) * (usable.size + 1)
        return ranked + chosen

    holders = (room >= need).nonzero()[0]
    if holders.size:
        # One node holds the gang: the fullest that does (best fit), ties by key.
        smallest = room[holders].min()
        tied = holders[room[holders] == smallest]
        chosen = int(tied[key(tied).argmin()])
        return usable[chosen : chosen + 1], np.array([need], dtype=np.int64)
    by_value = np.bincount(room)
    pods_from = np.cumsum((by_value * np.arange(by_value.size))[::-1])[::-1]  # pods in nodes >= v
    value = int(np.flatnonzero(pods_from >= need)[-1])  # the k-th largest node's capacity
    above = (room > value).nonzero()[0]
    left = need - int(room[above].sum())
    whole = (left - 1) // value  # nodes of capacity `value` taken whole; one more takes the rest
    at_value = (room == value).nonzero()[0]
    if whole:
        part = np.argpartition(key(at_value), whole - 1)[:whole] if whole < at_value.size else None
        taken = at_value if part is None else at_value[part]
    else:
        taken = at_value[:0]
    remainder = left - whole * value
    rest = np.ones(usable.size, dtype=np.bool_)
    rest[above] = False
    rest[taken] = False
    fit = (rest & (room >= remainder)).nonzero()[0]
    fit = fit[room[fit] == room[fit].min()]
    last = int(fit[key(fit).argmin()])
    picked = np.concatenate([above, taken, np.array([last], dtype=np.int64)])
    shares = room[picked].copy()
    shares[-1] = remainder
    order = np.argsort(picked, kind="stable")
    return usable[picked[order]], shares[order]
