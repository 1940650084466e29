"""Compiled loops that move the preemptible index's per-domain aggregates for one job."""

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
