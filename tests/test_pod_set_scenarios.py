"""Golden scenarios of jobs with several pod sets, from tests/scenarios/pod_sets/*.yaml: each
case's job placed every set or none (`place_job_sets`), checked set by set and as a whole;
`counts` gives the pods each set got (elastic sets, `min_pods`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from placement_helpers import assert_state_unchanged, assert_valid_placement, state_arrays
from test_placement_scenarios import build_state, check_failure, check_placement

from toposched.cluster.errors import InputError
from toposched.cluster.state import ClusterState
from toposched.jobs.spec import JobSpec
from toposched.placement.job_sets import JobSets, JobSetsPlacement, place_job_sets
from toposched.placement.policies import policy_by_name
from toposched.placement.search import Unschedulable

SCENARIO_DIR = Path(__file__).parent / "scenarios" / "pod_sets"
FILE_FIELDS = {"cluster", "builder", "allocations", "health", "policy", "cases"}
CASE_FIELDS = {"name", "job", "expect", "policy"}
EXPECTATIONS = {
    "sets",
    "within",
    "domains_used",
    "untouched",
    "unschedulable",
    "error",
    "shapes",
    "counts",
}


def load_cases() -> list[Any]:
    params: list[Any] = []
    for path in sorted(SCENARIO_DIR.glob("*.yaml")):
        scenario = yaml.safe_load(path.read_text())
        assert not set(scenario) - FILE_FIELDS, f"{path.name}: unknown fields"
        names: set[str] = set()
        for case in scenario["cases"]:
            assert not set(case) - CASE_FIELDS, f"{path.name}::{case.get('name')}: unknown fields"
            assert case["name"] not in names, f"{path.name}: duplicate case {case['name']}"
            names.add(case["name"])
            expect = set(case["expect"])
            assert expect and expect <= EXPECTATIONS, f"{path.name}::{case['name']}: {expect}"
            params.append(pytest.param(scenario, case, id=f"{path.name}::{case['name']}"))
    return params


def check_whole_job(
    state: ClusterState, placed: JobSetsPlacement, expect: Mapping[str, Any]
) -> None:
    """Expectations on every set's pods together: `within`, `domains_used`, `untouched`."""
    topology = state.topology
    nodes = np.concatenate([placement.allocation.nodes for placement in placed.placements])
    for level_name, domain_name in expect.get("within", {}).items():
        level = topology.level_index(level_name)
        domains = {topology.domain_name(level, int(d)) for d in topology.node_domain[level][nodes]}
        assert domains == {domain_name}, f"the job's pods at {level_name} are in {sorted(domains)}"
    for level_name, count in expect.get("domains_used", {}).items():
        level = topology.level_index(level_name)
        assert np.unique(topology.node_domain[level][nodes]).size == count, level_name
    names = {topology.node_names[int(node)] for node in nodes}
    for name in expect.get("untouched", []):
        topology.node_index(name)
        assert name not in names, f"a pod was placed on {name}"


@pytest.mark.parametrize(("scenario", "case"), load_cases())
def test_scenario(scenario: Mapping[str, Any], case: Mapping[str, Any]) -> None:
    state = build_state(scenario, case)
    policy = policy_by_name(case.get("policy", scenario.get("policy", "bestfit")))
    spec = JobSpec.from_dict({"name": case["name"], **case["job"]})
    expect = case["expect"]
    if "error" in expect:
        with pytest.raises(InputError) as raised:
            JobSets.from_spec(spec, state.topology)
        for fragment in expect["error"]:
            assert fragment in str(raised.value)
        return
    sets = JobSets.from_spec(spec, state.topology)
    before = state_arrays(state)
    result = place_job_sets(state, sets, policy)
    assert_state_unchanged(before, state)
    if "unschedulable" in expect:
        assert isinstance(result, Unschedulable), "expected no placement"
        check_failure(result, expect["unschedulable"])
        return
    assert isinstance(result, JobSetsPlacement), f"unschedulable: {result.reason}"
    counts = dict(zip((role.name for role in sets.roles), result.counts, strict=True))
    assert counts == {**counts, **expect.get("counts", {})}
    for role, placement in zip(result.placed_sets.roles, result.placements, strict=True):
        # Each set valid where the sets before it hold their pods (they share the nodes).
        assert_valid_placement(state, role, placement)
        state.allocate(f"{spec.name}[{role.name}]", placement.allocation)
    check_whole_job(state, result, expect)
    by_name = dict(zip((role.name for role in sets.roles), result.placements, strict=True))
    for name, set_expect in expect.get("sets", {}).items():
        check_placement(state, by_name[name], set_expect)
    check_held_as_one(state, spec.name, result, expect)


def check_held_as_one(
    state: ClusterState, job: str, placed: JobSetsPlacement, expect: Mapping[str, Any]
) -> None:
    """The sets' pods held by one owner (as the scheduler holds them) take exactly what the
    sets held one by one, in `shapes` allocations of one pod shape (1 when they share it)."""
    held = state_arrays(state)
    state.release_many([f"{job}[{role.name}]" for role in placed.sets.roles])
    joined = placed.joined()
    assert len(joined.parts) == expect.get("shapes", len(joined.parts))
    state.allocate(job, joined)
    assert_state_unchanged(held, state)
