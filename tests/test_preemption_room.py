"""The room a victim search counts per innermost domain, now and with every candidate gone,
from the aggregates and the candidates' nodes, against a count over every node."""

from __future__ import annotations

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import MILLI_PER_GPU, Allocation, ClusterState, Health
from toposched.placement.policies import BestFit
from toposched.placement.request import GangRequest, simple_request
from toposched.scheduler.preemption import CandidatePool, VictimSearch


def pods_fit(free: np.ndarray, request: GangRequest) -> np.ndarray:
    if request.gpus_per_pod == 0:
        return free * 0 + request.pods
    if request.is_fractional:
        return free * (MILLI_PER_GPU // request.gpu_milli)
    return free // request.gpus_per_pod


def room_over_every_node(
    state: ClusterState, search: VictimSearch, request: GangRequest, pool: CandidatePool
) -> tuple[np.ndarray, np.ndarray]:
    """Each node's free whole GPUs, and those plus what the candidates hold on it (at most
    its GPUs), as pods of the gang, summed per innermost domain over healthy nodes."""
    usable = (state.health == Health.HEALTHY).astype(np.int64)
    free = state.free_whole_gpus.astype(np.int64)
    leaf = search.leaf_of_node
    n_leaves = state.topology.n_domains(search.leaf_level)
    now = np.bincount(leaf, weights=pods_fit(free, request) * usable, minlength=n_leaves)
    potential = free.copy()
    np.add.at(potential, pool.pod_nodes, pool.whole[pool.pod_owner])
    potential = np.minimum(potential, state.topology.gpu_count) * usable
    after = np.bincount(leaf, weights=pods_fit(potential, request), minlength=n_leaves)
    return now.astype(np.int64), after.astype(np.int64)


@st.composite
def cases(draw: st.DrawFn) -> tuple[ClusterState, CandidatePool, GangRequest]:
    topology = nvl72_cluster(
        zones=1,
        blocks_per_zone=draw(st.integers(1, 2)),
        racks_per_block=draw(st.integers(1, 3)),
        nodes_per_rack=draw(st.integers(1, 6)),
        gpus_per_node=4,
    )
    state = ClusterState(topology)
    n_nodes = topology.n_nodes
    holders: list[tuple[list[int], int]] = []
    for index in range(draw(st.integers(0, 3 * n_nodes))):
        node = draw(st.integers(0, n_nodes - 1))
        gpus = np.flatnonzero(state.gpu_free_milli[node] == MILLI_PER_GPU)
        width = draw(st.integers(1, 4))
        if gpus.size < width:
            continue
        state.allocate(f"job-{index}", Allocation.of([node], [gpus[:width].tolist()]))
        holders.append(([node], width))
    for node in draw(st.lists(st.integers(0, n_nodes - 1), max_size=3, unique=True)):
        state.set_health([node], draw(st.sampled_from([Health.CORDONED, Health.DOWN])))
    chosen = [h for h in holders if draw(st.booleans())]
    if not chosen or draw(st.booleans()):
        # One candidate of one pod: on larger fleets, few enough pods to be sorted.
        chosen = chosen[:1] or holders[:1] or [([0], 1)]
    sizes = np.array([len(nodes) for nodes, _ in chosen], dtype=np.int64)
    pool = CandidatePool(
        job_ids=[f"victim-{i}" for i in range(len(chosen))],
        rules=["reclaim-budget"] * len(chosen),
        lost=np.ones(len(chosen)),
        standing=np.zeros(len(chosen)),
        whole=np.array([width for _, width in chosen], dtype=np.int64),
        pod_starts=np.concatenate(([0], np.cumsum(sizes))).astype(np.int64),
        pod_nodes=np.concatenate([nodes for nodes, _ in chosen]).astype(np.int64),
    )
    kind = draw(st.sampled_from(["whole", "shared", "no-gpu"]))
    pods = draw(st.integers(1, 2 * n_nodes))
    if kind == "whole":
        request = simple_request(pods, gpus_per_pod=draw(st.sampled_from([1, 2, 3, 4])))
    elif kind == "shared":
        request = simple_request(pods, gpus_per_pod=1, gpu_milli=draw(st.sampled_from([250, 500])))
    else:
        request = simple_request(pods, gpus_per_pod=0, cpu_milli=1000)
    return state, pool, request


@settings(max_examples=200, deadline=None)
@given(cases())
def test_room_from_aggregates_equals_the_count_over_every_node(
    case: tuple[ClusterState, CandidatePool, GangRequest],
) -> None:
    state, pool, request = case
    counted = "over every node" if pool.pod_nodes.size * 16 >= state.topology.n_nodes else "sorted"
    event(f"candidates' nodes {counted}")
    search = VictimSearch(state, BestFit())
    now, after = search._room_now_and_after(request, pool, pool.pod_owner)
    expected_now, expected_after = room_over_every_node(state, search, request, pool)
    assert now.tolist() == expected_now.tolist()
    assert after.tolist() == expected_after.tolist()
