"""Cluster-state benchmarks: the 1M-GPU fleet's build, one-pod and 1,000-node changes."""

from __future__ import annotations

from typing import Any

from toposched.bench.cluster import one_node_pod, thousand_node_gang
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
