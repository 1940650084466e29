"""Spare nodes per domain: a failed node's gang restarts inside its rack on a held spare."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_preemption_scenarios import (
    RACK,
    assert_consistent,
    bound,
    racks,
    run,
    scheduler,
    spec,
)

from toposched.cli.main import main
from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.errors import InputError
from toposched.cluster.state import Closure, ClusterState, Health
from toposched.jobs.spec import JobSpec
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler
from toposched.scheduler.jobs import JobState
from toposched.scheduler.spares import SparePool
from toposched.sim.engine import simulate
from toposched.sim.metrics import conservation
from toposched.workloads.model import NodeFailure, Workload, WorkloadJob, build_cluster


def held(sched: Scheduler) -> list[int]:
    assert sched.spares is not None
    return sched.spares.nodes.tolist()


def packed_racks(**options: Any) -> Scheduler:
    """Two racks of 4 nodes x 4 GPUs, one spare per rack (nodes 3 and 7 are held).

    Rack r0: `gang` (team-a, resumable, 3 pods in one rack) on nodes 0-2.
    Rack r1: `other` (team-b, protected for 8 h) on nodes 4-6.
    """
    sched = scheduler(racks(2, 4), spares=("rack", 1), **options)
    run(sched, spec("gang", "team-a", pods=3, resumable=True, topology=RACK), [0, 1, 2], 0)
    run(sched, spec("other", "team-b", pods=3, min_runtime="8h"), [4, 5, 6], 0)
    return sched


def test_spares_are_the_last_idle_nodes_of_each_rack_and_take_no_ordinary_work() -> None:
    sched = packed_racks()
    assert held(sched) == [3, 7]
    assert (sched.state.health[[3, 7]] == Health.HEALTHY).all()  # held, not cordoned
    assert (sched.state.closed[[3, 7]] == Closure.SPARE).all()
    sched.submit(spec("small", "team-c"), 10)
    result = sched.cycle(10)
    assert bound(result) == {}
    assert sched.jobs["small"].state is JobState.PENDING


def test_a_failed_nodes_gang_is_re_placed_inside_its_rack_using_a_spare() -> None:
    sched = packed_racks()
    sched.submit(spec("small", "team-c"), 10)
    sched.cycle(10)

    failed = sched.set_health([1], Health.DOWN, 500)

    assert [job.job_id for job in failed] == ["gang"]
    gang = sched.jobs["gang"]
    assert gang.state is JobState.PENDING
    assert "spare" in gang.reason
    # The same cycle restarts the gang on its surviving nodes 0 and 2 plus rack r0's spare,
    # and the higher-ranked small job (team-c has no usage) cannot take any of them.
    result = sched.cycle(500)
    assert bound(result) == {"gang": [0, 2, 3]}
    assert gang.attempts == 2
    assert sched.jobs["small"].state is JobState.PENDING
    assert held(sched) == [7]
    assert_consistent(sched.state)

    # Repaired, node 1 refills rack r0's pool instead of taking work.
    sched.set_health([1], Health.HEALTHY, 900)
    assert held(sched) == [1, 7]
    assert sched.state.health[1] == Health.HEALTHY
    assert sched.state.closed[1] == Closure.SPARE
    assert bound(sched.cycle(900)) == {}


def test_without_spares_the_gang_cannot_stay_in_its_rack() -> None:
    # The control: no node held back, so `filler` took node 3 and rack r0 has no room.
    sched = scheduler(racks(2, 4))
    run(sched, spec("gang", "team-a", pods=3, resumable=True, topology=RACK), [0, 1, 2], 0)
    run(sched, spec("other", "team-b", pods=3, min_runtime="8h"), [4, 5, 6], 0)
    run(sched, spec("filler", "team-b", min_runtime="8h"), [3], 0)
    sched.set_health([1], Health.DOWN, 500)
    result = sched.cycle(500)
    assert bound(result) == {}
    assert sched.jobs["gang"].state is JobState.PENDING


def test_a_gang_that_is_not_resumable_fails_and_leaves_the_spares_alone() -> None:
    sched = scheduler(racks(2, 4), spares=("rack", 1))
    run(sched, spec("fragile", "team-a", pods=3, topology=RACK), [0, 1, 2], 0)
    failed = sched.set_health([1], Health.DOWN, 500)
    assert failed[0].state is JobState.FAILED
    assert held(sched) == [3, 7]


def test_a_spare_outside_the_gangs_required_rack_is_not_used() -> None:
    # One block of two racks of 3 nodes, one spare per block: node 5, in rack r1. A gang that
    # requires one rack cannot use it, so it is requeued to be placed anew.
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=3))
    sched = scheduler(state, spares=("block", 1))
    assert held(sched) == [5]
    run(sched, spec("gang", "team-a", pods=2, resumable=True, topology=RACK), [0, 1], 0)
    sched.set_health([1], Health.DOWN, 500)
    gang = sched.jobs["gang"]
    assert gang.nomination is None
    assert "no spare node" in gang.history[-1][1]
    assert held(sched) == [5]
    # Placed anew inside rack r0 (node 2 is free), the spare untouched.
    assert bound(sched.cycle(500)) == {"gang": [0, 2]}


def test_gangs_sharing_a_failed_node_follow_it_to_the_same_spare() -> None:
    sched = scheduler(racks(1, 4), spares=("rack", 1))
    run(sched, spec("left", "team-a", pods=2, gpus=2, resumable=True), [0, 1], 0, [0, 1])
    run(sched, spec("right", "team-b", pods=2, gpus=2, resumable=True), [1, 2], 0, [2, 3])
    sched.set_health([1], Health.DOWN, 500)
    result = sched.cycle(500)
    assert bound(result) == {"left": [0, 3], "right": [2, 3]}
    assert_consistent(sched.state)


def test_a_spare_that_fails_before_the_restart_is_replaced_by_a_fresh_placement() -> None:
    sched = packed_racks()
    sched.set_health([1], Health.DOWN, 500)
    sched.set_health([3], Health.DOWN, 501)
    result = sched.cycle(501)
    # Rack r0 has only nodes 0 and 2 left: the gang waits rather than break its rack.
    assert bound(result) == {}
    gang = sched.jobs["gang"]
    assert gang.state is JobState.PENDING
    assert any("placing anew" in text for _, text in gang.history)
    assert_consistent(sched.state)


def test_a_spare_going_down_leaves_the_pool_and_returns_when_repaired() -> None:
    sched = scheduler(racks(2, 4), spares=("rack", 1))
    sched.set_health([7], Health.DOWN, 10)
    assert held(sched) == [3]
    assert sched.state.health[7] == Health.DOWN
    sched.set_health([7], Health.HEALTHY, 20)
    assert held(sched) == [3, 7]
    assert sched.state.closed[7] == Closure.SPARE
    # Marking a held spare healthy keeps it held; cordoned by an operator, it is both, and
    # uncordoned it is held still.
    sched.set_health([3], Health.HEALTHY, 30)
    assert sched.state.closed[3] == Closure.SPARE
    sched.set_health([3], Health.CORDONED, 40)
    assert sched.state.closed[3] == Closure.SPARE | Closure.UNHEALTHY
    sched.set_health([3], Health.HEALTHY, 50)
    assert (held(sched), int(sched.state.closed[3])) == ([3, 7], Closure.SPARE)


@pytest.mark.parametrize(
    ("spares", "field"),
    [(("aisle", 1), "spares.level"), (("rack", 0), "spares.per_domain")],
)
def test_bad_spare_settings_are_named(spares: tuple[str, int], field: str) -> None:
    with pytest.raises(InputError) as error:
        scheduler(racks(1, 4), spares=spares)
    assert error.value.field == field


def test_a_busy_rack_holds_only_its_idle_nodes() -> None:
    sched = scheduler(racks(2, 2))
    run(sched, spec("busy", "team-a", pods=2), [0, 1], 0)
    pool = SparePool(sched.state, "rack", 2)
    assert pool.nodes.tolist() == [2, 3]
    assert np.array_equal(pool.count, [0, 2])


def test_a_simulated_failure_restarts_the_gang_on_the_spare_and_gpu_seconds_balance() -> None:
    # One scalable unit of three 8-GPU nodes; node 2 is held. "x" (2 pods x 8 GPUs in one
    # unit, resumable, checkpoints every 30 min) runs on nodes 0-1 from 0 for 2 h. Node 1
    # fails at 4,000 s: 400 s since the 3,600 s checkpoint are lost and x restarts at once on
    # nodes 0 and 2, ending at 4,000 + 3,600 = 7,600 s, when node 1 is repaired and held.
    cluster = {"builder": "superpod", "spine_groups": 1, "units_per_group": 1, "nodes_per_unit": 3}
    spec_x = JobSpec.from_dict(
        {
            "name": "x",
            "account": "a",
            "pods": 2,
            "resumable": True,
            "resources_per_pod": {"gpus": 8},
            "topology": {"required": "su"},
        }
    )
    workload = Workload(
        name="three-nodes",
        topology=build_cluster(cluster),
        cluster=cluster,
        budget={"accounts": {"a": {"share": 100}}},
        jobs=[WorkloadJob(spec_x, 0.0, 7200.0, "job", None, 1800.0)],
        failures=[NodeFailure(4000.0, (1,), repair_after=3600.0)],
        horizon=10_000.0,
    )
    pools: list[SparePool] = []

    def with_spares(state: ClusterState, tree: BudgetTree) -> Scheduler:
        sched = Scheduler(state, tree, spares=("su", 1))
        assert sched.spares is not None
        pools.append(sched.spares)
        return sched

    result = simulate(workload, with_spares)
    record = result.records["x"]
    assert record.interruptions == 1
    assert record.lost_gpu_seconds == 16 * 400.0
    assert (record.end_time, record.state) == (7600.0, "finished")
    assert pools[0].nodes.tolist() == [1]
    # Held spares are idle: node 2 until 4,000 s, node 1 from its repair at 7,600 s.
    assert result.integrals.delivered == 16 * 7600.0
    assert result.integrals.unavailable == 8 * 3600.0
    assert result.integrals.idle == 8 * 4000.0 + 8 * 2400.0 + 16 * 2400.0
    assert conservation(result).holds(1e-12)


def test_simulate_takes_spares_and_names_a_bad_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arguments = ["simulate", "--workload", "ai2", "--days", "0.05", "--gpus", "64"]
    arguments += ["--no-progress", "--json", "--out", str(tmp_path)]
    assert main([*arguments, "--spares", "su:1"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["conservation"]["holds"]
    with pytest.raises(SystemExit):
        main([*arguments, "--spares", "su"])
    assert "expected LEVEL:N" in capsys.readouterr().err
    assert main([*arguments, "--spares", "aisle:1"]) != 0
    assert "spares.level" in capsys.readouterr().err
