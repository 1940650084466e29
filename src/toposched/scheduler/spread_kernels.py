"""Compiled loops of the searches across innermost domains: the jobs met on some domains'
nodes, those domains' room with the jobs the contract allows gone, and the room candidates'
pods would free."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def owners_read(
    starts: np.ndarray, leaves: np.ndarray, gpu_owner: np.ndarray, n_slots: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The nodes of `leaves` (innermost domains, nodes starts[d]..starts[d+1]-1), domain after
    domain, their rows of `gpu_owner` (C-contiguous), the slots met (one flag per slot below
    `n_slots`, and a last one for GPUs nobody holds, -1) and each domain's node count."""
    sizes = np.empty(leaves.size, dtype=np.int64)
    count = 0
    for i in range(leaves.size):
        sizes[i] = starts[leaves[i] + 1] - starts[leaves[i]]
        count += sizes[i]
    width = gpu_owner.shape[1]
    every = gpu_owner.reshape(-1)
    nodes = np.empty(count, dtype=np.int64)
    owners = np.empty(count * width, dtype=gpu_owner.dtype)
    row = 0
    for i in range(leaves.size):
        first, last = starts[leaves[i]], starts[leaves[i] + 1]
        owners[row * width : (row + last - first) * width] = every[first * width : last * width]
        for node in range(first, last):
            nodes[row] = node
            row += 1
    marks = np.zeros(n_slots + 1, dtype=np.bool_)
    for owner in owners:
        marks[owner if owner >= 0 else n_slots] = True
    return nodes, owners.reshape(count, width), marks, sizes


@njit(cache=True, nogil=True)
def allowed_room(
    nodes: np.ndarray,
    owners: np.ndarray,
    allowed: np.ndarray,
    sizes: np.ndarray,
    free_whole_gpus: np.ndarray,
    gpu_count: np.ndarray,
    closed: np.ndarray,
    gpu_model: np.ndarray,
    model_allowed: np.ndarray,
    pods_per_free: np.ndarray,
    granule: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Which GPUs of `nodes` (rows of `owners`, domain after domain, `sizes` nodes each)
    allowed jobs hold (`allowed`: per slot, its last entry for GPUs nobody holds), and each
    domain's room with those jobs gone: pods on its open nodes of allowed models
    (`pods_per_free`: pods a node with k free GPUs holds, for k up to its GPU count), in whole
    slices of `granule` pods."""
    width = owners.shape[1]
    last = allowed.size - 1
    held = np.empty(owners.shape, dtype=np.bool_)
    for row in range(owners.shape[0]):
        for gpu in range(width):
            owner = owners[row, gpu]
            held[row, gpu] = allowed[owner if owner >= 0 else last]
    room = np.empty(sizes.size, dtype=np.int64)
    row = 0
    for i in range(sizes.size):
        pods = 0
        for _ in range(sizes[i]):
            node = nodes[row]
            if closed[node] == 0 and model_allowed[gpu_model[node]]:
                gpus = np.int64(free_whole_gpus[node])
                for gpu in range(width):
                    if held[row, gpu]:
                        gpus += 1
                pods += pods_per_free[min(gpus, np.int64(gpu_count[node]))]
            row += 1
        room[i] = pods // granule * granule
    return held, room


@njit(cache=True, nogil=True)
def room_gained(
    pod_nodes: np.ndarray,
    freed: np.ndarray,
    free_whole_gpus: np.ndarray,
    gpu_count: np.ndarray,
    closed: np.ndarray,
    leaf_of_node: np.ndarray,
    n_leaves: int,
    pods_per_gpu: int,
    gpus_per_pod: int,
    extra: np.ndarray,
) -> np.ndarray:
    """Per innermost domain, the pods (`pods_per_gpu` per `gpus_per_pod` free whole GPUs on a
    node) its open nodes gain once pods on `pod_nodes` free `freed` whole GPUs each, up to each
    node's GPUs. `extra`: one zero per node, zero again on return (the GPUs freed per node
    are added up there)."""
    touched = np.empty(pod_nodes.size, dtype=np.int64)
    n_touched = 0
    for pod in range(pod_nodes.size):
        node = pod_nodes[pod]
        if freed[pod] == 0:
            continue
        if extra[node] == 0:
            touched[n_touched] = node
            n_touched += 1
        extra[node] += freed[pod]
    gained = np.zeros(n_leaves, dtype=np.int64)
    for i in range(n_touched):
        node = touched[i]
        free = np.int64(free_whole_gpus[node])
        after = min(free + extra[node], np.int64(gpu_count[node]))
        extra[node] = 0
        if closed[node] == 0:
            more = after * pods_per_gpu // gpus_per_pod - free * pods_per_gpu // gpus_per_pod
            gained[leaf_of_node[node]] += more
    return gained
