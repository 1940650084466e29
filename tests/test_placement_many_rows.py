"""The compiled choice among many domains of one level (every rack of a fleet) of the one that
holds a small gang, fullest or emptiest first, against a count written out with numpy."""

from __future__ import annotations

import numpy as np
import pytest

from toposched.cluster.state import TOTALS_CPU, TOTALS_FREE_GPUS, TOTALS_MEMORY
from toposched.placement.capacity import pods_per_free
from toposched.placement.leaf_kernel import best_of_many_rows


def _expected(
    hist: np.ndarray,
    totals: np.ndarray,
    need: int,
    allowed: np.ndarray,
    per_free: np.ndarray,
    cpu: int,
    memory: int,
    count_free_gpus: bool,
    node_slice: int,
    emptiest: bool,
) -> int:
    """The row `CapacityView`'s counts and the policy's domain scores pick: pods from the free
    GPUs, bounded by CPU and memory, in whole node slices; the fullest (or emptiest) of those
    holding `need`, the lowest row on ties; -1 if none does."""
    if count_free_gpus:
        held = totals[:, TOTALS_FREE_GPUS].copy()
    else:
        held = (hist[:, allowed, :].sum(axis=1, dtype=np.int64) * per_free).sum(axis=1)
    if cpu:
        held = np.minimum(held, totals[:, TOTALS_CPU] // cpu)
    if memory:
        held = np.minimum(held, totals[:, TOTALS_MEMORY] // memory)
    held = held // node_slice * node_slice
    fits = np.flatnonzero(held >= need)
    if fits.size == 0:
        return -1
    scores = -held[fits] if emptiest else held[fits]
    return int(fits[np.argmin(scores)])


@pytest.mark.parametrize("seed", range(40))
def test_the_row_the_aggregate_counts_pick(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(1, 400))
    models = int(rng.choice([1, 2, 3]))
    width = int(rng.choice([5, 9]))  # nodes of 4 or 8 GPUs
    nodes = int(rng.choice([2, 18]))
    # Nodes per row by free GPUs, mostly full and some wholly free, as on a busy fleet.
    hist = np.zeros((rows, models, width), dtype=np.int32)
    for row in range(rows):
        for _ in range(int(rng.integers(0, nodes + 1))):
            free = width - 1 if rng.random() < 0.6 else int(rng.integers(0, width))
            hist[row, int(rng.integers(0, models)), free] += 1
    totals = np.zeros((rows, 5), dtype=np.int64)
    totals[:, TOTALS_FREE_GPUS] = (hist.sum(axis=1) * np.arange(width)).sum(axis=1)
    totals[:, TOTALS_CPU] = rng.integers(0, 64_000 * nodes, size=rows)
    totals[:, TOTALS_MEMORY] = rng.integers(0, 512 * 1024 * nodes, size=rows)
    gpus_per_pod = int(rng.choice([1, 2, width - 1]))
    node_slice = int(rng.choice([1, 1, 2]))
    per_free = pods_per_free(width, gpus_per_pod, node_slice)
    allowed = np.ones(models, dtype=np.bool_)
    if models > 1 and rng.random() < 0.5:
        allowed[int(rng.integers(0, models))] = False
    cpu = int(rng.choice([0, 4_000, 32_000]))
    memory = int(rng.choice([0, 65_536]))
    count_free_gpus = gpus_per_pod == 1 and bool(allowed.all()) and node_slice == 1
    for need in (1, 2, nodes, nodes * 2):
        for emptiest in (False, True):
            expected = _expected(
                hist,
                totals,
                need,
                allowed,
                per_free,
                cpu,
                memory,
                count_free_gpus,
                node_slice,
                emptiest,
            )
            found = best_of_many_rows(
                hist,
                totals,
                0,
                rows,
                need,
                allowed,
                per_free,
                gpus_per_pod,
                cpu,
                memory,
                count_free_gpus,
                node_slice,
                emptiest,
            )
            assert found == expected


def test_rows_of_a_later_level_in_a_stack() -> None:
    # The rows searched are first..last-1 of a stack; the row returned is the stacked one.
    hist = np.zeros((6, 1, 5), dtype=np.int32)
    hist[:, 0, 4] = [18, 18, 3, 18, 18, 0]
    totals = np.zeros((6, 5), dtype=np.int64)
    per_free = pods_per_free(5, 4)
    allowed = np.ones(1, dtype=np.bool_)
    args = (allowed, per_free, 4, 0, 0, False, 1)
    assert best_of_many_rows(hist, totals, 2, 6, 18, *args, False) == 3
    assert best_of_many_rows(hist, totals, 2, 6, 18, *args, True) == 3
    assert best_of_many_rows(hist, totals, 2, 6, 3, *args, False) == 2
    assert best_of_many_rows(hist, totals, 5, 6, 1, *args, False) == -1
