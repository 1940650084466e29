"""Node health changes, with the aggregates moved so that they count healthy nodes only."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.aggregates import StateArrays
from toposched.cluster.errors import InputError
from toposched.cluster.health import Health
from toposched.cluster.rows import distinct


class Availability(StateArrays):
    """Which nodes offer capacity: node health, set and restored."""

    def set_health(self, nodes: NDArray[np.int64] | list[int], health: Health) -> NDArray[np.uint8]:
        """Set the health of `nodes`; returns their previous health (for undo)."""
        node_array = distinct(np.asarray(nodes, dtype=np.int64).reshape(-1))
        if node_array.size and (node_array[0] < 0 or node_array[-1] >= self.topology.n_nodes):
            raise InputError("nodes", node_array.tolist()[:5], "must be valid node indices")
        try:
            value = Health(health)
        except ValueError:
            raise InputError(
                "health", health, f"must be one of {', '.join(h.name.lower() for h in Health)}"
            ) from None
        previous = self.health[node_array].copy()
        self.version += 1
        self._contribute(node_array, -1)
        self.health[node_array] = value
        self._contribute(node_array, +1)
        self.nodes_by_health -= np.bincount(previous, minlength=len(Health))
        self.nodes_by_health[value] += node_array.size
        return previous

    def restore_health(self, nodes: NDArray[np.int64], previous: NDArray[np.uint8]) -> None:
        """Undo `set_health`: put each node back to its recorded health."""
        self.version += 1
        changed = distinct(nodes)
        self._contribute(changed, -1)
        self.nodes_by_health -= np.bincount(self.health[changed], minlength=len(Health))
        self.health[nodes] = previous
        self.nodes_by_health += np.bincount(self.health[changed], minlength=len(Health))
        self._contribute(changed, +1)
