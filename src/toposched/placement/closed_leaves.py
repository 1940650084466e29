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
    """Innermost domains (`leaves`, in no particular order) whose every node holds a pod on
    every GPU, though the state shows them free: per leaf, its nodes by GPU model (every node
    open, each with every GPU free before) and the CPU and memory their pods take (None when
    they take none)."""

    topology: Topology
    leaves: IntArray
    nodes_per_model: IntArray
    cpu_milli: IntArray | None
    memory_mib: IntArray | None
    _levels: dict[tuple[int, Models], ClosedAt] = field(default_factory=dict, repr=False)

    def joined(self, other: ClosedLeaves) -> ClosedLeaves:
        """These leaves and `other`'s (distinct from these)."""

        def both(mine: IntArray | None, theirs: IntArray | None) -> IntArray | None:
            if mine is None and theirs is None:
                return None
            zeros = np.zeros(self.leaves.size + other.leaves.size, dtype=np.int64)
            mine = zeros[: self.leaves.size] if mine is None else mine
            theirs = zeros[self.leaves.size :] if theirs is None else theirs
            return np.concatenate([mine, theirs])

        return ClosedLeaves(
            self.topology,
            np.concatenate([self.leaves, other.leaves]),
            np.concatenate([self.nodes_per_model, other.nodes_per_model]),
            both(self.cpu_milli, other.cpu_milli),
            both(self.memory_mib, other.memory_mib),
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
        if level == leaf_level:
            per_model = self.nodes_per_model if models is None else self.nodes_per_model[:, models]
            nodes = per_model[:, 0] if per_model.shape[1] == 1 else per_model.sum(axis=1)

            def dense(values: IntArray) -> IntArray:
                per_leaf = np.zeros(topology.n_domains(leaf_level), dtype=np.int64)
                per_leaf[self.leaves] = values
                return per_leaf

            found = ClosedAt(
                dense(nodes),
                None if self.cpu_milli is None else dense(self.cpu_milli),
                None if self.memory_mib is None else dense(self.memory_mib),
            )
        else:
            # Summed from the innermost level's: each domain's leaves are a run of them.
            leaves = self.at(leaf_level, models)
            bounds = topology.descendant_bounds(level, leaf_level)[:-1]

            def summed(values: IntArray | None) -> IntArray | None:
                return None if values is None else np.add.reduceat(values, bounds)

            found = ClosedAt(
                np.add.reduceat(leaves.nodes, bounds),
                summed(leaves.cpu_milli),
                summed(leaves.memory_mib),
            )
        self._levels[key] = found
        return found

    def closed_nodes(self, nodes: IntArray | slice) -> NDArray[np.bool_]:
        """Of `nodes` (indices, or a range of nodes), which lie in a closed leaf (one with
        nodes in the closed count of its level)."""
        per_leaf = self.at(len(self.topology.domain_levels) - 1, None).nodes
        closed: NDArray[np.bool_] = per_leaf[self.topology.node_domain[-1][nodes]] > 0
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
    leaves, rest = whole_free_leaves(
        allocation.nodes, topology.node_domain[-1], topology.domain_starts[-1], leaf_hist, width
    )
    nodes_per_model = leaf_hist[leaves, :, width].astype(np.int64)
    sizes = nodes_per_model.sum(axis=1) if allocation.cpu_milli or allocation.memory_mib else None
    closed = ClosedLeaves(
        topology,
        leaves,
        nodes_per_model,
        None if sizes is None or not allocation.cpu_milli else sizes * allocation.cpu_milli,
        None if sizes is None or not allocation.memory_mib else sizes * allocation.memory_mib,
    )
    if rest.size == 0:
        return closed, None
    return closed, Allocation(
        nodes=allocation.nodes[rest],
        gpus=allocation.gpus[rest],
        gpu_milli=allocation.gpu_milli,
        cpu_milli=allocation.cpu_milli,
        memory_mib=allocation.memory_mib,
    )
