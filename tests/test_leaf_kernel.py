"""Compiled placement passes (small gangs' search, node fills) against `_Search`'s numpy steps."""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from unittest import mock

import numpy as np
from hypothesis import event, given
from hypothesis import strategies as st
from test_placement_oracle import SETTINGS, RandomCase, random_cases

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState
from toposched.placement import search
from toposched.placement.policies import BestFit, PlacementPolicy, RandomFit, Spread
from toposched.placement.request import GangRequest, simple_request
from toposched.placement.search import (
    Placement,
    PlacementResult,
    Unschedulable,
    place,
    place_in_leaf,
)


def searched(state: ClusterState, request: GangRequest, policy: PlacementPolicy) -> PlacementResult:
    """`place` without compiled searches or node fills: what `_Search`'s numpy steps decide."""
    with mock.patch.object(search, "fills_emptiest_first", return_value=None):
        return place(state, request, policy)


def assert_same(compiled: Placement, expected: object) -> None:
    assert isinstance(expected, Placement), expected
    assert np.array_equal(compiled.allocation.nodes, expected.allocation.nodes)
    assert np.array_equal(compiled.allocation.gpus, expected.allocation.gpus)
    for field in ("gpu_milli", "cpu_milli", "memory_mib"):
        assert getattr(compiled.allocation, field) == getattr(expected.allocation, field)


def check_case(case: RandomCase) -> None:
    state, request, _ = case.build()
    for policy in (BestFit(), Spread()):
        expected = searched(state, request, policy)
        # The first level's domains ranked by the compiled loop, and (as on large fleets) by
        # numpy before it.
        for wide in (search._COMPILED_DOMAINS, 1):
            with mock.patch.object(search, "_COMPILED_DOMAINS", wide):
                compiled = search._placed_in_one_leaf(state, request, policy)
            event(f"compiled answered: {compiled is not None}")
            if compiled is not None:
                assert_same(compiled, expected)
        # `place` gives the search's answer whichever way it went.
        answer = place(state, request, policy)
        assert type(answer) is type(expected)
        if isinstance(answer, Placement):
            assert_same(answer, expected)
        else:
            assert str(answer) == str(expected)


@st.composite
def small_gang_cases(draw: st.DrawFn) -> RandomCase:
    """`random_cases`' clusters with the gangs the compiled search takes: 1-4 pods of 1-2
    whole GPUs, some CPU and memory, no domain slices (even gangs sometimes in node slices of
    2), any required and preferred levels."""
    case = draw(random_cases())
    levels = list(case.cluster["levels"])
    models = sorted({node["gpu_model"] for node in case.cluster["nodes"]})
    resources: dict[str, Any] = {
        "gpus": draw(st.sampled_from([1, 2, 1, 4])),
        "cpu": draw(st.sampled_from([0, 1, 2, 8])),
        "memory": draw(st.sampled_from(["0", "8Gi", "64Gi"])),
    }
    if draw(st.booleans()):
        resources["gpu_models"] = draw(st.lists(st.sampled_from(models), min_size=1, unique=True))
    topology: dict[str, Any] = {}
    required = draw(st.sampled_from([None, *levels]))
    if required is not None:
        topology["required"] = required
    preferred = draw(st.sampled_from([None, *levels]))
    if preferred is not None and (
        required is None or levels.index(preferred) >= levels.index(required)
    ):
        topology["preferred"] = preferred
    pods = draw(st.sampled_from([1, 2, 3, 4]))
    if pods % 2 == 0 and draw(st.booleans()):
        topology["slices"] = [{"level": "node", "pods": 2}]
    job = {"name": "small", "pods": pods, "resources_per_pod": resources, "topology": topology}
    return replace(case, job=job)


@SETTINGS
@given(small_gang_cases())
def test_compiled_search_agrees_with_the_search(case: RandomCase) -> None:
    check_case(case)


@SETTINGS
@given(random_cases())
def test_compiled_search_agrees_on_any_gang(case: RandomCase) -> None:
    check_case(case)


def racks_cluster() -> ClusterState:
    """2 zones of 1 block of 2 racks of 3 nodes of 4 GPUs: rack r holds nodes 3r..3r+2."""
    return ClusterState(
        nvl72_cluster(zones=2, blocks_per_zone=1, racks_per_block=2, nodes_per_rack=3)
    )


RACK = 3  # the rack level's index (cluster, zone, block, rack)


