"""Compiled loops over a few nodes' aggregates, where numpy's per-call cost outweighs the work."""

from __future__ import annotations

import numpy as np
from numba import njit

# Up to this many pods or nodes, changes and checks run in these loops; beyond, numpy's sorted
# and vectorised passes cost less (measured on the 1M-GPU cluster).
COMPILED_LIMIT = 2048
StateArrays = tuple[np.ndarray, ...]
"""The state's arrays the loops read and change, in this order (`ClusterState._kernel_arrays`):
per node, free whole GPUs, free milli-GPU of each GPU, free CPU, free memory, GPU count, CPU
capacity, memory capacity, closed (0: open to new work); each node's domain row at every level;
per node, its GPU model; per domain row, the free-GPU histogram and the totals."""
# Columns of a node's values, in the order of the per-domain totals.
WHOLE, MILLI, IDLE, CPU, MEMORY = range(5)


@njit(cache=True, nogil=True)
def _values_into(node: int, out: np.ndarray, arrays: StateArrays) -> None:
    free_whole_gpus, gpu_free_milli, free_cpu_milli, free_memory_mib = arrays[:4]
    gpu_count, cpu_capacity, memory_capacity = arrays[4:7]
    whole = np.int64(free_whole_gpus[node])
    cpu = free_cpu_milli[node]
    memory = free_memory_mib[node]
    milli = np.int64(0)
    for gpu in range(gpu_free_milli.shape[1]):
        milli += gpu_free_milli[node, gpu]
    out[WHOLE] = whole
    out[MILLI] = milli
    out[IDLE] = (
        whole == gpu_count[node] and cpu == cpu_capacity[node] and memory == memory_capacity[node]
    )
    out[CPU] = cpu
    out[MEMORY] = memory


@njit(cache=True, nogil=True)
def _move_domains(
    node: int,
    before: np.ndarray,
    after: np.ndarray,
    node_rows: np.ndarray,
    gpu_model: np.ndarray,
    hist: np.ndarray,
    totals: np.ndarray,
) -> None:
    """Move `node`'s domains, at every level, from its `before` values to its `after` values:
    totals by the difference, histograms from one cell to another."""
    left, entered = before[WHOLE], after[WHOLE]
    model = gpu_model[node]
    for level in range(node_rows.shape[1]):
        row = node_rows[node, level]
        for column in range(5):
            totals[row, column] += after[column] - before[column]
        if left != entered:
            hist[row, model, left] -= 1
            hist[row, model, entered] += 1


@njit(cache=True, nogil=True)
def node_values(nodes: np.ndarray, arrays: StateArrays) -> np.ndarray:
    """Each node's share of the per-domain totals: one row per node, the columns above."""
    values = np.empty((nodes.size, 5), dtype=np.int64)
    for i in range(nodes.size):
        _values_into(nodes[i], values[i], arrays)
    return values


@njit(cache=True, nogil=True)
def add_node_changes(
    nodes: np.ndarray,
    before: np.ndarray,
    after: np.ndarray,
    is_open: np.ndarray,
    node_rows: np.ndarray,
    gpu_model: np.ndarray,
    hist: np.ndarray,
    totals: np.ndarray,
) -> None:
    """Move the domains of open `nodes` from the nodes' `before` values (one row per node)
    to their `after` values."""
    for i in range(nodes.size):
        if is_open[i]:
            _move_domains(nodes[i], before[i], after[i], node_rows, gpu_model, hist, totals)


@njit(cache=True, nogil=True)
def add_nodes(nodes: np.ndarray, sign: int, arrays: StateArrays) -> None:
    """Add (sign=+1) or take away (-1) open `nodes`' values in their domains' aggregates."""
    closed, node_rows, gpu_model, hist, totals = arrays[7:]
    values = np.empty(5, dtype=np.int64)
    for i in range(nodes.size):
        node = nodes[i]
        if closed[node] != 0:
            continue
        _values_into(node, values, arrays)
        model = gpu_model[node]
        whole = values[WHOLE]
        for level in range(node_rows.shape[1]):
            row = node_rows[node, level]
            for column in range(5):
                totals[row, column] += sign * values[column]
            hist[row, model, whole] += sign


