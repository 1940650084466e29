"""Golden placement scenarios from tests/scenarios/*.yaml, each case checked against its outcome."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from placement_helpers import (
    allocate_pod,
    assert_state_unchanged,
    assert_valid_placement,
    build_topology,
    set_health,
    state_arrays,
)

from toposched.cluster.errors import InputError
from toposched.cluster.state import ClusterState
from toposched.jobs.spec import JobSpec
from toposched.placement.feasibility import never_fits_job
from toposched.placement.policies import policy_by_name
from toposched.placement.request import GangRequest
from toposched.placement.search import Placement, Unschedulable, UnschedulableCode, place

SCENARIO_DIR = Path(__file__).parent / "scenarios"
FILE_FIELDS = {"cluster", "builder", "allocations", "health", "policy", "cases"}
CASE_FIELDS = {"name", "job", "expect", "policy", "allocations", "health", "placed_before", "xfail"}
PLACEMENT_EXPECTATIONS = {"nodes", "gpus", "pods_per_node", "domains_used", "within", "untouched"}
FAILURE_EXPECTATIONS = {"unschedulable", "error", "never"}


def load_cases() -> list[Any]:
    """One pytest param per case, id "<file>::<case name>", strict xfail where the case says."""
    params: list[Any] = []
    for path in sorted(SCENARIO_DIR.glob("*.yaml")):
        scenario = yaml.safe_load(path.read_text())
        unknown = set(scenario) - FILE_FIELDS
        assert not unknown, f"{path.name}: unknown fields {sorted(unknown)}"
        names: set[str] = set()
        for case in scenario["cases"]:
            unknown = set(case) - CASE_FIELDS
            assert not unknown, f"{path.name}::{case.get('name')}: unknown fields {sorted(unknown)}"
            assert case["name"] not in names, f"{path.name}: duplicate case {case['name']}"
            names.add(case["name"])
            expect = set(case["expect"])
            # A case that expects nothing checks nothing: every case must state an outcome.
            assert expect and expect <= PLACEMENT_EXPECTATIONS | FAILURE_EXPECTATIONS, (
                f"{path.name}::{case['name']}: expectations {sorted(expect)}"
            )
            marks = []
            if "xfail" in case:
                marks.append(pytest.mark.xfail(strict=True, reason=case["xfail"]))
            params.append(
                pytest.param(scenario, case, id=f"{path.name}::{case['name']}", marks=marks)
            )
    return params


def build_state(scenario: Mapping[str, Any], case: Mapping[str, Any]) -> ClusterState:
    """The scenario's cluster with its and the case's pre-existing pods and node health."""
    state = ClusterState(build_topology(scenario.get("cluster"), scenario.get("builder")))
    for entry in [*scenario.get("allocations", []), *case.get("allocations", [])]:
        allocate_pod(state, entry)
    # Health goes last so that nodes that turned unhealthy may still hold earlier work.
    set_health(state, {**scenario.get("health", {}), **case.get("health", {})})
    return state


def job_spec(job: Mapping[str, Any], default_name: str) -> JobSpec:
    return JobSpec.from_dict({"name": default_name, **job})


def check_placement(state: ClusterState, placement: Placement, expect: Mapping[str, Any]) -> None:
    topology = state.topology
    pod_nodes = placement.pod_nodes(state)
    if "nodes" in expect:
        assert pod_nodes == expect["nodes"]
    if "gpus" in expect:
        assert placement.allocation.gpus.tolist() == expect["gpus"]
    if "pods_per_node" in expect:
        counts = {name: pod_nodes.count(name) for name in set(pod_nodes)}
        assert counts == expect["pods_per_node"]
    for level_name, count in expect.get("domains_used", {}).items():
        level = topology.level_index(level_name)
        assert placement.domains_used(state, level) == count, f"domains used at {level_name}"
    for level_name, domain_name in expect.get("within", {}).items():
        level = topology.level_index(level_name)
        domains = {
            topology.domain_name(level, int(d))
            for d in topology.node_domain[level][placement.allocation.nodes]
        }
        assert domains == {domain_name}, f"pods at {level_name} are in {sorted(domains)}"
    for name in expect.get("untouched", []):
        topology.node_index(name)  # a misspelt name fails here instead of passing unnoticed
        assert name not in pod_nodes, f"a pod was placed on {name}"


def check_failure(result: Unschedulable, expect: Mapping[str, Any]) -> None:
    assert result.code == expect["code"], result.reason
    for fragment in expect.get("reason", []):
        assert fragment in result.reason


@pytest.mark.parametrize(("scenario", "case"), load_cases())
def test_scenario(scenario: Mapping[str, Any], case: Mapping[str, Any]) -> None:
    state = build_state(scenario, case)
    policy_name = case.get("policy", scenario.get("policy", "bestfit"))
    policy = policy_by_name(policy_name)
    for number, earlier in enumerate(case.get("placed_before", [])):
        spec = job_spec(earlier, f"earlier-{number}")
        result = place(state, GangRequest.from_spec(spec, state.topology), policy)
        assert isinstance(result, Placement), f"setup job {spec.name}: {result}"
        state.allocate(spec.name, result.allocation)
    expect = case["expect"]
    spec = job_spec(case["job"], case["name"])
    if "error" not in expect:
        # Whatever the present state, a job is "never" exactly when the case says so.
        never = never_fits_job(state, spec)
        if "never" in expect:
            assert isinstance(never, Unschedulable), "expected never to fit"
            assert never.code == UnschedulableCode.NEVER_FITS
            for fragment in expect["never"]:
                assert fragment in never.reason
            if "unschedulable" not in expect:
                return
        else:
            assert never is None, never.reason
    if "error" in expect:
        with pytest.raises(InputError) as raised:
            GangRequest.from_spec(spec, state.topology)
        for fragment in expect["error"]:
            assert fragment in str(raised.value)
        return
    request = GangRequest.from_spec(spec, state.topology)
    before = state_arrays(state)
    result = place(state, request, policy)
    assert_state_unchanged(before, state)
    if "unschedulable" in expect:
        assert isinstance(result, Unschedulable), f"placed on {result.pod_nodes(state)}"
        check_failure(result, expect["unschedulable"])
        return
    assert isinstance(result, Placement), f"unschedulable ({result.code}): {result.reason}"
    assert_valid_placement(state, request, result)
    check_placement(state, result, expect)
