"""`preferred: L` (inside the required level) when one domain at L holds the gang: of those,
one needing the fewest domains one level inside L, over every required domain
(docs/placement.md's table, first row)."""

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

from toposched.placement import domains
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
