"""Compiled loops of the victim search: racks within reach of a gang, their room counted node
by node, and the racks a candidate set opens."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def pods_in_domains(
    domains: np.ndarray,
    starts: np.ndarray,
    free_whole_gpus: np.ndarray,
    extra_gpus: np.ndarray,
    gpu_count: np.ndarray,
    closed: np.ndarray,
    gpu_model: np.ndarray,
    model_allowed: np.ndarray,
    gpus_per_pod: int,
) -> np.ndarray:
    """Per domain (nodes starts[d]..starts[d+1]-1), the pods of `gpus_per_pod` whole GPUs its
    open nodes of allowed models could hold with `extra_gpus` more free on each node."""
    pods = np.zeros(domains.size, dtype=np.int64)
    for i in range(domains.size):
        domain = domains[i]
        total = 0
        for node in range(starts[domain], starts[domain + 1]):
            if closed[node] != 0 or not model_allowed[gpu_model[node]]:
                continue
            gpus = min(np.int64(free_whole_gpus[node]) + extra_gpus[node], gpu_count[node])
            total += gpus // gpus_per_pod
        pods[i] = total
    return pods


@njit(cache=True, nogil=True)
def reaching(
    free: np.ndarray,
    extra: np.ndarray,
    need: int,
    weight: np.ndarray,
    weighted_since: np.ndarray,
    now: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Indices where `free` plus `extra` reaches `need`, in increasing order, and at each the
    work `now * weight - weighted_since` (at least 0)."""
    count = 0
    for i in range(free.size):
        if free[i] + extra[i] >= need:
            count += 1
    found = np.empty(count, dtype=np.int64)
    work = np.empty(count, dtype=np.float64)
    count = 0
    for i in range(free.size):
        if free[i] + extra[i] >= need:
            found[count] = i
            work[count] = max(now * weight[i] - weighted_since[i], 0.0)
            count += 1
    return found, work


