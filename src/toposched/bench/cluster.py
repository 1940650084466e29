"""Cluster-state benchmarks: building the 1M-GPU fleet, one-pod changes, 1,000-node changes."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from toposched.bench.harness import Measurement, measure
from toposched.cluster.builders import million_gpu_cluster
from toposched.cluster.state import Allocation, ClusterState
from toposched.cluster.statement import Statement

SLICE_RACKS = 2_778
"""Racks of the 200,016-GPU job: 2,778 rack slices of 18 pods x 4 GPUs."""
RUNNING_JOBS = 680
"""Jobs a frontier cycle's reservation search releases, about, on a statement."""


def one_node_pod() -> Allocation:
    """A 2-GPU pod on node 5 with some CPU and memory."""
    return Allocation.of([5], [[0, 1]], cpu_milli=16_000, memory_mib=64 * 1024)


def thousand_node_gang(state: ClusterState) -> Allocation:
    """Every 4 GPUs of 1,000 nodes spread through the cluster (one node in every ~250)."""
    step = state.topology.n_nodes // 1000
    nodes = np.arange(1000, dtype=np.int64) * step
    return Allocation.of(nodes, np.tile(np.arange(4), (1000, 1)))


def rack_slice_gang(state: ClusterState, racks: int = SLICE_RACKS) -> Allocation:
    """Every node of the first `racks` racks, 4 GPUs, 64 cores and 512 GiB per pod, each rack's
    nodes listed last to first, as a best-fit placement may list them (not in node order)."""
    starts = state.topology.domain_starts[-1]
    first, last = starts[:racks], starts[1 : racks + 1]
    nodes = np.concatenate(
        [np.arange(hi - 1, lo - 1, -1) for lo, hi in zip(first, last, strict=True)]
    )
    return Allocation.of(
        nodes, np.tile(np.arange(4), (nodes.size, 1)), cpu_milli=64_000, memory_mib=512 * 1024
    )


def hold_small_jobs(state: ClusterState, jobs: int = RUNNING_JOBS) -> list[str]:
    """`jobs` running jobs of 4 one-node pods (4 GPUs, 16 cores and 64 GiB each) on nodes
    spread through the cluster; returns their owners."""
    step = state.topology.n_nodes // (4 * jobs)
    owners = []
    for job in range(jobs):
        nodes = (np.arange(4, dtype=np.int64) + 4 * job) * step
        allocation = Allocation.of(
            nodes, np.tile(np.arange(4), (4, 1)), cpu_milli=16_000, memory_mib=64 * 1024
        )
        state.allocate(f"bench-small-{job}", allocation)
        owners.append(f"bench-small-{job}")
    return owners


def release_and_roll_back(state: ClusterState, owners: list[str]) -> None:
    """Release `owners` on a statement and roll it back: a reservation search's step."""
    statement = Statement(state)
    statement.release_many(owners)
    statement.discard()


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
    for name, allocation, timed_runs in (
        ("allocate + release one 2-GPU pod", one_node_pod(), 200 if quick else 2000),
        ("allocate + release a 1,000-node gang", thousand_node_gang(state), 20 if quick else 200),
        (
            "allocate + release a 50,004-node gang (2,778 racks, CPU and memory, policy order)",
            rack_slice_gang(state),
            5 if quick else 30,
        ),
    ):
        results.append(measure(name, _allocate_and_release(state, allocation), runs=timed_runs))
    owners = hold_small_jobs(state)
    results.append(
        measure(
            f"release + roll back {RUNNING_JOBS} running 4-node jobs on a statement",
            lambda: release_and_roll_back(state, owners),
            runs=20 if quick else 200,
        )
    )
    return results


def _allocate_and_release(state: ClusterState, allocation: Allocation) -> Callable[[], None]:
    """A run that allocates `allocation` and releases it, leaving the state as it was."""

    def run() -> None:
        state.allocate("bench-job", allocation)
        state.release("bench-job")

    return run


def _build() -> None:
    ClusterState(million_gpu_cluster())
