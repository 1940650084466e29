"""The node fill of a large gang's innermost domains (more nodes than the small gangs'
compiled fill takes): counted in one compiled pass, against the same fill from node capacities
counted apart (`NodeFill.assign` given them)."""

from __future__ import annotations

import numpy as np
import pytest

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState
from toposched.placement.capacity import CapacityView
from toposched.placement.node_fill import NodeFill
from toposched.placement.policies import BestFit, PlacementPolicy, Spread, fills_emptiest_first
from toposched.placement.request import GangRequest

# 120 racks of 18 nodes: 2,160 nodes, beyond the small gangs' compiled fill (2,048).
TOPOLOGY = nvl72_cluster(zones=2, blocks_per_zone=2, racks_per_block=30)


def _state(rng: np.random.Generator, busy: float, with_cpu: bool) -> ClusterState:
    """Some nodes partly or wholly taken, by pods of 1-4 GPUs (with CPU and memory or not);
    some racks left wholly free, as a large gang finds them."""
    state = ClusterState(TOPOLOGY)
    leaf_starts = TOPOLOGY.domain_starts[-1]
    free_racks = set(rng.choice(TOPOLOGY.n_domains(3), size=40, replace=False).tolist())
    for rack in range(TOPOLOGY.n_domains(3)):
        if rack in free_racks:
            continue
        for node in range(int(leaf_starts[rack]), int(leaf_starts[rack + 1])):
            if rng.random() >= busy:
                continue
            gpus = int(rng.integers(1, 5))
            cpu = int(rng.integers(1, 144)) * 1000 if with_cpu else 0
            allocation = Allocation.of(
                [node], [list(range(gpus))], cpu_milli=cpu, memory_mib=1024 if with_cpu else 0
            )
            state.allocate(f"job-{node}", allocation)
    return state


def _request(pods: int, with_cpu: bool, gpus_per_pod: int = 4) -> GangRequest:
    return GangRequest(
        name="gang",
        pods=pods,
        gpus_per_pod=gpus_per_pod,
        gpu_milli=1000,
        cpu_milli=64_000 if with_cpu else 0,
        memory_mib=512 * 1024 if with_cpu else 0,
        allowed_models=None,
    )


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("policy", [BestFit(), Spread()], ids=["bestfit", "spread"])
def test_many_racks_filled_as_from_counted_capacities(seed: int, policy: PlacementPolicy) -> None:
    rng = np.random.default_rng(seed)
    with_cpu = bool(seed % 2)
    # Pods of 2 GPUs fill a node partly taken too, and take its second pair after the first.
    gpus_per_pod = 2 if seed % 3 == 0 else 4
    state = _state(rng, busy=float(rng.choice([0.2, 0.6])), with_cpu=with_cpu)
    leaf_starts = TOPOLOGY.domain_starts[-1]
    for take_whole in (True, False):
        request = _request(1, with_cpu, gpus_per_pod)
        view = CapacityView(state, request, exact=False)
        leaves = np.sort(rng.choice(TOPOLOGY.n_domains(3), size=116, replace=False))
        per_node = [
            view.node_capacity_in(int(leaf_starts[d]), int(leaf_starts[d + 1])) for d in leaves
        ]
        room = np.array([int(c.sum()) for c in per_node], dtype=np.int64)
        leaves = leaves[room > 0]
        room = room[room > 0]
        if take_whole:
            shares = room
        else:
            shares = np.maximum(room - rng.integers(0, 3, size=room.size), 1)
        request = _request(int(shares.sum()), with_cpu, gpus_per_pod)
        view = CapacityView(state, request, exact=False)
        fill = NodeFill(state, request, policy, fills_emptiest_first(policy))
        nodes = np.concatenate(
            [np.arange(leaf_starts[d], leaf_starts[d + 1], dtype=np.int64) for d in leaves]
        )
        assert nodes.size > 2048
        compiled = fill.assign(view, leaves, shares)
        counted = fill.assign(view, leaves, shares, view.node_capacity(nodes))
        assert compiled is not None and counted is not None
        assert compiled.nodes.tolist() == counted.nodes.tolist()
        assert compiled.gpus.tolist() == counted.gpus.tolist()
        assert compiled.nodes.size == request.pods


def test_free_racks_taken_whole_take_every_gpu_in_order() -> None:
    state = ClusterState(TOPOLOGY)
    leaves = np.arange(120, dtype=np.int64)
    shares = np.full(120, 18, dtype=np.int64)
    request = _request(int(shares.sum()), with_cpu=True)
    view = CapacityView(state, request, exact=False)
    placed = NodeFill(state, request, BestFit(), False).assign(view, leaves, shares)
    assert placed is not None
    assert placed.nodes.tolist() == list(range(TOPOLOGY.n_nodes))
    assert placed.gpus.tolist() == [[0, 1, 2, 3]] * TOPOLOGY.n_nodes


@pytest.mark.parametrize("policy", [BestFit(), Spread()], ids=["bestfit", "spread"])
@pytest.mark.parametrize("layout", ["alternate", "half used"])
def test_racks_of_partly_used_nodes_taken_whole(policy: PlacementPolicy, layout: str) -> None:
    # Every node has room for 2-GPU pods; "alternate": every other node has 2 GPUs taken (so
    # index order is not policy order), "half used": every node has GPUs 0 and 1 taken (the
    # pods take GPUs 2 and 3).
    state = ClusterState(TOPOLOGY)
    for node in range(TOPOLOGY.n_nodes):
        if layout == "half used" or node % 2:
            state.allocate(f"job-{node}", Allocation.of([node], [[0, 1]]))
    leaves = np.arange(120, dtype=np.int64)
    per_rack = 9 * 1 + 9 * 2 if layout == "alternate" else 18
    shares = np.full(120, per_rack, dtype=np.int64)
    request = _request(int(shares.sum()), with_cpu=False, gpus_per_pod=2)
    view = CapacityView(state, request, exact=False)
    fill = NodeFill(state, request, policy, fills_emptiest_first(policy))
    compiled = fill.assign(view, leaves, shares)
    counted = fill.assign(view, leaves, shares, view.node_capacity(np.arange(TOPOLOGY.n_nodes)))
    assert compiled is not None and counted is not None
    assert compiled.nodes.tolist() == counted.nodes.tolist()
    assert compiled.gpus.tolist() == counted.gpus.tolist()
    if layout == "half used":
        assert compiled.gpus.tolist() == [[2, 3]] * TOPOLOGY.n_nodes