def test_small_gangs_take_the_compiled_search_and_fill_the_fullest_rack() -> None:
    state = racks_cluster()
    # Rack 2 (zone 1) is the fullest: node 6 keeps 1 free GPU (GPU 3), node 7 three.
    state.allocate("a", Allocation.of([6], [[0, 1, 2]]))
    state.allocate("b", Allocation.of([7], [[0]]))
    expected = {
        "one": ([6], [[3]]),
        "two-pods": ([6, 7], [[3], [1]]),
        "two-gpus-in-a-rack": ([7], [[1, 2]]),
    }
    for request in (
        simple_request(1, 1, name="one"),
        simple_request(2, 1, name="two-pods"),
        simple_request(1, 2, name="two-gpus-in-a-rack", required=RACK),
    ):
        compiled = search._placed_in_one_leaf(state, request, BestFit())
        assert compiled is not None, request.name
        assert_same(compiled, searched(state, request, BestFit()))
        nodes, gpus = expected[request.name]
        assert compiled.allocation.nodes.tolist() == nodes, request.name
        assert compiled.allocation.gpus.tolist() == gpus, request.name
    # Emptiest first: zone 0, its first rack, its first node.
    spread = search._placed_in_one_leaf(state, simple_request(1, 1), Spread())
    assert spread is not None and spread.allocation.nodes.tolist() == [0]


def test_node_sliced_one_gpu_pods_rank_racks_by_whole_slices() -> None:
    """Two one-GPU pods in a node slice: rack 0's three free GPUs (one node) hold one slice,
    as rack 1's two do, so the racks tie and the lower one is chosen, by the compiled search
    as by the search (counting free GPUs, rack 1 would look fuller)."""
    state = racks_cluster()
    full = [0, 1, 2, 3]
    state.allocate("zone-1", Allocation.of(list(range(6, 12)), [full] * 6))
    state.allocate("rack-0", Allocation.of([0], [[0]]))
    state.allocate("rack-1", Allocation.of([3], [[0, 1]]))
    state.allocate("the rest", Allocation.of([1, 2, 4, 5], [full] * 4))
    request = simple_request(2, 1, node_slice=2)
    compiled = search._placed_in_one_leaf(state, request, BestFit())
    assert compiled is not None
    assert_same(compiled, searched(state, request, BestFit()))
    assert compiled.allocation.nodes.tolist() == [0, 0]


def test_other_gangs_and_policies_go_to_the_search() -> None:
    state = racks_cluster()
    one_gpu = simple_request(1, 1)
    assert search._placed_in_one_leaf(state, one_gpu, RandomFit(seed=1)) is None
    # 4 pods of 4 GPUs: a rack holds 3, so the gang is split by the search.
    split = simple_request(4, 4)
    assert search._placed_in_one_leaf(state, split, BestFit()) is None
    assert isinstance(place(state, split, BestFit()), Placement)
    sliced = simple_request(6, 4, slices=[(RACK, 3)])
    assert search._placed_in_one_leaf(state, sliced, BestFit()) is None
    cpu_only = simple_request(1, 0, cpu_milli=1000)
    assert search._placed_in_one_leaf(state, cpu_only, BestFit()) is None


def test_over_promising_aggregates_leave_it_to_the_exact_search() -> None:
    state = racks_cluster()
    topology = state.topology
    # Every node keeps 1 CPU free: a rack's free CPU (3 CPUs) promises a pod of 2 CPUs that
    # no node holds.
    nodes = list(range(topology.n_nodes))
    cpu_left = 1000
    state.allocate(
        "cpu",
        Allocation.of(nodes, [[]] * len(nodes), cpu_milli=int(topology.cpu_milli[0]) - cpu_left),
    )
    request = simple_request(1, 1, cpu_milli=2 * cpu_left)
    assert search._placed_in_one_leaf(state, request, BestFit()) is None
    answer = place(state, request, BestFit())
    assert isinstance(answer, Unschedulable)
    assert str(answer) == str(searched(state, request, BestFit()))


@SETTINGS
@given(random_cases(large_jobs=True))
def test_compiled_node_fill_agrees_on_gangs_across_domains(case: RandomCase) -> None:
    state, request, _ = case.build()
    for policy in (BestFit(), Spread()):
        expected = searched(state, request, policy)
        answer = place(state, request, policy)
        assert type(answer) is type(expected)
        if isinstance(answer, Placement):
            event(f"placed on {np.unique(answer.allocation.nodes).size} nodes")
            assert_same(answer, expected)
        else:
            assert str(answer) == str(expected)


@SETTINGS
@given(small_gang_cases())
def test_compiled_fill_of_one_leaf_agrees_with_the_search(case: RandomCase) -> None:
    state, request, _ = case.build()
    if request.on_one_node and request.pods > 1:
        return
    leaf_level = len(state.topology.domain_levels) - 1
    for policy in (BestFit(), Spread()):
        for leaf in range(state.topology.n_domains(leaf_level)):
            answer = place_in_leaf(state, request, leaf, policy)
            with mock.patch.object(search, "fills_emptiest_first", return_value=None):
                expected = place_in_leaf(state, request, leaf, policy)
            event(f"placed in the leaf: {answer is not None}")
            assert (answer is None) == (expected is None)
            if answer is not None:
                assert_same(answer, expected)
