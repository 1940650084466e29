"""ClusterState: struct-of-arrays free capacity with per-domain aggregates kept incrementally.

The class is composed of layers, each in its own module: the arrays and their aggregates
(`aggregates`), allocation checks (`validation`), allocation and release (`changes`), what-ifs
of releases (`trials`), and node health and closures (`availability`).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.aggregates import TOTALS_CPU, TOTALS_FREE_GPUS, TOTALS_MEMORY
from toposched.cluster.allocation import MILLI_PER_GPU, Allocation
from toposched.cluster.availability import Availability, Closure
from toposched.cluster.health import Health
from toposched.cluster.rows import (
    SavedRows,
    distinct,
    distinct_inverse,
    row_sums,
    take_rows,
)
from toposched.cluster.trials import TrialReleases

__all__ = [
    "MILLI_PER_GPU",
    "TOTALS_CPU",
    "TOTALS_FREE_GPUS",
    "TOTALS_MEMORY",
    "Allocation",
    "ClusterState",
    "Closure",
    "Health",
    "SavedRows",
    "distinct",
    "distinct_inverse",
    "row_sums",
    "take_rows",
]


class ClusterState(Availability, TrialReleases):
    """Free capacity of every node and GPU, and aggregates for every domain at every level.

    Per node: free milli-GPU of each GPU (`gpu_free_milli`, padded with 0 past the node's GPU
    count), free whole GPUs, free CPU millicores and memory MiB, health, and whether it is open
    to new work (`closed`: healthy, not fenced, not a held spare). Per domain level
    (0 = the whole cluster): a histogram `free_hist[level][domain, model, k]` of open nodes
    with exactly k free whole GPUs, plus free whole GPUs, free milli-GPU, idle nodes, free CPU
    and memory — all counting open nodes only. Every change updates the aggregates of the
    nodes it touches at each level: O(levels x touched nodes), never O(cluster).

    Allocations are held per owner (a job id). Mutators validate first and change nothing on
    error; use a `Statement` to try changes and undo them exactly.
    """

    def owners_on(self, nodes: NDArray[np.int64] | list[int]) -> list[str]:
        """Owners holding anything on any of `nodes` (O(allocations); for failures and drains)."""
        wanted = np.zeros(self.topology.n_nodes, dtype=bool)
        wanted[np.asarray(nodes, dtype=np.int64)] = True
        return [owner for owner, a in self.allocations.items() if wanted[a.nodes].any()]

    @property
    def total_free_gpus(self) -> int:
        return int(self.free_gpus[0][0])

    def snapshot(self) -> dict[str, np.ndarray]:
        """Copies of every array of the state, per node and per domain at every level, by name
        (to check that something changed nothing, or that a rollback restored everything)."""
        arrays: dict[str, np.ndarray] = {
            "gpu_free_milli": self.gpu_free_milli,
            "free_whole_gpus": self.free_whole_gpus,
            "free_cpu_milli": self.free_cpu_milli,
            "free_memory_mib": self.free_memory_mib,
            "health": self.health,
            "closed": self.closed,
            "nodes_by_health": self.nodes_by_health,
        }
        for level in range(len(self.free_hist)):
            arrays[f"free_hist[{level}]"] = self.free_hist[level]
            arrays[f"free_gpus[{level}]"] = self.free_gpus[level]
            arrays[f"free_milli[{level}]"] = self.free_milli[level]
            arrays[f"idle_nodes[{level}]"] = self.idle_nodes[level]
            arrays[f"domain_free_cpu[{level}]"] = self.domain_free_cpu[level]
            arrays[f"domain_free_memory[{level}]"] = self.domain_free_memory[level]
        return {name: array.copy() for name, array in arrays.items()}

    def nbytes(self) -> int:
        """Memory held by the state's arrays, topology included."""
        arrays: list[np.ndarray] = [
            self.gpu_free_milli,
            self.free_whole_gpus,
            self.free_cpu_milli,
            self.free_memory_mib,
            self.health,
            self.closed,
            self._hist_all,
            self._totals_all,
            self._node_rows,
        ]
        return self.topology.nbytes() + sum(a.nbytes for a in arrays)
