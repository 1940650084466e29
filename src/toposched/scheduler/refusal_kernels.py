"""Compiled loop of the check whether a kept refusal still stands after releases: the most
pods of a gang one domain holding released nodes could take, counted node by node."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def node_pods(
    node: int,
    free_whole_gpus: np.ndarray,
    gpu_count: np.ndarray,
    node_held: np.ndarray,
    gpu_owner: np.ndarray,
    takeable: np.ndarray,
    shared: np.ndarray,
    fenced: np.ndarray,
    gpus_per_pod: int,
) -> int:
    """The pods of `gpus_per_pod` whole GPUs `node` could take with its free whole GPUs and
    those held by jobs it may take gone: per node `node_held` if it is not empty, else the GPUs
    whose `gpu_owner` slot is `takeable` (every GPU on a node marked `shared`); none on a node
    marked `fenced` (empty masks mark nothing)."""
    if fenced.size and fenced[node]:
        return 0
    count = np.int64(gpu_count[node])
    if node_held.size:
        held = np.int64(node_held[node])
    elif shared.size and shared[node]:
        held = count
    else:
        held = np.int64(0)
        for gpu in range(gpu_owner.shape[1]):
            owner = gpu_owner[node, gpu]
            if owner >= 0 and takeable[owner]:
                held += 1
    gpus = min(np.int64(free_whole_gpus[node]) + held, count)
    return int(gpus // gpus_per_pod)


@njit(cache=True, nogil=True)
def most_pods(
    nodes: np.ndarray,
    starts: np.ndarray,
    node_domain: np.ndarray,
    one_node: bool,
    free_whole_gpus: np.ndarray,
    gpu_count: np.ndarray,
    node_held: np.ndarray,
    gpu_owner: np.ndarray,
    takeable: np.ndarray,
    shared: np.ndarray,
    fenced: np.ndarray,
    gpus_per_pod: int,
    nodes_counted: int,
    too_many: int,
) -> int:
    """The most pods (see `node_pods`) one of `nodes` could take (`one_node`), else one domain
    (nodes starts[d]..starts[d+1]-1, `node_domain` per node) holding some of `nodes`;
    `too_many` when those domains hold more than `nodes_counted` nodes."""
    best = 0
    if one_node:
        for i in range(nodes.size):
            pods = node_pods(
                nodes[i],
                free_whole_gpus,
                gpu_count,
                node_held,
                gpu_owner,
                takeable,
                shared,
                fenced,
                gpus_per_pod,
            )
            best = max(best, pods)
        return best
    domains = np.empty(nodes.size, dtype=np.int64)
    for i in range(nodes.size):
        domains[i] = node_domain[nodes[i]]
    domains.sort()
    counted = 0
    for i in range(domains.size):
        if i == 0 or domains[i] != domains[i - 1]:
            counted += starts[domains[i] + 1] - starts[domains[i]]
    if counted > nodes_counted:
        return too_many
    for i in range(domains.size):
        if i > 0 and domains[i] == domains[i - 1]:
            continue
        total = 0
        for node in range(starts[domains[i]], starts[domains[i] + 1]):
            total += node_pods(
                node,
                free_whole_gpus,
                gpu_count,
                node_held,
                gpu_owner,
                takeable,
                shared,
                fenced,
                gpus_per_pod,
            )
        best = max(best, total)
    return best
