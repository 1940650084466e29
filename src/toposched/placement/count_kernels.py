"""Compiled loops of the count plans' knapsack: by runs of equal children, or by SMAWK."""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

# Runs of equal children beyond which a domain is merged by SMAWK instead: one SMAWK pass over
# a row costs about as much as this many run passes.
SMAWK_RUNS = 8
# Slope of the penalty that extends a kernel beyond its children (or below none), keeping it
# concave: larger than any capacity, small enough that penalised sums stay far from overflow.
_PENALTY = np.int64(1) << 40
# `fewest_node_counts` where the domains of a row do not hold the need together.
NOT_REACHED = np.iinfo(np.int64).max


@njit(cache=True, nogil=True)
def knapsack_by_runs(
    kernels: np.ndarray, offsets: np.ndarray, k: int, limit: int, smawk_runs: int = SMAWK_RUNS
) -> np.ndarray:
    """Tables of the knapsack over domains: `tables[i][d, j]` is the most pods on at most d of
    the first i domains with at most j children, for d <= k and j <= limit.

    Domain i taking m children holds `kernels[offsets[i] + m]` pods: the running sums of its
    children's capacities, largest first (so m = 0 holds 0, and the sums are concave). Over each
    run of equal capacities c, table[d - 1, j - m] + kernel[m] is (table[d - 1, i] - c i) + c j
    + const with i = j - m in a window that slides with j: a monotone queue gives every j's best
    in one pass, so a domain costs k x limit per run of equal children, not per child. A domain
    with more than `smawk_runs` runs is merged by `_row_maxima` instead.
    """
    domains = offsets.size - 1
    width = limit + 1
    tables = np.zeros((domains + 1, k + 1, width), dtype=np.int64)
    queue = np.empty(width, dtype=np.int64)
    for domain in range(domains):
        tables[domain + 1] = tables[domain]
        base = offsets[domain]
        children = offsets[domain + 1] - base - 1
        kernel = kernels[base : offsets[domain + 1]]
        runs = 0
        for child in range(children):
            if child == 0 or kernel[child + 1] - kernel[child] != kernel[child] - kernel[child - 1]:
                runs += 1
        for d in range(1, k + 1):
            previous = tables[domain, d - 1]
            best = tables[domain + 1, d]
            if runs > smawk_runs:
                merged = _row_maxima(previous, kernel)
                for j in range(width):
                    if merged[j] > best[j]:
                        best[j] = merged[j]
                continue
            start = 0
            while start < children and start < limit:
                slope = kernel[start + 1] - kernel[start]
                end = start + 1
                while end < children and kernel[end + 1] - kernel[end] == slope:
                    end += 1
                constant = kernel[start] - slope * start
                head = 0
                tail = 0
                for j in range(start + 1, width):
                    # Children m in (start, end]: previous[i] with i = j - m in [j - end, j -
                    # start - 1]; i = j - start - 1 enters, i < j - end leaves.
                    entering = j - start - 1
                    value = previous[entering] - slope * entering
                    while (
                        tail > head and previous[queue[tail - 1]] - slope * queue[tail - 1] <= value
                    ):
                        tail -= 1
                    queue[tail] = entering
                    tail += 1
                    while queue[head] < j - end:
                        head += 1
                    i = queue[head]
                    candidate = previous[i] - slope * i + slope * j + constant
                    if candidate > best[j]:
                        best[j] = candidate
                start = end
    return tables


@njit(cache=True, nogil=True)
def _entry(previous: NDArray[np.int64], kernel: NDArray[np.int64], j: int, i: int) -> int:
    """previous[i] + kernel[j - i], the kernel extended concavely by a steep penalty on both
    sides, so that the matrix over (j, i) is Monge and SMAWK applies."""
    x = j - i
    last = kernel.size - 1
    if x < 0:
        value = previous[i] + _PENALTY * x
    elif x > last:
        value = previous[i] + kernel[last] - _PENALTY * (x - last)
    else:
        value = previous[i] + kernel[x]
    return int(value)


