"""Compiled loops over the children of several domains: how few of them hold a gang."""

from __future__ import annotations

import numpy as np
from numba import njit

from toposched.placement.count_kernels import NOT_REACHED

# Widest capacity up to which a domain's children are tallied by capacity; beyond, sorted.
_TALLIED_WIDTH = 1 << 16


@njit(cache=True, nogil=True)
def fewest_children(
    span: np.ndarray, first: np.ndarray, last: np.ndarray, need: int, counted_cells: int
) -> np.ndarray:
    """For each domain d, whose children's capacities are `span[first[d]:last[d]]` (never
    empty), the fewest of its children that hold `need` pods, largest first. Where a child of
    some domain holds `need` alone: 1 for the domains with such a child and 2 for the others,
    since then only the least count matters. A domain whose children do not reach `need`
    counts `NOT_REACHED` when the domains times the widest capacity plus one are at most
    `counted_cells`, and its number of children otherwise.

    One pass over the children, and a tally by capacity per domain walked from the largest
    (children wider than `_TALLIED_WIDTH`, or below 0, sorted instead)."""
    domains = first.size
    counts = np.empty(domains, dtype=np.int64)
    widest = np.int64(0)
    lowest = np.int64(0)
    holds = False
    for domain in range(domains):
        counts[domain] = 2
        for child in range(first[domain], last[domain]):
            value = span[child]
            if value >= need:
                counts[domain] = 1
                holds = True
            if value > widest:
                widest = value
            if value < lowest:
                lowest = value
    if holds:
        return counts
    # Every child holds less than `need`.
    counted = domains * (widest + 1) <= counted_cells
    tallied = widest < _TALLIED_WIDTH and lowest >= 0
    tally = np.zeros(widest + 1 if tallied else 1, dtype=np.int64)
    for domain in range(domains):
        lo, hi = first[domain], last[domain]
        left = np.int64(need)
        used = np.int64(0)
        if tallied:
            top = np.int64(0)
            for child in range(lo, hi):
                value = span[child]
                tally[value] += 1
                if value > top:
                    top = value
            for value in range(top, 0, -1):
                taken = tally[value]
                tally[value] = 0
                if taken == 0 or left <= 0:
                    continue
                enough = (left + value - 1) // value
                if enough < taken:
                    taken = enough
                used += taken
                left -= taken * value
            tally[0] = 0
        else:
            ranked = np.sort(span[lo:hi])
            for at in range(ranked.size - 1, -1, -1):
                if left <= 0:
                    break
                used += 1
                left -= ranked[at]
        if left > 0:
            counts[domain] = NOT_REACHED if counted else hi - lo
        else:
            counts[domain] = used
    return counts


@njit(cache=True, nogil=True)
def greedy_cover(capacity: np.ndarray, need: int, emptiest: bool) -> tuple[np.ndarray, np.ndarray]:
    """The fewest domains whose capacities reach `need`, as `DomainChoice` covers a
    gang for the fullest-first or emptiest-first policy: the largest domains (by capacity, then
    lowest index), then for the rest the fullest (or emptiest) of those after them that hold it
    alone, the first on ties. Returns the domains' indices and the pods each takes; both empty
    when all of them together hold less than `need`."""
    size = capacity.size
    total = 0
    for at in range(size):
        total += capacity[at]
    if size == 0 or total < need:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    # Largest first, lowest index on ties: counted by capacity where capacities are small.
    widest = 0
    lowest = 0
    for at in range(size):
        widest = max(widest, capacity[at])
        lowest = min(lowest, capacity[at])
    order = np.empty(size, dtype=np.int64)
    if widest < _TALLIED_WIDTH and lowest >= 0:
        starts = np.zeros(widest + 2, dtype=np.int64)
        for at in range(size):
            starts[widest - capacity[at] + 1] += 1
        for rank in range(widest + 1):
            starts[rank + 1] += starts[rank]
        for at in range(size):
            rank = widest - capacity[at]
            order[starts[rank]] = at
            starts[rank] += 1
    else:
        order[:] = np.argsort(-capacity, kind="mergesort")
    # The k largest fall short of `need`; the rest goes to one more.
    reached = 0
    k = 0
    while reached + capacity[order[k]] < need:
        reached += capacity[order[k]]
        k += 1
    remainder = need - reached
    chosen = k
    if not emptiest:
        # The fullest of those holding the rest: the last such in order, the first of its size.
        last = k
        while last + 1 < size and capacity[order[last + 1]] >= remainder:
            last += 1
        chosen = last
        while chosen > k and capacity[order[chosen - 1]] == capacity[order[last]]:
            chosen -= 1
    picked = np.empty(k + 1, dtype=np.int64)
    shares = np.empty(k + 1, dtype=np.int64)
    for at in range(k):
        picked[at] = order[at]
        shares[at] = capacity[order[at]]
    picked[k] = order[chosen]
    shares[k] = remainder
    return picked, shares
