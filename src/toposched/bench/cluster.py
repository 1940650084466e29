"""Cluster-state benchmarks: building the 1M-GPU fleet, one-pod changes, 1,000-node changes."""

from __future__ import annotations

import time

import numpy as np

from toposched.bench.harness import Measurement, measure
from toposched.cluster.builders import million_gpu_cluster
from toposched.cluster.state import Allocation, ClusterState


def one_node_pod() -> Allocation:
    """A 2-GPU pod on node 5 with some CPU and memory."""
    return Allocation.of([5], [[0, 1]], cpu_milli=16_000, memory_mib=64 * 1024)


def thousand_node_gang(state: ClusterState) -> Allocation:
    """Every 4 GPUs of 1,000 nodes spread through the cluster (one node in every ~250)."""
    step = state.topology.n_nodes // 1000
    nodes = np.arange(1000, dtype=np.int64) * step
    return Allocation.of(nodes, np.tile(np.arange(4), (1000, 1)))


def run_cluster_benchmarks(quick: bool = False) -> list[Measurement]:
    runs = 3 if quick else 10
    results = [measure("build 1,000,080-GPU GB300 cluster + state", _build, runs=runs)]
    started = time.perf_counter()
    state = ClusterState(million_gpu_cluster())
    results[0].extra = {
        "state_mb": round(state.nbytes() / 2**20, 2),
        "nodes": state.topology.n_nodes,
        "gpus": state.topology.n_gpus,
        "build_once_s": round(time.perf_counter() - started, 4),
    }
    pod = one_node_pod()

    def allocate_release() -> None:
        state.allocate("bench-pod", pod)
        state.release("bench-pod")

    results.append(
        measure("allocate + release one 2-GPU pod", allocate_release, runs=200 if quick else 2000)
    )
    gang = thousand_node_gang(state)

    def change_and_undo() -> None:
        state.allocate("bench-gang", gang)
        state.release("bench-gang")

    results.append(
        measure(
            "allocate + release a 1,000-node gang",
            change_and_undo,
            runs=20 if quick else 200,
        )
    )
    return results


def _build() -> None:
    ClusterState(million_gpu_cluster())