@njit(cache=True, nogil=True)
def _row_maxima(previous: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """For every j, the best of previous[j - m] + kernel[m] over m (the (max, +) convolution of
    a row with a concave kernel), by SMAWK on the implicit matrix of `_entry` in O(rows).

    Rows at level t are j = 2^t - 1 + q 2^t. Going down, each level keeps at most as many
    columns as it has rows (the columns that may hold a row maximum); coming back up, each row
    between two rows of the level below is searched only between their maxima's columns.
    """
    n = previous.size
    levels = 0
    while (1 << (levels + 1)) - 1 < n:
        levels += 1
    columns = np.empty(2 * n + levels + 2, dtype=np.int64)
    first = np.empty(levels + 1, dtype=np.int64)
    count = np.empty(levels + 1, dtype=np.int64)
    stack = np.empty(n, dtype=np.int64)
    used = 0
    for level in range(levels + 1):
        start, step = (1 << level) - 1, 1 << level
        rows = (n - start + step - 1) // step
        top = 0
        offered = n if level == 0 else count[level - 1]
        for q in range(offered):
            column = q if level == 0 else columns[first[level - 1] + q]
            while top > 0:
                row = start + (top - 1) * step
                if _entry(previous, kernel, row, stack[top - 1]) < _entry(
                    previous, kernel, row, column
                ):
                    top -= 1
                else:
                    break
            if top < rows:
                stack[top] = column
                top += 1
        first[level] = used
        count[level] = top
        columns[used : used + top] = stack[:top]
        used += top
    best_column = np.empty(n, dtype=np.int64)
    for level in range(levels, -1, -1):
        start, step = (1 << level) - 1, 1 << level
        rows = (n - start + step - 1) // step
        base = first[level]
        low = 0
        for p in range(0, rows, 2):
            row = start + p * step
            high = count[level] - 1
            if p < rows - 1:
                target = best_column[row + step]
                high = low
                while columns[base + high] != target:
                    high += 1
            chosen = columns[base + low]
            value = _entry(previous, kernel, row, chosen)
            for x in range(low + 1, high + 1):
                candidate = _entry(previous, kernel, row, columns[base + x])
                if candidate > value:
                    value = candidate
                    chosen = columns[base + x]
            best_column[row] = chosen
            low = high
    merged = np.empty(n, dtype=np.int64)
    for j in range(n):
        merged[j] = _entry(previous, kernel, j, best_column[j])
    return merged


@njit(cache=True, nogil=True)
def knapsack_every_count(
    kernels: np.ndarray, offsets: np.ndarray, k: int, limit: int, unreachable: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The count plan's knapsack over every count of children, for kernels of any shape:
    `table[d, j]`, the most pods on at most d domains with at most j children (d <= k,
    j <= limit), domain i taking m children holding `kernels[offsets[i] + m]`; and per domain
    and (d - 1, j) whether it is used in reaching `table[d, j]` and the children it takes then
    (the first m of the most pods). Entries j - m < 0 count as `unreachable`."""
    domains = offsets.size - 1
    table = np.zeros((k + 1, limit + 1), dtype=np.int64)
    used = np.zeros((domains, k, limit + 1), dtype=np.bool_)
    taken = np.zeros((domains, k, limit + 1), dtype=np.int32)
    for domain in range(domains):
        kernel = kernels[offsets[domain] : offsets[domain + 1]]
        for d in range(k, 0, -1):  # row d from row d - 1 as it was before this domain
            previous = table[d - 1]
            row = table[d]
            for j in range(limit + 1):
                best = previous[j] + kernel[0]
                chosen = 0
                for m in range(1, kernel.size):
                    value = (previous[j - m] if m <= j else unreachable) + kernel[m]
                    if value > best:
                        best = value
                        chosen = m
                taken[domain, d - 1, j] = chosen
                if best > row[j]:
                    row[j] = best
                    used[domain, d - 1, j] = True
    return table, used, taken


@njit(cache=True, nogil=True)
def running_sums(
    children: np.ndarray,
    offsets: np.ndarray,
    counts: np.ndarray,
    widths: np.ndarray,
    smawk_runs: int = SMAWK_RUNS,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """For each domain i (its children's capacities at `offsets[i]`, `counts[i]` of them, at
    least `widths[i] - 1`): the running sums of its largest `widths[i] - 1` children from 0, in
    `sums[starts[i]:starts[i + 1]]`; those children's positions, largest first (ties in their
    order), in `picks[starts[i] - i:starts[i + 1] - i - 1]`; and over all domains the runs of
    equal capacity the knapsack merges (each domain's counted up to `smawk_runs`)."""
    domains = offsets.size
    starts = np.empty(domains + 1, dtype=np.int64)
    starts[0] = 0
    for i in range(domains):
        starts[i + 1] = starts[i] + widths[i]
    sums = np.zeros(starts[domains], dtype=np.int64)
    picks = np.empty(starts[domains] - domains, dtype=np.int64)
    runs = 0
    for i in range(domains):
        own = children[offsets[i] : offsets[i] + counts[i]]
        order = _largest_first(own, widths[i] - 1)
        first, own_runs, total = starts[i], 1, 0
        for m in range(widths[i] - 1):
            value = own[order[m]]
            if m > 0 and value != own[order[m - 1]]:
                own_runs += 1
            picks[first - i + m] = order[m]
            total += value
            sums[first + m + 1] = total
        runs += min(own_runs, smawk_runs)
    return sums, starts, picks, runs


@njit(cache=True, nogil=True)
def _largest_first(values: np.ndarray, most: int) -> np.ndarray:
    """Positions of the `most` largest of `values`, largest first, ties in their order: a
    stable sort's, by counting when the values are small beside their number (a domain's
    children's capacities in pods, the usual case)."""
    top, bottom = 0, 0
    for value in values:
        top, bottom = max(top, value), min(bottom, value)
    if bottom < 0 or top > 4 * values.size + 64:
        return np.argsort(-values, kind="mergesort")[:most]
    # Where each value's run begins, largest values first: how many values exceed it.
    begins = np.zeros(top + 2, dtype=np.int64)
    for value in values:
        begins[value] += 1
    above = 0
    for value in range(top, -1, -1):
        count = begins[value]
        begins[value] = above
        above += count
    order = np.empty(most, dtype=np.int64)
    for position in range(values.size):
        value = values[position]
        rank = begins[value]
        begins[value] = rank + 1
        if rank < most:
            order[rank] = position
    return order


@njit(cache=True, nogil=True)
def backtrack_by_runs(
    tables: np.ndarray, sums: np.ndarray, starts: np.ndarray, domains: int, children: int
) -> np.ndarray:
    """Children taken in each domain by a choice reaching `tables[-1][domains, children]` (the
    most pods on at most that many domains and children, from `knapsack_by_runs` over the
    running sums `sums`, domain i's at `starts[i]:starts[i + 1]`): each domain, last first, is
    skipped where the table before it reaches the same, else takes the fewest children that
    do."""
    taken = np.zeros(starts.size - 1, dtype=np.int64)
    d, j = domains, children
    for i in range(starts.size - 2, -1, -1):
        value = tables[i + 1, d, j]
        if d == 0 or value == tables[i, d, j]:
            continue
        kernel = sums[starts[i] : starts[i + 1]]
        m = 1
        while m <= min(j, kernel.size - 1) and tables[i, d - 1, j - m] + kernel[m] != value:
            m += 1
        if m > min(j, kernel.size - 1):
            raise AssertionError("no count of children reaches the knapsack's table")
        taken[i] = m
        d, j = d - 1, j - m
    return taken


@njit(cache=True, nogil=True)
def shares_largest_first(
    children: np.ndarray,
    offsets: np.ndarray,
    picks: np.ndarray,
    starts: np.ndarray,
    taken: np.ndarray,
    amounts: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Where `amounts[i]` pods go among the `taken[i]` children domain i takes (its largest,
    at `picks` as `running_sums` lists them): each child filled whole in turn, the last with
    the rest. Returns the children with pods (positions in `children`) and their pods, domain
    after domain."""
    size = 0
    for i in range(taken.size):
        size += taken[i]
    positions = np.empty(size, dtype=np.int64)
    pods = np.empty(size, dtype=np.int64)
    filled = 0
    for i in range(taken.size):
        before = 0
        for m in range(taken[i]):
            position = offsets[i] + picks[starts[i] - i + m]
            capacity = children[position]
            share = min(max(amounts[i] - before, 0), capacity)
            before += capacity
            if share > 0:
                positions[filled] = position
                pods[filled] = share
                filled += 1
    return positions[:filled], pods[:filled]


def fewest_node_counts(
    values: NDArray[np.int64], counts: NDArray[np.int64], need: int | NDArray[np.int64]
) -> NDArray[np.int64]:
    """For each row of `counts` (nodes, or any domains, by capacity `values`), the fewest that
    hold `need` pods (`NOT_REACHED` where all of them do not): the largest first. `need` may
    be one per row."""
    if isinstance(need, np.ndarray):
        need = need[:, None]
    if values.size == 0:
        return np.full(counts.shape[0], NOT_REACHED, dtype=np.int64)
    by_largest = counts[:, ::-1]
    largest = values[::-1]
    pods = (by_largest * largest).cumsum(axis=1)
    nodes = by_largest.cumsum(axis=1)
    reach = pods >= need
    column = reach.argmax(axis=1)
    rows = np.arange(counts.shape[0])
    pods_before = np.where(column > 0, pods[rows, column - 1], 0)
    nodes_before = np.where(column > 0, nodes[rows, column - 1], 0)
    value = largest[column]
    if isinstance(need, np.ndarray):
        need = need[:, 0]
    fewest = nodes_before + (need - pods_before + value - 1) // value
    return np.where(reach[:, -1], fewest, NOT_REACHED).astype(np.int64)


@njit(cache=True, nogil=True)
def knapsack_of_tables(
    tables: np.ndarray, offsets: np.ndarray, rows: np.ndarray, width: int, k: int, children: int
) -> np.ndarray:
    """A knapsack over domains whose own tables count two levels: domain i holds
    `tables[offsets[i]:offsets[i + 1]].reshape(rows[i], width)[a, b]` pods on at most a
    children and b grandchildren. Returns `merged[i][d, a, b]`, the most pods on at most d of
    the first i domains, a children and b grandchildren, for d <= k, a <= `children` and
    b < `width`; a domain used takes a child at least. Each domain costs k x (children + 1) x
    width x its (rows - 1) x width / 2 or so: for tables short in both counts."""
    domains = offsets.size - 1
    limit = children + 1
    merged = np.zeros((domains + 1, k + 1, limit, width), dtype=np.int64)
    for i in range(domains):
        own = tables[offsets[i] : offsets[i + 1]].reshape(rows[i], width)
        merged[i + 1] = merged[i]
        for d in range(1, k + 1):
            before = merged[i, d - 1]
            after = merged[i + 1, d]
            for a in range(limit):
                for b in range(width):
                    best = after[a, b]
                    for a2 in range(1, min(a, rows[i] - 1) + 1):
                        for b2 in range(b + 1):
                            value = before[a - a2, b - b2] + own[a2, b2]
                            if value > best:
                                best = value
                    after[a, b] = best
    return merged


@njit(cache=True, nogil=True)
def backtrack_of_tables(
    merged: np.ndarray,
    tables: np.ndarray,
    offsets: np.ndarray,
    rows: np.ndarray,
    d: int,
    a: int,
    b: int,
) -> np.ndarray:
    """Children and grandchildren each domain takes in a choice reaching `merged[-1][d, a, b]`
    (from `knapsack_of_tables`): `taken[i] = (children, grandchildren)`, zeros where unused."""
    domains = offsets.size - 1
    width = merged.shape[3]
    taken = np.zeros((domains, 2), dtype=np.int64)
    for i in range(domains - 1, -1, -1):
        value = merged[i + 1, d, a, b]
        if d == 0 or value == merged[i, d, a, b]:
            continue
        own = tables[offsets[i] : offsets[i + 1]].reshape(rows[i], width)
        found = False
        for a2 in range(1, min(a, rows[i] - 1) + 1):
            for b2 in range(b + 1):
                if merged[i, d - 1, a - a2, b - b2] + own[a2, b2] == value:
                    taken[i, 0], taken[i, 1] = a2, b2
                    found = True
                    break
            if found:
                break
        if not found:
            raise AssertionError("no share of a domain reaches the knapsack's table")
        d, a, b = d - 1, a - taken[i, 0], b - taken[i, 1]
    return taken
