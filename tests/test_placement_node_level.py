"""The node as a level, and "never" answers, against brute force on small random clusters.

Node slices are checked as slices of a level whose domains are single nodes, `preferred: node`
as the fewest such domains; "never" as a placement on the same cluster emptied and healed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from placement_helpers import assert_valid_placement
from test_placement_oracle import SETTINGS, RandomCase, brute_force, random_cases

from toposched.cluster.state import ClusterState
from toposched.jobs.spec import JobSpec
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
