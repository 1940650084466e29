"""The plan over three levels of counts (`placement/fewest_three.py`): its knapsack over
L-domains' two-level tables against enumeration, and its placements against brute force."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from placement_helpers import assert_valid_placement
from test_placement_oracle import (
    SETTINGS,
    RandomCase,
    brute_force,
    domains_used,
    policies,
    random_cases,
)

from toposched.placement import fewest
from toposched.placement.count_kernels import backtrack_of_tables, knapsack_of_tables
from toposched.placement.search import Placement, place


def monotone_table(rows: int, width: int, data: st.DataObject) -> np.ndarray:
    """Most pods on at most a children and b grandchildren: 0 without a child, never falling
    along either count."""
    steps = data.draw(
        st.lists(st.integers(0, 4), min_size=rows * width, max_size=rows * width), label="steps"
    )
    table = np.array(steps, dtype=np.int64).reshape(rows, width)
    table[0] = 0
    return np.maximum.accumulate(np.maximum.accumulate(table, axis=0), axis=1)


@settings(max_examples=200, deadline=None)
@given(
    domains=st.integers(1, 3),
    width=st.integers(1, 4),
    k=st.integers(1, 3),
    children=st.integers(0, 3),
    data=st.data(),
)
def test_knapsack_of_tables_matches_every_choice(
    domains: int, width: int, k: int, children: int, data: st.DataObject
) -> None:
    """For every (d, a, b): the most pods over every choice of at most d domains, each taking
    (a_i >= 1, b_i) with the a_i summing to at most a and the b_i to at most b; and the way back
    reaches it."""
    rows = [data.draw(st.integers(1, 3), label="rows") for _ in range(domains)]
    tables = [monotone_table(r, width, data) for r in rows]
    flat = np.concatenate([t.ravel() for t in tables])
    offsets = np.concatenate(([0], np.cumsum([t.size for t in tables]))).astype(np.int64)
    merged = knapsack_of_tables(flat, offsets, np.array(rows, dtype=np.int64), width, k, children)
    shares = [[(0, 0)] + [(a, b) for a in range(1, r) for b in range(width)] for r in rows]
    for d, a, b in itertools.product(range(k + 1), range(children + 1), range(width)):
        most = 0
        for choice in itertools.product(*shares):
            used = [share for share in choice if share[0]]
            if len(used) <= d and sum(s[0] for s in used) <= a and sum(s[1] for s in used) <= b:
                held = sum(int(t[s]) for t, s in zip(tables, choice, strict=True))
                most = max(most, held)
        assert merged[-1, d, a, b] == most, (d, a, b)
        taken = backtrack_of_tables(merged, flat, offsets, np.array(rows), d, a, b)
        held = sum(int(t[tuple(s)]) for t, s in zip(tables, taken.tolist(), strict=True))
        assert held == most and int((taken[:, 0] > 0).sum()) <= d
        assert int(taken[:, 0].sum()) <= a and int(taken[:, 1].sum()) <= b


@st.composite
def zones_of_blocks(draw: st.DrawFn) -> RandomCase:
    """2-4 zones of 1-2 blocks of 1-2 racks of 1-2 nodes (at most 12) of 1-2 free GPUs, and
    one-GPU pods for half to all of them, preferring zones, in rack slices of 2 or none: a
    gang across zones most often, whose zones, blocks and racks can each be chosen well or
    badly."""
    nodes: list[dict[str, object]] = []
    for z in range(draw(st.integers(2, 4))):
        for b in range(draw(st.integers(1, 2))):
            for r in range(draw(st.integers(1, 2))):
                for n in range(draw(st.integers(1, 2))):
                    if len(nodes) < 12:
                        name = f"n{z}{b}{r}{n}"
                        gpus = draw(st.integers(1, 2))
                        nodes.append(
                            {
                                "name": name,
                                "zone": f"z{z}",
                                "block": f"b{z}{b}",
                                "rack": f"r{z}{b}{r}",
                                "gpus": gpus,
                                "gpu_model": "A",
                            }
                        )
    cluster = {"levels": ["zone", "block", "rack"], "nodes": nodes}
    topology: dict[str, object] = {"preferred": "zone"}
    total = sum(int(str(node["gpus"])) for node in nodes)
    pods = draw(st.integers(max(2, total // 2), max(2, total)))
    if draw(st.booleans()):
        pods -= pods % 2
        topology["slices"] = [{"level": "rack", "pods": 2}]
    job = {"name": "job", "pods": pods, "resources_per_pod": {"gpus": 1}, "topology": topology}
    return RandomCase(cluster, job)


@SETTINGS
@given(
    case=st.one_of(
        zones_of_blocks(),
        zones_of_blocks(),
        random_cases(large_jobs=True, with_preferred=True, spanning=True),
    )
)
def test_several_preferred_domains_beyond_the_amount_plan_by_counts(case: RandomCase) -> None:
    """The amount plan off, the gang on two or more L-domains, the innermost level two inside
    L and no slice coarser than the innermost domains' below the required level: the least at
    every level, over every required domain."""
    state, request, labels = case.build()
    preferred = request.preferred
    assert preferred is not None
    leaf = len(labels) - 1
    if preferred <= request.required or preferred != leaf - 2:
        return
    if any(request.granule(lv) != request.granule(leaf) for lv in range(request.required, leaf)):
        return
    answer = brute_force(state, request, labels, minimise=True)
    if answer.profile is None or answer.profile[0] < 2:
        return
    event(f"least profile: {answer.profile}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fewest, "MAX_CELLS", 0)
        for policy in policies():
            result = place(state, request, policy)
            assert isinstance(result, Placement)
            assert_valid_placement(state, request, result, labels)
            profile = tuple(domains_used(result, labels, lv) for lv in range(preferred, leaf + 1))
            assert profile == answer.profile, f"{policy.name}: {profile} > {answer.profile}"
