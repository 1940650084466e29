"""Tests of pod capacity per node and per domain, exact and from aggregates."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_placement_oracle import RandomCase, random_cases

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState
from toposched.placement.capacity import CapacityView, pods_by_free, pods_per_free
from toposched.placement.capacity_kernels import (
    UNLIMITED,
    pods_in_leaves,
    pods_on_nodes,
    sums_of_children,
)
from toposched.placement.request import GangRequest, simple_request

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


# --- every level, exact and from aggregates, against plain counts ------------------------------


def _plain_node_pods(state: ClusterState, request: GangRequest, node: int) -> int:
    """Pods of `request` one node holds now, counted from its free resources one by one."""
    topology = state.topology
    if state.health[node] != 0:
        return 0
    if request.allowed_models is not None and topology.gpu_model[node] not in set(
        request.allowed_models.tolist()
    ):
        return 0
    bounds = []
    if request.is_fractional:
        bounds.append(sum(int(m) // request.gpu_milli for m in state.gpu_free_milli[node]))
    elif request.gpus_per_pod:
        bounds.append(int(state.free_whole_gpus[node]) // request.gpus_per_pod)
    if request.cpu_milli:
        bounds.append(int(state.free_cpu_milli[node]) // request.cpu_milli)
    if request.memory_mib:
        bounds.append(int(state.free_memory_mib[node]) // request.memory_mib)
    return min(bounds) if bounds else int(UNLIMITED)


def _plain_domain_bound(state: ClusterState, request: GangRequest, nodes: list[int]) -> int:
    """What a domain's aggregates promise: pods by free whole GPUs per healthy node of an
    allowed model, bounded by the free CPU and memory of all its healthy nodes together."""
    topology = state.topology
    healthy = [node for node in nodes if state.health[node] == 0]
    allowed = [
        node
        for node in healthy
        if request.allowed_models is None
        or topology.gpu_model[node] in set(request.allowed_models.tolist())
    ]
    bounds = []
    if request.gpus_per_pod:
        bounds.append(sum(int(state.free_whole_gpus[n]) // request.gpus_per_pod for n in allowed))
    if request.cpu_milli:
        bounds.append(sum(int(state.free_cpu_milli[n]) for n in healthy) // request.cpu_milli)
    if request.memory_mib:
        bounds.append(sum(int(state.free_memory_mib[n]) for n in healthy) // request.memory_mib)
    return min(bounds) if bounds else int(UNLIMITED)


def _plain_capacities(
    state: ClusterState, request: GangRequest, labels: list[list[str]], exact: bool
) -> list[list[int]]:
    """Per level (the cluster first), per domain in order, the pods it holds: summed from nodes
    below every slice, then whole slices only, summed upwards and rounded level by level."""
    n_levels = len(labels)
    domains = [list(dict.fromkeys(level_labels)) for level_labels in labels]

    def nodes_of(level: int, name: str) -> list[int]:
        return [node for node, label in enumerate(labels[level]) if label == name]

    def raw(level: int, name: str) -> int:
        nodes = nodes_of(level, name)
        if exact or request.is_fractional:
            return sum(_plain_node_pods(state, request, node) for node in nodes)
        return _plain_domain_bound(state, request, nodes)

    slice_level = max((level for level, _ in request.slices), default=None)
    result: list[list[int]] = [[] for _ in range(n_levels)]
    for level in range(n_levels - 1, -1, -1):
        granule = request.granule(level)
        for name in domains[level]:
            if slice_level is None or level > slice_level:
                result[level].append(raw(level, name))
                continue
            if level == slice_level:
                held = raw(level, name)
            else:
                members = nodes_of(level, name)
                held = sum(
                    result[level + 1][index]
                    for index, child in enumerate(domains[level + 1])
                    if set(nodes_of(level + 1, child)) <= set(members)
                )
            result[level].append(held // granule * granule)
    return result


@settings(max_examples=150, deadline=None)
@given(case=random_cases())
def test_capacities_at_every_level_match_plain_counts(case: RandomCase) -> None:
    state, request, labels = case.build()
    if request.on_one_node:
        return  # placed node by node, never through domain capacities
    for exact, nodes_first in ((True, False), (True, True), (False, False)):
        view = CapacityView(state, request, exact=exact)
        if nodes_first:
            view.node_capacity()  # every node's count kept: domains are summed from it
        expected = _plain_capacities(state, request, labels, exact)
        for level, counts in enumerate(expected):
            assert view.at(level, 0, len(counts)).tolist() == counts, (level, exact)
        # Nodes one by one, by index and by range, as the search reads them.
        per_node = [_plain_node_pods(state, request, n) for n in range(state.topology.n_nodes)]
        assert view.node_capacity(np.arange(len(per_node))[::-1]).tolist() == per_node[::-1]
        assert view.node_capacity_in(0, len(per_node)).tolist() == per_node


@settings(max_examples=100, deadline=None)
@given(case=random_cases())
def test_a_view_confined_to_a_domain_counts_its_inside_as_the_whole_view(
    case: RandomCase,
) -> None:
    state, request, _ = case.build()
    topology = state.topology
    levels = len(topology.domain_levels)
    for exact in (True, False):
        whole = CapacityView(state, request, exact=exact)
        for outer in range(1, levels):
            for domain in range(topology.n_domains(outer)):
                confined = CapacityView(state, request, exact=exact, inside=(outer, domain))
                for level in range(outer, levels):
                    lo, hi = topology.descendants(outer, domain, level)
                    assert confined.at(level, lo, hi).tolist() == whole.at(level, lo, hi).tolist()
                # Above it, the room inside it alone: no more than the whole view's.
                assert confined.total() <= whole.total()


@pytest.mark.parametrize("domains", [3, 2047, 2048, 13_890])
@pytest.mark.parametrize("weights", [[0, 0, 0, 0, 1], [0, 0, 1, 1, 2], [0, 1, 2, 3, 4], [0] * 5])
def test_pods_by_free_equals_the_histogram_product_below_and_above_the_column_path(
    domains: int, weights: list[int]
) -> None:
    # A (domains, models, free GPUs) histogram read for one model, as the view reads it.
    rng = np.random.default_rng(domains)
    hist = rng.integers(0, 19, size=(domains, 2, 5)).astype(np.int32)
    pods_per_free = np.array(weights, dtype=np.int64)
    expected = hist[:, 1, :].astype(np.int64) @ pods_per_free
    result = pods_by_free(hist[:, 1, :], pods_per_free)
    assert result.dtype == np.int64
    assert np.array_equal(result, expected)


@pytest.mark.parametrize("granule", [1, 18, 72])
@pytest.mark.parametrize("children", [[1], [3, 1, 4], [1] * 30, [463] * 30])
def test_sums_of_children_are_segment_sums_rounded_to_the_granule(
    granule: int, children: list[int]
) -> None:
    rng = np.random.default_rng(granule + len(children))
    bounds = np.concatenate(([0], np.cumsum(children))).astype(np.int64)
    below = rng.integers(0, 200, size=int(bounds[-1])).astype(np.int64)
    expected = [
        int(below[lo:hi].sum()) // granule * granule
        for lo, hi in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)
    ]
    assert sums_of_children(below, bounds, granule).tolist() == expected


@settings(max_examples=100, deadline=None)
@given(case=random_cases(), node_slice=st.integers(1, 3))
def test_pods_in_leaves_sums_each_nonzero_leafs_node_counts_in_node_slices(
    case: RandomCase, node_slice: int
) -> None:
    state, request, _ = case.build()
    if request.is_fractional:
        return  # counted from milli-GPU per node, never by this kernel
    request = replace(request, node_slice=node_slice)
    topology = state.topology
    leaf = len(topology.domain_levels) - 1
    starts = topology.domain_starts[leaf]
    n_leaves = topology.n_domains(leaf)
    arrays = (
        state.free_whole_gpus,
        state.free_cpu_milli,
        state.free_memory_mib,
        state.closed,
        topology.gpu_model,
        request.model_allowed(topology),
        pods_per_free(state.free_hist[0].shape[2], request.gpus_per_pod, request.node_slice),
        request.gpus_per_pod,
        request.cpu_milli,
        request.memory_mib,
    )
    per_node = pods_on_nodes(np.zeros(0, dtype=np.int64), 0, topology.n_nodes, *arrays)
    per_node = per_node // request.node_slice * request.node_slice
    # Leaves marked 0 are left as they are; the others (1, or a stale count) are counted.
    marks = np.arange(n_leaves, dtype=np.int64) % 3
    for leaf_lo in range(n_leaves):
        per_leaf = marks[leaf_lo:].copy()
        pods_in_leaves(per_leaf, leaf_lo, starts, *arrays, request.node_slice)
        expected = [
            int(per_node[starts[d] : starts[d + 1]].sum()) if marks[d] else 0
            for d in range(leaf_lo, n_leaves)
        ]
        assert per_leaf.tolist() == expected
