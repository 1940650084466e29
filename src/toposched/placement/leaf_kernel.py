"""A compiled search for gangs that one innermost domain holds: the descent and the node fill."""

from __future__ import annotations

import numpy as np
from numba import njit

from toposched.cluster.kernels import pick_free_gpus
from toposched.cluster.state import TOTALS_CPU, TOTALS_FREE_GPUS, TOTALS_MEMORY


@njit(cache=True, nogil=True)
def _best_row(
    hist: np.ndarray,
    totals: np.ndarray,
    first: int,
    last: int,
    need: int,
    model_allowed: np.ndarray,
    pods_per_free: np.ndarray,
    gpus_per_pod: int,
    cpu_milli: int,
    memory_mib: int,
    count_free_gpus: bool,
    node_slice: int,
    emptiest: bool,
) -> int:
    """The fullest (or emptiest) of stacked domain rows first..last-1 that holds `need` pods
    by its aggregates, the lowest row on ties; -1 if none does. A row's pods are
    `CapacityView`'s bound: from the free-GPU histogram (or the free GPUs, for one-GPU pods of
    any model), then the domain's free CPU and memory, rounded down to whole node slices.
    (In one loop: a call per row costs more than the count.)"""
    best = -1
    best_score = 0
    for row in range(first, last):
        if count_free_gpus:
            held = totals[row, TOTALS_FREE_GPUS]
        else:
            held = 0
            for model in range(hist.shape[1]):
                if model_allowed[model]:
                    # Fewer free GPUs than a pod's hold no pod.
                    for free in range(gpus_per_pod, hist.shape[2]):
                        held += hist[row, model, free] * pods_per_free[free]
        if held and cpu_milli and held * cpu_milli > totals[row, TOTALS_CPU]:
            held = totals[row, TOTALS_CPU] // cpu_milli
        if held and memory_mib and held * memory_mib > totals[row, TOTALS_MEMORY]:
            held = totals[row, TOTALS_MEMORY] // memory_mib
        if node_slice > 1:
            held = held // node_slice * node_slice
        if held < need:
            continue
        score = -held if emptiest else held
        if best < 0 or score < best_score:
            best = row
            best_score = score
    return best


@njit(cache=True, nogil=True)
def best_of_many_rows(
    hist: np.ndarray,
    totals: np.ndarray,
    first: int,
    last: int,
    need: int,
    model_allowed: np.ndarray,
    pods_per_free: np.ndarray,
    gpus_per_pod: int,
    cpu_milli: int,
    memory_mib: int,
    count_free_gpus: bool,
    node_slice: int,
    emptiest: bool,
) -> int:
    """`_best_row` over many rows (every rack of a fleet), faster: a row whose free GPUs hold
    fewer than `need` pods is passed before its CPU and memory are read; where one cell of the
    histogram alone holds pods (one GPU model allowed, one count of free GPUs holding any: a
    pod of all of a node's GPUs) only that cell is read; and fullest first, the first row
    holding exactly `need` pods ends the search, since no row can do better and ties go to the
    lower row. The same row as `_best_row`."""
    models, width = hist.shape[1], hist.shape[2]
    model, column = -1, -1
    cells = 0
    for m in range(models):
        if model_allowed[m]:
            for free in range(gpus_per_pod, width):
                if pods_per_free[free]:
                    model, column = m, free
                    cells += 1
    weight = pods_per_free[column] if cells == 1 else 0
    best = -1
    best_score = 0
    for row in range(first, last):
        if count_free_gpus:
            held = totals[row, TOTALS_FREE_GPUS]
        elif cells == 1:
            held = hist[row, model, column] * weight
        else:
            held = 0
            for m in range(models):
                if model_allowed[m]:
                    for free in range(gpus_per_pod, width):
                        held += hist[row, m, free] * pods_per_free[free]
        if held < need:
            continue  # CPU, memory and slices only lower it
        if cpu_milli and held * cpu_milli > totals[row, TOTALS_CPU]:
            held = totals[row, TOTALS_CPU] // cpu_milli
        if memory_mib and held * memory_mib > totals[row, TOTALS_MEMORY]:
            held = totals[row, TOTALS_MEMORY] // memory_mib
        if node_slice > 1:
            held = held // node_slice * node_slice
        if held < need:
            continue
        score = -held if emptiest else held
        if best < 0 or score < best_score:
            best = row
            best_score = score
            if not emptiest and held == need:
                break
    return best


