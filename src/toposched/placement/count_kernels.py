"""Compiled loop of the count plans' knapsack over runs of children of equal capacity."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def knapsack_by_runs(kernels: np.ndarray, offsets: np.ndarray, k: int, limit: int) -> np.ndarray:
    """Tables of the knapsack over domains: `tables[i][d, j]` is the most pods on at most d of
    the first i domains with at most j children, for d <= k and j <= limit.

    Domain i taking m children holds `kernels[offsets[i] + m]` pods: the running sums of its
    children's capacities, largest first (so m = 0 holds 0). Over each run of equal
    capacities c, table[d - 1, j - m] + kernel[m] is (table[d - 1, i] - c i) + c j + const with
    i = j - m in a window that slides with j: a monotone queue gives every j's best in one pass,
    so a domain costs k x limit per run of equal children, not per child.
    """
    domains = offsets.size - 1
    width = limit + 1
    tables = np.zeros((domains + 1, k + 1, width), dtype=np.int64)
    queue = np.empty(width, dtype=np.int64)
    for domain in range(domains):
        tables[domain + 1] = tables[domain]
        base = offsets[domain]
        children = offsets[domain + 1] - base - 1
        for d in range(1, k + 1):
            previous = tables[domain, d - 1]
            best = tables[domain + 1, d]
            start = 0
            while start < children and start < limit:
                slope = kernels[base + start + 1] - kernels[base + start]
                end = start + 1
                while end < children and kernels[base + end + 1] - kernels[base + end] == slope:
                    end += 1
                constant = kernels[base + start] - slope * start
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
