"""Compiled loops of the check whether a kept refusal still stands after releases: the most
pods of a gang one domain holding released nodes could take, counted node by node, and the
pods the innermost domains released nodes touch could take, per domain of the gang's level."""

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
    distinct = np.empty(domains.size, dtype=np.int64)
    n_distinct = 0
    for i in range(domains.size):
        if i == 0 or domains[i] != domains[i - 1]:
            distinct[n_distinct] = domains[i]
            n_distinct += 1
    per_domain = domain_pods(
        distinct[:n_distinct],
        starts,
        free_whole_gpus,
        gpu_count,
        node_held,
        gpu_owner,
        takeable,
        shared,
        fenced,
        gpus_per_pod,
    )
    return int(per_domain.max()) if n_distinct else 0


@njit(cache=True, nogil=True)
def domain_pods(
    domains: np.ndarray,
    starts: np.ndarray,
    free_whole_gpus: np.ndarray,
    gpu_count: np.ndarray,
    node_held: np.ndarray,
    gpu_owner: np.ndarray,
    takeable: np.ndarray,
    shared: np.ndarray,
    fenced: np.ndarray,
    gpus_per_pod: int,
) -> np.ndarray:
    """Per domain of `domains` (nodes starts[d]..starts[d+1]-1), the pods (see `node_pods`)
    its nodes could take together."""
    pods = np.zeros(domains.size, dtype=np.int64)
    for i in range(domains.size):
        domain = domains[i]
        total = 0
        for node in range(starts[domain], starts[domain + 1]):
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
        pods[i] = total
    return pods


@njit(cache=True, nogil=True)
def add_touched(
    touched: np.ndarray, counts: np.ndarray, nodes: np.ndarray, leaf_of_node: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The innermost domains of `touched` (sorted, distinct) and those holding `nodes`,
    sorted and distinct, with the pods counted for each of `touched` (`counts`, one per
    domain), -1 for the domains holding some of `nodes`: those are to be counted again."""
    fresh = np.empty(nodes.size, dtype=np.int64)
    for i in range(nodes.size):
        fresh[i] = leaf_of_node[nodes[i]]
    fresh.sort()
    leaves = np.empty(touched.size + fresh.size, dtype=np.int64)
    merged = np.empty(touched.size + fresh.size, dtype=np.int64)
    i = j = k = 0
    while i < touched.size or j < fresh.size:
        if j < fresh.size and (i >= touched.size or fresh[j] <= touched[i]):
            leaf = fresh[j]
            while j < fresh.size and fresh[j] == leaf:
                j += 1
            if i < touched.size and touched[i] == leaf:
                i += 1
            leaves[k] = leaf
            merged[k] = -1
        else:
            leaves[k] = touched[i]
            merged[k] = counts[i]
            i += 1
        k += 1
    return leaves[:k], merged[:k]


@njit(cache=True, nogil=True)
def most_grown(
    leaves: np.ndarray,
    counts: np.ndarray,
    starts: np.ndarray,
    domain_of_leaf: np.ndarray,
    n_domains: int,
    granule: int,
    free_whole_gpus: np.ndarray,
    gpu_count: np.ndarray,
    node_held: np.ndarray,
    gpu_owner: np.ndarray,
    takeable: np.ndarray,
    shared: np.ndarray,
    fenced: np.ndarray,
    gpus_per_pod: int,
) -> int:
    """The most pods the innermost domains `leaves` (nodes starts[l]..starts[l+1]-1) of one
    domain (`domain_of_leaf`) could take together, each in whole slices of `granule` pods
    (see `node_pods`); 0 without leaves. `counts` gives each leaf's pods in whole slices where
    known; those of -1 are counted, and written there."""
    fresh = np.flatnonzero(counts < 0)
    pods = domain_pods(
        leaves[fresh],
        starts,
        free_whole_gpus,
        gpu_count,
        node_held,
        gpu_owner,
        takeable,
        shared,
        fenced,
        gpus_per_pod,
    )
    for j in range(fresh.size):
        counts[fresh[j]] = pods[j] // granule * granule
    grown = np.zeros(n_domains, dtype=np.int64)
    best = 0
    for i in range(leaves.size):
        domain = domain_of_leaf[leaves[i]]
        grown[domain] += counts[i]
        best = max(best, grown[domain])
    return best


@njit(cache=True, nogil=True)
def takeable_slots(
    counted: np.ndarray,
    unallocated: np.ndarray,
    account: np.ndarray,
    priority: np.ndarray,
    gpus: np.ndarray,
    own_code: int,
    own_priority: int,
    limits: np.ndarray,
    slack: float,
) -> np.ndarray:
    """Per slot of `counted` (the index's first slots), whether a job of account code
    `own_code` and priority `own_priority` may take that unprotected job under the budget
    rule: unallocated work, its account's jobs of lower priority, and other accounts' jobs
    of at most their account's `limits` GPUs (plus `slack`); one last entry, False."""
    size = counted.size
    takeable = np.zeros(size + 1, dtype=np.bool_)
    for slot in range(size):
        if not counted[slot]:
            continue
        code = account[slot]
        if unallocated[slot]:
            takeable[slot] = True
        elif code == own_code:
            takeable[slot] = priority[slot] < own_priority
        else:
            takeable[slot] = gpus[slot] <= limits[code] + slack
    return takeable


@njit(cache=True, nogil=True)
def limits_reach_more(
    limits: np.ndarray,
    before: np.ndarray,
    counted: np.ndarray,
    unallocated: np.ndarray,
    account: np.ndarray,
    gpus: np.ndarray,
    slack: float,
) -> bool:
    """Whether an allocated job of `counted` (the index's first slots) is within its
    account's `limits` now but was not within `before` (-inf beyond its end), both widened by
    `slack`."""
    for slot in range(counted.size):
        if not counted[slot] or unallocated[slot]:
            continue
        code = account[slot]
        limit = limits[code]
        was = before[code] if code < before.size else -np.inf
        if limit > was and gpus[slot] > was - slack and gpus[slot] <= limit + slack:
            return True
    return False
