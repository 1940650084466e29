"""Compiled loops over the preemptible index: its per-domain aggregates moved for one job, and
the jobs holding GPUs on given nodes."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def count_job(
    nodes: np.ndarray,
    leaf_of_node: np.ndarray,
    whole: int,
    unallocated: bool,
    weight: float,
    weighted_since: float,
    leaf_freeable: np.ndarray,
    node_freeable: np.ndarray,
    leaf_unallocated_freeable: np.ndarray,
    node_unallocated_freeable: np.ndarray,
    leaf_weight: np.ndarray,
    leaf_weighted_since: np.ndarray,
) -> None:
    """Add a job's pods (one per entry of `nodes`, `whole` GPUs each, negative to take them
    away) to the freeable GPUs of their nodes and innermost domains, and its `weight` (and
    `weighted_since`) once to each innermost domain it touches."""
    for i in range(nodes.size):
        node = nodes[i]
        leaf = leaf_of_node[node]
        leaf_freeable[leaf] += whole
        node_freeable[node] += whole
        if unallocated:
            leaf_unallocated_freeable[leaf] += whole
            node_unallocated_freeable[node] += whole
    leaves = np.sort(leaf_of_node[nodes])
    for i in range(leaves.size):
        leaf = leaves[i]
        if i == 0 or leaf != leaves[i - 1]:
            leaf_weight[leaf] += weight
            leaf_weighted_since[leaf] += weighted_since


@njit(cache=True, nogil=True)
def owners_on(nodes: np.ndarray, owner: np.ndarray) -> np.ndarray:
    """The distinct non-negative entries of `owner`'s rows for `nodes`, sorted."""
    width = owner.shape[1]
    found = np.empty(nodes.size * width, dtype=np.int64)
    count = 0
    last = -1
    for i in range(nodes.size):
        for column in range(width):
            value = owner[nodes[i], column]
            # A job's GPUs lie side by side: repeats in a row are dropped before the sort.
            if value >= 0 and value != last:
                found[count] = value
                count += 1
                last = value
    found = np.sort(found[:count])
    distinct = 0
    for i in range(count):
        if i == 0 or found[i] != found[i - 1]:
            found[distinct] = found[i]
            distinct += 1
    return found[:distinct]
