"""Elastic pod sets (`min_pods`): the job starts with at least each set's minimum and takes as
many pods as fit up to `pods`, in whole slices; usage counts the pods placed; preemption and
reservations aim at the minimums; restarts keep the counts. Through the placement, the
scheduler, the simulator, the service and `toposched place`, and against brute force."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import event, given
from hypothesis import strategies as st
from placement_helpers import assert_state_unchanged, assert_valid_placement, state_arrays
from service_helpers import Server, budgets, small_cluster
from test_job_pod_sets import simulated_summary
from test_placement_oracle import SETTINGS, RandomCase, random_cases
from test_placement_roles import free_whole, roles_fit_somewhere
from test_service_pod_sets import ACCOUNT, wait_running

from toposched.cli.main import main
from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation, ClusterState
from toposched.jobs.spec import JobSpec
from toposched.placement.elastic_roles import ElasticRoles, place_elastic_roles
from toposched.placement.job_sets import JobSets, JobSetsPlacement, place_job_sets
from toposched.placement.request import simple_request
from toposched.placement.search import Placement, Unschedulable, place
from toposched.policy.budget import BudgetTree
from toposched.scheduler.adoptions import Adoption
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Bind, Evict
from toposched.scheduler.jobs import JobState
from toposched.service.errors import NeverFits
from toposched.service.fits import ClusterLimits
from toposched.service.records import allocation_from_json, allocation_to_json

# 1 zone x 2 blocks x 2 racks x 2 nodes x 4 GPUs = 32 GPUs; a block is 16.


def cluster() -> ClusterState:
    return ClusterState(nvl72_cluster(1, 2, 2, nodes_per_rack=2))


def elastic_job(name: str = "el", *sets: dict[str, Any], **fields: Any) -> JobSpec:
    """A job of `sets` (default: workers of 1-8 pods of 4 GPUs) held in one block."""
    data: dict[str, Any] = {
        "name": name,
        "account": "team",
        "min_runtime": "1h",
        "topology": {"required": "block"},
        "pod_sets": list(sets)
        or [{"name": "workers", "pods": 8, "min_pods": 1, "resources_per_pod": {"gpus": 4}}],
    }
    return JobSpec.from_dict(data | fields)


def gang(name: str, pods: int, **fields: Any) -> JobSpec:
    data = {"name": name, "account": "team", "pods": pods, "resources_per_pod": {"gpus": 4}}
    return JobSpec.from_dict(data | fields)


def team() -> BudgetTree:
    return BudgetTree.from_dict({"accounts": {"team": 100}})


# --- the placement --------------------------------------------------------------------------


def test_the_minimum_and_the_count_taken_follow_the_set() -> None:
    state = cluster()
    spec = elastic_job()
    sets = JobSets.from_spec(spec, state.topology)
    assert sets.elastic and sets.minimums == (1,)
    # What waits asks for its minimum; the sets as placed count what they got.
    assert (sets.pods, sets.gpus) == (1, 4.0)
    placed = place_job_sets(state, sets)
    assert isinstance(placed, JobSetsPlacement)
    assert placed.counts == (4,)  # one block: 4 nodes of 4 GPUs
    assert placed.placed_sets.gpus == 16.0 and not placed.placed_sets.elastic
    # Kept apart even of one shape, so a restart reads the counts back.
    joined = placed.joined()
    assert len(joined.sets) == 1 and sets.counts_in(joined) == (4,)


def test_a_fixed_job_of_sets_is_placed_as_before() -> None:
    state = cluster()
    fixed = [{"name": "workers", "pods": 2, "resources_per_pod": {"gpus": 4}}]
    sets = JobSets.from_spec(elastic_job("fixed", *fixed), state.topology)
    assert not sets.elastic and sets.minimums == ()
    placed = place_job_sets(state, sets)
    assert isinstance(placed, JobSetsPlacement) and placed.counts == (2,)
    assert placed.joined().sets == ()


def test_counts_that_break_the_sets_are_refused_naming_them() -> None:
    state = cluster()
    sets = JobSets.from_spec(elastic_job(), state.topology)
    nine = Allocation.of(list(range(8)) + [0], [[0]] * 9)
    with pytest.raises(InputError) as caught:
        sets.counts_in(Allocation.of_sets([nine], keep_sets=True))
    assert caught.value.field == "allocation"
    assert "job el has 1 pod sets of 1-8 pods" in caught.value.rule
    with pytest.raises(InputError, match="a multiple of 2"):
        role = simple_request(4, gpus_per_pod=1, name="a", slices=[(1, 2)])
        ElasticRoles((role,), (1,), 0, None)


# --- against brute force ----------------------------------------------------------------------


@st.composite
def elastic_cases(draw: st.DrawFn) -> tuple[RandomCase, dict[str, int]]:
    case = draw(random_cases(large_jobs=True))
    pods_a = draw(st.integers(1, 5))
    roles = {
        "pods_a": pods_a,
        "min_a": draw(st.integers(1, pods_a)),
        "gpus_a": draw(st.sampled_from([1, 2])),
        "pods_b": draw(st.integers(1, 3)),
        "gpus_b": draw(st.sampled_from([1, 2])),
        "level": draw(st.integers(0, len(case.cluster["levels"]))),
    }
    return case, roles


@SETTINGS
@given(data=elastic_cases())
def test_an_elastic_role_takes_no_more_than_brute_force_finds(
    data: tuple[RandomCase, dict[str, int]],
) -> None:
    """An elastic role A (min_a to pods_a) beside a fixed role B: the placement keeps each
    role's rules in one shared domain, A gets at least its minimum and at most the most that
    brute force fits beside B, and all of A whenever its whole count is placed by itself."""
    case, roles = data
    state, _, _ = case.build()
    topology, level = state.topology, roles["level"]
    role_a = simple_request(roles["pods_a"], gpus_per_pod=roles["gpus_a"], name="a")
    role_b = simple_request(roles["pods_b"], gpus_per_pod=roles["gpus_b"], name="b")
    elastic = ElasticRoles((role_a, role_b), (roles["min_a"], roles["pods_b"]), level, None)
    before = state_arrays(state)
    result = place_elastic_roles(state, elastic)
    assert_state_unchanged(before, state)
    most = max(
        (
            count
            for count in range(roles["min_a"], roles["pods_a"] + 1)
            if roles_fit_somewhere(state, topology, level, {**roles, "pods_a": count})
        ),
        default=0,
    )
    if isinstance(result, Unschedulable):
        event("missed a fit brute force finds" if most else "no fit")
        return
    count = result.placements[0].allocation.pods
    assert roles["min_a"] <= count <= most
    event("fewer than brute force" if count < most else "as many as brute force")
    taken: dict[int, int] = {}
    for role, placed in zip(elastic.at((count, roles["pods_b"])), result.placements, strict=True):
        assert_valid_placement(state, role, placed)
        for node in placed.allocation.nodes.tolist():
            taken[node] = taken.get(node, 0) + role.gpus_per_pod
    for node, gpus in taken.items():
        assert gpus <= free_whole(state, node)
    shared = {
        int(d) for p in result.placements for d in topology.node_domain[level][p.allocation.nodes]
    }
    assert shared == {result.domain}


# --- the scheduler ----------------------------------------------------------------------------


def test_takes_every_pod_when_there_is_room_and_is_charged_for_them() -> None:
    scheduler = Scheduler(cluster(), team())
    job = scheduler.submit(elastic_job(), now=0)
    assert job.gpus == 4.0  # waiting: its minimum
    (bind,) = [d for d in scheduler.cycle(0).decisions if isinstance(d, Bind)]
    assert bind.allocation.pods == 4
    assert job.held is not None and [r.pods for r in job.held.roles] == [4]
    assert job.gpus == scheduler.running_gpus("team") == 16.0
    scheduler.finish("el", now=HOUR)
    assert scheduler.running_gpus("team") == 0.0


HOUR = 3600.0


def test_takes_fewer_when_the_cluster_is_busy() -> None:
    scheduler = Scheduler(cluster(), team())
    scheduler.submit(gang("busy", 7), now=0)  # block z0-b0 and 3 nodes of z0-b1
    scheduler.cycle(0)
    job = scheduler.submit(elastic_job(), now=0)
    scheduler.cycle(0)
    assert job.state is JobState.RUNNING
    assert scheduler.state.allocations["el"].pods == 1
    assert scheduler.running_gpus("team") == 28 + 4


def test_waits_below_its_minimum_and_starts_when_it_fits() -> None:
    scheduler = Scheduler(cluster(), team())
    scheduler.submit(gang("busy", 6), now=0)  # block z0-b0 and half of z0-b1
    scheduler.cycle(0)
    spec = elastic_job(
        "el", {"name": "workers", "pods": 4, "min_pods": 3, "resources_per_pod": {"gpus": 4}}
    )
    job = scheduler.submit(spec, now=0)
    scheduler.cycle(0)
    assert job.state is JobState.PENDING
    assert "needs 3 pods of 4 GPUs" in job.reason
    scheduler.finish("busy", now=HOUR)
    scheduler.cycle(HOUR)
    assert scheduler.jobs["el"].state is JobState.RUNNING
    assert scheduler.state.allocations["el"].pods == 4


def test_preemption_makes_room_for_the_minimum_only() -> None:
    scheduler = Scheduler(cluster(), team())
    for index in range(8):  # every node, as unallocated work anyone may evict
        scheduler.submit(gang(f"u{index}", 1, min_runtime=0), now=0)
    scheduler.cycle(0)
    spec = elastic_job(
        "el", {"name": "workers", "pods": 4, "min_pods": 2, "resources_per_pod": {"gpus": 4}}
    )
    job = scheduler.submit(spec, now=1)
    evictions = [d for d in scheduler.cycle(1).decisions if isinstance(d, Evict)]
    assert len(evictions) == 2  # room for 2 pods, not 4
    for eviction in evictions:
        scheduler.evicted(eviction.job_id, now=2)
    scheduler.cycle(2)
    assert job.state is JobState.RUNNING
    assert scheduler.state.allocations["el"].pods == 2 and job.gpus == 8.0


def test_as_a_victim_it_frees_every_pod_it_holds() -> None:
    scheduler = Scheduler(cluster(), team())
    sets = [
        {"name": "trainer", "pods": 4, "min_pods": 1, "resources_per_pod": {"gpus": 4}},
        {"name": "rollout", "pods": 4, "min_pods": 1, "resources_per_pod": {"gpus": 4}},
    ]
    scheduler.submit(elastic_job("u", *sets, topology={}, min_runtime=0), now=0)
    scheduler.cycle(0)
    assert scheduler.state.allocations["u"].pods == 8  # the whole cluster, as unallocated work
    scheduler.submit(gang("big", 8), now=1)
    # Its sets share one shape: the preemptible index counts all of its 32 GPUs freed.
    evictions = [d for d in scheduler.cycle(1).decisions if isinstance(d, Evict)]
    assert [e.job_id for e in evictions] == ["u"]


def test_placed_as_one_gang_it_holds_its_minimums() -> None:
    # As the simulator's baselines place a job of several sets: its gang, the sets' minimums.
    scheduler = Scheduler(cluster(), team())
    sets = [
        {"name": "trainer", "pods": 4, "min_pods": 2, "resources_per_pod": {"gpus": 4}},
        {"name": "rollout", "pods": 4, "min_pods": 1, "resources_per_pod": {"gpus": 4}},
    ]
    job = scheduler.submit(elastic_job("el", *sets), now=0)
    assert job.request.pods == 3
    placement = place(scheduler.state, job.request)
    assert isinstance(placement, Placement)
    scheduler.bind("el", placement, now=0)
    assert job.held is not None and [r.pods for r in job.held.roles] == [2, 1]
    assert scheduler.running_gpus("team") == 12.0


def test_requeued_it_asks_for_its_minimum_again() -> None:
    scheduler = Scheduler(cluster(), team())
    job = scheduler.submit(elastic_job(resumable=True), now=0)
    scheduler.cycle(0)
    assert job.request.pods == 4 and job.gpus == 16.0
    scheduler.fail("el", now=HOUR)
    assert job.state is JobState.PENDING
    assert (job.held, job.request.pods, job.gpus) == (None, 1, 4.0)
    scheduler.cycle(HOUR)
    assert scheduler.jobs["el"].state is JobState.RUNNING and job.gpus == 16.0


def test_adopted_it_holds_the_counts_it_had() -> None:
    first = Scheduler(cluster(), team())
    sets = [
        {"name": "trainer", "pods": 4, "min_pods": 1, "resources_per_pod": {"gpus": 4}},
        {"name": "rollout", "pods": 8, "min_pods": 2, "resources_per_pod": {"gpus": 4}},
    ]
    spec = elastic_job("el", *sets)
    first.submit(spec, now=0)
    first.cycle(0)
    held = first.state.allocations["el"]
    assert [part.pods for part in held.parts] == [2, 2]  # trainer, then rollout: one block
    stored = allocation_from_json(allocation_to_json(held))
    assert stored is not None and [part.pods for part in stored.parts] == [2, 2]
    again = Scheduler(cluster(), team())
    (job,) = again.adopt_many([Adoption(spec, stored, 0.0)], now=10.0)
    assert job.held is not None and [r.pods for r in job.held.roles] == [2, 2]
    assert again.running_gpus("team") == 16.0
    # Counts outside the sets' are bad input; nothing is taken.
    other = Scheduler(cluster(), team())
    trainer, rollout = Allocation.of([0], [[0, 1, 2, 3]]), Allocation.of([1], [[0, 1, 2, 3]])
    below = Allocation.of_sets([trainer, rollout], keep_sets=True)  # the rollout's minimum is 2
    with pytest.raises(InputError, match="pod sets of 1-4, 2-8 pods"):
        other.adopt_many([Adoption(spec, below, 0.0)], 10.0)
    assert other.state.allocations == {}


# --- the service, the simulator and `place` --------------------------------------------------


def test_never_fits_is_judged_on_the_minimums() -> None:
    limits = ClusterLimits.of(small_cluster())  # 16 GPUs in racks of 8
    big = {"name": "workers", "pods": 6, "min_pods": 2, "resources_per_pod": {"gpus": 4}}
    written = {"name": "el", "account": ACCOUNT, "topology": {"required": "rack"}}
    limits.check(JobSpec.from_dict({**written, "pod_sets": [big]}), budgets())
    with pytest.raises(NeverFits):
        limits.check(
            JobSpec.from_dict({**written, "pod_sets": [{**big, "min_pods": 3}]}), budgets()
        )


def test_the_service_shows_the_counts_and_keeps_them_across_a_restart(tmp_path: Path) -> None:
    args = ("--cluster", "cluster.yaml", "--budgets", "budgets.yaml", "--backend", "dry-run")
    two = {"gpus": 2}
    job = {
        "name": "el",
        "account": ACCOUNT,
        "topology": {"required": "rack"},  # 8 GPUs
        "pod_sets": [
            {"name": "trainer", "pods": 2, "min_pods": 1, "resources_per_pod": two},
            {"name": "rollout", "pods": 4, "min_pods": 1, "resources_per_pod": two},
        ],
    }
    server = Server(tmp_path, *args).start()
    try:
        with server.client() as client:
            assert client.post("/v1/jobs", json=job).status_code == 201
            before = wait_running(client, "el")
            # The trainer takes its 2 pods with the rollout at 1; then the rollout what is left.
            assert [s["placed_pods"] for s in before["pod_sets"]] == [2, 2]
            assert [s["min_pods"] for s in before["pod_sets"]] == [1, 1]
            assert before["gpus"] == 8.0
        server.kill()
        server.start()
        with server.client() as client:
            after = client.get("/v1/jobs/el").json()
            assert after["state"] == "running"
            assert [s["placed_pods"] for s in after["pod_sets"]] == [2, 2]
            assert (after["nodes"], after["gpus"]) == (before["nodes"], 8.0)
    finally:
        server.stop()


WORKLOAD = """\
format: toposched-workload/1
name: elastic-lab
cluster: {builder: nvl72, zones: 1, blocks_per_zone: 2, racks_per_block: 2, nodes_per_rack: 2}
budget: {accounts: {rl: 60, lm: 40}}
jobs:
  - name: lm-0
    submit: 0
    runtime: 1h
    account: lm
    pods: 3
    resources_per_pod: {gpus: 4}
  - name: rl-0
    submit: 10m
    runtime: 2h
    account: rl
    topology: {required: block}
    pod_sets:
      - {name: trainer, pods: 8, min_pods: 2, resources_per_pod: {gpus: 4}}
