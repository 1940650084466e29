"""The node as a level, and "never" answers, against brute force on small random clusters.

Node slices are checked as slices of a level whose domains are single nodes, `preferred: node`
as the fewest such domains; "never" as a placement on the same cluster emptied and healed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st
from placement_helpers import assert_valid_placement, pod_capacity
from test_placement_oracle import (
    SETTINGS,
    RandomCase,
    brute_force,
    count_vectors,
    domains_used,
    random_cases,
)

from toposched.cluster.state import ClusterState
from toposched.jobs.spec import JobSpec
from toposched.placement import fewest_nodes
from toposched.placement.feasibility import never_fits, never_fits_job
from toposched.placement.policies import BestFit, RandomFit, Spread
from toposched.placement.request import GangRequest
from toposched.placement.search import Placement, Unschedulable, UnschedulableCode, place


@st.composite
def node_level_cases(draw: st.DrawFn) -> RandomCase:
    """A random case whose job gains a node slice and/or `preferred: node`."""
    case = draw(st.one_of(random_cases(), random_cases(large_jobs=True)))
    job: dict[str, Any] = {**case.job, "topology": dict(case.job["topology"])}
    topology = job["topology"]
    if topology.get("required") == "node":
        del topology["required"]
    pods = job["pods"]
    innermost = topology["slices"][-1]["pods"] if topology.get("slices") else pods
    sizes = [size for size in range(2, innermost + 1) if innermost % size == 0]
    add_node_slice: bool = draw(st.booleans())
    if sizes and add_node_slice:
        topology["slices"] = [
            *topology.get("slices", []),
            {"level": "node", "pods": draw(st.sampled_from(sizes))},
        ]
    if draw(st.booleans()) or "slices" not in topology:
        topology["preferred"] = "node"
    return replace(case, job=job)


def with_node_level(
    request: GangRequest, labels: list[list[str]], names: list[str]
) -> tuple[GangRequest, list[list[str]]]:
    """The request and labels for `brute_force`, nodes as one more level (one node each)."""
    node_level = len(labels)
    slices = request.slices
    if request.node_slice > 1:
        slices = (*slices, (node_level, request.node_slice))
    preferred = node_level if request.preferred_node else request.preferred
    oracle = replace(request, slices=slices, node_slice=1, preferred=preferred)
    return oracle, [*labels, names]


@SETTINGS
@given(case=node_level_cases())
def test_node_level_constraints_against_brute_force(case: RandomCase) -> None:
    """Placements keep node slices (and every other rule, rank order included); a gang is
    placed whenever brute force finds a placement; `preferred: node` without domain slices
    uses the fewest nodes any placement does."""
    state, request, labels = case.build()
    oracle_request, oracle_labels = with_node_level(
        request, labels, list(state.topology.node_names)
    )
    answer = brute_force(
        state, oracle_request, oracle_labels, minimise=request.preferred_node and not request.slices
    )
    for policy in (BestFit(), Spread(), RandomFit(seed=3)):
        result = place(state, request, policy)
        if answer.witness is None:
            assert isinstance(result, Unschedulable)
            continue
        assert isinstance(result, Placement), result.reason
        assert_valid_placement(state, request, result, labels)
        if request.preferred_node and not request.slices:
            nodes = len(set(result.allocation.nodes.tolist()))
            assert answer.profile is not None
            assert nodes == answer.profile[0], f"{nodes} nodes, the fewest is {answer.profile[0]}"


@st.composite
def preferring_nodes(draw: st.DrawFn) -> RandomCase:
    """A random gang that spans domains, with `preferred: node`, no slices, its own required
    level (if a domain level) kept."""
    case = draw(
        st.one_of(random_cases(large_jobs=True, spanning=True), random_cases(large_jobs=True))
    )
    topology = {
        key: value
        for key, value in case.job["topology"].items()
        if key == "required" and value != "node"
    }
    topology["preferred"] = "node"
    return replace(case, job={**case.job, "topology": topology})


def least_node_profile(
    state: ClusterState, request: GangRequest, labels: list[list[str]]
) -> tuple[int, ...] | None:
    """Over every placement, the least (nodes, innermost domains, their parents, and further out
    up to the required level), by brute force."""
    capacity = [pod_capacity(state, request, node) for node in range(state.topology.n_nodes)]
    levels = profile_levels(request, labels)
    scopes: dict[str, list[int]] = {}
    for node in range(state.topology.n_nodes):
        scopes.setdefault(labels[request.required][node], []).append(node)
    best: tuple[int, ...] | None = None
    for scope in scopes.values():
        for counts in count_vectors([capacity[node] for node in scope], request.pods):
            used = [node for node, count in zip(scope, counts, strict=True) if count]
            profile = (len(used), *(len({labels[lv][n] for n in used}) for lv in levels))
            best = profile if best is None or profile < best else best
    return best


def most_nodes_with_room(
    state: ClusterState, request: GangRequest, labels: list[list[str]], level: int
) -> int:
    """The most nodes with room for one pod in one domain of `level`."""
    per_domain: dict[str, int] = {}
    for node in range(state.topology.n_nodes):
        if pod_capacity(state, request, node):
            per_domain[labels[level][node]] = per_domain.get(labels[level][node], 0) + 1
    return max(per_domain.values(), default=0)


def profile_levels(request: GangRequest, labels: list[list[str]]) -> list[int]:
    """The levels of a `preferred: node` profile after nodes: innermost first, inside required."""
    return list(range(len(labels) - 1, request.required, -1))


# r0: nodes of 2 and 1 free GPUs; r1 and r2: one node of 2 each; one-GPU pods, 3 of them.
# Two nodes at least: 2 + 2 on two racks, or 2 + 1 on r0 alone.
A_SMALLER_NODE_STANDS_IN = RandomCase(
    cluster={
        "levels": ["rack"],
        "nodes": [
            {"name": "n0", "rack": "r0", "gpus": 2, "gpu_model": "A"},
            {"name": "n1", "rack": "r0", "gpus": 1, "gpu_model": "A"},
            {"name": "n2", "rack": "r1", "gpus": 2, "gpu_model": "A"},
            {"name": "n3", "rack": "r2", "gpus": 2, "gpu_model": "A"},
        ],
    },
    job={
        "name": "job",
        "pods": 3,
        "resources_per_pod": {"gpus": 1},
        "topology": {"preferred": "node"},
    },
)


def _node(name: str, gpus: int, zone: str, block: str, rack: str) -> dict[str, object]:
    return {
        "name": name,
        "gpus": gpus,
        "gpu_model": "A",
        "zone": zone,
        "block": block,
        "rack": rack,
    }


ONE_BLOCK_IN_THE_OTHER_ZONE = RandomCase(
    # Six half-GPU pods: two nodes at least, a 2-GPU node (4 pods) and a 1-GPU node (2 pods).
    # Both zones hold such a pair on two racks; only z0 holds one in one block (n4 in r1 and
    # a node of r2, both of b1), which the greedy choice inside z0 misses (it takes a node
    # of r0, the rack with the most 1-GPU nodes).
    cluster={
        "levels": ["zone", "block", "rack"],
        "nodes": [
            *(_node(f"n{i}", 1, "z0", "b0", "r0") for i in range(4)),
            _node("n4", 2, "z0", "b1", "r1"),
            *(_node(f"n{i}", 1, "z0", "b1", "r2") for i in range(5, 8)),
            _node("n8", 2, "z1", "b2", "r3"),
            *(_node(f"n{i}", 1, "z1", "b3", "r4") for i in range(9, 12)),
        ],
    },
    job={
        "name": "job",
        "pods": 6,
        "resources_per_pod": {"gpu_milli": 500, "cpu": 0, "memory": "0"},
        "topology": {"preferred": "node"},
    },
)


@SETTINGS
@example(case=A_SMALLER_NODE_STANDS_IN)
@example(case=ONE_BLOCK_IN_THE_OTHER_ZONE)
@given(case=preferring_nodes())
def test_preferred_node_fewest_nodes_then_racks_then_blocks(case: RandomCase) -> None:
    """`preferred: node`: the fewest nodes, then the fewest innermost domains, over every
    required domain; then the fewest of their parents when every usable node holds the same
    count of pods, and further out one domain where one holds such a least placement; with
    several counts, one parent where one holds the fewest nodes on the fewest innermost domains
    (docs/placement.md's table). Past the knapsacks' limit, the fewest nodes, and the fewest
    innermost domains too when nodes hold one count."""
    state, request, labels = case.build()
    least = least_node_profile(state, request, labels)
    capacities = {pod_capacity(state, request, node) for node in range(state.topology.n_nodes)}
    one_count = len(capacities - {0}) == 1
    event(f"one count of pods per node: {one_count}; profile length {len(least or ())}")
    levels = profile_levels(request, labels)
    for limit in (fewest_nodes.MAX_NODE_PLAN_CELLS, 0):
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(fewest_nodes, "MAX_NODE_PLAN_CELLS", limit)
            for policy in (BestFit(), Spread(), RandomFit(seed=3)):
                result = place(state, request, policy)
                if least is None:
                    assert isinstance(result, Unschedulable)
                    continue
                assert isinstance(result, Placement), result.reason
                assert_valid_placement(state, request, result, labels)
                nodes = len(set(result.allocation.nodes.tolist()))
                profile = (nodes, *(domains_used(result, labels, lv) for lv in levels))
                guaranteed = 1 + int(one_count) + int(bool(limit))
                assert profile[:guaranteed] == least[:guaranteed], (
                    f"{policy.name}, limit {limit}: {profile}, the least is {least}"
                )
                if guaranteed == 3:
                    # Further out: one domain wherever a least placement lies in one.
                    for used, fewest in zip(profile[3:], least[3:], strict=True):
                        assert used == 1 or fewest > 1, f"{policy.name}: {profile} > {least}"
                elif limit and len(profile) > 2:
                    # One parent wherever the fewest nodes on the fewest domains fit in one.
                    assert profile[2] == 1 or least[2] > 1, f"{policy.name}: {profile} > {least}"
                # Best effort, bounded: at every level, at most as many domains as the most
                # nodes with room in one of its domains times the least.
                for used, fewest, level in zip(profile[1:], least[1:], levels, strict=True):
                    assert used <= most_nodes_with_room(state, request, labels, level) * fewest


def emptied(state: ClusterState) -> ClusterState:
    return ClusterState(state.topology)


@SETTINGS
@given(case=st.one_of(random_cases(), random_cases(large_jobs=True), node_level_cases()))
def test_never_exactly_when_the_empty_cluster_cannot_hold_the_gang(case: RandomCase) -> None:
    """`never_fits` says "never" exactly when brute force finds no placement on the cluster
    emptied and healed, and a "never" gang is unschedulable on the present cluster too."""
    state, request, labels = case.build()
    empty = emptied(state)
    oracle_request, oracle_labels = with_node_level(
        request, labels, list(state.topology.node_names)
    )
    possible = brute_force(empty, oracle_request, oracle_labels, minimise=False).witness
    never = never_fits(state, request)
    if possible is None:
        assert isinstance(never, Unschedulable)
        assert never.code == UnschedulableCode.NEVER_FITS
        assert "never fits this cluster, even empty and healthy" in never.reason
        assert isinstance(place(state, request), Unschedulable)
    else:
        assert never is None, never.reason


def test_unknown_gpu_model_never_fits() -> None:
    case = RandomCase(
        cluster={
            "levels": ["rack"],
            "nodes": [{"name": "n0", "rack": "r0", "gpus": 4, "gpu_model": "A"}],
        },
        job={"name": "j", "pods": 1, "resources_per_pod": {"gpus": 1}},
    )
    state, _, _ = case.build()
    spec = JobSpec.from_dict(
        {"name": "j", "pods": 1, "resources_per_pod": {"gpus": 1, "gpu_models": ["H100"]}}
    )
    never = never_fits_job(state, spec)
    assert never is not None and never.code == UnschedulableCode.NEVER_FITS
    assert never.reason.endswith("asks for GPU models H100; the cluster has A")
