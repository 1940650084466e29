"""Convolutions of the exact plans' tables: every pair tried (numpy), or, for the amount plan's
cost tables, compiled and read by runs of equal cost."""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.lib.stride_tricks import sliding_window_view
from numpy.typing import NDArray

IntArray = NDArray[np.int64]

# Cost of an impossible amount; twice it still fits in int64, so sums need no overflow check.
IMPOSSIBLE = np.int64(1) << 61


def convolve_tables(
    left: IntArray, right: IntArray, limit: int, missing: np.int64, maximise: bool
) -> tuple[IntArray, IntArray]:
    """(min, +) or, with `maximise`, (max, +) convolution of two tables indexed 0..`limit`, and
    the right side's share: `best[a] = min (max) over b of left[a - b] + right[b]`, `split[a]`
    the least b that reaches it. `missing` fills the entries beyond `left`'s end."""
    width = min(left.size + right.size - 1, limit + 1)
    padded = np.full(right.size - 1 + width, missing, dtype=np.int64)
    kept = min(left.size, width)
    padded[right.size - 1 : right.size - 1 + kept] = left[:kept]
    # pairs[a, b] = left[a - b] + right[b]
    pairs = sliding_window_view(padded, right.size)[:width, ::-1] + right
    split = np.argmax(pairs, axis=1) if maximise else np.argmin(pairs, axis=1)
    best: IntArray = pairs[np.arange(width), split]
    return best, split.astype(np.int64)


@njit(cache=True, nogil=True)
def cost_runs(table: np.ndarray, upto: int, impossible: int) -> int:
    """Maximal runs of equal possible costs (below `impossible`) among `table[:upto]`."""
    runs = 0
    end = min(upto, table.size)
    for i in range(end):
        if table[i] < impossible and (i == 0 or table[i] != table[i - 1]):
            runs += 1
    return runs


@njit(cache=True, nogil=True)
def min_plus_by_runs(
    left: np.ndarray, right: np.ndarray, limit: int, impossible: int
) -> tuple[np.ndarray, np.ndarray]:
    """`best[a] = min over b of left[a - b] + right[b]` for a = 0 .. `limit` (and no further
    than both tables reach), and `split[a]`, the least b that reaches it; `impossible` where no
    pair of possible costs does (and then split 0).

    A cost table is constant over runs of amounts (a domain holding a little more often uses no
    more domains), so one side is read run by run: over a run [s, e] of cost v, the best pair
    is v plus the least of the other side over the window [a - e, a - s], which slides with a,
    kept by a monotone queue, or, where the other side never falls and is possible throughout,
    read off its window's first index. The side with fewer runs is read so: the work is its runs
    times the result's length, not the product of the two lengths.
    """
    width = min(left.size + right.size - 1, limit + 1)
    best = np.full(width, impossible, dtype=np.int64)
    split = np.zeros(width, dtype=np.int64)
    # The stepped side's runs; the other side slides. `by_right`: right is the stepped side.
    by_right = cost_runs(right, width, impossible) <= cost_runs(left, width, impossible)
    stepped = right if by_right else left
    sliding = left if by_right else right
    run_end = _run_ends(sliding, impossible)
    queue = np.empty(sliding.size, dtype=np.int64)
    start = 0
    reach = min(stepped.size, width)
    while start < reach:
        value = stepped[start]
        end = start
        while end + 1 < reach and stepped[end + 1] == value:
            end += 1
        if value < impossible:
            last = min(width - 1, end + sliding.size - 1)
            if run_end.size:
                _run_by_ends(sliding, run_end, value, start, end, last, by_right, best, split)
            else:
                _run_by_queue(
                    sliding, queue, value, start, end, last, by_right, best, split, impossible
                )
        start = end + 1
    for a in range(width):
        if best[a] >= impossible:
            best[a] = impossible
            split[a] = 0
    return best, split


