"""Many allocations taken at once: the running jobs of a restart (a hundred thousand gangs on
the million-GPU fleet) checked together with numpy and applied in one vectorised pass, instead
of `ClusterState.allocate` gang by gang.

The checks are those of `allocate`: distinct owners that hold nothing yet, node and GPU
indices of the cluster, open nodes (healthy, not fenced, not held as spares), each GPU's
milli-GPU and each node's CPU and memory within what is free, counted over every allocation
together. Anything they cannot vouch for
(odd shapes or types, a request that does not fit) goes to `allocate` one by one, whose checks
name the field and rule; then nothing of the batch is kept. Allocations of several pod shapes
(jobs whose pod sets differ) are taken one by one after the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter, itemgetter

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.errors import InputError
from toposched.cluster.state import MILLI_PER_GPU, Allocation, ClusterState
from toposched.cluster.validation import MAX_PER_POD

_SETS, _NODES, _GPUS = attrgetter("sets"), attrgetter("nodes"), attrgetter("gpus")
_SHAPE, _NDIM, _DTYPE = attrgetter("shape"), attrgetter("ndim"), attrgetter("dtype")
_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_AMOUNTS = tuple(map(attrgetter, ("gpu_milli", "cpu_milli", "memory_mib")))
"""Fields of many allocations and their arrays, read in C (`_plain_columns`)."""


def allocate_many(
    state: ClusterState, owners: Sequence[str], allocations: Sequence[Allocation]
) -> None:
    """Give each owner its allocation, as `state.allocate` would one after the other; all or
    nothing."""
    if len(owners) != len(allocations):
        raise InputError("owners", len(owners), f"must be one per allocation ({len(allocations)})")
    if not owners:
        return
    if any(allocation.sets for allocation in allocations):
        _allocate_with_sets(state, owners, allocations)
        return
    if _fits(state, owners, allocations):
        state.retake_many(list(owners), list(allocations))
        return
    done: list[str] = []
    try:
        for owner, allocation in zip(owners, allocations, strict=True):
            state.allocate(owner, allocation)
            done.append(owner)
    except InputError:
        state.release_many(done)
        raise


def _allocate_with_sets(
    state: ClusterState, owners: Sequence[str], allocations: Sequence[Allocation]
) -> None:
    """`allocate_many` for a batch holding allocations of several pod shapes: the others
    together, then those one by one (set by set, as `allocate` takes them); all or nothing."""
    several = [i for i, allocation in enumerate(allocations) if allocation.sets]
    chosen = set(several)
    plain = [i for i in range(len(owners)) if i not in chosen]
    allocate_many(state, [owners[i] for i in plain], [allocations[i] for i in plain])
    done = [owners[i] for i in plain]
    try:
        for i in several:
            state.allocate(owners[i], allocations[i])
            done.append(owners[i])
    except InputError:
        state.release_many(done)
        raise


def _fits(state: ClusterState, owners: Sequence[str], allocations: Sequence[Allocation]) -> bool:
    """Whether every allocation is well formed and all of them fit together now."""
    held = state.allocations
    if len(set(owners)) != len(owners) or any(not o or o in held for o in owners):
        return False
    columns = _plain_columns(allocations)
    if columns is None:
        return False
    nodes_of, gpus_of, table = columns
    nodes = np.concatenate(nodes_of)
    n_nodes = state.topology.n_nodes
    if nodes.size and (int(nodes.min()) < 0 or int(nodes.max()) >= n_nodes):
        return False
    if (state.closed[nodes] != 0).any():  # unhealthy, fenced or held as a spare
        return False
    if not _gpus_fit(state, gpus_of, nodes, table):
        return False
    return _per_node_fits(state, nodes, table)


def _plain_columns(
    allocations: Sequence[Allocation],
) -> tuple[list[NDArray[np.int64]], list[NDArray[np.int64]], NDArray[np.int64]] | None:
    """Each allocation's nodes and GPUs, and a table of its pods, GPUs per pod, milli-GPU, CPU
    and memory per pod, where every allocation is one `plain_allocation` vouches for (read
    as columns, for a restart's hundred thousand); else None."""
    if any(map(_SETS, allocations)):
        return None
    nodes: list[NDArray[np.int64]] = list(map(_NODES, allocations))
    gpus: list[NDArray[np.int64]] = list(map(_GPUS, allocations))
    shapes = list(map(_SHAPE, gpus))
    amounts = [list(map(getter, allocations)) for getter in _AMOUNTS]
    kinds = {dtype.kind for dtype in set(map(_DTYPE, nodes)) | set(map(_DTYPE, gpus))}
    if (
        set(map(_NDIM, nodes)) != {1}
        or set(map(len, shapes)) != {2}
        or not kinds <= {"i", "u"}
        or not all(set(map(type, column)) <= {int} for column in amounts)  # not bool
    ):
        return None
    n = len(allocations)
    pods = np.fromiter(map(len, nodes), np.int64, n)
    try:
        table = np.column_stack(
            (
                pods,
                np.fromiter(map(_SECOND, shapes), np.int64, n),
                *(np.fromiter(column, np.int64, n) for column in amounts),
            )
        )
    except OverflowError:  # an amount beyond int64, far beyond `MAX_PER_POD`
        return None
    per_pod, milli, cpu, memory = table[:, 1], table[:, 2], table[:, 3], table[:, 4]
    if (
        not np.array_equal(np.fromiter(map(_FIRST, shapes), np.int64, n), pods)
        or bool(((milli <= 0) | (milli > MILLI_PER_GPU)).any())
        or bool(((per_pod > 1) & (milli != MILLI_PER_GPU)).any())
        or bool(((cpu < 0) | (cpu > MAX_PER_POD) | (memory < 0) | (memory > MAX_PER_POD)).any())
    ):
        return None
    return nodes, gpus, table


def _gpus_fit(
    state: ClusterState,
    gpus_of: list[NDArray[np.int64]],
    nodes: NDArray[np.int64],
    table: NDArray[np.int64],
) -> bool:
    """GPU indices within each node's GPUs, and each GPU's milli-GPU asked for by all the
    allocations together within what it has free (a whole GPU asked twice is over)."""
    width = state.gpu_free_milli.shape[1]
    pods, per_pod = table[:, 0], table[:, 1]
    if bool((per_pod == per_pod[0]).all()):  # pods of one width: rows of one table
        gpus = np.concatenate(gpus_of).reshape(-1).astype(np.int64)
    else:
        gpus = np.concatenate([part.reshape(-1) for part in gpus_of]).astype(np.int64)
    if not gpus.size:
        return True
    pod_of_gpu_nodes = np.repeat(nodes, np.repeat(per_pod, pods))
    counts = state.topology.gpu_count[pod_of_gpu_nodes].astype(np.int64)
    if (gpus < 0).any() or (gpus >= counts).any():
        return False
    slots = pod_of_gpu_nodes * width + gpus
    milli = np.repeat(table[:, 2], pods * per_pod)
    asked = np.bincount(slots, weights=milli, minlength=state.gpu_free_milli.size)
    return bool((asked <= state.gpu_free_milli.reshape(-1)).all())


def _per_node_fits(state: ClusterState, nodes: NDArray[np.int64], table: NDArray[np.int64]) -> bool:
    """Each node's CPU and memory asked for by all the allocations' pods within its free."""
    n_nodes = state.topology.n_nodes
    pods = table[:, 0]
    for column, free in ((3, state.free_cpu_milli), (4, state.free_memory_mib)):
        per_pod = table[:, column]
        if not per_pod.any():
            continue
        asked = np.bincount(nodes, weights=np.repeat(per_pod, pods), minlength=n_nodes)
        if (asked > free).any():
            return False
    return True
