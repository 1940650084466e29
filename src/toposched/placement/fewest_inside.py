"""Fewest domains inside one preferred domain, by counts: the count plan one level further in.

When one domain at the preferred level L holds the gang and the innermost level lies two levels
inside L (`preferred: zone` over blocks of racks), the least placement in it, level by level,
is the fewest L+1 domains and, among placements on that many, the fewest innermost domains:
the count plan's question with L+1 as the preferred level (`FewestByCount.fewer_inside`), whose
tables are as long as the innermost domains used, not as the gang. It answers where the amount
plan's tables would pass their limits.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.topology import Topology
from toposched.placement.capacity import CapacityView
from toposched.placement.count_kernels import fewest_node_counts
from toposched.placement.fewest_counts import FewestByCount, Shares
from toposched.placement.request import GangRequest

IntArray = NDArray[np.int64]

# Parents times capacities up to which innermost domains are counted by capacity, not sorted.
_COUNTED_CELLS = 1 << 20


@dataclass(frozen=True)
class Planned:
    """A least placement found by counts: the domains it uses at the preferred level and at
    each inside it, and how to lay it out (innermost domains and pods of each, depth-first),
    done only if it is taken."""

    profile: tuple[int, ...]
    layout: Callable[[], tuple[IntArray, IntArray]]


def planned(topology: Topology, preferred: int, shares: Shares) -> Planned:
    """A placement already laid out, its profile counted from its innermost domains."""
    first_nodes = topology.domain_starts[shares.level][shares.domains]
    profile = tuple(
        int(np.unique(topology.node_domain[level][first_nodes]).size)
        for level in range(preferred, shares.level + 1)
    )
    order = np.argsort(shares.domains, kind="stable")
    laid_out = (shares.domains[order], shares.pods[order])
    return Planned(profile, lambda: laid_out)


def least_inside_by_counts(
    topology: Topology, view: CapacityView, request: GangRequest, domain: int
) -> Planned | None:
    """The least placement in preferred `domain` (its profile, and its layout when asked): the
    fewest domains one level inside it, then the fewest innermost ones. None when `domain` cannot
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
    used = leaves_to_reach(topology, view, lo + order, amounts)
    leaf_lo, leaf_hi = topology.descendants(preferred, domain, inner + 1)
    if used == cover_count(view.at(inner + 1, leaf_lo, leaf_hi), request.pods):
        # No placement in `domain` uses fewer innermost domains: this one is the least.
        return Planned((1, count, used), lambda: _laid_out(topology, view, lo + order, amounts))
    shifted = replace(request, preferred=inner)
    least = FewestByCount(topology, view, shifted).fewer_inside(preferred, domain, count, used + 1)
    return None if least is None else planned(topology, preferred, least)


def _laid_out(
    topology: Topology, view: CapacityView, parents: IntArray, amounts: IntArray
) -> tuple[IntArray, IntArray]:
    shares = largest_first(topology, view, parents, amounts)
    return shares.domains, shares.pods


def leaves_to_reach(
    topology: Topology, view: CapacityView, parents: IntArray, amounts: IntArray
) -> int:
    """Innermost domains `largest_first` uses for these amounts, without placing them: each
    parent's counted by capacity (one pass for all of them), or sorted where capacities run
    past a million cells."""
    leaf = len(topology.domain_levels) - 1
    bounds = topology.descendant_bounds(leaf - 1, leaf)
    used = parents[amounts > 0]
    needs = amounts[amounts > 0]
    first, last = bounds[used], bounds[used + 1]
    span_lo = int(first.min())
    span = view.at(leaf, span_lo, int(last.max()))
    counts = last - first
    offsets = np.cumsum(counts) - counts
    local = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(
        first - span_lo - offsets, counts
    )
    capacity = span[local]
    width = int(capacity.max()) + 1
    if used.size * width > _COUNTED_CELLS:
        return sum(
            cover_count(capacity[o : o + c], int(n))
            for o, c, n in zip(offsets.tolist(), counts.tolist(), needs.tolist(), strict=True)
        )
    segment = np.repeat(np.arange(used.size, dtype=np.int64), counts)
    by_capacity = np.bincount(segment * width + capacity, minlength=used.size * width)
    values = np.arange(1, width, dtype=np.int64)
    return int(
        fewest_node_counts(values, by_capacity.reshape(used.size, width)[:, 1:], needs).sum()
    )


def largest_first(
    topology: Topology, view: CapacityView, parents: IntArray, amounts: IntArray
) -> Shares:
    """The placement that puts `amounts[i]` pods in parent of innermost domains `parents[i]`,
    each on its largest innermost domains: pods per innermost domain, in depth-first order."""
    leaf = len(topology.domain_levels) - 1
    bounds = topology.descendant_bounds(leaf - 1, leaf)
    used = parents[amounts > 0]
    span_lo, span_hi = int(bounds[used].min()), int(bounds[used + 1].max())
    span = view.at(leaf, span_lo, span_hi)  # one read for every parent used
    leaves: list[IntArray] = []
    pods: list[IntArray] = []
    for parent, amount in zip(used.tolist(), amounts[amounts > 0].tolist(), strict=True):
        lo = int(bounds[parent])
        own = span[lo - span_lo : int(bounds[parent + 1]) - span_lo]
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
