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

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation, ClusterState
from toposched.cluster.validation import plain_allocation


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
    if not all(plain_allocation(allocation) for allocation in allocations):
        return False
    nodes = np.concatenate([a.nodes for a in allocations])
    n_nodes = state.topology.n_nodes
    if nodes.size and (int(nodes.min()) < 0 or int(nodes.max()) >= n_nodes):
        return False
    if (state.closed[nodes] != 0).any():  # unhealthy, fenced or held as a spare
        return False
    # Each allocation's pods, GPUs per pod, milli-GPU, CPU and memory per pod, read in one
    # pass (the amounts are ints, `plain_allocation` checked).
    table = np.array(
        [
            (len(a.nodes), a.gpus.shape[1], a.gpu_milli, a.cpu_milli, a.memory_mib)
            for a in allocations
        ],
        dtype=np.int64,
    ).reshape(-1, 5)
    if not _gpus_fit(state, allocations, nodes, table):
        return False
    return _per_node_fits(state, nodes, table)


def _gpus_fit(
    state: ClusterState,
    allocations: Sequence[Allocation],
    nodes: NDArray[np.int64],
    table: NDArray[np.int64],
) -> bool:
    """GPU indices within each node's GPUs, and each GPU's milli-GPU asked for by all the
    allocations together within what it has free (a whole GPU asked twice is over)."""
    width = state.gpu_free_milli.shape[1]
    pods, per_pod = table[:, 0], table[:, 1]
    if bool((per_pod == per_pod[0]).all()):  # pods of one width: rows of one table
        gpus = np.concatenate([a.gpus for a in allocations]).reshape(-1).astype(np.int64)
    else:
        gpus = np.concatenate([a.gpus.reshape(-1) for a in allocations]).astype(np.int64)
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
