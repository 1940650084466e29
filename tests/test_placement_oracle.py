"""Property tests: the placement engine against a brute-force oracle on small random clusters."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from placement_helpers import (
    allocate_pod,
    assert_state_unchanged,
    assert_valid_placement,
    constraint_violations,
    pod_capacity,
    set_health,
    state_arrays,
)

from toposched.cluster.loaders import topology_from_dict
from toposched.cluster.state import ClusterState
from toposched.jobs.spec import JobSpec
from toposched.placement import fewest, fewest_counts
from toposched.placement.fewest import FewestDomains
from toposched.placement.policies import BestFit, PlacementPolicy, RandomFit, Spread
from toposched.placement.request import GangRequest
from toposched.placement.search import Placement, Unschedulable, place

LEVEL_NAMES = ("zone", "block", "rack")
MODELS = ("A", "B")
SHARES = (100, 250, 300, 500, 600, 750, 900)
GPU_STATES = ("free", "free", "used", "shared")
HEALTH = ("healthy",) * 5 + ("draining", "cordoned", "down")
# Examples per property: the default keeps the file well under a minute; raise it to hunt.
EXAMPLES = int(os.environ.get("TOPOSCHED_ORACLE_EXAMPLES", "250"))
SETTINGS = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def policies() -> list[PlacementPolicy]:
    return [BestFit(), Spread(), RandomFit(seed=7)]


# --- random clusters and jobs ---------------------------------------------------------------------


@dataclass(frozen=True)
class RandomCase:
    """A cluster description, its pre-existing pods and node health, and one job (as data)."""

    cluster: dict[str, Any]
    job: dict[str, Any]
    allocations: tuple[dict[str, Any], ...] = ()
    health: dict[str, str] = field(default_factory=dict)

    def build(self) -> tuple[ClusterState, GangRequest, list[list[str]]]:
        """The state, the resolved request, and each node's domain name per domain level.

        The labels come from the description itself, not the topology's arrays, so that the
        checks and the oracle do not lean on the code they test.
        """
        state = ClusterState(topology_from_dict(self.cluster))
        for entry in self.allocations:
            allocate_pod(state, entry)
        set_health(state, self.health)
        topology = state.topology
        request = GangRequest.from_spec(JobSpec.from_dict(self.job), topology)
        labels: list[list[str]] = [["cluster"] * topology.n_nodes]
        by_name = {node["name"]: node for node in self.cluster["nodes"]}
        for level in self.cluster["levels"]:
            labels.append([str(by_name[name][level]) for name in topology.node_names])
        return state, request, labels


def slice_sizes(group: int) -> list[int]:
    """Sizes that divide `group`, proper divisors first: a slice of 1 pod constrains nothing."""
    proper = [d for d in range(group - 1, 1, -1) if group % d == 0]
    return [*proper, group, 1] if group > 1 else [1]


@st.composite
def random_cases(
    draw: st.DrawFn,
    large_jobs: bool = False,
    with_preferred: bool = False,
    spanning: bool = False,
    sliced_above: bool = False,
) -> RandomCase:
    """A cluster of <= 12 nodes in 1-3 levels, partly used and partly unhealthy, and a job.

    `large_jobs` asks for 3-6 pods of 1-2 GPUs (or a share) with little CPU and memory, on
    nodes of 1, 2 or 4 mostly free GPUs in smaller domains, so that gangs often span domains.
    `with_preferred` always sets a preferred level (and never `required: node`). `spanning`
    (with `large_jobs`) keeps 2-3 levels and nodes of 1-2 GPUs, so that a gang most often
    needs several domains at every level. `sliced_above` (with `spanning`) gives the job a
    slice layer between its required level and its preferred one, the innermost.
    """
    levels = LEVEL_NAMES[3 - draw(st.integers(2 if spanning else 1, 3)) :]
    n_nodes = draw(st.integers(6 if spanning else 4 if large_jobs else 1, 12))
    models = MODELS[: draw(st.integers(1, 2))]
    # Domain boundaries nest: every level's cut points include those of the level above it.
    # Large jobs get a cut at each gap between nodes with even odds, so domains are small.
    gaps = range(1, n_nodes)
    cuts: set[int] = set()
    level_cuts: list[set[int]] = []
    for _ in levels:
        if large_jobs:
            flags = draw(st.lists(st.booleans(), min_size=len(gaps), max_size=len(gaps)))
            cuts |= {gap for gap, cut in zip(gaps, flags, strict=True) if cut}
        elif gaps:
            cuts |= draw(st.sets(st.sampled_from(gaps), max_size=3))
        level_cuts.append(set(cuts))
    nodes: list[dict[str, Any]] = []
    allocations: list[dict[str, Any]] = []
    health: dict[str, str] = {}
    for index in range(n_nodes):
        name = f"n{index}"
        sizes = [1, 2] if spanning else [1, 2, 4]
        gpus = draw(st.sampled_from(sizes) if large_jobs else st.integers(1, 8))
        cpu = draw(st.sampled_from([4, 8, 16, 32]))
        memory_gib = draw(st.sampled_from([16, 64, 256]))
        node: dict[str, Any] = {
            "name": name,
            "gpus": gpus,
            "gpu_model": draw(st.sampled_from(models)),
            "cpu": cpu,
            "memory": f"{memory_gib}Gi",
        }
        for level, level_cut in zip(levels, level_cuts, strict=True):
            node[level] = f"{level[0]}{sum(1 for cut in level_cut if cut <= index)}"
        nodes.append(node)
        # Each GPU is free (half the time, more for large jobs), used, or shared with another pod.
        gpu_states = draw(
            st.lists(
                st.sampled_from(("free", *GPU_STATES) if large_jobs else GPU_STATES),
                min_size=gpus,
                max_size=gpus,
            )
        )
        whole = [gpu for gpu, use in enumerate(gpu_states) if use == "used"]
        cpu_used = draw(st.integers(0, cpu))
        memory_used = draw(st.integers(0, memory_gib))
        if whole or cpu_used or memory_used:
            allocations.append(
                {
                    "owner": f"old-{name}",
                    "node": name,
                    "gpus": whole,
                    "cpu": cpu_used,
                    "memory": f"{memory_used}Gi",
                }
            )
        for gpu, use in enumerate(gpu_states):
            if use == "shared":
                allocations.append(
                    {
                        "owner": f"share-{name}-{gpu}",
                        "node": name,
                        "gpus": [gpu],
                        "gpu_milli": draw(st.sampled_from(SHARES)),
                    }
                )
        condition = draw(st.sampled_from(HEALTH + ("healthy",) * 5 if large_jobs else HEALTH))
        if condition != "healthy":
            health[name] = condition
    cluster = {"levels": list(levels), "nodes": nodes}
    present = sorted({node["gpu_model"] for node in nodes})  # a job may only name these
    if sliced_above:
        job = draw(jobs_sliced_above(levels, present))
    else:
        job = draw(jobs(levels, present, large_jobs, with_preferred, spanning))
    return RandomCase(cluster, job, tuple(allocations), health)


@st.composite
def jobs(
    draw: st.DrawFn,
    levels: Sequence[str],
    models: Sequence[str],
    large_jobs: bool,
    with_preferred: bool,
    spanning: bool = False,
) -> dict[str, Any]:
    """A JobSpec dict with 1-6 pods of 0-4 GPUs or a share, and optional topology constraints."""
    # Hypothesis draws the first options of a list most often: larger gangs go first.
    pods = draw(st.sampled_from([4, 6, 3, 5] if large_jobs else [4, 6, 2, 3, 5, 1]))
    resources: dict[str, Any] = {}
    if draw(st.sampled_from(["whole", "share"])) == "whole":
        resources["gpus"] = draw(st.sampled_from([1, 1, 2]) if large_jobs else st.integers(0, 4))
    else:
        resources["gpu_milli"] = draw(st.sampled_from(SHARES[3:] if large_jobs else SHARES))
    if large_jobs:
        resources["cpu"] = draw(st.sampled_from([0, 0, 0, 1, 2]))
        resources["memory"] = draw(st.sampled_from(["0", "0", "0", "4Gi"]))
    else:
        resources["cpu"] = draw(st.sampled_from([0, 0, 1, 2, 4, 8]))
        resources["memory"] = draw(st.sampled_from(["0", "0", "8Gi", "32Gi"]))
    if resources.get("gpus") == 0 and not resources["cpu"] and resources["memory"] == "0":
        resources["cpu"] = 1  # a pod must ask for something
    if draw(st.sampled_from([False, False, True] if large_jobs else [False, True])):
        resources["gpu_models"] = draw(
            st.lists(st.sampled_from(list(models)), min_size=1, max_size=2, unique=True)
        )
    topology: dict[str, Any] = {}
    required = draw(st.sampled_from([None, *levels] + ([] if with_preferred else ["node"])))
    if required == "node":
        topology["required"] = "node"
    else:
        depth = 0 if required is None else levels.index(required) + 1
        if required is not None:
            topology["required"] = required
        # Preferred is the required level or inside it; slices lie strictly inside required.
        options = list(levels[max(depth - 1, 0) :])
        if spanning:
            options.reverse()  # inner levels first, so that slices often lie above preferred
        preferred = draw(st.sampled_from(options if with_preferred else [None, *options]))
        if preferred is not None:
            topology["preferred"] = preferred
        inner = list(levels[depth:])
        layers = min(draw(st.sampled_from([1, 2, 0])), len(inner))
        chosen = sorted(draw(st.permutations(inner))[:layers], key=levels.index)
        slices, group = [], pods
        for level in chosen:
            group = draw(st.sampled_from(slice_sizes(group)))
            slices.append({"level": level, "pods": group})
        if slices:
            topology["slices"] = slices
    return {"name": "job", "pods": pods, "resources_per_pod": resources, "topology": topology}


@st.composite
def jobs_sliced_above(
    draw: st.DrawFn, levels: Sequence[str], models: Sequence[str]
) -> dict[str, Any]:
    """A large job preferring the innermost level, with slices at one or two levels above it
    (inside the required one), and sometimes finer slices at the preferred level itself."""
    job = draw(jobs(levels, models, large_jobs=True, with_preferred=True, spanning=True))
    required = draw(st.sampled_from([None, levels[0]])) if len(levels) == 3 else None
    between = list(levels[0 if required is None else 1 : -1])
    layers = draw(st.sampled_from([[between[-1]], between] if len(between) > 1 else [between]))
    slices, group = [], job["pods"]
    for index, level in enumerate(layers):
        # The innermost layer above L must be coarser than L's granule (1 or a finer slice).
        sizes = [size for size in slice_sizes(group) if size > 1]
        if index < len(layers) - 1:
            sizes = [size for size in sizes if size < group] or sizes
        group = draw(st.sampled_from(sizes))
        slices.append({"level": level, "pods": group})
    finer = [size for size in slice_sizes(group) if 1 < size < group]
    add_finer: bool = draw(st.booleans())
    if finer and add_finer:
        slices.append({"level": levels[-1], "pods": draw(st.sampled_from(finer))})
    topology: dict[str, Any] = {"preferred": levels[-1], "slices": slices}
    if required is not None:
        topology["required"] = required
    return {**job, "topology": topology}


# --- the oracle -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class OracleAnswer:
    """A placement if any exists (pod -> node) and, over all placements, the fewest domains used.

    `profile` is the lexicographically least tuple of domains used at the preferred level and
    at every level inside it; `fewest_preferred` its first entry.
    """

    witness: list[int] | None
    profile: tuple[int, ...] | None = None

    @property
    def fewest_preferred(self) -> int | None:
        return None if self.profile is None else self.profile[0]


def count_vectors(capacity: Sequence[int], pods: int) -> Iterator[list[int]]:
    """Every way to put `pods` identical pods on nodes with these capacities (pods per node).

    Exhaustive; a branch stops only when the nodes left cannot hold the pods left.
    """
    room_after = [0] * (len(capacity) + 1)
    for i in range(len(capacity) - 1, -1, -1):
        room_after[i] = room_after[i + 1] + capacity[i]
    counts = [0] * len(capacity)

    def visit(i: int, left: int) -> Iterator[list[int]]:
        if left == 0:
            yield counts
            return
        if room_after[i] < left:
            return
        for take in range(min(capacity[i], left), -1, -1):
            counts[i] = take
            yield from visit(i + 1, left - take)
        counts[i] = 0

    yield from visit(0, pods)


def brute_force(
    state: ClusterState,
    request: GangRequest,
    labels: list[list[str]],
    minimise: bool,
    within: str | None = None,
) -> OracleAnswer:
    """Search every assignment of pods to nodes (up to the order of identical pods).

    `within` names one domain of the required level to search alone (default: all of them).

    Pods are identical, so an assignment is a count per node. Slices then hold for some pod
    order exactly when every domain of each slice level holds a multiple of its slice size:
    listing pods in depth-first node order puts every domain's pods together, and sizes nest,
    so each group of consecutive pods falls within one domain at every slice level.
    """
    n_nodes = state.topology.n_nodes
    capacity = [pod_capacity(state, request, node) for node in range(n_nodes)]
    if request.on_one_node:
        scopes = [[node] for node in range(n_nodes)]
    else:
        by_domain: dict[str, list[int]] = {}
        for node in range(n_nodes):
            by_domain.setdefault(labels[request.required][node], []).append(node)
        scopes = [nodes for name, nodes in by_domain.items() if within in (None, name)]
    ranked_levels = range(request.preferred or 0, len(labels)) if minimise else range(0)
    witness: list[int] | None = None
    best: tuple[int, ...] | None = None
    for scope in scopes:
        for counts in count_vectors([capacity[node] for node in scope], request.pods):
            if not all(
                _multiples(scope, counts, labels[level], size) for level, size in request.slices
            ):
                continue
            if witness is None:
                witness = [
                    node for node, count in zip(scope, counts, strict=True) for _ in range(count)
                ]
                if not minimise:
                    return OracleAnswer(witness)
            used = [node for node, count in zip(scope, counts, strict=True) if count]
            profile = tuple(len({labels[level][node] for node in used}) for level in ranked_levels)
            if best is None or profile < best:
                best = profile
    return OracleAnswer(witness, best)


def _multiples(
    scope: Sequence[int], counts: Sequence[int], domain_of: Sequence[str], size: int
) -> bool:
    per_domain: dict[str, int] = {}
    for node, count in zip(scope, counts, strict=True):
        per_domain[domain_of[node]] = per_domain.get(domain_of[node], 0) + count
    return all(total % size == 0 for total in per_domain.values())


def expected_code(state: ClusterState, request: GangRequest, labels: list[list[str]]) -> str:
    """The Unschedulable code that names the first constraint without room."""
    if request.on_one_node:
        return "node"
    total = sum(pod_capacity(state, request, node) for node in range(state.topology.n_nodes))
    if total < request.pods:
        return "capacity"
    if brute_force(state, replace(request, required=0), labels, minimise=False).witness is None:
        return "slices"
    return "required"


def domains_used(placement: Placement, labels: list[list[str]], level: int) -> int:
    return len({labels[level][node] for node in placement.allocation.nodes.tolist()})


# Small jobs on clusters of larger nodes, and larger gangs that span small domains.
ANY_CASE = st.one_of(random_cases(), random_cases(large_jobs=True))


# --- properties -----------------------------------------------------------------------------------


@SETTINGS
@given(case=ANY_CASE)
def test_placements_keep_every_constraint(case: RandomCase) -> None:
    """(a) Whatever the policy, a placement keeps required, slices, models, health and room."""
    state, request, labels = case.build()
    for policy in policies():
        before = state_arrays(state)
        result = place(state, request, policy)
        assert_state_unchanged(before, state)
        if isinstance(result, Placement):
            assert_valid_placement(state, request, result, labels)


@SETTINGS
@given(case=ANY_CASE)
def test_engine_places_whenever_oracle_does(case: RandomCase) -> None:
    """(b) If any placement exists the engine finds one, under every policy.

    The oracle's witness is itself checked, and an engine placement (valid by (a)) must be one
    the oracle also finds, so the two searches agree in both directions.
    """
    state, request, labels = case.build()
    answer = brute_force(state, request, labels, minimise=False)
    event("a placement exists" if answer.witness is not None else "no placement exists")
    if answer.witness is not None:
        assert not constraint_violations(state, request, answer.witness, labels)
    for policy in policies():
        result = place(state, request, policy)
        if answer.witness is None:
            assert isinstance(result, Unschedulable), "engine placed a job the oracle cannot"
        else:
            assert isinstance(result, Placement), f"oracle found {answer.witness}; {result}"


# --- unschedulable jobs ---------------------------------------------------------------------------

# Aggregates add CPU over a domain's nodes, GPU nodes or not; in these two cases they promise
# room that no node has, and only an exact count gives the right code.
#
# 3 pods of 1 GPU and 2 cores in one rack: r0's GPU node has 4 cores (2 pods), r1 no free GPU.
# The cluster holds 2 such pods: `capacity`. From aggregates alone the root (3 GPUs, 12 cores)
# has room and the racks (2, 0) do not, which reads as `required`.
CPU_BOUND_REQUIRED = RandomCase(
    cluster={
        "levels": ["rack"],
        "nodes": [
            {"name": "n0", "rack": "r0", "gpus": 3, "gpu_model": "A", "cpu": 4},
            {"name": "n1", "rack": "r1", "gpus": 1, "gpu_model": "A", "cpu": 8},
        ],
    },
    allocations=({"owner": "old", "node": "n1", "gpus": [0]},),
    job={
        "name": "job",
        "pods": 3,
        "resources_per_pod": {"gpus": 1, "cpu": 2},
        "topology": {"required": "rack"},
    },
)

# 4 pods of 1 GPU and 2 cores in slices of 2 per rack: r0's GPU node has 1 core, r1 one GPU.
# Node by node the cluster holds 1 such pod, with or without slices: `capacity`. From
# aggregates alone the sliced total (r0 3 -> 2, r1 0) falls short while the unsliced one (4)
# does not, which reads as `slices`.
CPU_BOUND_SLICES = RandomCase(
    cluster={
        "levels": ["rack"],
        "nodes": [
            {"name": "n0", "rack": "r0", "gpus": 3, "gpu_model": "A", "cpu": 1},
            {"name": "n1", "rack": "r0", "gpus": 1, "gpu_model": "A", "cpu": 8},
            {"name": "n2", "rack": "r1", "gpus": 1, "gpu_model": "A", "cpu": 8},
        ],
    },
    allocations=({"owner": "old", "node": "n1", "gpus": [0]},),
    job={
        "name": "job",
        "pods": 4,
        "resources_per_pod": {"gpus": 1, "cpu": 2},
        "topology": {"slices": [{"level": "rack", "pods": 2}]},
    },
)


@SETTINGS
@example(case=CPU_BOUND_REQUIRED)
@example(case=CPU_BOUND_SLICES)
@given(case=random_cases(large_jobs=True))
def test_unschedulable_is_confirmed_and_coded(case: RandomCase) -> None:
    """(d) Every Unschedulable is confirmed by the oracle and names the first rule without room."""
    state, request, labels = case.build()
    result = place(state, request)
    if isinstance(result, Placement):
        return
    assert brute_force(state, request, labels, minimise=False).witness is None, result.reason
    event(f"unschedulable: {result.code}")
    assert result.code == expected_code(state, request, labels), result.reason


# --- preferred: fewest domains at the preferred level, then at each level inside it -------------

# 4 single-GPU pods in slices of 2 per block, preferring racks: block a has four racks of one GPU,
# blocks b and c one rack of 2 GPUs each. Racks b0 + c0 hold the job (2 racks, each block an even
# count); splitting at the block level first would take block a whole and use 4 racks.
SLICE_ABOVE_PREFERRED = RandomCase(
    cluster={
        "levels": ["block", "rack"],
        "nodes": [
            *(
                {"name": f"a{i}", "block": "a", "rack": f"a{i}", "gpus": 1, "gpu_model": "A"}
                for i in range(4)
            ),
            {"name": "b0", "block": "b", "rack": "b0", "gpus": 2, "gpu_model": "A"},
            {"name": "c0", "block": "c", "rack": "c0", "gpus": 2, "gpu_model": "A"},
        ],
    },
    job={
        "name": "job",
        "pods": 4,
        "resources_per_pod": {"gpus": 1},
        "topology": {"preferred": "rack", "slices": [{"level": "block", "pods": 2}]},
    },
)

# 5 single-GPU pods preferring blocks: block x has racks of 2 + 2 GPUs, y one rack of 4, z one of 1.
# Two blocks are needed; y + z use 2 racks, while x (the first of the two largest) + z use 3.
LOWER_LEVELS_NOT_MINIMISED = RandomCase(
    cluster={
        "levels": ["block", "rack"],
        "nodes": [
            {"name": "x0", "block": "x", "rack": "x0", "gpus": 2, "gpu_model": "A"},
            {"name": "x1", "block": "x", "rack": "x1", "gpus": 2, "gpu_model": "A"},
            {"name": "y0", "block": "y", "rack": "y0", "gpus": 4, "gpu_model": "A"},
            {"name": "z0", "block": "z", "rack": "z0", "gpus": 1, "gpu_model": "A"},
        ],
    },
    job={
        "name": "job",
        "pods": 5,
        "resources_per_pod": {"gpus": 1},
        "topology": {"preferred": "block"},
    },
)


# 6 single-GPU pods required in one zone, preferring blocks. Zone x: two blocks of three
# one-GPU racks; zone y: a block with one 4-GPU rack and a block with one 2-GPU rack. Both zones
# need two blocks; y's use 2 racks, x's 6. Beyond the amount plan the zones are told apart by
# the count plans (docs: the fewest at L and at L+1 over every required domain).
TIED_ZONES = RandomCase(
    cluster={
        "levels": ["zone", "block", "rack"],
        "nodes": [
            *(
                {
                    "name": f"x{b}{r}",
                    "zone": "x",
                    "block": f"x{b}",
                    "rack": f"x{b}{r}",
                    "gpus": 1,
                    "gpu_model": "A",
                }
                for b in range(2)
                for r in range(3)
            ),
            {"name": "y0", "zone": "y", "block": "y0", "rack": "y0", "gpus": 4, "gpu_model": "A"},
            {"name": "y1", "zone": "y", "block": "y1", "rack": "y1", "gpus": 2, "gpu_model": "A"},
        ],
    },
    job={
        "name": "job",
        "pods": 6,
        "resources_per_pod": {"gpus": 1},
        "topology": {"required": "zone", "preferred": "block"},
    },
)


def _node(name: str, zone: str, block: str, gpus: int) -> dict[str, Any]:
    """A one-node rack named `name` in `block` of `zone`."""
    return {
        "name": name,
        "zone": zone,
        "block": block,
        "rack": name,
        "gpus": gpus,
        "gpu_model": "A",
    }


# 4 single-GPU pods in slices of 4 per zone and 2 per block, preferring racks. Zone x: block x1
# one rack of 2 GPUs, block x2 two racks of 1; zone y likewise. One zone holds the job on 3
# racks; the two 2-GPU racks (2 racks) would split it across zones, breaking the zone slice.
TWO_SLICE_LAYERS_ABOVE_PREFERRED = RandomCase(
    cluster={
        "levels": ["zone", "block", "rack"],
        "nodes": [
            node
            for zone in "xy"
            for node in (
                _node(f"{zone}0", zone, f"{zone}1", 2),
                _node(f"{zone}1", zone, f"{zone}2", 1),
                _node(f"{zone}2", zone, f"{zone}2", 1),
            )
        ],
    },
    job={
        "name": "job",
        "pods": 4,
        "resources_per_pod": {"gpus": 1},
        "topology": {
            "preferred": "rack",
            "slices": [{"level": "zone", "pods": 4}, {"level": "block", "pods": 2}],
        },
    },
)


# 4 single-GPU pods required in one zone, in slices of 2 per block, preferring racks. Zone x:
# block x0 with a 3-GPU rack, block x1 with two 1-GPU racks; zone y: two blocks of one 2-GPU
# rack. Both zones' racks cover the gang with 2 (3 + 1, 2 + 2), but the slices make x use 3 racks
# (2 pods on the 3-GPU rack, 1 on each small one) against y's 2.
SLICED_TIED_ZONES = RandomCase(
    cluster={
        "levels": ["zone", "block", "rack"],
        "nodes": [
            _node("x00", "x", "x0", 3),
            _node("x10", "x", "x1", 1),
            _node("x11", "x", "x1", 1),
            _node("y00", "y", "y0", 2),
            _node("y10", "y", "y1", 2),
        ],
    },
    job={
        "name": "job",
        "pods": 4,
        "resources_per_pod": {"gpus": 1},
        "topology": {
            "required": "zone",
            "preferred": "rack",
            "slices": [{"level": "block", "pods": 2}],
        },
    },
)


@SETTINGS
@example(case=SLICE_ABOVE_PREFERRED)
@given(case=random_cases(large_jobs=True, with_preferred=True))
def test_preferred_uses_fewest_domains(case: RandomCase) -> None:
    """(c) With `preferred: L`, no more domains at L than the oracle's minimum, any policy.

    Slices may lie at any level, between the required and the preferred level included.
    """
    state, request, labels = case.build()
    assert request.preferred is not None
    answer = brute_force(state, request, labels, minimise=True)
    for policy in policies():
        result = place(state, request, policy)
        if answer.witness is None:
            assert isinstance(result, Unschedulable)
            continue
        assert isinstance(result, Placement)
        assert_valid_placement(state, request, result, labels)
        assert answer.fewest_preferred is not None
        assert domains_used(result, labels, request.preferred) <= answer.fewest_preferred


@SETTINGS
@example(case=SLICE_ABOVE_PREFERRED)
@example(case=LOWER_LEVELS_NOT_MINIMISED)
@example(case=TIED_ZONES)
@example(case=SLICED_TIED_ZONES)
@given(case=random_cases(large_jobs=True, with_preferred=True))
def test_preferred_then_fewest_domains_at_each_lower_level(case: RandomCase) -> None:
    """When no one domain at L fits: the fewest at L, then at each level inside L, in order."""
    state, request, labels = case.build()
    assert request.preferred is not None
    answer = brute_force(state, request, labels, minimise=True)
    if answer.profile is None or answer.profile[0] == 1:
        return
    event(f"least profile: {answer.profile}")
    levels = range(request.preferred, len(labels))
    for policy in policies():
        result = place(state, request, policy)
        assert isinstance(result, Placement)
        profile = tuple(domains_used(result, labels, level) for level in levels)
        assert profile == answer.profile, f"{policy.name}: {profile} > {answer.profile}"


@SETTINGS
@example(case=SLICE_ABOVE_PREFERRED)
@example(case=LOWER_LEVELS_NOT_MINIMISED)
@example(case=TIED_ZONES)
@example(case=SLICED_TIED_ZONES)
@example(case=TWO_SLICE_LAYERS_ABOVE_PREFERRED)
@given(
    case=st.one_of(
        random_cases(large_jobs=True, with_preferred=True),
        random_cases(large_jobs=True, with_preferred=True, spanning=True),
        random_cases(large_jobs=True, with_preferred=True, spanning=True, sliced_above=True),
    )
)
def test_beyond_the_amount_plan_count_plans_keep_the_guarantees(case: RandomCase) -> None:
    """With the amount plan out of reach, what the count plans guarantee (docs, table rows 4-5).

    No slice layer between the required and the preferred level L: the fewest L-domains, then
    the fewest domains one level inside L, both over every required domain.
    A slice layer there: the fewest L-domains over every required domain. Either way,
    every level when nothing lies inside the level minimised last.
    """
    state, request, labels = case.build()
    preferred = request.preferred
    assert preferred is not None
    answer = brute_force(state, request, labels, minimise=True)
    if answer.profile is None or answer.profile[0] == 1:
        return
    sliced_above = request.granule(request.required + 1) != request.granule(preferred)
    leaf = len(labels) - 1
    # Each way a plan may run. With a slice layer between, the fewest L-domains by counts of
    # them or by slices of the innermost slice level above L (the cheaper one runs in
    # service); without, the knapsack over runs of equal children (when children hold whole
    # granules) or over every count of children.
    variants: list[dict[str, object]] = (
        [{"_counts_cost_less": lambda *_: True}, {"_counts_cost_less": lambda *_: False}]
        if sliced_above
        else [{}, {"MAX_RUN_CELLS": 0}]
    )
    defaults = {
        name: getattr(fewest_counts, name) for name in ("_counts_cost_less", "MAX_RUN_CELLS")
    }
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FewestDomains, "affordable", lambda *_: False)
        for policy, variant in itertools.product(policies(), variants):
            for name, default in defaults.items():
                patch.setattr(fewest_counts, name, variant.get(name, default))
            result = place(state, request, policy)
            assert isinstance(result, Placement)
            assert_valid_placement(state, request, result, labels)
            profile = tuple(domains_used(result, labels, lv) for lv in range(preferred, leaf + 1))
            within = labels[request.required][int(result.allocation.nodes[0])]
            least = brute_force(state, request, labels, minimise=True, within=within).profile
            assert least is not None
            if sliced_above:
                event("slices between required and preferred")
                assert profile[0] == answer.profile[0], f"{policy.name}: {profile}"
                guaranteed = 1
            else:
                event("no slice between required and preferred")
                assert profile[:2] == answer.profile[:2], f"{policy.name}: {profile}"
                guaranteed = 2
            assert profile[:guaranteed] == least[:guaranteed], f"{policy.name}: {profile} > {least}"


def test_beyond_every_limit_the_greedy_cover_stands(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the amount plan's and the count plans' limits, only the count at L holds (docs)."""
    state, request, labels = LOWER_LEVELS_NOT_MINIMISED.build()
    assert request.preferred is not None
    monkeypatch.setattr(fewest, "MAX_CELLS", 0)
    result = place(state, request)
    assert isinstance(result, Placement)
    assert [domains_used(result, labels, level) for level in (1, 2)] == [2, 2]  # y + z, by count
    for limit in ("MAX_COUNT_CELLS", "MAX_RUN_CELLS", "MAX_EVERY_COUNT_CELLS"):
        monkeypatch.setattr(fewest_counts, limit, 0)
    result = place(state, request)
    assert isinstance(result, Placement)
    # x (the first of the two largest blocks) and z: the fewest blocks, one rack more than y + z.
    assert [domains_used(result, labels, level) for level in (1, 2)] == [2, 3]
