"""Compiled loops counting the pods of one shape that nodes and domains hold, in one pass."""

from __future__ import annotations

import numpy as np
from numba import njit

# Stands for "no limit" in pod counts: larger than any gang, small enough not to overflow sums.
UNLIMITED = np.int64(1) << 40


@njit(cache=True, nogil=True)
def pods_on_nodes(
    nodes: np.ndarray,
    first: int,
    last: int,
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
) -> np.ndarray:
    """Pods of whole GPUs (GPUs, milli-CPU and MiB per pod as given) each node holds now: 0 on
    unhealthy nodes and GPU models the pods may not use. The nodes are `nodes`, or when it is
    empty first..last-1; `pods_per_free[k]` is the pods k free GPUs hold."""
    by_range = nodes.size == 0
    count = last - first if by_range else nodes.size
    pods = np.empty(count, dtype=np.int64)
    for i in range(count):
        node = first + i if by_range else nodes[i]
        if health[node] != 0 or not model_allowed[gpu_model[node]]:
            pods[i] = 0
            continue
        if gpus_per_pod == 0:
            held = UNLIMITED
            if cpu_milli:
                held = min(held, free_cpu_milli[node] // cpu_milli)
            if memory_mib:
                held = min(held, free_memory_mib[node] // memory_mib)
            pods[i] = held
            continue
        # A few pods at most per node: divide only when CPU or memory binds (integer division
        # is the loop's slowest step).
        held = pods_per_free[free_whole_gpus[node]]
        if held and cpu_milli and held * cpu_milli > free_cpu_milli[node]:
            held = free_cpu_milli[node] // cpu_milli
        if held and memory_mib and held * memory_mib > free_memory_mib[node]:
            held = free_memory_mib[node] // memory_mib
        pods[i] = held
    return pods


@njit(cache=True, nogil=True)
def pods_in_leaves(
    per_leaf: np.ndarray,
    leaf_lo: int,
    starts: np.ndarray,
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
) -> None:
    """In place, for innermost domains leaf_lo.. (one per entry of `per_leaf`, their nodes
    `starts[d]` to `starts[d + 1]`) whose entry is not 0: the pods their nodes hold now, each
    node's counted as `pods_on_nodes` counts it, in whole slices of `node_slice` pods. Domains
    at 0 (the aggregates' bound: no room) are not read. The node count is written out here
    rather than called: a call per node would cost more than the count."""
    for i in range(per_leaf.size):
        if per_leaf[i] == 0:
            continue
        total = np.int64(0)
        for node in range(starts[leaf_lo + i], starts[leaf_lo + i + 1]):
            if health[node] != 0 or not model_allowed[gpu_model[node]]:
                continue
            if gpus_per_pod == 0:
                held = UNLIMITED
                if cpu_milli:
                    held = min(held, free_cpu_milli[node] // cpu_milli)
                if memory_mib:
                    held = min(held, free_memory_mib[node] // memory_mib)
            else:
                held = pods_per_free[free_whole_gpus[node]]
                if held and cpu_milli and held * cpu_milli > free_cpu_milli[node]:
                    held = free_cpu_milli[node] // cpu_milli
                if held and memory_mib and held * memory_mib > free_memory_mib[node]:
                    held = free_memory_mib[node] // memory_mib
            total += held // node_slice * node_slice if node_slice > 1 else held
        per_leaf[i] = total


@njit(cache=True, nogil=True)
def bound_and_round(
    pods: np.ndarray,
    free_cpu: np.ndarray,
    free_memory: np.ndarray,
    cpu_milli: int,
    memory_mib: int,
    granule: int,
) -> None:
    """Per domain, in place: the pods its free GPUs hold (`pods`), bounded by the domain's free
    CPU and memory per pod and rounded down to a multiple of `granule`."""
    for domain in range(pods.size):
        held = pods[domain]
        if held < granule:
            # Fewer than a granule: none after any bound, and the domain's CPU and memory stay
            # unread (on a busy fleet most domains, each read a likely cache miss).
            if held:
                pods[domain] = 0
            continue
        # Divide only when CPU or memory binds, or the count is not a multiple already:
        # integer division is the loop's slowest step.
        if cpu_milli and (held == UNLIMITED or held * cpu_milli > free_cpu[domain]):
            held = min(held, free_cpu[domain] // cpu_milli)
        if memory_mib and (held == UNLIMITED or held * memory_mib > free_memory[domain]):
            held = min(held, free_memory[domain] // memory_mib)
        if held < granule:
            held = np.int64(0)
        elif granule > 1 and held != granule:
            held = held // granule * granule
        pods[domain] = held


@njit(cache=True, nogil=True)
def whole_units(free: np.ndarray, unit: int) -> int:
    """The sum over domains of floor(free / unit), for free >= 0 and unit >= 1: e.g. whole
    slices of `unit` GPUs that each domain's free GPUs could hold. Multiplied by the
    reciprocal in floating point, which the loop vectorizes (an integer division by a number
    known only at run time is the slowest step a loop can take): with free = q * unit + r,
    (free + 1/2) / unit lies at least 1/(2 unit) from any integer, beyond the product's
    rounding error (about (free / unit) * 2**-52) while free < 2**50: its integer part is q."""
    inverse = 1.0 / unit
    total = 0
    for domain in range(free.size):
        total += int((free[domain] + 0.5) * inverse)
    return total


@njit(cache=True, nogil=True)
def sums_of_children(below: np.ndarray, bounds: np.ndarray, granule: int) -> np.ndarray:
    """Per domain d of a level, the sum of `below[bounds[d]:bounds[d + 1]]` (its children's
    counts at the level below), rounded down to a multiple of `granule`: one pass, where
    numpy's segment sums and rounding are three calls."""
    sums = np.empty(bounds.size - 1, dtype=np.int64)
    for domain in range(bounds.size - 1):
        total = 0
        for child in range(bounds[domain], bounds[domain + 1]):
            total += below[child]
        if granule > 1:
            total = total // granule * granule
        sums[domain] = total
    return sums


@njit(cache=True, nogil=True)
def slice_level_and_above(
    pods: np.ndarray,
    free_cpu: np.ndarray,
    free_memory: np.ndarray,
    cpu_milli: int,
    memory_mib: int,
    level: int,
    offsets: np.ndarray,
    child_first: np.ndarray,
    child_last: np.ndarray,
    granules: np.ndarray,
) -> np.ndarray:
    """The slice-rounded capacities of every domain at `level` and above, in one call: `pods`
    (every domain at `level`, from its free GPUs) is bounded and rounded in place as
    `bound_and_round` does it with granule `granules[level]`; the domains of each level above
    sum their children's, rounded down to their level's granule. Returns the levels above,
    stacked (level l: rows `offsets[l]` to `offsets[l + 1]`, as are `child_first` and
    `child_last`, the stacked rows of each domain's children)."""
    bound_and_round(pods, free_cpu, free_memory, cpu_milli, memory_mib, granules[level])
    above = np.empty(offsets[level], dtype=np.int64)
    below_row = offsets[level]
    for upper in range(level - 1, -1, -1):
        granule = granules[upper]
        for row in range(offsets[upper], offsets[upper + 1]):
            total = 0
            if upper == level - 1:
                for child in range(child_first[row], child_last[row]):
                    total += pods[child - below_row]
            else:
                for child in range(child_first[row], child_last[row]):
                    total += above[child]
            if granule > 1:
                total = total // granule * granule
            above[row] = total
    return above