"""


def test_the_simulator_charges_the_pods_placed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    summary = simulated_summary(WORKLOAD, tmp_path, capsys)
    assert summary["jobs"]["finished"] == 2
    # rl-0 gets the free block, 4 of its 8 pods, for 2 hours.
    teams = summary["fairness"]["teams"]
    assert teams["rl"]["delivered_gpu_hours"] == pytest.approx(32.0)
    assert teams["lm"]["delivered_gpu_hours"] == pytest.approx(12.0)


CLUSTER = {
    "levels": ["block", "rack"],
    "defaults": {"gpus": 4, "gpu_model": "H100", "cpu": 96, "memory": "1Ti"},
    "nodes": [
        {"name": f"n{i}", "labels": {"block": f"b{i // 4}", "rack": f"r{i // 2}"}} for i in range(8)
    ],
}


def test_place_shows_each_sets_pods_placed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster_path = tmp_path / "cluster.yaml"
    cluster_path.write_text(yaml.safe_dump(CLUSTER))
    jobs = tmp_path / "jobs.yaml"
    sets = [
        {"name": "trainer", "pods": 4, "min_pods": 2, "resources_per_pod": {"gpus": 4},
         "topology": {"slices": [{"level": "rack", "pods": 2}]}},
        {"name": "rollout", "pods": 8, "min_pods": 2, "resources_per_pod": {"gpus": 1}},
    ]  # fmt: skip
    jobs.write_text(
        yaml.safe_dump(
            [
                {"name": "first", "pods": 3, "resources_per_pod": {"gpus": 4}},
                {"name": "rl", "topology": {"required": "block"}, "pod_sets": sets},
            ]
        )
    )
    assert main(["place", str(jobs), "--cluster", str(cluster_path), "--json"]) == 0
    (_, rl) = json.loads(capsys.readouterr().out)["results"]
    parts = {part["name"]: part for part in rl["pod_sets"]}
    # Block b0 holds "first" (3 nodes). In b1 the trainer's 2 rack slices leave no room for
    # the rollout's minimum: the trainer gets one slice, one rack; then the rollout takes all
    # of its 8 one-GPU pods in the other rack.
    assert parts["trainer"]["placed_pods"] == 2 and parts["trainer"]["asks"] == "2-4 x 4 GPUs"
    assert parts["rollout"]["placed_pods"] == 8 and parts["rollout"]["asks"] == "2-8 x 1 GPU"
    assert parts["trainer"]["ranks"] == [0, 1] and parts["rollout"]["ranks"][0] == 2
    assert main(["place", str(jobs), "--cluster", str(cluster_path)]) == 0
    table = capsys.readouterr().out
    assert "2-4 x 4 GPUs" in table and "2 pods, ranks 0-1" in table