@njit(cache=True, nogil=True)
def _apply_rows(
    nodes: np.ndarray,
    gpus: np.ndarray,
    gpu_milli: int,
    cpu_milli: int,
    memory_mib: int,
    sign: int,
    arrays: StateArrays,
    changed_at: np.ndarray,
    change: int,
) -> None:
    """Take (sign=-1) or give back (+1) the resources of pods on `nodes` (their GPUs: a row
    each of `gpus`), pod by pod, moving the domains of each open node by the node's change
    of values (the columns above); each node's `changed_at` becomes `change`. The arrays are
    unpacked once and each pod's values kept in scalars: a pod costs tens of nanoseconds,
    where a helper taking the arrays' tuple and a row of `gpus` per pod cost hundreds."""
    free_whole_gpus, gpu_free_milli, free_cpu_milli, free_memory_mib = arrays[:4]
    gpu_count, cpu_capacity, memory_capacity = arrays[4:7]
    closed, node_rows, gpu_model, hist, totals = arrays[7:]
    width = gpu_free_milli.shape[1]
    levels = node_rows.shape[1]
    gpu_change = sign * gpu_milli
    for pod in range(nodes.size):
        node = nodes[pod]
        changed_at[node] = change
        old_whole = np.int64(free_whole_gpus[node])
        old_cpu = free_cpu_milli[node]
        old_memory = free_memory_mib[node]
        old_milli = np.int64(0)
        for gpu in range(width):
            old_milli += gpu_free_milli[node, gpu]
        for column in range(gpus.shape[1]):
            gpu_free_milli[node, gpus[pod, column]] += gpu_change
        whole = np.int64(0)
        milli = np.int64(0)
        for gpu in range(width):
            value = gpu_free_milli[node, gpu]
            milli += value
            if value == 1000:
                whole += 1
        free_whole_gpus[node] = whole
        cpu = old_cpu + sign * cpu_milli
        memory = old_memory + sign * memory_mib
        free_cpu_milli[node] = cpu
        free_memory_mib[node] = memory
        if closed[node] != 0:
            continue
        count = gpu_count[node]
        idle_before = (
            old_whole == count
            and old_cpu == cpu_capacity[node]
            and old_memory == memory_capacity[node]
        )
        idle_after = (
            whole == count and cpu == cpu_capacity[node] and memory == memory_capacity[node]
        )
        whole_change = whole - old_whole
        milli_change = milli - old_milli
        idle_change = np.int64(idle_after) - np.int64(idle_before)
        cpu_change = cpu - old_cpu
        memory_change = memory - old_memory
        model = gpu_model[node]
        for level in range(levels):
            row = node_rows[node, level]
            totals[row, WHOLE] += whole_change
            totals[row, MILLI] += milli_change
            totals[row, IDLE] += idle_change
            totals[row, CPU] += cpu_change
            totals[row, MEMORY] += memory_change
            if whole_change != 0:
                hist[row, model, old_whole] -= 1
                hist[row, model, whole] += 1


@njit(cache=True, nogil=True)
def free_pods_inside(
    nodes: np.ndarray,
    gpus: np.ndarray,
    gpu_milli: int,
    cpu_milli: int,
    memory_mib: int,
    first: int,
    last: int,
    free_whole_gpus: np.ndarray,
    gpu_free_milli: np.ndarray,
    free_cpu_milli: np.ndarray,
    free_memory_mib: np.ndarray,
) -> None:
    """Give back, in the node arrays alone, what the pods on nodes first..last-1 hold."""
    for pod in range(nodes.size):
        node = nodes[pod]
        if node < first or node >= last:
            continue
        for column in range(gpus.shape[1]):
            gpu_free_milli[node, gpus[pod, column]] += gpu_milli
        whole = 0
        for gpu in range(gpu_free_milli.shape[1]):
            if gpu_free_milli[node, gpu] == 1000:
                whole += 1
        free_whole_gpus[node] = whole
        free_cpu_milli[node] += cpu_milli
        free_memory_mib[node] += memory_mib


