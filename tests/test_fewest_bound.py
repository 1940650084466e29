"""The bound docs/placement.md states where the fewest-domains table says best effort, against
the brute-force oracle on small clusters of three and four levels.

Where the table makes the count at level e the least (or, for the level just inside the
required one, at most the least placement's count there), every level i inside e uses at most
M(e, i) times the least count at i, M(e, i) the most level-i domains with room for a pod under
one level-e domain the placement uses. Each seeded case is placed with the amount plan switched
off (the plans over counts alone) and past every limit, under two policies; every placement the
table leaves to best effort at some level is checked there against the oracle's least profile
inside the required domain the search chose (and over every required domain where the docs say
the bound holds so), and the cases must reach every kind of it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from placement_helpers import assert_valid_placement
from test_placement_exact import (
    POLICIES,
    Regime,
    assert_within_the_bound,
    best_effort,
    bound_factor,
    profile_of,
    regime_in_force,
)
from test_placement_oracle import RandomCase, brute_force

from toposched.cluster.loaders import topology_from_dict
from toposched.cluster.state import ClusterState
from toposched.placement.request import simple_request
from toposched.placement.search import Placement, place

SEEDS = range(400)
FOUR_LEVELS = ("zone", "block", "row", "rack")
THREE_LEVELS = ("zone", "block", "rack")


def small_case(seed: int) -> RandomCase:
    """A cluster of at most 10 nodes of 1-3 GPUs (some taken) on three or four levels, every
    domain of 1-3 children, and a gang of 2-8 one-GPU pods (40-90% of the free GPUs, so that
    most span several domains) preferring an outer level (so that
    levels lie two or three inside it), sometimes with a required level above it and a slice
    layer between the two, or slices at the innermost level."""
    rng = np.random.default_rng(seed)
    levels = FOUR_LEVELS if rng.random() < 0.5 else THREE_LEVELS
    nodes: list[dict[str, Any]] = []
    allocations: list[dict[str, Any]] = []

    def grow(path: list[str]) -> None:
        depth = len(path)
        if depth == len(levels):
            for _ in range(int(rng.integers(1, 3))):
                if len(nodes) == 10:
                    return
                name = f"n{len(nodes)}"
                gpus = int(rng.choice([1, 2, 2, 3]))
                node = {"name": name, "gpus": gpus, "gpu_model": "A"}
                node.update(dict(zip(levels, path, strict=True)))
                nodes.append(node)
                taken = int(rng.integers(0, gpus)) if rng.random() < 0.3 else 0
                if taken:
                    allocations.append({"owner": f"old-{name}", "node": name, "gpus": [0]})
            return
        for child in range(int(rng.integers(1 if depth else 2, 4))):
            grow([*path, f"{path[-1] if path else ''}{levels[depth][0]}{child}"])

    grow([])
    free = sum(node["gpus"] for node in nodes) - len(allocations)
    preferred = int(rng.integers(0, len(levels) - 1))
    required = int(rng.integers(0, preferred + 1)) if preferred and rng.random() < 0.5 else None
    pods = max(2, min(8, int(free * rng.uniform(0.4, 0.9))))
    topology: dict[str, Any] = {"preferred": levels[preferred]}
    if required is not None and required < preferred:
        topology["required"] = levels[required]
    between = range(0 if required is None else required + 1, preferred)
    shape = rng.random()
    if shape < 0.8 and pods % 2 and pods % 3:
        pods -= 1  # a slice size divides it
    slice_size = next((size for size in (2, 3) if pods % size == 0), 0)
    if slice_size and between and shape < 0.6:
        topology["slices"] = [{"level": levels[int(rng.choice(list(between)))], "pods": slice_size}]
    elif slice_size and shape < 0.8:
        topology["slices"] = [{"level": levels[-1], "pods": slice_size}]
    job = {"name": "job", "pods": pods, "resources_per_pod": {"gpus": 1}, "topology": topology}
    cluster = {"levels": list(levels), "nodes": nodes}
    return RandomCase(cluster, job, tuple(allocations))


def test_best_effort_levels_within_the_bound_against_brute_force() -> None:
    """Every best-effort placement within the bound, at every best-effort level; and the cases
    reach it from L+1, from L and from above L (a slice layer between), on four levels too."""
    kinds: Counter[tuple[str, int]] = Counter()  # by where the bound starts, and levels
    for seed in SEEDS:
        case = small_case(seed)
        state, request, labels = case.build()
        assert request.preferred is not None
        overall = brute_force(state, request, labels, minimise=True).profile
        if overall is None:
            continue
        inside: dict[str, tuple[int, ...]] = {}
        for regime in (Regime.COUNTS, Regime.GREEDY):
            for policy in POLICIES:
                calls: list[bool] = []
                with regime_in_force(regime, calls):
                    result = place(state, request, policy)
                assert isinstance(result, Placement), f"seed {seed}: {result}"
                assert_valid_placement(state, request, result, labels)
                profile = profile_of(state, result, request.preferred)
                effort = best_effort(regime, calls, request, profile)
                if effort is None:
                    continue
                chosen = labels[request.required][int(result.allocation.nodes[0])]
                if chosen not in inside:
                    least = brute_force(state, request, labels, True, within=chosen).profile
                    assert least is not None
                    inside[chosen] = least
                where = f"seed {seed} {case.job['topology']}, {regime.value}, {policy.name}"
                assert_within_the_bound(state, result, effort, inside[chosen], where)
                if effort.over_every_required_domain(request, profile):
                    assert_within_the_bound(state, result, effort, overall, f"{where}, all")
                kinds[(effort.bounded_from(request.preferred), len(labels) - 1)] += 1
    print(f"best effort (from, levels): {dict(kinds)}")
    assert kinds[("L+1", 3)] >= 100 and kinds[("L+1", 4)] >= 200, kinds
    assert kinds[("L", 3)] >= 60 and kinds[("L", 4)] >= 30, kinds
    assert kinds[("above L", 3)] + kinds[("above L", 4)] >= 20, kinds


def test_the_bound_is_reached() -> None:
    """n one-GPU pods preferring zones, in one zone of two blocks: one of n one-GPU racks, one
    of a single rack of n GPUs. Either block holds the gang on one block, so the count plans
    tie them; past every limit the descent takes the first, n racks where 1 is the least: M,
    the racks with room in that block, times the least."""
    n = 6
    racks = [("a", f"a{i}", 1) for i in range(n)] + [("b", "b0", n)]
    nodes = [
        {"name": rack, "zone": "z", "block": block, "rack": rack, "gpus": gpus, "gpu_model": "A"}
        for block, rack, gpus in racks
    ]
    state = ClusterState(topology_from_dict({"levels": list(THREE_LEVELS), "nodes": nodes}))
    request = simple_request(n, 1, preferred=1)
    with regime_in_force(Regime.GREEDY, []):
        result = place(state, request)
    assert isinstance(result, Placement)
    profile = profile_of(state, result, 1)
    assert profile == (1, 1, n)
    assert bound_factor(state, result, 2, 3) * 1 == n  # least (1, 1, 1): the bound, met
    with regime_in_force(Regime.DEFAULT, []):
        result = place(state, request)
    assert isinstance(result, Placement) and profile_of(state, result, 1) == (1, 1, 1)
