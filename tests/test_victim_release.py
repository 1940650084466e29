"""A what-if of many candidates evicted, read through the running jobs' index (who holds each
whole GPU), leaves the state exactly as freeing their allocations one by one does: every node
array and every aggregate, on random clusters with closed nodes, CPU and memory requests,
shared GPUs and GPU-less pods."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

from toposched.cluster.errors import InputError
from toposched.cluster.loaders import topology_from_dict
from toposched.cluster.state import Allocation, ClusterState, Health
from toposched.cluster.statement import trial
from toposched.scheduler import victim_release
from toposched.scheduler.candidates import CandidatePool
from toposched.scheduler.preemptible import PreemptibleIndex

KINDS = ("whole", "whole with CPU and memory", "shared", "no GPU")


def cluster(draw: st.DrawFn) -> ClusterState:
    racks, per_rack = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    nodes = [
        {"name": f"n{i}", "rack": f"r{i // per_rack}", "gpus": 4, "gpu_model": "X"}
        | {"cpu": 16, "memory": "64Gi"}
        for i in range(racks * per_rack)
    ]
    return ClusterState(topology_from_dict({"levels": ["rack"], "nodes": nodes}))


def allocation(draw: st.DrawFn, state: ClusterState, kind: str) -> Allocation:
    n_nodes = state.topology.n_nodes
    pods = draw(st.integers(1, 3))
    nodes = [draw(st.integers(0, n_nodes - 1)) for _ in range(pods)]
    if kind == "no GPU":
        return Allocation.of(nodes, [[] for _ in nodes], cpu_milli=1000, memory_mib=256)
    width = 1 if kind == "shared" else draw(st.integers(1, 2))
    gpus = [draw(st.lists(st.integers(0, 3), min_size=width, max_size=width, unique=True))]
    requests = {"cpu_milli": 500, "memory_mib": 128} if kind.endswith("memory") else {}
    milli = 250 if kind == "shared" else 1000
    return Allocation.of(nodes, gpus * pods, gpu_milli=milli, **requests)


@st.composite
def cases(draw: st.DrawFn) -> tuple[ClusterState, PreemptibleIndex, CandidatePool, np.ndarray]:
    state = cluster(draw)
    index = PreemptibleIndex(state)
    for number in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(KINDS))
        held = allocation(draw, state, kind)
        try:
            state.allocate(f"job-{number}", held)
        except InputError:
            continue  # the GPUs drawn are taken, or a node has the same GPU twice
        gpus = held.gpus.size * held.gpu_milli / 1000
        index.add(f"job-{number}", held, gpus, 0.0, 0.0, True, "team", 0)
    for node in draw(st.lists(st.integers(0, state.topology.n_nodes - 1), max_size=2)):
        state.set_health([node], Health.CORDONED)
    job_ids = list(state.allocations)
    slots = np.array([index.slot_of[job] for job in job_ids], dtype=np.int64)
    counts = np.array([state.allocations[job].pods for job in job_ids], dtype=np.int64)
    pool = CandidatePool(
        job_ids=job_ids,
        rules=["unallocated"] * len(job_ids),
        lost=np.zeros(len(job_ids)),
        standing=np.zeros(len(job_ids)),
        whole=index.whole[slots],
        pod_starts=np.concatenate(([0], counts.cumsum())).astype(np.int64),
        pod_nodes=np.concatenate(
            [state.allocations[job].nodes for job in job_ids] or [np.zeros(0, dtype=np.int64)]
        ),
        index=index,
        slots=slots,
    )
    rows = np.flatnonzero([draw(st.booleans()) for _ in job_ids]).astype(np.int64)
    return state, index, pool, rows


@settings(max_examples=300, deadline=None)
@given(cases())
def test_freeing_through_the_owners_equals_freeing_the_allocations(
    case: tuple[ClusterState, PreemptibleIndex, CandidatePool, np.ndarray],
) -> None:
    state, index, pool, rows = case
    shared = (index.gpus[pool.slots] != index.whole[pool.slots] * index.pods[pool.slots])[rows]
    event("a candidate holds shared GPUs or none" if shared.any() else "whole GPUs only")
    with trial(state) as what_if, patch.object(victim_release, "COLUMNS_FROM", 0):
        victim_release.free_candidates(what_if, state, pool, rows)
        through_owners = state.snapshot()
    with trial(state) as what_if:
        what_if.free_parts([state.allocations[pool.job_ids[row]] for row in rows.tolist()])
        allocation_by_allocation = state.snapshot()
    for name, array in allocation_by_allocation.items():
        assert np.array_equal(through_owners[name], array), name
    fresh = state.compute_aggregates()
    assert np.array_equal(fresh["free_gpus"][-1], state.free_gpus[-1])
