"""Array helpers of the victim search: slots met on nodes, room per domain, subsets."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from toposched.scheduler.slot_verdicts import SlotVerdicts

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


def slot_marks(owners: NDArray[np.integer], bound: int) -> NDArray[np.bool_]:
    """Per slot in [0, bound), whether it is among `owners`; the extra last entry marks -1
    (nobody)."""
    seen = np.zeros(bound + 1, dtype=bool)
    seen[owners.reshape(-1)] = True
    return seen


def distinct_slots(owners: NDArray[np.integer], bound: int) -> IntArray:
    """Sorted distinct slots in [0, bound) among `owners` (-1 for nobody, ignored), by marking
    rather than sorting: the values are many and bounded."""
    distinct: IntArray = slot_marks(owners, bound)[:-1].nonzero()[0]
    return distinct


def touching_victims(victim_nodes: Sequence[IntArray], gang_nodes: IntArray) -> NDArray[np.bool_]:
    """Per victim (its pods' nodes), whether any of its pods is on one of `gang_nodes`."""
    sizes = np.fromiter((nodes.size for nodes in victim_nodes), dtype=np.int64)
    owner = np.repeat(np.arange(sizes.size), sizes)
    touched = np.zeros(sizes.size, dtype=bool)
    touched[owner[np.isin(np.concatenate(victim_nodes), gang_nodes)]] = True
    return touched


@dataclass(frozen=True)
class Nowhere:
    """No domain of the gang's required level can hold it with every candidate gone, by the
    aggregates' upper bounds: `most` pods in the best one."""

    most: int


@dataclass(frozen=True)
class AllowedRoom:
    """Innermost domains read node by node with the jobs the contract allows gone: each
    one's `room` in pods (in the order asked), and what was read, in node order: the `nodes`,
    their GPUs' `owners`, which GPUs allowed jobs hold (`held`), the slots met (`marks`, one
    per slot plus one for GPUs nobody holds; `slots`, those held) and their `verdicts`;
    `by_node` and `sizes` map the domains to the nodes."""

    room: IntArray
    nodes: IntArray
    owners: NDArray[np.int32]
    held: NDArray[np.bool_]
    marks: NDArray[np.bool_]
    slots: IntArray
    verdicts: SlotVerdicts
    by_node: IntArray
    sizes: IntArray


def domain_sums(values: IntArray, bounds: IntArray) -> IntArray:
    """Per domain of a level, the sum of `values` over its items, the domain's items being
    `bounds[d]` to `bounds[d + 1] - 1` (items ordered by domain)."""
    if bounds.size > 1 and bool((bounds[1:] > bounds[:-1]).all()) and bounds[-1] == values.size:
        # No domain without items: one reduction per run.
        summed: IntArray = np.add.reduceat(values, bounds[:-1]).astype(np.int64, copy=False)
        return summed
    running = np.zeros(values.size + 1, dtype=np.int64)
    np.cumsum(values, out=running[1:])
    sums: IntArray = running[bounds[1:]] - running[bounds[:-1]]
    return sums


def cheapest_required_domain(
    bounds: IntArray,
    pods: int,
    now_room: IntArray,
    gain: IntArray,
    helpful: IntArray,
    ratio: FloatArray,
) -> tuple[IntArray, int] | Nowhere | None:
    """For a gang that must lie in one domain of a level above the innermost (whose innermost
    domains are `bounds[d]` to `bounds[d + 1] - 1`): the domain whose shortfall (its pods
    beyond the room its innermost domains have now) the `helpful` ones (increasing) cover at
    the least cost, taken by `ratio` (cost per pod gained, aligned with `helpful`) cheapest
    first. Returns that domain's helpful innermost domains in that order and its shortfall;
    `Nowhere` when no domain's shortfall can be covered (with `now_room + gain` an upper bound
    of each innermost domain's room, no victim set can work); None when some domain has no
    shortfall (the aggregates cannot tell why the gang does not fit)."""
    room_now = domain_sums(now_room, bounds)
    shortfall = pods - room_now
    if (shortfall <= 0).any():
        return None
    # `helpful` increases, so each domain's helpful innermost domains are one run of it.
    split = np.searchsorted(helpful, bounds)
    first, last = split[:-1], split[1:]
    gains = gain[helpful]
    room_most = room_now + domain_sums(gains, split)
    if (room_most < pods).all():
        return Nowhere(int(room_most.max()))
    domains = np.repeat(np.arange(first.size), last - first)
    order = np.lexsort((ratio, domains))
    leaves, gains = helpful[order], gains[order]
    reach = np.cumsum(gains)
    spent = np.cumsum(ratio[order] * gains)
    reach_before = np.where(first > 0, reach[np.maximum(first - 1, 0)], 0)
    spent_before = np.where(first > 0, spent[np.maximum(first - 1, 0)], 0.0)
    # Gains are positive, so the running sums grow: one search finds each domain's prefix.
    enough = np.searchsorted(reach, reach_before + shortfall, side="left")
    covered = enough < last
    cost = np.where(covered, spent[np.minimum(enough, reach.size - 1)] - spent_before, np.inf)
    best = int(np.argmin(cost))
    return leaves[first[best] : last[best]], int(shortfall[best])


def all_subsets(count: int) -> NDArray[np.int64]:
    """Every subset of `count` items as 0/1 rows, the empty set first."""
    cached = _SUBSETS.get(count)
    if cached is None:
        cached = (np.arange(2**count)[:, None] >> np.arange(count)) & 1
        _SUBSETS[count] = cached
    return cached


def one_node_subsets(touching: NDArray[np.int64]) -> IntArray:
    """Of every subset of `touching`'s rows (candidates; columns: nodes, > 0 where the
    candidate frees something on the node), those whose candidates all touch one node, as
    sorted indices into `all_subsets(len(touching))`: the empty set, and each node's
    candidates' subsets."""
    count = touching.shape[0]
    bits = np.left_shift(1, np.arange(count, dtype=np.int64))
    masks = np.unique(bits @ (touching > 0))
    pieces = [np.zeros(1, dtype=np.int64)]
    for mask in masks.tolist():
        members = bits[(mask & bits) != 0]
        pieces.append(all_subsets(members.size) @ members)
    return np.unique(np.concatenate(pieces))


SUMMED_FROM = 8
"""From this many rows on, `subset_sums` adds instead of multiplying (fewer: the product is
cheaper than its numpy calls)."""


def subset_sums(rows: NDArray[np.int64]) -> NDArray[np.int64]:
    """For each subset of `rows` in the order of `all_subsets`, the sum of its rows: equal to
    `all_subsets(len(rows)) @ rows`. The subsets with item b are those without it plus row b,
    so each bit doubles the table with one addition: thousands of rows times the row width,
    where numpy's integer product (no BLAS) also multiplies by the items (for 8 items or
    more; below, the product costs less than the additions' calls)."""
    count = rows.shape[0]
    if count < SUMMED_FROM:
        product: NDArray[np.int64] = all_subsets(count) @ rows
        return product
    sums = np.zeros((1 << count, rows.shape[1]), dtype=np.int64)
    for bit in range(count):
        half = 1 << bit
        np.add(sums[:half], rows[bit], out=sums[half : 2 * half])
    return sums


_SUBSETS: dict[int, NDArray[np.int64]] = {}
