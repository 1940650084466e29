"""The reservation search finds the same earliest fit as releasing running jobs one at a time."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.changes import FEW_PODS
from toposched.cluster.state import MILLI_PER_GPU, Allocation, ClusterState, Health, distinct
from toposched.cluster.statement import Statement
from toposched.jobs.spec import JobSpec
from toposched.placement.search import Placement, place
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler
from toposched.scheduler.jobs import Job
from toposched.scheduler.release_order import count_held, count_held_together

HOUR = 3600.0
LEVELS = ("zone", "block", "rack")


def one_at_a_time(scheduler: Scheduler, job: Job) -> tuple[int, list[int]] | None:
    """The fewest running jobs, released in expected-end order, after which `job` fits, and
    the nodes it would get: one release and one placement at a time, then all undone."""
    statement = Statement(scheduler.state)
    try:
        for released, (_, owner) in enumerate(scheduler.ledger.releases, start=1):
            statement.release(owner)
            outcome = place(scheduler.state, job.request, scheduler.policy)
            if isinstance(outcome, Placement):
                return released, distinct(outcome.allocation.nodes).tolist()
        return None
    finally:
        statement.discard()


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[Scheduler, Job, list[int | None]]:
    """A small fleet filled by running jobs of 1-3 pods with random ends, some nodes cordoned
    or down, and a pending gang with topology constraints; plus hints to try."""
    topology = nvl72_cluster(
        zones=draw(st.integers(1, 2)),
        blocks_per_zone=draw(st.integers(1, 2)),
        racks_per_block=draw(st.integers(1, 3)),
        nodes_per_rack=draw(st.integers(1, 3)),
        gpus_per_node=4,
        cpu_milli=16_000,
        memory_mib=65_536,
    )
    state = ClusterState(topology)
    tree = BudgetTree.from_dict({"accounts": {"a": 50, "b": 50}})
    scheduler = Scheduler(state, tree, defragment=False)
    n_nodes = topology.n_nodes
    for index in range(draw(st.integers(n_nodes, 4 * n_nodes))):
        gpus = draw(st.sampled_from([1, 2, 4]))
        pods = draw(st.integers(1, 3))
        cpu = draw(st.sampled_from([0, 4_000]))
        nodes: list[int] = []
        taken: list[list[int]] = []
        for _ in range(pods):
            node = draw(st.integers(0, n_nodes - 1))
            free = np.flatnonzero(state.gpu_free_milli[node] == MILLI_PER_GPU).tolist()
            free = [gpu for gpu in free if [node, gpu] not in _pairs(nodes, taken)]
            if len(free) < gpus:
                continue
            nodes.append(node)
            taken.append(free[:gpus])
        if not nodes:
            continue
        fields: dict[str, Any] = {
            "name": f"run-{index}",
            "account": draw(st.sampled_from(["a", "b"])),
            "pods": len(nodes),
            "resources_per_pod": {"gpus": gpus, "cpu": f"{cpu}m"},
            "min_runtime": draw(st.sampled_from([0.0, HOUR, 2 * HOUR])),
        }
        if draw(st.booleans()):
            fields["expected_runtime"] = draw(st.sampled_from([HOUR, 2 * HOUR, 3 * HOUR, 5 * HOUR]))
        allocation = Allocation.of(nodes, taken, cpu_milli=cpu)
        if not _fits(state, allocation):
            continue
        start = -draw(st.sampled_from([0.0, 600.0, 1800.0]))
        scheduler.adopt(JobSpec.from_dict(fields), allocation, start_time=start, now=0.0)
    for node in draw(st.lists(st.integers(0, n_nodes - 1), max_size=3, unique=True)):
        state.set_health([node], draw(st.sampled_from([Health.CORDONED, Health.DOWN])))
    topology_fields: dict[str, Any] = {}
    required = draw(st.sampled_from([None, *LEVELS]))
    if required is not None:
        topology_fields["required"] = required
    pods = draw(st.integers(1, 2 * n_nodes))
    if draw(st.booleans()) and required != "rack":
        per_rack = draw(st.integers(1, topology.domain_sizes(len(LEVELS)).min()))
        pods = max(per_rack, pods // per_rack * per_rack)
        topology_fields["slices"] = [{"level": "rack", "pods": per_rack}]
    spec = JobSpec.from_dict(
        {
            "name": "big",
            "account": "a",
            "pods": pods,
            "resources_per_pod": {"gpus": draw(st.sampled_from([2, 4])), "cpu": "2000m"},
            "topology": topology_fields,
        }
    )
    job = scheduler.submit(spec, now=0.0)
    count = len(scheduler.ledger.releases)
    hints = draw(st.lists(st.one_of(st.none(), st.integers(0, count + 1)), min_size=1, max_size=3))
    return scheduler, job, hints


def _pairs(nodes: list[int], taken: list[list[int]]) -> list[list[int]]:
    return [[node, gpu] for node, gpus in zip(nodes, taken, strict=True) for gpu in gpus]


def _fits(state: ClusterState, allocation: Allocation) -> bool:
    statement = Statement(state)
    try:
        statement.allocate("probe", allocation)
    except Exception:  # noqa: BLE001 - any refusal means the draw does not fit
        return False
    statement.discard()
    return True


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_earliest_fit_equals_releasing_one_job_at_a_time(
    scenario: tuple[Scheduler, Job, list[int | None]],
) -> None:
    scheduler, job, hints = scenario
    expected = one_at_a_time(scheduler, job)
    fewest = scheduler.reservations.bounds(job.request).fewest()
    event("no fit" if expected is None else f"fits after {min(expected[0], 4)}+ releases")
    event("bound skips releases" if fewest is not None and fewest > 1 else "bound skips none")
    before = scheduler.state.snapshot()
    # The jobs released themselves (few pods, as here), or their parts freed (many).
    for hint, few_pods in itertools.product(hints, (FEW_PODS, 0)):
        scheduler.reservations.few_pods = few_pods
        fit = scheduler.reservations.earliest_fit(job, hint)
        found = None if fit is None else (fit.released, fit.nodes.tolist())
        assert found == expected, (hint, few_pods)
        if fit is not None:
            assert fit.release == scheduler.ledger.releases[fit.released - 1][0]
            needed = scheduler.reservations.bounds(job.request).released_for(fit.released)
            event("search skips releases" if needed < fit.released else "search skips none")
    after = scheduler.state.snapshot()
    assert all(np.array_equal(before[name], after[name]) for name in before)


def test_many_running_jobs_are_counted_together_as_one_by_one() -> None:
    """The leaves and GPU slots of a hundred running jobs at once (as a restart's first
    reservation reads them) are those counted job by job: gangs of no pods to whole racks,
    whole nodes and single GPUs, CPU-only pods."""
    topology = nvl72_cluster(zones=1, blocks_per_zone=2, racks_per_block=3, nodes_per_rack=6)
    scheduler = Scheduler(ClusterState(topology), BudgetTree.from_dict({"accounts": {"a": 100}}))
    leaf_of_node = scheduler.ledger.release_order.leaf_of_node
    n_leaves = scheduler.ledger.release_order.n_leaves
    rng = np.random.default_rng(7)
    allocations = []
    for _ in range(100):
        pods = int(rng.choice([0, 1, 3, 18]))
        width = int(rng.choice([0, 1, 4]))
        nodes = rng.integers(0, topology.n_nodes, pods).astype(np.int64)
        allocations.append(Allocation(nodes, rng.integers(0, 4, (pods, width)).astype(np.int64)))
    sizes, all_leaves, all_slots = count_held_together(allocations, leaf_of_node, n_leaves)
    ends = np.cumsum(sizes).tolist()
    together = [
        (all_leaves[start:end], all_slots[start:end])
        for start, end in zip([0, *ends[:-1]], ends, strict=True)
    ]
    for allocation, (leaves, slots) in zip(allocations, together, strict=True):
        one_leaves, one_slots = count_held(allocation, leaf_of_node, n_leaves)
        assert sorted(leaves.tolist()) == sorted(one_leaves.tolist())
        assert dict(zip(leaves.tolist(), slots.tolist(), strict=True)) == dict(
            zip(one_leaves.tolist(), one_slots.tolist(), strict=True)
        )
