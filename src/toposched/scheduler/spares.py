"""Spare nodes held per domain, so a failed node's gang restarts inside its rack or block."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.availability import Closure
from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation, ClusterState
from toposched.cluster.topology import Topology
from toposched.placement.request import GangRequest

IntArray = NDArray[np.int64]


def spare_level(topology: Topology, level: str, field_name: str = "spares.level") -> int:
    """The index of the topology level spares are held at (`level` by name), or an
    `InputError` naming `field_name`: an unknown level, or the root."""
    index = topology.level_index(level, field_name)
    if index == 0:
        raise InputError(field_name, level, "spares are held per domain below the root")
    return index


class SparePool:
    """Up to `per_domain` idle nodes in every domain at `level`, held out of service.

    Held nodes are closed (`Closure.SPARE`), their health unchanged: placement, preemption and
    backfill never see them. When a node
    under a gang goes down, the gang's pods on it move to a spare of the same domain (same GPU
    count and model), so the gang restarts on its surviving nodes plus the spare and keeps its
    topology. A repaired node joins the pool of its domain if that pool is short.
    """

    def __init__(self, state: ClusterState, level: str, per_domain: int) -> None:
        topology = state.topology
        self.level = spare_level(topology, level)
        if per_domain < 1:
            raise InputError("spares.per_domain", per_domain, "must be at least 1")
        self.state = state
        self.per_domain = per_domain
        self.level_name = level
        self._domain_of_node = topology.node_domain[self.level]
        self.held = np.zeros(topology.n_nodes, dtype=bool)
        self.count = np.zeros(topology.n_domains(self.level), dtype=np.int64)
        self.gpus = 0
        """GPUs on held spares (all idle: only idle nodes are held)."""
        self._hold(self._idle_open(np.arange(topology.n_nodes, dtype=np.int64)))

    @property
    def nodes(self) -> IntArray:
        return np.flatnonzero(self.held).astype(np.int64)

    def _idle_open(self, nodes: IntArray) -> IntArray:
        """The idle nodes of `nodes` open to new work (healthy, not fenced, not held)."""
        state = self.state
        idle: NDArray[np.bool_] = state.closed[nodes] == 0
        idle &= state.free_whole_gpus[nodes] == state.topology.gpu_count[nodes]
        idle &= state.free_cpu_milli[nodes] == state.topology.cpu_milli[nodes]
        idle &= state.free_memory_mib[nodes] == state.topology.memory_mib[nodes]
        return nodes[idle]

    def _hold(self, candidates: IntArray) -> None:
        """Hold the last idle open candidates of each domain until its pool is full."""
        if candidates.size == 0:
            return
        # Last nodes first within each domain, so the domain's first nodes stay for work.
        ordered = candidates[::-1]
        domains = self._domain_of_node[ordered]
        by_domain = np.argsort(domains, kind="stable")
        ordered, domains = ordered[by_domain], domains[by_domain]
        first_of_domain = np.searchsorted(domains, domains, side="left")
        rank = np.arange(domains.size) - first_of_domain
        chosen = ordered[rank < self.per_domain - self.count[domains]]
        if chosen.size:
            self.state.close(chosen, Closure.SPARE)
            self.held[chosen] = True
            np.add.at(self.count, self._domain_of_node[chosen], 1)
            self.gpus += int(self.state.topology.gpu_count[chosen].sum(dtype=np.int64))

    def release_down(self, nodes: IntArray) -> None:
        """Spares among `nodes` went down: they leave the pool."""
        lost = nodes[self.held[nodes]]
        if lost.size:
            self.state.reopen(lost, Closure.SPARE)  # closed by their health now
            self.held[lost] = False
            np.subtract.at(self.count, self._domain_of_node[lost], 1)
            self.gpus -= int(self.state.topology.gpu_count[lost].sum(dtype=np.int64))

    def refill(self, nodes: IntArray) -> None:
        """Nodes back in service refill the pools of their domains that are short."""
        self._hold(self._idle_open(np.unique(nodes)))

    def replacement(
        self, request: GangRequest, allocation: Allocation, down: IntArray, taken: dict[int, int]
    ) -> Allocation | None:
        """`allocation` with its pods on `down` nodes moved to spares of the same domain, or
        None if some failed node has no suitable spare.

        `taken` maps failed nodes to the spares already given to them in this failure, so
        co-located gangs follow their node to the same spare. A spare must share the failed
        node's domain at the pool's level and at every hard constraint level of the gang
        (required, slices), so the gang keeps its topology.
        """
        topology = self.state.topology
        failed = np.intersect1d(allocation.nodes, down)
        constraint_levels = [request.required] + [level for level, _ in request.slices]
        same_level = max(self.level, *constraint_levels)
        mapping: dict[int, int] = {}
        fresh: list[int] = []
        for node in failed.tolist():
            spare = taken.get(node)
            if spare is None:
                spare = self._spare_for(node, same_level)
                if spare is not None:
                    fresh.append(node)
                    taken[node] = spare
            elif topology.node_domain[same_level][spare] != topology.node_domain[same_level][node]:
                spare = None
            if spare is None:
                # All or nothing: spares taken for this gang's other nodes go back.
                for returned in fresh:
                    self._hold_again(taken.pop(returned))
                return None
            mapping[node] = spare
        nodes = allocation.nodes.copy()
        for node, spare in mapping.items():
            nodes[allocation.nodes == node] = spare
        return allocation.with_nodes(nodes)

    def _hold_again(self, spare: int) -> None:
        self.state.close(np.array([spare], dtype=np.int64), Closure.SPARE)
        self.held[spare] = True
        self.count[self._domain_of_node[spare]] += 1
        self.gpus += int(self.state.topology.gpu_count[spare])

    def _spare_for(self, node: int, same_level: int) -> int | None:
        """Take a held spare like `node` (GPU count and model) in its domain at `same_level`."""
        topology = self.state.topology
        start, stop = topology.domain_range(same_level, int(topology.node_domain[same_level][node]))
        candidates = np.flatnonzero(self.held[start:stop]) + start
        alike = candidates[
            (topology.gpu_count[candidates] == topology.gpu_count[node])
            & (topology.gpu_model[candidates] == topology.gpu_model[node])
            & (topology.cpu_milli[candidates] >= topology.cpu_milli[node])
            & (topology.memory_mib[candidates] >= topology.memory_mib[node])
        ]
        if alike.size == 0:
            return None
        spare = int(alike[0])
        self.held[spare] = False
        self.count[self._domain_of_node[spare]] -= 1
        self.gpus -= int(topology.gpu_count[spare])
        # Open again, and free: the gang's nomination keeps it from other work.
        self.state.reopen(np.array([spare], dtype=np.int64), Closure.SPARE)
        return spare