@njit(cache=True, nogil=True)
def place_in_one_leaf(
    hist: np.ndarray,
    totals: np.ndarray,
    level_offsets: np.ndarray,
    child_first: np.ndarray,
    child_last: np.ndarray,
    required: int,
    preferred: int,
    chosen_row: int,
    leaf_starts: np.ndarray,
    free_whole_gpus: np.ndarray,
    free_cpu_milli: np.ndarray,
    free_memory_mib: np.ndarray,
    health: np.ndarray,
    gpu_model: np.ndarray,
    gpu_free_milli: np.ndarray,
    model_allowed: np.ndarray,
    pods_per_free: np.ndarray,
    pods: int,
    gpus_per_pod: int,
    cpu_milli: int,
    memory_mib: int,
    count_free_gpus: bool,
    node_slice: int,
    emptiest: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Each pod's node and GPUs, as `place` finds them for a gang of whole GPUs without domain
    slices (in node slices of `node_slice` pods) when, at every level, one domain holds it
    all: from the required domain (the fullest, or emptiest, that holds the gang by
    aggregates) down through the preferred level when it is deeper than the required one (or
    the domain at that first level whose stacked row is `chosen_row`, when not -1), then
    level by level, to one innermost domain, whose nodes with room take the pods in policy
    order (fewest free GPUs first, or most; lowest index on ties). No pods (empty arrays) when
    the search would go another way: no domain holds the gang at some level, or the innermost
    domain's nodes hold fewer pods than its aggregates promised."""
    no_pods = (np.empty(0, dtype=np.int64), np.empty((0, gpus_per_pod), dtype=np.int64))
    leaf_level = level_offsets.size - 2
    level = 0
    first, last = level_offsets[0], level_offsets[1]  # the whole cluster
    while True:
        row = _best_row(
            hist,
            totals,
            first,
            last,
            pods,
            model_allowed,
            pods_per_free,
            gpus_per_pod,
            cpu_milli,
            memory_mib,
            count_free_gpus,
            node_slice,
            emptiest,
        )
        if row < 0:
            return no_pods
        if level == 0 and (required > 0 or preferred > 0):
            # A required level's domains all compete; so do a preferred level's when nothing
            # is required. The caller may have chosen among them already (`chosen_row`).
            level = required if required > 0 else preferred
            if chosen_row < 0:
                first, last = level_offsets[level], level_offsets[level + 1]
                continue
            row = chosen_row
        if level == leaf_level:
            break
        first, last = child_first[row], child_last[row]
        level += 1

    leaves = np.empty(1, dtype=np.int64)
    leaves[0] = row - level_offsets[leaf_level]
    shares = np.empty(1, dtype=np.int64)
    shares[0] = pods
    return fill_leaves(
        leaves,
        shares,
        leaf_starts,
        free_whole_gpus,
        free_cpu_milli,
        free_memory_mib,
        health,
        gpu_model,
        gpu_free_milli,
        model_allowed,
        pods_per_free,
        gpus_per_pod,
        cpu_milli,
        memory_mib,
        emptiest,
    )


@njit(cache=True, nogil=True)
def fill_leaves(
    leaves: np.ndarray,
    shares: np.ndarray,
    leaf_starts: np.ndarray,
    free_whole_gpus: np.ndarray,
    free_cpu_milli: np.ndarray,
    free_memory_mib: np.ndarray,
    health: np.ndarray,
    gpu_model: np.ndarray,
    gpu_free_milli: np.ndarray,
    model_allowed: np.ndarray,
    pods_per_free: np.ndarray,
    gpus_per_pod: int,
    cpu_milli: int,
    memory_mib: int,
    emptiest: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Each pod's node and GPUs when innermost domain `leaves[i]` takes `shares[i]` pods of whole
    GPUs, leaf after leaf: its nodes with room (exact: health, GPU model, free GPUs, CPU and
    memory, as `capacity_kernels.pods_on_nodes`) in policy order (fewest free GPUs first, or
    most; index order on ties), each filled to its room until the share is placed; a node's
    pods take its free GPUs in index order. No pods (empty arrays) when some leaf's nodes hold
    less than its share."""
    no_pods = (np.empty(0, dtype=np.int64), np.empty((0, gpus_per_pod), dtype=np.int64))
    size = 0
    for i in range(leaves.size):
        size += leaf_starts[leaves[i] + 1] - leaf_starts[leaves[i]]
    ranks = gpu_free_milli.shape[1] + 1  # a node's rank: its free GPUs, or the reverse
    used_nodes = np.empty(size, dtype=np.int64)
    used_pods = np.empty(size, dtype=np.int64)
    used = 0
    for i in range(leaves.size):
        first, last = leaf_starts[leaves[i]], leaf_starts[leaves[i] + 1]
        nodes = np.empty(last - first, dtype=np.int64)
        held = np.empty(last - first, dtype=np.int64)
        scores = np.empty(last - first, dtype=np.int64)
        usable = 0
        room = 0
        for node in range(first, last):
            if health[node] != 0 or not model_allowed[gpu_model[node]]:
                continue
            count = pods_per_free[free_whole_gpus[node]]
            if count and cpu_milli and count * cpu_milli > free_cpu_milli[node]:
                count = free_cpu_milli[node] // cpu_milli
            if count and memory_mib and count * memory_mib > free_memory_mib[node]:
                count = free_memory_mib[node] // memory_mib
            if count <= 0:
                continue
            nodes[usable] = node
            held[usable] = count
            free = free_whole_gpus[node]
            scores[usable] = ranks - 1 - free if emptiest else free
            usable += 1
            room += count
        if room < shares[i]:
            return no_pods
        # Policy order, stable (the nodes come in index order), by counting: ranks are free GPU
        # counts, so a leaf of any size (a whole flat cluster) is ordered in one pass, not a sort.
        starts = np.zeros(ranks + 1, dtype=np.int64)
        for at in range(usable):
            starts[scores[at] + 1] += 1
        for rank in range(ranks):
            starts[rank + 1] += starts[rank]
        order = np.empty(usable, dtype=np.int64)
        for at in range(usable):
            order[starts[scores[at]]] = at
            starts[scores[at]] += 1
        left = shares[i]
        for ranked in order:
            if left == 0:
                break
            take = min(held[ranked], left)
            used_nodes[used] = nodes[ranked]
            used_pods[used] = take
            used += 1
            left -= take
    return pick_free_gpus(used_nodes[:used], used_pods[:used], gpus_per_pod, gpu_free_milli)


@njit(cache=True, nogil=True)
def nodes_of_leaves(
    leaves: np.ndarray,
    shares: np.ndarray,
    leaf_starts: np.ndarray,
    free_whole_gpus: np.ndarray,
    free_cpu_milli: np.ndarray,
    free_memory_mib: np.ndarray,
    health: np.ndarray,
    gpu_model: np.ndarray,
    model_allowed: np.ndarray,
    pods_per_free: np.ndarray,
    gpus_per_pod: int,
    cpu_milli: int,
    memory_mib: int,
    node_slice: int,
    emptiest: bool,
    gpu_count: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, bool, bool]:
    """The nodes of innermost domains `leaves`, leaf after leaf in index order, and the pods
    of whole GPUs each holds now (as `capacity_kernels.pods_on_nodes` counts them, in whole
    node slices); whether the leaves are taken whole in that order: every node has room,
    each leaf's nodes hold exactly its share, and index order is policy order within each
    leaf (free GPUs never fewer, fullest first, or never more, emptiest first), as on the
    free racks a large gang takes; and whether every GPU of every node is free (`gpu_count`
    per node). One pass, where numpy gathers the nodes several times."""
    size = 0
    for i in range(leaves.size):
        size += leaf_starts[leaves[i] + 1] - leaf_starts[leaves[i]]
    nodes = np.empty(size, dtype=np.int64)
    capacity = np.empty(size, dtype=np.int64)
    whole = True
    every_gpu_free = True
    at = 0
    for i in range(leaves.size):
        room = 0
        previous_rank = np.int64(0)
        first = True
        for node in range(leaf_starts[leaves[i]], leaf_starts[leaves[i] + 1]):
            held = 0
            if health[node] == 0 and model_allowed[gpu_model[node]]:
                held = pods_per_free[free_whole_gpus[node]]
                if held and cpu_milli and held * cpu_milli > free_cpu_milli[node]:
                    held = free_cpu_milli[node] // cpu_milli
                if held and memory_mib and held * memory_mib > free_memory_mib[node]:
                    held = free_memory_mib[node] // memory_mib
                if node_slice > 1:
                    held = held // node_slice * node_slice
            nodes[at] = node
            capacity[at] = held
            at += 1
            room += held
            if held <= 0:
                whole = False
            free = np.int64(free_whole_gpus[node])
            if free != gpu_count[node]:
                every_gpu_free = False
            rank = -free if emptiest else free
            if not first and rank < previous_rank:
                whole = False
            first = False
            previous_rank = rank
        if room != shares[i]:
            whole = False
    return nodes, capacity, whole, every_gpu_free
