"""Per-job grace periods: what an evicted job declares, capped by the cluster, else the default."""

from __future__ import annotations

import pytest
from test_preemption_scenarios import RACK, evictions, racks, run, scheduler, spec

from toposched.cluster.errors import InputError
from toposched.cluster.state import Health
from toposched.jobs.spec import JobSpec


def test_victims_get_their_own_grace_period_capped_by_the_cluster() -> None:
    # One rack of 3 nodes of unallocated work (scratch has no budget): u0 asks 2 min to exit,
    # u1 asks 1 h (capped at the cluster's 10 min), u2 says nothing (the 30 s default). A
    # 3-node gang that requires the rack evicts all three.
    sched = scheduler(racks(1, 3))
    run(sched, spec("u0", "scratch", min_runtime=0, grace_period="2m"), [0], 0)
    run(sched, spec("u1", "scratch", min_runtime=0, grace_period="1h"), [1], 0)
    run(sched, spec("u2", "scratch", min_runtime=0), [2], 0)
    sched.submit(spec("gang", "team-a", pods=3, topology=RACK), 100)
    graces = {e.job_id: e.grace_s for e in evictions(sched.cycle(100))}
    assert graces == {"u0": 120.0, "u1": 600.0, "u2": 30.0}


def test_the_cluster_sets_the_default_and_the_cap() -> None:
    sched = scheduler(racks(1, 2), grace_s=5.0, max_grace_s=60.0)
    run(sched, spec("u0", "scratch", min_runtime=0, grace_period="2m"), [0], 0)
    run(sched, spec("u1", "scratch", min_runtime=0), [1], 0)
    sched.submit(spec("gang", "team-a", pods=2, topology=RACK), 100)
    graces = {e.job_id: e.grace_s for e in evictions(sched.cycle(100))}
    assert graces == {"u0": 60.0, "u1": 5.0}


def test_a_draining_node_gives_its_job_the_declared_grace() -> None:
    sched = scheduler(racks(1, 2))
    run(sched, spec("u0", "scratch", min_runtime=0, grace_period="45s"), [0], 0)
    sched.set_health([0], Health.DRAINING, 10)
    assert [(e.job_id, e.rule, e.grace_s) for e in evictions(sched.cycle(10))] == [
        ("u0", "node_draining", 45.0)
    ]


def test_grace_period_reads_back_and_bad_values_are_named() -> None:
    job = spec("j", "team-a", grace_period="1m30s")
    assert job.grace_period == 90.0
    assert JobSpec.from_dict(job.to_dict()) == job
    assert "grace_period" not in spec("k", "team-a").to_dict()
    with pytest.raises(InputError) as error:
        spec("bad", "team-a", grace_period="-5s")
    assert error.value.field == "grace_period"
