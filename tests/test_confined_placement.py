"""Tests of placement confined to one innermost domain, on a what-if of released node arrays."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState, Health
from toposched.cluster.statement import trial
from toposched.placement.request import GangRequest, simple_request
from toposched.placement.search import Placement, place, place_in_leaf

RACK = 3  # domain levels of the NVL72 builder: zone, block, rack


def racks(count: int, nodes_per_rack: int) -> ClusterState:
    return ClusterState(nvl72_cluster(1, 1, count, nodes_per_rack=nodes_per_rack))


def request(pods: int, gpus: int, cpu_milli: int = 0) -> GangRequest:
    return simple_request(pods, gpus, cpu_milli=cpu_milli, name="gang", required=RACK)


def test_free_on_nodes_frees_only_the_range_and_restores_everything() -> None:
    state = racks(2, 2)
    # `a` spans both racks (nodes 1 and 2); `b` shares a node with `a`, with CPU.
    state.allocate("a", Allocation.of([1, 2], [[0, 1], [0, 1]], cpu_milli=4000))
    state.allocate("b", Allocation.of([1], [[2]], cpu_milli=1000))
    before = state.snapshot()
    parts = [state.allocations["a"], state.allocations["b"]]
    with trial(state) as what_if:
        what_if.free_on_nodes(parts, 0, 2)  # rack r0: nodes 0 and 1
        assert state.free_whole_gpus[:4].tolist() == [4, 4, 2, 4]
        assert state.gpu_free_milli[1, :4].tolist() == [1000] * 4
        assert int(state.free_cpu_milli[1]) == int(before["free_cpu_milli"][1]) + 5000
        # Node 2 is outside the range: `a`'s pod there stays, and aggregates are untouched.
        assert state.gpu_free_milli[2, :2].tolist() == [0, 0]
        inside = state.snapshot()
        for name in ("free_hist[3]", "free_gpus[3]", "domain_free_cpu[3]"):
            assert np.array_equal(before[name], inside[name]), name
    after = state.snapshot()
    assert before.keys() == after.keys()
    for name, values in before.items():
        assert np.array_equal(values, after[name]), name


def test_free_on_nodes_returns_shared_gpus_and_memory() -> None:
    state = racks(2, 2)
    # Two shared pods on GPU 3 of node 0 (one of them also on node 2, outside the range),
    # with memory; a whole-GPU pod with memory on node 1.
    state.allocate("half", Allocation.of([0, 2], [[3], [3]], gpu_milli=500, memory_mib=1024))
    state.allocate("quarter", Allocation.of([0], [[3]], gpu_milli=250))
    state.allocate("whole", Allocation.of([1], [[0, 1]], memory_mib=2048))
    before = state.snapshot()
    parts = [state.allocations[name] for name in ("half", "quarter", "whole")]
    with trial(state) as what_if:
        what_if.free_on_nodes(parts, 0, 2)
        assert state.gpu_free_milli[0, 3] == 1000
        assert state.gpu_free_milli[2, 3] == 500  # outside the range: still held
        assert state.free_whole_gpus[:3].tolist() == [4, 4, 3]
        memory = before["free_memory_mib"]
        assert int(state.free_memory_mib[0]) == int(memory[0]) + 1024
        assert int(state.free_memory_mib[1]) == int(memory[1]) + 2048
        assert int(state.free_memory_mib[2]) == int(memory[2])
    after = state.snapshot()
    for name, values in before.items():
        assert np.array_equal(values, after[name]), name


def test_place_in_leaf_uses_the_released_gpus_and_respects_cpu() -> None:
    state = racks(2, 2)
    state.allocate("a", Allocation.of([0, 1], [[0, 1, 2, 3]] * 2))
    gang = request(2, 4)
    assert place_in_leaf(state, gang, 0) is None
    with trial(state) as what_if:
        what_if.free_on_nodes([state.allocations["a"]], 0, 2)
        placed = place_in_leaf(state, gang, 0)
        assert isinstance(placed, Placement)
        assert sorted(placed.allocation.nodes.tolist()) == [0, 1]
        # More CPU per pod than a node has: no room, whatever the GPUs.
        cpu = int(state.topology.cpu_milli[0])
        assert place_in_leaf(state, request(2, 4, cpu_milli=cpu + 1), 0) is None
    state.set_health(np.array([3]), Health.DOWN)
    assert place_in_leaf(state, gang, 1) is None  # one healthy node left in rack r1


@settings(max_examples=60, deadline=None)
@given(
    held=st.lists(st.integers(0, 4), min_size=6, max_size=6),
    pods=st.integers(1, 4),
    gpus=st.sampled_from([1, 2, 4]),
)
def test_place_in_leaf_agrees_with_place_when_only_that_leaf_has_room(
    held: list[int], pods: int, gpus: int
) -> None:
    # Rack r0 (nodes 0-2) has the GPUs `held` leaves free; rack r1 (nodes 3-5) is full.
    state = racks(2, 3)
    for node, busy in enumerate(held[:3]):
        if busy:
            state.allocate(f"j{node}", Allocation.of([node], [list(range(busy))]))
    for node in range(3, 6):
        state.allocate(f"full{node}", Allocation.of([node], [[0, 1, 2, 3]]))
    gang = request(pods, gpus)
    anywhere = place(state, gang)
    confined = place_in_leaf(state, gang, 0)
    if not isinstance(anywhere, Placement):
        assert confined is None
        return
    assert confined is not None
    assert confined.allocation.nodes.tolist() == anywhere.allocation.nodes.tolist()
    assert confined.allocation.gpus.tolist() == anywhere.allocation.gpus.tolist()