@njit(cache=True, nogil=True)
def _run_ends(table: np.ndarray, impossible: int) -> np.ndarray:
    """For a table of possible costs that never fall, where each index's run of equal costs
    ends; an empty array for any other table."""
    for i in range(table.size):
        if table[i] >= impossible or (i > 0 and table[i] < table[i - 1]):
            return np.empty(0, dtype=np.int64)
    ends = np.empty(table.size, dtype=np.int64)
    for i in range(table.size - 1, -1, -1):
        ends[i] = i if i == table.size - 1 or table[i + 1] != table[i] else ends[i + 1]
    return ends


@njit(cache=True, nogil=True)
def _run_by_ends(
    sliding: np.ndarray,
    run_end: np.ndarray,
    value: int,
    start: int,
    end: int,
    last: int,
    by_right: bool,
    best: np.ndarray,
    split: np.ndarray,
) -> None:
    """One run [start, end] of cost `value` against a side that never falls: each window's
    least is its first entry; of its ties, the latest ends that entry's run."""
    for a in range(start, last + 1):
        lo = max(0, a - end)
        hi = min(a - start, sliding.size - 1)
        index = min(run_end[lo], hi) if by_right else lo
        candidate = value + sliding[index]
        b = a - index if by_right else index
        if candidate < best[a] or (candidate == best[a] and b < split[a]):
            best[a] = candidate
            split[a] = b


@njit(cache=True, nogil=True)
def _run_by_queue(
    sliding: np.ndarray,
    queue: np.ndarray,
    value: int,
    start: int,
    end: int,
    last: int,
    by_right: bool,
    best: np.ndarray,
    split: np.ndarray,
    impossible: int,
) -> None:
    """One run [start, end] of cost `value` against any side: a monotone queue keeps the
    least possible cost of the window [a - end, a - start] as it slides."""
    head = 0
    tail = 0
    for a in range(start, last + 1):
        entering = a - start
        if entering < sliding.size and sliding[entering] < impossible:
            entry = sliding[entering]
            # Ties: the least b, so the latest index when b = a - index (by right), the
            # earliest when b is the index itself.
            while tail > head and (
                sliding[queue[tail - 1]] >= entry if by_right else sliding[queue[tail - 1]] > entry
            ):
                tail -= 1
            queue[tail] = entering
            tail += 1
        while head < tail and queue[head] < a - end:
            head += 1
        if head == tail:
            continue
        index = queue[head]
        candidate = value + sliding[index]
        b = a - index if by_right else index
        if candidate < best[a] or (candidate == best[a] and b < split[a]):
            best[a] = candidate
            split[a] = b


@njit(cache=True, nogil=True)
def leaf_parent_tables(
    capacity: np.ndarray,
    offsets: np.ndarray,
    need: int,
    leaf_weight: int,
    own_weight: int,
    granule: int,
    impossible: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The amount plan's tables of parents of innermost domains, all in one pass: parent i's
    innermost domains hold `capacity[offsets[i]:offsets[i + 1]]` units, and its table is at
    `tables[starts[i]:starts[i + 1]]`.

    Holding `a` units takes the fewest of them, largest first (any split of `a` fits), each
    weighing `leaf_weight`; amounts off the parent's `granule` are `impossible`, and every
    possible positive amount adds `own_weight` (the parent's own level's)."""
    parents = offsets.size - 1
    widths = np.empty(parents, dtype=np.int64)
    for i in range(parents):
        total = 0
        for j in range(offsets[i], offsets[i + 1]):
            total += capacity[j]
        widths[i] = min(total, need) + 1
    starts = np.zeros(parents + 1, dtype=np.int64)
    for i in range(parents):
        starts[i + 1] = starts[i] + widths[i]
    tables = np.empty(starts[parents], dtype=np.int64)
    for i in range(parents):
        ranked = np.sort(capacity[offsets[i] : offsets[i + 1]])[::-1]
        base = starts[i]
        tables[base] = 0
        used = 0
        reach = 0
        for a in range(1, widths[i]):
            while reach < a:
                reach += ranked[used]
                used += 1
            cost = used * leaf_weight
            if granule > 1 and a % granule != 0:
                cost = impossible
            tables[base + a] = min(cost + own_weight, impossible)
    return tables, starts
