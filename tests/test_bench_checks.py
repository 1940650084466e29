"""The benchmarks' checker (`toposched.bench.checks`) agrees with the tests' GPU-by-GPU checker
(tests/placement_helpers.py) on the placement oracle's random clusters: on the engine's
placements, and on the same placements with one pod moved to another node or GPU."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from placement_helpers import constraint_violations, resource_violations, topology_labels
from test_placement_oracle import ANY_CASE, SETTINGS, RandomCase

from toposched.bench.checks import (
    InvalidResult,
    check_gpu_accounts,
    check_placement,
    placement_problems,
)
from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState
from toposched.placement.request import GangRequest, simple_request
from toposched.placement.search import Placement, place


def helper_problems(state: ClusterState, request: GangRequest, allocation: Allocation) -> list[str]:
    labels = topology_labels(state.topology)
    problems = constraint_violations(state, request, allocation.nodes.tolist(), labels)
    return problems + resource_violations(state, request, allocation)


@SETTINGS
@given(case=ANY_CASE, moved=st.integers(0, 10**6), to_node=st.integers(0, 10**6))
def test_checkers_agree(case: RandomCase, moved: int, to_node: int) -> None:
    state, request, _ = case.build()
    found = place(state, request)
    if not isinstance(found, Placement):
        return
    allocation = found.allocation
    assert placement_problems(state, request, allocation) == []
    assert helper_problems(state, request, allocation) == []
    check_placement(state, request, found)
    # One pod moved to another node (same GPU indices, where that node has them).
    pod = moved % request.pods
    node = to_node % state.topology.n_nodes
    if allocation.gpus.size and allocation.gpus[pod].max() >= state.topology.gpu_count[node]:
        return
    nodes = allocation.nodes.copy()
    nodes[pod] = node
    shifted = Allocation(
        nodes,
        allocation.gpus.copy(),
        gpu_milli=allocation.gpu_milli,
        cpu_milli=allocation.cpu_milli,
        memory_mib=allocation.memory_mib,
    )
    ours = placement_problems(state, request, shifted)
    theirs = helper_problems(state, request, shifted)
    assert bool(ours) == bool(theirs), (ours, theirs)
    # Once applied, the placement is read with its own share free, and the state not changed.
    state.allocate("placed", allocation)
    version = state.version
    assert placement_problems(state, request, allocation, applied=True) == []
    assert state.version == version


def test_a_broken_slice_and_a_taken_gpu_are_refused() -> None:
    state = ClusterState(nvl72_cluster(1, 2, 2, nodes_per_rack=4))
    request = simple_request(8, 4, name="sliced", slices=[(3, 4)])
    found = place(state, request)
    assert isinstance(found, Placement)
    check_placement(state, request, found)
    nodes = found.allocation.nodes.copy()
    nodes[[3, 4]] = nodes[[4, 3]]  # each slice now spans two racks
    broken = Allocation(nodes, found.allocation.gpus.copy())
    assert any("slices" in p for p in placement_problems(state, request, broken))
    with pytest.raises(InvalidResult, match="slices"):
        check_placement(state, request, Placement(request, broken))
    state.allocate("holder", Allocation.of([int(nodes[0])], [[0]]))
    assert any("free" in p for p in placement_problems(state, request, found.allocation))


def test_gpu_accounts_hold_for_allocations_and_catch_a_skew() -> None:
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=4))
    state.allocate("a", Allocation.of([0, 1], [[0, 1], [2, 3]]))
    check_gpu_accounts(state)
    state.gpu_free_milli[0, 0] = 1000  # as if GPU 0 of node 0 were free again
    with pytest.raises(InvalidResult):
        check_gpu_accounts(state)
    assert np.count_nonzero(state.gpu_free_milli[1] < 1000) == 2
