"""Placement benchmarks on the 1,000,080-GPU fleet at 70% occupancy (see toposched.bench)."""

from __future__ import annotations

from itertools import cycle
from typing import Any

import numpy as np
import pytest

from toposched.bench.placement import (
    block_preferring_job,
    block_sliced_job,
    frontier_job,
    infeasible_job,
    occupied_fleet,
    small_block_slices_job,
    small_jobs,
)
from toposched.cluster.state import ClusterState
from toposched.placement.search import Placement, Unschedulable, place


@pytest.fixture(scope="module")
def busy_fleet() -> ClusterState:
    return occupied_fleet()


def test_small_job(benchmark: Any, busy_fleet: ClusterState) -> None:
    jobs = cycle(small_jobs())
    result = benchmark(lambda: place(busy_fleet, next(jobs)))
    assert isinstance(result, Placement)


def test_frontier_job(benchmark: Any, busy_fleet: ClusterState) -> None:
    job = frontier_job()
    result = benchmark.pedantic(lambda: place(busy_fleet, job), rounds=20, iterations=1)
    assert isinstance(result, Placement)
    # Whole racks only: 2,778 racks of 18 nodes.
    racks = busy_fleet.topology.node_domain[3][result.allocation.nodes]
    assert np.unique(racks).size == 2778


def test_block_sliced_job(benchmark: Any, busy_fleet: ClusterState) -> None:
    job = block_sliced_job()
    result = benchmark.pedantic(lambda: place(busy_fleet, job), rounds=20, iterations=1)
    assert isinstance(result, Placement)
    # A rack holds at most 36 two-GPU pods: 9,216 pods need 256 racks, and that many suffice.
    racks = busy_fleet.topology.node_domain[3][result.allocation.nodes]
    assert np.unique(racks).size == 256


def test_block_preferring_job(benchmark: Any, busy_fleet: ClusterState) -> None:
    job = block_preferring_job()
    result = benchmark.pedantic(lambda: place(busy_fleet, job), rounds=20, iterations=1)
    assert isinstance(result, Placement)
    # Two blocks; 280 racks, the least on this layout (the greedy placement alone took 414).
    assert result.domains_used(busy_fleet, 2) == 2
    assert result.domains_used(busy_fleet, 3) == 280


def test_small_block_slices_job(benchmark: Any, busy_fleet: ClusterState) -> None:
    job = small_block_slices_job()
    result = benchmark.pedantic(lambda: place(busy_fleet, job), rounds=20, iterations=1)
    assert isinstance(result, Placement)
    # A free rack holds 72 one-GPU pods: 40,000 need 556 racks (the greedy placement took 747).
    assert result.domains_used(busy_fleet, 3) == 556


def test_infeasible_job(benchmark: Any, busy_fleet: ClusterState) -> None:
    job = infeasible_job()
    result = benchmark(lambda: place(busy_fleet, job))
    assert isinstance(result, Unschedulable)
