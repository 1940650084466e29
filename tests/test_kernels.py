"""The compiled loops against plain-Python counts on random node arrays."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.cluster import kernels
from toposched.scheduler import preemptible_kernels, victim_kernels


@st.composite
def domains_of_nodes(draw: st.DrawFn) -> dict[str, np.ndarray | int]:
    sizes = draw(st.lists(st.integers(0, 6), min_size=1, max_size=6))
    n_nodes = sum(sizes)
    node = st.lists(st.integers(0, 8), min_size=n_nodes, max_size=n_nodes)
    gpu_count = np.array(draw(node), dtype=np.int8)
    free = np.array([draw(st.integers(0, int(c))) for c in gpu_count], dtype=np.int8)
    n_models = draw(st.integers(1, 3))
    return {
        "starts": np.concatenate(([0], np.cumsum(sizes))).astype(np.int64),
        "free": free,
        "extra": np.array(draw(node), dtype=np.int64),
        "gpu_count": gpu_count,
        "health": np.array(
            draw(st.lists(st.sampled_from([0, 0, 1, 2]), min_size=n_nodes, max_size=n_nodes)),
            dtype=np.uint8,
        ),
        "model": np.array(
            draw(st.lists(st.integers(0, n_models - 1), min_size=n_nodes, max_size=n_nodes)),
            dtype=np.int16,
        ),
        "allowed": np.array(
            draw(st.lists(st.booleans(), min_size=n_models, max_size=n_models)), dtype=np.bool_
        ),
        "gpus_per_pod": draw(st.integers(1, 8)),
    }


@settings(max_examples=200, deadline=None)
@given(case=domains_of_nodes(), data=st.data())
def test_pods_in_domains_counts_healthy_allowed_nodes_capped_at_their_gpus(
    case: dict[str, np.ndarray | int], data: st.DataObject
) -> None:
    starts = np.asarray(case["starts"])
    n_domains = starts.size - 1
    domains = np.array(
        data.draw(st.lists(st.integers(0, n_domains - 1), max_size=2 * n_domains)),
        dtype=np.int64,
    )
    per_pod = int(case["gpus_per_pod"])  # type: ignore[arg-type]
    free, extra = np.asarray(case["free"]), np.asarray(case["extra"])
    count, health = np.asarray(case["gpu_count"]), np.asarray(case["health"])
    model, allowed = np.asarray(case["model"]), np.asarray(case["allowed"])
    expected = [
        sum(
            min(int(free[node]) + int(extra[node]), int(count[node])) // per_pod
            for node in range(int(starts[domain]), int(starts[domain + 1]))
            if health[node] == 0 and allowed[model[node]]
        )
        for domain in domains.tolist()
    ]
    pods = victim_kernels.pods_in_domains(
        domains, starts, free, extra, count, health, model, allowed, per_pod
    )
    assert pods.tolist() == expected


@st.composite
def candidates_on_domains(draw: st.DrawFn) -> dict[str, Any]:
    case = draw(domains_of_nodes())
    starts = np.asarray(case["starts"])
    n_nodes = int(starts[-1])
    leaf_of_node = np.repeat(np.arange(starts.size - 1), np.diff(starts)).astype(np.int64)
    holdings = (
        draw(st.lists(st.lists(st.integers(0, n_nodes - 1), max_size=4), max_size=5))
        if n_nodes
        else []
    )
    case["leaf_of_node"] = leaf_of_node
    case["pod_starts"] = np.concatenate(([0], np.cumsum([len(h) for h in holdings]))).astype(
        np.int64
    )
    case["pod_nodes"] = np.array([n for h in holdings for n in h], dtype=np.int64)
    case["whole"] = np.array([draw(st.integers(1, 4)) for _ in holdings], dtype=np.int64)
    case["lost"] = np.array(
        [draw(st.floats(0, 100, allow_nan=False)) for _ in holdings], dtype=np.float64
    )
    case["gpu_needed"] = draw(st.integers(0, 40))
    return case


@settings(max_examples=200, deadline=None)
@given(case=candidates_on_domains())
def test_domains_opened_by_matches_plain_counts_and_the_fractional_knapsack(
    case: dict[str, Any],
) -> None:
    per_pod = int(case["gpus_per_pod"])
    starts, leaf_of_node = case["starts"], case["leaf_of_node"]
    pod_starts, pod_nodes, whole, lost = (
        case["pod_starts"],
        case["pod_nodes"],
        case["whole"],
        case["lost"],
    )
    free, count, health = case["free"], case["gpu_count"], case["health"]
    model, allowed = case["model"], case["allowed"]
    leaves, room, bound, lower, pair_leaf, pair_owner = victim_kernels.domains_opened_by(
        pod_starts,
        pod_nodes,
        whole,
        lost,
        leaf_of_node,
        starts,
        free,
        count,
        health,
        model,
        allowed,
        1,
        per_pod,
        0,
        case["gpu_needed"],
        True,
    )
    # The candidates on each domain, and the GPUs each frees there.
    freed_in: dict[int, dict[int, int]] = {}
    freed_on = [0] * int(starts[-1])
    for candidate in range(pod_starts.size - 1):
        for node in pod_nodes[pod_starts[candidate] : pod_starts[candidate + 1]].tolist():
            leaf = int(leaf_of_node[node])
            held = freed_in.setdefault(leaf, {})
            held[candidate] = held.get(candidate, 0) + int(whole[candidate])
            freed_on[node] += int(whole[candidate])
    assert leaves.tolist() == sorted(freed_in)
    for position, leaf in enumerate(leaves.tolist()):
        usable = [
            node
            for node in range(int(starts[leaf]), int(starts[leaf + 1]))
            if health[node] == 0 and allowed[model[node]]
        ]
        expected_room = sum(
            min(int(free[node]) + freed_on[node], int(count[node])) // per_pod for node in usable
        )
        assert room[position] == expected_room
        members = sorted(freed_in[leaf])
        assert pair_owner[pair_leaf == position].tolist() == members
        assert bound[position] == pytest.approx(sum(float(lost[c]) for c in members))
        # Fractional knapsack: cheapest lost work per GPU first, the last one in part.
        lacking = case["gpu_needed"] - sum(int(free[node]) for node in usable)
        expected_lower = 0.0
        for candidate in sorted(members, key=lambda c: lost[c] / freed_in[leaf][c]):
            taken = min(max(lacking, 0), freed_in[leaf][candidate])
            expected_lower += taken * float(lost[candidate]) / freed_in[leaf][candidate]
            lacking -= freed_in[leaf][candidate]
        assert lower[position] == pytest.approx(expected_lower)


@settings(max_examples=200, deadline=None)
@given(
    milli=st.lists(st.sampled_from([0, 250, 1000, 1000, 1000]), min_size=1, max_size=24),
    picks=st.lists(st.integers(0, 23), max_size=30),
)
def test_whole_gpus_distinct_and_free_matches_a_set_and_leaves_the_array_as_it_was(
    milli: list[int], picks: list[int]
) -> None:
    flat = np.array(milli, dtype=np.int16)
    slots = np.array([p % flat.size for p in picks], dtype=np.int64)
    before = flat.copy()
    expected = len(set(slots.tolist())) == slots.size and all(
        milli[s] == 1000 for s in slots.tolist()
    )
    assert kernels.whole_gpus_distinct_and_free(flat, slots, 1000) == expected
    assert np.array_equal(flat, before)


@settings(max_examples=200, deadline=None)
@given(
    free=st.lists(st.integers(0, 40), min_size=1, max_size=12),
    pods=st.lists(st.integers(0, 11), max_size=30),
    per_pod=st.integers(1, 16),
)
def test_per_pod_requests_fit_matches_per_node_sums_and_leaves_the_array_as_it_was(
    free: list[int], pods: list[int], per_pod: int
) -> None:
    array = np.array(free, dtype=np.int64)
    nodes = np.array([p % array.size for p in pods], dtype=np.int64)
    asked = np.bincount(nodes, minlength=array.size) * per_pod
    assert kernels.per_pod_requests_fit(array, nodes, per_pod) == bool((asked <= array).all())
    assert array.tolist() == free


@settings(max_examples=100, deadline=None)
@given(data=st.data(), jobs=st.integers(1, 6), sign=st.sampled_from([-1, 1]))
def test_count_jobs_matches_plain_counts_of_each_job_in_turn(
    data: st.DataObject, jobs: int, sign: int
) -> None:
    n_nodes, n_leaves = 12, 4
    leaf_of_node = np.repeat(np.arange(n_leaves), 3).astype(np.int64)
    pods = np.array(
        data.draw(st.lists(st.integers(0, 5), min_size=jobs, max_size=jobs)), dtype=np.int64
    )
    total = int(pods.sum())
    pod_nodes = np.array(
        data.draw(st.lists(st.integers(0, n_nodes - 1), min_size=total, max_size=total)),
        dtype=np.int64,
    )
    whole = sign * np.array(data.draw(st.lists(st.integers(1, 4), min_size=jobs, max_size=jobs)))
    unallocated = np.array(data.draw(st.lists(st.booleans(), min_size=jobs, max_size=jobs)))
    gpus = st.floats(0.25, 64.0, allow_nan=False)
    weight = sign * np.array(data.draw(st.lists(gpus, min_size=jobs, max_size=jobs)))
    since = np.array(data.draw(st.lists(st.floats(0, 1e6), min_size=jobs, max_size=jobs)))
    pair = np.array(data.draw(st.lists(st.integers(0, 2), min_size=jobs, max_size=jobs)))
    # Sums that already hold thirds, so that the order of the float additions shows.
    leaf_freeable = np.full(n_leaves, 7, dtype=np.int64)
    node_freeable = np.full(n_nodes, 7, dtype=np.int32)
    leaf_weight = np.full(n_leaves, 1.0 / 3.0)
    leaf_weighted_since = np.full(n_leaves, 1e5 / 3.0)
    expected: list[list[Any]] = [
        array.tolist()
        for array in (
            leaf_freeable,
            node_freeable,
            leaf_freeable,
            node_freeable,
            leaf_weight,
            leaf_weighted_since,
            np.zeros(3, dtype=np.int64),
        )
    ]
    starts = np.concatenate(([0], np.cumsum(pods)))
    for job in range(jobs):
        nodes = pod_nodes[starts[job] : starts[job + 1]].tolist()
        for node in nodes:
            leaf = int(leaf_of_node[node])
            for target, index in ((0, leaf), (1, node)) + (
                ((2, leaf), (3, node)) if unallocated[job] else ()
            ):
                expected[target][index] += int(whole[job])
        for leaf in {int(leaf_of_node[node]) for node in nodes}:
            expected[4][leaf] += float(weight[job])
            expected[5][leaf] += float(weight[job]) * float(since[job])
        if not unallocated[job]:
            expected[6][pair[job]] += sign
    counted: list[np.ndarray] = [
        leaf_freeable.copy(),
        node_freeable.copy(),
        leaf_freeable.copy(),
        node_freeable.copy(),
        leaf_weight.copy(),
        leaf_weighted_since.copy(),
        np.zeros(3, dtype=np.int64),
    ]
    seen = np.zeros(n_leaves, dtype=bool)
    preemptible_kernels.count_jobs(
        pod_nodes, pods, whole, unallocated, weight, since, pair, sign, leaf_of_node, *counted, seen
    )
    assert [array.tolist() for array in counted] == expected
    assert not seen.any()


@settings(max_examples=100, deadline=None)
@given(data=st.data(), width=st.integers(1, 4))
def test_set_owner_marks_each_pods_gpus(data: st.DataObject, width: int) -> None:
    owner = np.full((6, 4), -1, dtype=np.int32)
    nodes = np.array(data.draw(st.lists(st.integers(0, 5), max_size=6)), dtype=np.int64)
    gpus = np.array(
        [data.draw(st.permutations(range(4)))[:width] for _ in range(nodes.size)], dtype=np.int64
    ).reshape(nodes.size, width)
    expected = owner.copy()
    for node, row in zip(nodes.tolist(), gpus.tolist(), strict=True):
        expected[node, row] = 7
    preemptible_kernels.set_owner(owner, nodes, gpus, 7)
    assert np.array_equal(owner, expected)
