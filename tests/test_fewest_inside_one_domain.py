"""`preferred: L` (inside the required level) when one domain at L holds the gang: of those,
one needing the fewest domains one level inside L, over every required domain; and, beyond
the amount plan, the count plan one level further in (docs/placement.md's table, first row)."""

from __future__ import annotations

import pytest
from hypothesis import event, example, given
from test_placement_oracle import (
    SETTINGS,
    RandomCase,
    brute_force,
    domains_used,
    policies,
    random_cases,
)

from toposched.placement import domains, fewest
from toposched.placement.search import Placement, place

# Two blocks hold the gang of 4 one-GPU pods: b0 (the fuller, best fit's favourite) on two
# racks of 2, b1 in one rack of 4.
FULLER_BLOCK_NEEDS_MORE_RACKS = RandomCase(
    cluster={
        "levels": ["block", "rack"],
        "nodes": [
            {"name": "n0", "block": "b0", "rack": "r0", "gpus": 2, "gpu_model": "A"},
            {"name": "n1", "block": "b0", "rack": "r1", "gpus": 2, "gpu_model": "A"},
            {"name": "n2", "block": "b1", "rack": "r2", "gpus": 4, "gpu_model": "A"},
            {"name": "n3", "block": "b1", "rack": "r3", "gpus": 4, "gpu_model": "A"},
        ],
    },
    job={
        "name": "job",
        "pods": 4,
        "resources_per_pod": {"gpus": 1},
        "topology": {"preferred": "block"},
    },
)


@SETTINGS
@example(case=FULLER_BLOCK_NEEDS_MORE_RACKS)
@given(case=random_cases(large_jobs=True, with_preferred=True))
def test_one_preferred_domain_then_fewest_inside(case: RandomCase) -> None:
    """One L-domain holds the gang: one is used, and the fewest domains one level inside L."""
    state, request, labels = case.build()
    preferred = request.preferred
    assert preferred is not None
    if preferred <= request.required:
        return  # preferred at the required level: one domain there, the descent inside it
    answer = brute_force(state, request, labels, minimise=True)
    if answer.profile is None or answer.profile[0] != 1 or len(answer.profile) < 2:
        return
    event(f"least profile: {answer.profile}")
    # Children counted by capacity, or (with no cells for counting) sorted.
    for cells in (domains._COUNTED_CELLS, 0):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(domains, "_COUNTED_CELLS", cells)
            for policy in policies():
                result = place(state, request, policy)
                assert isinstance(result, Placement)
                levels = (preferred, preferred + 1)
                profile = tuple(domains_used(result, labels, lv) for lv in levels)
                assert profile == answer.profile[:2], f"{policy.name}: {profile} > {answer.profile}"


@SETTINGS
@given(case=random_cases(large_jobs=True, with_preferred=True))
def test_one_preferred_domain_beyond_the_amount_plan_by_counts(case: RandomCase) -> None:
    """The amount plan off, one L-domain holding the gang, and the innermost level two inside
    L: the least at every level, inside the required domain chosen (the fewest L+1 domains
    over every one), from the count plan over L+1 domains and innermost ones."""
    state, request, labels = case.build()
    preferred = request.preferred
    assert preferred is not None
    leaf = len(labels) - 1
    if preferred <= request.required or preferred != leaf - 2:
        return
    answer = brute_force(state, request, labels, minimise=True)
    if answer.profile is None or answer.profile[0] != 1:
        return
    event(f"least profile: {answer.profile}")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fewest, "MAX_CELLS", 0)
        for policy in policies():
            result = place(state, request, policy)
            assert isinstance(result, Placement)
            profile = tuple(domains_used(result, labels, lv) for lv in range(preferred, leaf + 1))
            within = labels[request.required][int(result.allocation.nodes[0])]
            least = brute_force(state, request, labels, minimise=True, within=within).profile
            assert profile[:2] == answer.profile[:2], f"{policy.name}: {profile}"
            assert profile == least, f"{policy.name}: {profile} > {least}"
