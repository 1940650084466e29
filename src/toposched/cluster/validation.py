"""Checks that an allocation is well formed and fits what is free now."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from toposched.cluster import kernels, run_kernels
from toposched.cluster.aggregates import StateArrays
from toposched.cluster.allocation import MILLI_PER_GPU, Allocation
from toposched.cluster.errors import InputError
from toposched.cluster.health import HEALTHY, Health
from toposched.cluster.rows import SMALL, distinct_counts

MAX_PER_POD = 2**40
"""CPU millicores or memory MiB per pod beyond which the quick checks leave an allocation to
the full ones (which refuse it)."""
_FENCE = 2  # `Closure.FENCE`, a bit of `closed`


def plain_allocation(allocation: Allocation) -> bool:
    """Whether `allocation` has the shapes, integer types and per-pod amounts the quick checks
    vouch for (no pass over its pods); False means "run the full checks", not "invalid"
    (an allocation of several pod shapes is checked set by set)."""
    if allocation.sets:
        return False
    nodes, gpus = allocation.nodes, allocation.gpus
    if nodes.ndim != 1 or gpus.ndim != 2 or gpus.shape[0] != nodes.shape[0]:
        return False
    if nodes.dtype.kind not in "iu" or gpus.dtype.kind not in "iu":
        return False
    milli, cpu, memory = allocation.gpu_milli, allocation.cpu_milli, allocation.memory_mib
    if type(milli) is not int or not 0 < milli <= MILLI_PER_GPU:
        return False
    if gpus.shape[1] > 1 and milli != MILLI_PER_GPU:
        return False
    return (
        type(cpu) is int
        and type(memory) is int
        and 0 <= cpu <= MAX_PER_POD
        and 0 <= memory <= MAX_PER_POD
    )


class AllocationChecks(StateArrays):
    """Validation of allocations against the topology and the free capacity: a quick compiled
    check for the usual case, and full checks that name what does not fit."""

    def _fits_now(self, allocation: Allocation) -> bool:
        """True if `allocation` is well formed and fits now: scalars checked here, nodes and
        GPUs in one compiled pass over the pods (numpy's per-call cost would dominate for a
        few, its sorts for many). False means "run the full checks", not "invalid"."""
        if not plain_allocation(allocation):
            return False
        fits: bool = run_kernels.fits_in_place(
            allocation.nodes,
            allocation.gpus,
            allocation.gpu_milli,
            allocation.cpu_milli,
            allocation.memory_mib,
            self.topology.gpu_count,
            self.closed,
            self.gpu_free_milli,
            self.free_cpu_milli,
            self.free_memory_mib,
        )
        return fits

    def _validate_shape(self, allocation: Allocation, field: str) -> None:
        top = self.topology
        nodes, gpus = allocation.nodes, allocation.gpus
        if gpus.ndim != 2 or gpus.shape[0] != nodes.shape[0]:
            raise InputError(f"{field}.gpus", gpus.shape, "must have one row per pod")
        if nodes.size and (nodes.min() < 0 or nodes.max() >= top.n_nodes):
            bad = int(nodes[(nodes < 0) | (nodes >= top.n_nodes)][0])
            raise InputError(f"{field}.nodes", bad, f"must be a node index in [0, {top.n_nodes})")
        if gpus.size:
            counts = top.gpu_count[nodes].astype(np.int64)[:, None]
            bad_mask = (gpus < 0) | (gpus >= counts)
            if bad_mask.any():
                pod = int(np.argwhere(bad_mask)[0][0])
                raise InputError(
                    f"{field}.gpus[{pod}]",
                    gpus[pod].tolist(),
                    f"node {top.node_names[int(nodes[pod])]} has {int(counts[pod, 0])} GPUs",
                )
        milli = allocation.gpu_milli
        if isinstance(milli, bool) or not isinstance(milli, int | np.integer):
            raise InputError(f"{field}.gpu_milli", milli, "must be an integer milli-GPU")
        if gpus.size and not 0 < allocation.gpu_milli <= MILLI_PER_GPU:
            raise InputError(f"{field}.gpu_milli", allocation.gpu_milli, "must be in (0, 1000]")
        if gpus.shape[1] > 1 and allocation.gpu_milli != MILLI_PER_GPU:
            raise InputError(
                f"{field}.gpu_milli", allocation.gpu_milli, "a fraction applies to one GPU per pod"
            )
        for name, value in (
            ("cpu_milli", allocation.cpu_milli),
            ("memory_mib", allocation.memory_mib),
        ):
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise InputError(f"{field}.{name}", value, "must be an integer")
            if value < 0:
                raise InputError(f"{field}.{name}", value, "must be >= 0")
            if value > MAX_PER_POD:
                # The bound keeps pod count x request far from int64 overflow.
                raise InputError(f"{field}.{name}", value, f"must be <= {MAX_PER_POD}")

    def _why_closed(self, node: int) -> str:
        """Why `node` takes no new work, in words."""
        health = int(self.health[node])
        if health != HEALTHY:
            return f"node is {Health(health).name.lower()}; only healthy nodes take new work"
        if int(self.closed[node]) & _FENCE:
            return "node is kept for other jobs of this cycle; it takes no other new work"
        return "node is held as a spare; it takes new work only as one"

    def _gpu_slots(self, allocation: Allocation) -> NDArray[np.int64]:
        width = self.gpu_free_milli.shape[1]
        slots: NDArray[np.int64] = (allocation.nodes[:, None] * width + allocation.gpus).reshape(-1)
        return slots

    def _distinct_and_free(self, slots: NDArray[np.int64]) -> bool:
        """Whether the GPUs at flat `slots` are all different and wholly free; when not, the
        full check counts them. A few slots are compared as a set; many, in whatever order the
        placement lists them (policy order within racks), in one compiled pass without a sort."""
        if slots.size <= SMALL:
            if len(set(slots.tolist())) != slots.size:
                return False
            return bool((self.gpu_free_milli.reshape(-1)[slots] == MILLI_PER_GPU).all())
        return bool(
            kernels.whole_gpus_distinct_and_free(
                self.gpu_free_milli.reshape(-1), slots, MILLI_PER_GPU
            )
        )

    def _check_fits(self, field: str, allocation: Allocation) -> None:
        """Raise unless every GPU, CPU and memory request fits what is free now; errors name
        `field` (e.g. `allocation[job]`)."""
        top = self.topology
        closed = self.closed[allocation.nodes] != 0
        if closed.any():
            node = int(allocation.nodes[closed][0])
            raise InputError(f"{field}.nodes", top.node_names[node], self._why_closed(node))
        slots = self._gpu_slots(allocation)
        # Whole GPUs, each asked for once and free, fit without counting.
        if slots.size and not (
            allocation.gpu_milli == MILLI_PER_GPU and self._distinct_and_free(slots)
        ):
            unique, counts = distinct_counts(slots)
            wanted = counts * allocation.gpu_milli
            free = self.gpu_free_milli.reshape(-1)[unique]
            over = wanted > free
            if over.any():
                slot = int(unique[over][0])
                node, gpu = divmod(slot, self.gpu_free_milli.shape[1])
                raise InputError(
                    f"{field}.gpus",
                    f"{top.node_names[node]} GPU {gpu}",
                    f"needs {int(wanted[over][0])} milli-GPU, {int(free[over][0])} free",
                )
        if not (allocation.cpu_milli or allocation.memory_mib):
            return
        if allocation.nodes.size > SMALL and all(
            kernels.per_pod_requests_fit(free_array, allocation.nodes, per_pod)
            for per_pod, free_array in (
                (allocation.cpu_milli, self.free_cpu_milli),
                (allocation.memory_mib, self.free_memory_mib),
            )
            if per_pod
        ):
            return  # many pods, in policy order: checked without sorting their nodes
        unique, counts = distinct_counts(allocation.nodes)
        for name, per_pod, free_array in (
            ("cpu_milli", allocation.cpu_milli, self.free_cpu_milli),
            ("memory_mib", allocation.memory_mib, self.free_memory_mib),
        ):
            if per_pod == 0:
                continue
            over = counts * per_pod > free_array[unique]
            if over.any():
                node = int(unique[over][0])
                raise InputError(
                    f"{field}.{name}",
                    int(counts[over][0] * per_pod),
                    f"exceeds the {int(free_array[node])} free on node {top.node_names[node]}",
                )
