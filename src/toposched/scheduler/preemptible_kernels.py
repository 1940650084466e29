"""Compiled loops over the preemptible index: its per-domain aggregates moved for one job or
many, a job's GPUs marked as its own, and the jobs holding GPUs on given nodes."""

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
    seen: np.ndarray,
) -> None:
    """Add a job's pods (one per entry of `nodes`, `whole` GPUs each, negative to take them
    away) to the freeable GPUs of their nodes and innermost domains, and its `weight` (and
    `weighted_since`) once to each innermost domain it touches. `seen` (one flag per
    innermost domain, all false) marks the domains done; they are cleared again."""
    for i in range(nodes.size):
        node = nodes[i]
        leaf = leaf_of_node[node]
        leaf_freeable[leaf] += whole
        node_freeable[node] += whole
        if unallocated:
            leaf_unallocated_freeable[leaf] += whole
            node_unallocated_freeable[node] += whole
        if not seen[leaf]:
            seen[leaf] = True
            leaf_weight[leaf] += weight
            leaf_weighted_since[leaf] += weighted_since
    for i in range(nodes.size):
        seen[leaf_of_node[nodes[i]]] = False


@njit(cache=True, nogil=True)
def count_jobs(
    pod_nodes: np.ndarray,
    pods: np.ndarray,
    whole: np.ndarray,
    unallocated: np.ndarray,
    weight: np.ndarray,
    since: np.ndarray,
    pair: np.ndarray,
    sign: int,
    leaf_of_node: np.ndarray,
    leaf_freeable: np.ndarray,
    node_freeable: np.ndarray,
    leaf_unallocated_freeable: np.ndarray,
    node_unallocated_freeable: np.ndarray,
    leaf_weight: np.ndarray,
    leaf_weighted_since: np.ndarray,
    unprotected_in_pair: np.ndarray,
    seen: np.ndarray,
) -> None:
    """`count_job` of each of many jobs in turn (`pods[j]` of `pod_nodes` are job j's, after
    those of the jobs before it; `whole` and `weight` already carry the sign), and `sign`
    added to the unprotected count of each allocated job's pair."""
    start = 0
    for job in range(pods.size):
        end = start + pods[job]
        count_job(
            pod_nodes[start:end],
            leaf_of_node,
            whole[job],
            unallocated[job],
            weight[job],
            weight[job] * since[job],
            leaf_freeable,
            node_freeable,
            leaf_unallocated_freeable,
            node_unallocated_freeable,
            leaf_weight,
            leaf_weighted_since,
            seen,
        )
        if not unallocated[job]:
            unprotected_in_pair[pair[job]] += sign
        start = end


@njit(cache=True, nogil=True)
def leaves_of(nodes: np.ndarray, leaf_of_node: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """The innermost domains of a job's pods on `nodes`, each once, in the order first met.
    `seen` as `count_job` takes it."""
    leaves = np.empty(nodes.size, dtype=np.int64)
    count = 0
    for i in range(nodes.size):
        leaf = leaf_of_node[nodes[i]]
        if not seen[leaf]:
            seen[leaf] = True
            leaves[count] = leaf
            count += 1
    for i in range(count):
        seen[leaves[i]] = False
    return leaves[:count].copy()


@njit(cache=True, nogil=True)
def move_since(
    leaves: np.ndarray,
    weight: float,
    weighted_before: float,
    weighted_after: float,
    leaf_weight: np.ndarray,
    leaf_weighted_since: np.ndarray,
) -> None:
    """A counted job's work at stake now counted from a later time: `count_job` out, then in,
    without its freeable GPUs (whole numbers, which come back exactly). Each innermost domain
    it touches (`leaves`, each once: `leaves_of`) takes the same float sums those two calls
    make, so its sums end bit for bit as theirs would: `weight` off and on again,
    `weighted_before` off, `weighted_after` on."""
    for i in range(leaves.size):
        leaf = leaves[i]
        leaf_weight[leaf] += -weight
        leaf_weighted_since[leaf] += -weighted_before
        leaf_weight[leaf] += weight
        leaf_weighted_since[leaf] += weighted_after


@njit(cache=True, nogil=True)
def set_owner(owner: np.ndarray, nodes: np.ndarray, gpus: np.ndarray, value: int) -> None:
    """Mark the GPUs `gpus[p]` of each pod's node `nodes[p]` as `value`'s."""
    width = gpus.shape[1]
    if width == owner.shape[1]:
        # Each pod holds every GPU of its node (its GPUs are distinct): whole rows.
        for pod in range(nodes.size):
            owner[nodes[pod], :] = value
        return
    for pod in range(nodes.size):
        node = nodes[pod]
        for column in range(width):
            owner[node, gpus[pod, column]] = value


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
