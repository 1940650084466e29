"""Placement benchmarks on the churned 1,000,080-GPU fleet (see toposched.bench), each result
checked by `check_placement`; the 200,016-GPU job also on the arranged layout, the best case."""

from __future__ import annotations

from itertools import cycle
from typing import Any

import pytest

from toposched.bench.checks import check_placement
from toposched.bench.fleets import churned
from toposched.bench.placement import (
    block_preferring_job,
    block_sliced_job,
    frontier_job,
    infeasible_job,
    occupied_fleet,
    rack_sliced_job,
    small_block_slices_job,
    small_jobs,
)
from toposched.cluster.state import ClusterState
from toposched.placement.request import GangRequest
from toposched.placement.search import Placement, Unschedulable, place


@pytest.fixture(scope="module")
def churned_fleet() -> ClusterState:
    return churned().state


def test_small_job(benchmark: Any, churned_fleet: ClusterState) -> None:
    jobs = cycle(small_jobs())
    result = benchmark(lambda: place(churned_fleet, next(jobs)))
    assert isinstance(result, Placement)
    check_placement(churned_fleet, result.request, result)


def test_200k_gpu_job_is_refused_on_the_churned_fleet(
    benchmark: Any, churned_fleet: ClusterState
) -> None:
    # Best fit leaves about 15% of racks whole while filling to 85%; endings break no more
    # racks open: 2,102 whole racks hold 37,836 slices' pods, short of 50,004.
    job = frontier_job()
    result = benchmark.pedantic(lambda: place(churned_fleet, job), rounds=20, iterations=1)
    assert isinstance(result, Unschedulable)


@pytest.mark.parametrize(
    "job",
    [
        rack_sliced_job(2_100, "pretrain-151k"),
        block_sliced_job(),
        block_preferring_job(),
        small_block_slices_job(),
    ],
    ids=["151k-rack-slices", "block-slices", "block-preferring", "small-block-slices"],
)
def test_large_gang(benchmark: Any, churned_fleet: ClusterState, job: GangRequest) -> None:
    result = benchmark.pedantic(lambda: place(churned_fleet, job), rounds=10, iterations=1)
    assert isinstance(result, Placement)
    check_placement(churned_fleet, job, result)


def test_infeasible_job(benchmark: Any, churned_fleet: ClusterState) -> None:
    job = infeasible_job()
    result = benchmark(lambda: place(churned_fleet, job))
    assert isinstance(result, Unschedulable)


def test_200k_gpu_job_best_case_arranged_layout(benchmark: Any) -> None:
    state = occupied_fleet()
    job = frontier_job()
    result = benchmark.pedantic(lambda: place(state, job), rounds=10, iterations=1)
    assert isinstance(result, Placement)
    check_placement(state, job, result)
    assert result.domains_used(state, 3) == 2778
