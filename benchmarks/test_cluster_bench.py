"""Cluster-state benchmarks: the 1M-GPU fleet's build, one-pod, 1,000-node and large-gang
changes, a bulk release on a statement."""

from __future__ import annotations

from typing import Any

from toposched.bench.cluster import (
    RUNNING_JOBS,
    hold_small_jobs,
    one_node_pod,
    rack_slice_gang,
    release_and_roll_back,
    thousand_node_gang,
)
from toposched.cluster.builders import million_gpu_cluster
from toposched.cluster.state import ClusterState

GPUS = 1_000_080


def build() -> ClusterState:
    return ClusterState(million_gpu_cluster())


def test_build_million_gpu_cluster_and_state(benchmark: Any) -> None:
    state = benchmark.pedantic(build, rounds=10, iterations=1, warmup_rounds=1)
    assert (state.topology.n_nodes, state.topology.n_gpus) == (250_020, GPUS)
    assert state.total_free_gpus == GPUS
    benchmark.extra_info["state_mb"] = round(state.nbytes() / 2**20, 2)


def test_allocate_release_one_node_pod(benchmark: Any, million_state: ClusterState) -> None:
    pod = one_node_pod()

    def allocate_release() -> None:
        million_state.allocate("bench-pod", pod)
        million_state.release("bench-pod")

    benchmark(allocate_release)
    assert million_state.allocations == {}
    assert million_state.total_free_gpus == GPUS


def test_allocate_release_thousand_node_gang(benchmark: Any, million_state: ClusterState) -> None:
    gang = thousand_node_gang(million_state)
    # 1,000 nodes x 4 GPUs, one node in every 250.
    assert (gang.pods, gang.gpus.size) == (1000, 4000)

    def allocate_release() -> None:
        million_state.allocate("bench-gang", gang)
        million_state.release("bench-gang")

    benchmark(allocate_release)
    assert million_state.allocations == {}
    assert million_state.total_free_gpus == GPUS


def test_allocate_release_rack_slice_gang(benchmark: Any, million_state: ClusterState) -> None:
    gang = rack_slice_gang(million_state)
    # 2,778 racks of 18 nodes, each rack's nodes last to first: not in node order.
    assert gang.pods == 50_004 and not (gang.nodes[1:] > gang.nodes[:-1]).all()

    def allocate_release() -> None:
        million_state.allocate("bench-slices", gang)
        million_state.release("bench-slices")

    benchmark.pedantic(allocate_release, rounds=20, iterations=1, warmup_rounds=2)
    assert million_state.allocations == {}
    assert million_state.total_free_gpus == GPUS


def test_release_and_roll_back_running_jobs(benchmark: Any, million_state: ClusterState) -> None:
    owners = hold_small_jobs(million_state)
    before = million_state.snapshot()
    benchmark(release_and_roll_back, million_state, owners)
    after = million_state.snapshot()
    assert all((before[key] == after[key]).all() for key in before)
    assert len(owners) == RUNNING_JOBS
    for owner in owners:
        million_state.release(owner)
    assert million_state.total_free_gpus == GPUS