@njit(cache=True, nogil=True)
def domains_opened_by(
    pod_starts: np.ndarray,
    pod_nodes: np.ndarray,
    whole: np.ndarray,
    lost: np.ndarray,
    leaf_of_node: np.ndarray,
    starts: np.ndarray,
    free_whole_gpus: np.ndarray,
    gpu_count: np.ndarray,
    closed: np.ndarray,
    gpu_model: np.ndarray,
    model_allowed: np.ndarray,
    pods_per_gpu: int,
    gpus_per_pod: int,
    pods_per_node: int,
    gpu_needed: int,
    with_lower: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For candidates 0..k-1 (candidate c holds pods pod_starts[c]..pod_starts[c+1]-1 on
    `pod_nodes`, freeing `whole[c]` GPUs per pod and losing `lost[c]`), per innermost domain
    some candidate touches, in increasing order:

    - the domain, and the pods its open nodes of allowed models could hold if every
      candidate there left (`pods_per_gpu` per `gpus_per_pod` free GPUs), plus
      `pods_per_node` on every node (pods without GPUs);
    - the work lost evicting every candidate there (an upper bound of the cheapest set);
    - with `with_lower`, a lower bound of it: candidates by lost work per GPU freed there, the
      last in part, until the `gpu_needed` GPUs less the free ones are covered;

    and the (domain position, candidate) pairs, by domain position then candidate.
    """
    candidates = pod_starts.size - 1
    pods = pod_nodes.size
    pod_owner = np.empty(pods, dtype=np.int64)
    pod_leaf = np.empty(pods, dtype=np.int64)
    for candidate in range(candidates):
        for pod in range(pod_starts[candidate], pod_starts[candidate + 1]):
            pod_owner[pod] = candidate
            pod_leaf[pod] = leaf_of_node[pod_nodes[pod]]
    # The leaves touched, in increasing order, and each pod's position among them: marked on
    # the leaves (bounded, and fewer than the pods of a large pool), not sorted.
    position_of = np.full(starts.size - 1, -1, dtype=np.int64)
    for pod in range(pods):
        position_of[pod_leaf[pod]] = 0
    leaves = np.flatnonzero(position_of == 0)
    for i in range(leaves.size):
        position_of[leaves[i]] = i
    position = np.empty(pods, dtype=np.int64)
    for pod in range(pods):
        position[pod] = position_of[pod_leaf[pod]]
    offsets = np.empty(leaves.size + 1, dtype=np.int64)
    offsets[0] = 0
    for i in range(leaves.size):
        offsets[i + 1] = offsets[i] + starts[leaves[i] + 1] - starts[leaves[i]]
    freed = np.zeros(offsets[-1], dtype=np.int64)
    for pod in range(pods):
        at = position[pod]
        freed[offsets[at] + pod_nodes[pod] - starts[leaves[at]]] += whole[pod_owner[pod]]
    room = np.zeros(leaves.size, dtype=np.int64)
    usable_free = np.zeros(leaves.size, dtype=np.int64)
    for i in range(leaves.size):
        first = starts[leaves[i]]
        for node in range(first, starts[leaves[i] + 1]):
            room[i] += pods_per_node
            if closed[node] != 0 or not model_allowed[gpu_model[node]]:
                continue
            free = np.int64(free_whole_gpus[node])
            usable_free[i] += free
            gpus = min(free + freed[offsets[i] + node - first], np.int64(gpu_count[node]))
            room[i] += gpus * pods_per_gpu // gpus_per_pod
    # Distinct (position, candidate) pairs with the GPUs the candidate frees there: pods by
    # position, stably (a counting sort), are by position then candidate, since pods come
    # candidate after candidate.
    codes = position * candidates + pod_owner
    next_at = np.zeros(leaves.size + 1, dtype=np.int64)
    for pod in range(pods):
        next_at[position[pod] + 1] += 1
    next_at = np.cumsum(next_at)
    order = np.empty(pods, dtype=np.int64)
    for pod in range(pods):
        order[next_at[position[pod]]] = pod
        next_at[position[pod]] += 1
    pair_leaf = np.empty(pods, dtype=np.int64)
    pair_owner = np.empty(pods, dtype=np.int64)
    supply = np.zeros(pods, dtype=np.float64)
    pairs = 0
    for k in range(pods):
        pod = order[k]
        if k == 0 or codes[pod] != codes[order[k - 1]]:
            pair_leaf[pairs] = position[pod]
            pair_owner[pairs] = pod_owner[pod]
            pairs += 1
        supply[pairs - 1] += whole[pod_owner[pod]]
    pair_leaf, pair_owner, supply = pair_leaf[:pairs], pair_owner[:pairs], supply[:pairs]
    bound = np.zeros(leaves.size, dtype=np.float64)
    for pair in range(pairs):
        bound[pair_leaf[pair]] += lost[pair_owner[pair]]
    lower = np.zeros(leaves.size if with_lower else 0, dtype=np.float64)
    if with_lower:
        _add_lower_bounds(pair_leaf, pair_owner, supply, lost, usable_free, gpu_needed, lower)
    return leaves, room, bound, lower, pair_leaf, pair_owner


@njit(cache=True, nogil=True)
def _add_lower_bounds(
    pair_leaf: np.ndarray,
    pair_owner: np.ndarray,
    supply: np.ndarray,
    lost: np.ndarray,
    usable_free: np.ndarray,
    gpu_needed: int,
    lower: np.ndarray,
) -> None:
    """Per domain position, a lower bound of the work lost opening it (`domains_opened_by`):
    its (position, candidate) pairs by lost work per GPU freed, the last in part, until the
    `gpu_needed` GPUs less the free ones are covered."""
    pairs = pair_leaf.size
    ratio = np.empty(pairs, dtype=np.float64)
    for pair in range(pairs):
        if supply[pair] > 0:
            ratio[pair] = lost[pair_owner[pair]] / max(supply[pair], 1.0)
        else:
            ratio[pair] = np.inf
    begin = 0
    while begin < pairs:
        end = begin + 1
        while end < pairs and pair_leaf[end] == pair_leaf[begin]:
            end += 1
        leaf = pair_leaf[begin]
        need = gpu_needed - usable_free[leaf]
        cheapest = np.argsort(ratio[begin:end], kind="mergesort")
        before = 0.0
        for k in range(end - begin):
            pair = begin + cheapest[k]
            take = min(max(need - before, 0.0), supply[pair])
            if take > 0:
                lower[leaf] += take * ratio[pair]
            before += supply[pair]
        begin = end
