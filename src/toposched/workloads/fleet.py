"""A busy reference fleet: the 1,000,080-GPU GB300 fleet with a job mix holding most of it, the
cluster `toposched place --fleet` places on and the placement benchmarks time."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.builders import million_gpu_cluster
from toposched.cluster.errors import checked_seed
from toposched.cluster.state import Allocation, ClusterState

__all__ = ["RACK_LEVEL", "occupied_fleet"]

RACK_LEVEL = 3
"""The rack level of the NVL72 builder's topology (cluster=0, zone=1, block=2, rack=3)."""
NODES_PER_RACK = 18
"""Nodes of an NVL72 rack (four GPUs each)."""


def occupied_fleet(
    occupancy: float = 0.70,
    whole_rack_share: float = 0.55,
    small_rack_share: float = 0.20,
    seed: int = 0,
) -> ClusterState:
    """The 1M-GPU fleet with a random job mix holding `occupancy` of its GPUs.

    Laid out the way a packing scheduler leaves a busy fleet: `whole_rack_share` of the racks,
    chosen at random, are held whole by rack-slice training jobs; `small_rack_share` of the
    racks host small jobs that hold a random number of GPUs on every node, enough to reach
    `occupancy` overall; the other racks are free.
    """
    rng = np.random.default_rng(checked_seed(seed))
    state = ClusterState(million_gpu_cluster())
    topology = state.topology
    racks = topology.n_domains(RACK_LEVEL)
    order = rng.permutation(racks)
    n_whole = int(round(whole_rack_share * racks))
    n_small = int(round(small_rack_share * racks))
    starts = topology.domain_starts[RACK_LEVEL]
    gpus_per_node = int(topology.gpu_count[0])

    def rack_nodes(selected: NDArray[np.int64]) -> NDArray[np.int64]:
        first: NDArray[np.int64] = starts[np.sort(selected)]
        nodes: NDArray[np.int64] = (first[:, None] + np.arange(NODES_PER_RACK)[None, :]).reshape(-1)
        return nodes

    whole_nodes = rack_nodes(order[:n_whole])
    state.allocate(
        "training-mix",
        Allocation.of(whole_nodes, np.tile(np.arange(gpus_per_node), (whole_nodes.size, 1))),
    )
    small_nodes = rack_nodes(order[n_whole : n_whole + n_small])
    target_gpus = occupancy * topology.n_gpus - whole_nodes.size * gpus_per_node
    mean_per_node = target_gpus / max(small_nodes.size, 1)
    taken = np.clip(
        rng.binomial(gpus_per_node, min(mean_per_node / gpus_per_node, 1.0), small_nodes.size),
        0,
        gpus_per_node,
    )
    # One allocation per GPU count, so each is a uniform gang.
    for count in range(1, gpus_per_node + 1):
        nodes = small_nodes[taken == count]
        if nodes.size:
            state.allocate(
                f"small-mix-{count}",
                Allocation.of(nodes, np.tile(np.arange(count), (nodes.size, 1))),
            )
    return state
