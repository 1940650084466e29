"""Capacity counts on the churned 1,000,080-GPU fleet (see toposched.bench): every rack of a
rack-sliced gang counted up to the whole cluster, from the aggregates and exactly (node by node
where the aggregates give room), each total checked against the count from every node."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from toposched.bench.fleets import churned
from toposched.cluster.state import ClusterState
from toposched.placement.capacity import CapacityView
from toposched.placement.request import simple_request

RACK = 3  # levels of the reference fleet: zone, block, rack
SLICE = 18  # pods per rack slice


@pytest.fixture(scope="module")
def churned_fleet() -> ClusterState:
    return churned().state


@pytest.mark.parametrize("exact", [False, True], ids=["aggregates", "exact"])
def test_rack_sliced_total(benchmark: Any, churned_fleet: ClusterState, exact: bool) -> None:
    # The simulator's frontier gangs: 4 GPUs, 128 cores and 800 GiB per pod, in rack slices.
    request = simple_request(
        2_100 * SLICE,
        4,
        cpu_milli=128_000,
        memory_mib=800 * 1024,
        name="pretrain-151k",
        preferred=2,
        slices=[(RACK, SLICE)],
    )
    total = benchmark(lambda: CapacityView(churned_fleet, request, exact=exact).total())
    # Every node counted first: racks summed from the per-node counts, in whole slices.
    counted = CapacityView(churned_fleet, request, exact=True)
    per_node = counted.node_capacity()
    starts = churned_fleet.topology.domain_starts[RACK]
    per_rack = np.add.reduceat(per_node, starts[:-1])
    whole = int((per_rack // SLICE * SLICE).sum())
    assert total == whole if exact else total >= whole
