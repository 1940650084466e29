"""Which nodes may take new work: node health, and closures held apart from it (the scheduler's
fence, the spare pool), combined in one per-node mask that placement reads."""

from __future__ import annotations

from enum import IntFlag

import numpy as np
from numpy.typing import NDArray

from toposched.cluster import kernels, run_kernels
from toposched.cluster.aggregates import StateArrays
from toposched.cluster.errors import InputError
from toposched.cluster.health import HEALTHY, Health
from toposched.cluster.rows import distinct


class Closure(IntFlag):
    """Why a node takes no new work, as bits of `ClusterState.closed`. Health is one of them,
    set only by `set_health`; the others never change a node's health."""

    UNHEALTHY = 1
    """Its health is anything but healthy."""
    FENCE = 2
    """Kept by the scheduler for jobs of this cycle (nominated or reserved nodes), or by a
    trial that keeps work off them."""
    SPARE = 4
    """Held in the spare pool, for gangs that lose a node."""


_UNHEALTHY = np.uint8(Closure.UNHEALTHY)


class Availability(StateArrays):
    """Node health and closures: every change moves the aggregates of the nodes that open or
    close, so that the aggregates count open nodes only (`closed == 0`)."""

    availability_changes = 0
    """Counts changes of health and of closures other than the fence's (whose nodes the
    scheduler compares itself)."""

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
        self.availability_changes += 1
        self._contribute(node_array, -1)
        self.health[node_array] = value
        self._mark_health(node_array)
        self._contribute(node_array, +1)
        self.nodes_by_health -= np.bincount(previous, minlength=len(Health))
        self.nodes_by_health[value] += node_array.size
        return previous

    def restore_health(self, nodes: NDArray[np.int64], previous: NDArray[np.uint8]) -> None:
        """Undo `set_health`: put each node back to its recorded health."""
        self.version += 1
        self.availability_changes += 1
        changed = distinct(nodes)
        self._contribute(changed, -1)
        self.nodes_by_health -= np.bincount(self.health[changed], minlength=len(Health))
        self.health[nodes] = previous
        self._mark_health(changed)
        self.nodes_by_health += np.bincount(self.health[changed], minlength=len(Health))
        self._contribute(changed, +1)

    def _mark_health(self, nodes: NDArray[np.int64]) -> None:
        """Set the `UNHEALTHY` bit of `nodes` from their health."""
        unhealthy = (self.health[nodes] != HEALTHY).view(np.uint8)
        self.closed[nodes] = (self.closed[nodes] & ~_UNHEALTHY) | unhealthy

    def close(self, nodes: NDArray[np.int64], closure: Closure) -> NDArray[np.int64]:
        """Keep `nodes` from new work for `closure`, their health unchanged; returns those not
        closed for it before (what `reopen` undoes exactly)."""
        bit = self._bit(closure)
        nodes = self._distinct(nodes)
        self.version += 1
        if closure is not Closure.FENCE:
            self.availability_changes += 1
        newly: NDArray[np.int64]
        if nodes.size > kernels.COMPILED_LIMIT:
            # Many nodes (a fence's block): their bits set in one compiled pass; the open
            # ones leave the aggregates, which their share is read from (not the bits).
            newly, leaving = run_kernels.close_nodes(nodes, self.closed, int(bit))
            self._contribute_open(leaving, -1)
            return newly
        newly = nodes[(self.closed[nodes] & bit) == 0]
        # Nodes that were open leave the aggregates; closed ones added nothing to them.
        self._contribute(newly, -1)
        self.closed[newly] |= bit
        return newly

    def reopen(self, nodes: NDArray[np.int64], closure: Closure) -> None:
        """Undo `close` for `nodes`: nodes closed for no other reason are open again and count
        in the aggregates."""
        bit = self._bit(closure)
        nodes = self._distinct(nodes)
        self.version += 1
        if closure is not Closure.FENCE:
            self.availability_changes += 1
        if nodes.size > kernels.COMPILED_LIMIT:
            # Only nodes closed for `closure` alone come back: nodes open already would leave
            # and come back with the same share, and the others stay closed.
            self._contribute_open(run_kernels.reopen_nodes(nodes, self.closed, int(bit)), +1)
            return
        self._contribute(nodes, -1)  # nodes open already leave, to come back once
        self.closed[nodes] &= ~bit
        self._contribute(nodes, +1)

    @staticmethod
    def _distinct(nodes: NDArray[np.int64]) -> NDArray[np.int64]:
        """`nodes` sorted and distinct; many of them already so (a fence's groups) are taken
        as they are, without a copy: the compiled passes only read them, and give new arrays
        of the nodes they pick."""
        if nodes.size > kernels.COMPILED_LIMIT and run_kernels.increasing(nodes):
            return nodes
        return distinct(nodes)

    @staticmethod
    def _bit(closure: Closure) -> np.uint8:
        if closure is Closure.UNHEALTHY or closure not in (Closure.FENCE, Closure.SPARE):
            raise InputError("closure", closure, "must be fence or spare (health has set_health)")
        return np.uint8(closure)
