"""Tests of per-domain pod capacity from aggregates: GPUs, then free CPU and memory."""

from __future__ import annotations

import numpy as np
import pytest

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState
from toposched.placement.capacity import CapacityView
from toposched.placement.request import simple_request

RACK = 3  # domain levels of the NVL72 builder: zone, block, rack


@pytest.mark.parametrize("busy_racks", [7, 0])
@pytest.mark.parametrize("resource", ["cpu", "memory"])
def test_rack_capacity_is_bounded_by_free_cpu_and_memory(busy_racks: int, resource: str) -> None:
    # Eight racks of two 4-GPU nodes. With seven racks' GPUs taken, only rack 0 has GPU room
    # (few domains to bound); with none taken, every rack has (all of them to bound).
    state = ClusterState(nvl72_cluster(1, 1, 8, nodes_per_rack=2))
    for rack in range(8 - busy_racks, 8):
        nodes = [2 * rack, 2 * rack + 1]
        state.allocate(f"full{rack}", Allocation.of(nodes, [[0, 1, 2, 3]] * 2))
    node_cpu, node_memory = 144_000, 960 * 1024
    per_pod = {"cpu": node_cpu // 2, "memory": node_memory // 2}[resource]
    # Rack 0 keeps room for three and a half such pods in all: its GPUs would hold four.
    held = per_pod // 4
    for node in (0, 1):
        state.allocate(
            f"hold{node}",
            Allocation.of(
                [node],
                np.zeros((1, 0), dtype=np.int64),
                cpu_milli=held if resource == "cpu" else 0,
                memory_mib=held if resource == "memory" else 0,
            ),
        )
    request = simple_request(
        4,
        2,
        cpu_milli=per_pod if resource == "cpu" else 0,
        memory_mib=per_pod if resource == "memory" else 0,
        name="gang",
        required=RACK,
    )
    capacity = CapacityView(state, request, exact=False).at(RACK, 0, 8)
    free_racks = 8 - busy_racks
    expected = [3] + [4] * (free_racks - 1) + [0] * busy_racks
    assert capacity.tolist() == expected
