"""Innermost domains an earlier pod set of a job fills whole, read as full by the searches for
its later sets without taking them on the state (`place_roles`).

A set of whole-node pods in whole racks (a trainer in rack slices) leaves those racks with no
room at all: every node of each holds one of its pods on every GPU. A search for a later set
reads them as it would after `Statement.take` of those pods (`CapacityView(closed=...)`):
no room on their nodes, and every domain above them without their nodes' room, CPU and
memory. The take of tens of thousands of nodes, and its undo, are saved; only the set's pods
outside whole racks are taken.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.allocation import MILLI_PER_GPU, Allocation
from toposched.cluster.state import ClusterState
from toposched.cluster.topology import Topology
from toposched.cluster.trials import whole_free_leaves
from toposched.placement.capacity_kernels import sums_per_domain

__all__ = ["ClosedAt", "ClosedLeaves", "closed_leaves_of"]

# A GPU models filter as a cache key: None for every model.
Models = tuple[int, ...] | None

IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class ClosedAt:
    """The closed leaves summed per domain of one level, one entry per domain: their nodes of
    the GPU models asked for, and the CPU and memory their pods take (None when none)."""

    nodes: IntArray
    cpu_milli: IntArray | None
    memory_mib: IntArray | None


@dataclass(frozen=True, eq=False)
class ClosedLeaves:
    """Innermost domains (`leaves`, increasing) whose every node holds a pod on every GPU,
    though the state shows them free: per leaf, its nodes by GPU model (every node open, each
    with every GPU free before) and the CPU and memory their pods take."""

    topology: Topology
    leaves: IntArray
    nodes_per_model: IntArray
    cpu_milli: IntArray
    memory_mib: IntArray
    _levels: dict[tuple[int, Models], ClosedAt] = field(default_factory=dict, repr=False)
    _leaf_mask: list[NDArray[np.bool_]] = field(default_factory=list, repr=False)
    """Per innermost domain, whether it is closed: built on first use, then its one entry."""

    def joined(self, other: ClosedLeaves) -> ClosedLeaves:
        """These leaves and `other`'s (distinct from these)."""
        order = np.argsort(np.concatenate([self.leaves, other.leaves]), kind="stable")
        return ClosedLeaves(
            self.topology,
            np.concatenate([self.leaves, other.leaves])[order],
            np.concatenate([self.nodes_per_model, other.nodes_per_model])[order],
            np.concatenate([self.cpu_milli, other.cpu_milli])[order],
            np.concatenate([self.memory_mib, other.memory_mib])[order],
        )

    def at(self, level: int, models: NDArray[np.int64] | None) -> ClosedAt:
        """The closed leaves summed per domain at `level`, counting nodes of `models` (GPU
        model indices; None: every model). Kept: the searches of later sets read a level
        several times."""
        key = (level, None if models is None else tuple(models.tolist()))
        found = self._levels.get(key)
        if found is not None:
            return found
        topology = self.topology
        leaf_level = len(topology.domain_levels) - 1
        owners: NDArray[np.integer] = self.leaves
        if level != leaf_level:
            owners = topology.node_domain[level][topology.domain_starts[leaf_level][owners]]
        n_domains = topology.n_domains(level)
        per_model = self.nodes_per_model if models is None else self.nodes_per_model[:, models]
        found = ClosedAt(
            sums_per_domain(owners, per_model.sum(axis=1), n_domains),
            sums_per_domain(owners, self.cpu_milli, n_domains) if self.cpu_milli.any() else None,
            sums_per_domain(owners, self.memory_mib, n_domains) if self.memory_mib.any() else None,
        )
        self._levels[key] = found
        return found

    def closed_nodes(self, nodes: IntArray | slice) -> NDArray[np.bool_]:
        """Of `nodes` (indices, or a range of nodes), which lie in a closed leaf."""
        if not self._leaf_mask:
            leaf_level = len(self.topology.domain_levels) - 1
            mask = np.zeros(self.topology.n_domains(leaf_level), dtype=np.bool_)
            mask[self.leaves] = True
            self._leaf_mask.append(mask)
        node_leaf = self.topology.node_domain[-1]
        closed: NDArray[np.bool_] = self._leaf_mask[0][node_leaf[nodes]]
        return closed


def closed_leaves_of(
    state: ClusterState, allocation: Allocation
) -> tuple[ClosedLeaves, Allocation | None] | None:
    """The innermost domains a placement a search just found on `state` fills whole (each
    node's every GPU, one pod per node), and the placement's pods outside them (None when it
    has none); None when its pods are not whole-node pods of one shape."""
    width = state.gpu_free_milli.shape[1]
    if (
        allocation.sets
        or allocation.gpu_milli != MILLI_PER_GPU
        or allocation.gpus.shape[1] != width
        or allocation.pods == 0
    ):
        return None
    topology = state.topology
    leaf_hist = state.free_hist[-1]
    leaves, in_whole = whole_free_leaves(
        allocation.nodes, topology.node_domain[-1], topology.domain_starts[-1], leaf_hist, width
    )
    order = np.argsort(leaves, kind="stable")
    leaves = leaves[order]
    nodes_per_model = leaf_hist[leaves, :, width].astype(np.int64)
    sizes = nodes_per_model.sum(axis=1)
    closed = ClosedLeaves(
        topology,
        leaves,
        nodes_per_model,
        sizes * allocation.cpu_milli,
        sizes * allocation.memory_mib,
    )
    if in_whole.all():
        return closed, None
    rest = ~in_whole
    return closed, Allocation(
        nodes=allocation.nodes[rest],
        gpus=allocation.gpus[rest],
        gpu_milli=allocation.gpu_milli,
        cpu_milli=allocation.cpu_milli,
        memory_mib=allocation.memory_mib,
    )