@njit(cache=True, nogil=True)
def pick_free_gpus(
    nodes: np.ndarray, pods_per_node: np.ndarray, per_pod: int, gpu_free_milli: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each pod's node, and its `per_pod` whole GPUs: a node's pods take its wholly free GPUs
    in index order, `per_pod` after `per_pod`. The caller knows they are enough."""
    width = gpu_free_milli.shape[1]
    pods = 0
    for i in range(nodes.size):
        pods += pods_per_node[i]
    pod_nodes = np.empty(pods, dtype=np.int64)
    gpus = np.empty((pods, per_pod), dtype=np.int64)
    pod = 0
    for i in range(nodes.size):
        node = nodes[i]
        gpu = 0
        for _ in range(pods_per_node[i]):
            pod_nodes[pod] = node
            for column in range(per_pod):
                while gpu < width and gpu_free_milli[node, gpu] != 1000:
                    gpu += 1
                if gpu == width:
                    raise ValueError("a node was given more pods than its free GPUs hold")
                gpus[pod, column] = gpu
                gpu += 1
            pod += 1
    return pod_nodes, gpus


@njit(cache=True, nogil=True)
def set_gpu_rows(nodes: np.ndarray, rows: np.ndarray, arrays: StateArrays) -> None:
    """Give each of `nodes` (sorted, distinct) the free milli-GPU row of `rows`, and move the
    aggregates of the open ones by the change: summed over each run of nodes sharing an
    innermost domain, then added once per level to the run's domains (a large gang's nodes
    fill whole racks, so far fewer domain updates than nodes)."""
    free_whole_gpus, gpu_free_milli, free_cpu_milli, free_memory_mib = arrays[:4]
    gpu_count, cpu_capacity, memory_capacity = arrays[4:7]
    closed, node_rows, gpu_model, hist, totals = arrays[7:]
    levels = node_rows.shape[1]
    leaf_level = levels - 1
    width = hist.shape[2]
    cells = np.zeros((hist.shape[1], width), dtype=np.int64)
    change = np.zeros(3, dtype=np.int64)  # free whole GPUs, milli-GPU, idle nodes
    moved = False
    run_node = -1
    for i in range(nodes.size + 1):
        flush = i == nodes.size or (
            run_node >= 0 and node_rows[nodes[i], leaf_level] != node_rows[run_node, leaf_level]
        )
        if flush and run_node >= 0:
            for level in range(levels):
                row = node_rows[run_node, level]
                for column in range(3):
                    totals[row, column] += change[column]
                if moved:
                    for model in range(cells.shape[0]):
                        for cell in range(width):
                            hist[row, model, cell] += cells[model, cell]
            change[:] = 0
            if moved:
                cells[:, :] = 0
                moved = False
            run_node = -1
        if i == nodes.size:
            break
        node = nodes[i]
        old_whole = np.int64(free_whole_gpus[node])
        old_milli = np.int64(0)
        new_whole = np.int64(0)
        new_milli = np.int64(0)
        for gpu in range(gpu_free_milli.shape[1]):
            old_milli += gpu_free_milli[node, gpu]
            value = rows[i, gpu]
            gpu_free_milli[node, gpu] = value
            new_milli += value
            if value == 1000:
                new_whole += 1
        free_whole_gpus[node] = new_whole
        if closed[node] != 0:
            continue
        rest_free = (
            free_cpu_milli[node] == cpu_capacity[node]
            and free_memory_mib[node] == memory_capacity[node]
        )
        count = np.int64(gpu_count[node])
        change[0] += new_whole - old_whole
        change[1] += new_milli - old_milli
        change[2] += np.int64(rest_free and new_whole == count) - np.int64(
            rest_free and old_whole == count
        )
        if new_whole != old_whole:
            model = gpu_model[node]
            cells[model, old_whole] -= 1
            cells[model, new_whole] += 1
            moved = True
        if run_node < 0:
            run_node = node


@njit(cache=True, nogil=True)
def whole_gpus_distinct_and_free(flat_milli: np.ndarray, slots: np.ndarray, full: int) -> bool:
    """Whether the GPUs at flat `slots` are all different and wholly free (`full` milli-GPU),
    in one pass and in any order: each GPU seen is marked in `flat_milli` itself, so a repeat
    finds its mark, and every mark is undone before returning."""
    marked = 0
    distinct_and_free = True
    for slot in slots:
        if flat_milli[slot] != full:  # held, or marked: already seen
            distinct_and_free = False
            break
        flat_milli[slot] = -1
        marked += 1
    for i in range(marked):
        flat_milli[slots[i]] = full
    return distinct_and_free


@njit(cache=True, nogil=True)
def per_pod_requests_fit(free: np.ndarray, nodes: np.ndarray, per_pod: int) -> bool:
    """Whether `per_pod` of `free` (CPU or memory) for every pod on `nodes` (repeats allowed,
    any order) fits each node, in one pass without sorting: taken from `free` as it goes, and
    every change undone before returning."""
    taken = 0
    fits = True
    for node in nodes:
        free[node] -= per_pod
        taken += 1
        if free[node] < 0:
            fits = False
            break
    for i in range(taken):
        free[nodes[i]] += per_pod
    return fits


@njit(cache=True, nogil=True)
def apply_pods_of_many(
    nodes: np.ndarray,
    gpus: np.ndarray,
    figures: np.ndarray,
    sign: int,
    arrays: StateArrays,
    changed_at: np.ndarray,
    change: int,
) -> None:
    """Take (sign=-1) or give back (+1) the resources of several one-shape allocations'
    pods, pod by pod, moving the domains of open nodes from each node's values before the pod
    to its values after (each node's `changed_at` becomes `change`): `nodes`, their pods' nodes
    one allocation after another; `gpus`, their GPU rows flattened in the same order;
    `figures`, one row per allocation: pods, GPUs per pod, milli-GPU, CPU milli and memory
    MiB per pod."""
    pod = 0
    column_at = 0
    for allocation in range(figures.shape[0]):
        pods, width, gpu_milli, cpu_milli, memory_mib = figures[allocation]
        rows = gpus[column_at : column_at + pods * width].reshape((pods, width))
        _apply_rows(
            nodes[pod : pod + pods],
            rows,
            gpu_milli,
            cpu_milli,
            memory_mib,
            sign,
            arrays,
            changed_at,
            change,
        )
        column_at += pods * width
        pod += pods
