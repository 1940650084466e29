"""Where unallocated work starts (`AdmissionRule`): not on reserved nodes due to their job
before the work's first checkpoint; elsewhere, or on nodes due later, as before."""

from __future__ import annotations

import argparse
from typing import Any

import pytest
from test_scheduler_cycle import adopt_on, job, small_cluster, two_teams

from toposched.cli.simulate import add_options, scheduler_factory
from toposched.cluster.errors import InputError
from toposched.scheduler.admission import AdmissionRule
from toposched.scheduler.core import CycleResult, Scheduler

HELD = (
    "the nodes reserved for big are closed to it: big is due there in 33 min, before this "
    "job would keep any work (in 1.0 h)"
)


def reserved_rack(rule: AdmissionRule | None, x2_runtime: float = 6000) -> Scheduler:
    """Rack r0 = nodes 0-1, rack r1 = nodes 2-3, each node held by team-a's x0-x3, expected
    to end at 1000, 3000, `x2_runtime` and 8000. `big` (2 pods in one rack) is reserved rack r0
    for 3000; at 1000 x0 ends (and x2 too when `x2_runtime` is 1000)."""
    scheduler = Scheduler(small_cluster(), two_teams(), grace_s=30.0, admission=rule)
    for node, runtime in enumerate((1000, 3000, x2_runtime, 8000)):
        adopt_on(scheduler, job(f"x{node}", "team-a", expected_runtime=runtime), node, range(4))
    rack = {"required": "rack"}
    scheduler.submit(job("big", "team-a", pods=2, expected_runtime=2000, topology=rack), 0)
    first = scheduler.cycle(0)
    assert first.reservation is not None and first.reservation.start_time == 3000.0
    scheduler.finish("x0", 1000)
    if x2_runtime == 1000:
        scheduler.finish("x2", 1000)
    return scheduler


def scavenger(**fields: Any) -> Any:
    """Unallocated work (min runtime 0) of team-b, one node, expected to run 10,000 s."""
    return job("scavenger", "team-b", min_runtime=0, **{"expected_runtime": 10_000, **fields})


def placed(result: CycleResult) -> list[tuple[str, list[int], bool]]:
    return [(d.job_id, d.allocation.nodes.tolist(), d.backfilled) for d in result.bound]


def test_without_the_rule_unallocated_work_backfills_onto_the_reserved_node() -> None:
    scheduler = reserved_rack(None)
    scheduler.submit(scavenger(resumable=True), 1000)
    assert placed(scheduler.cycle(1000)) == [("scavenger", [0], True)]


def test_unallocated_work_is_not_started_on_reserved_nodes_due_before_its_checkpoint() -> None:
    # The reservation is due at 3000, 2000 s from now; a resumable job checkpoints first after
    # an hour: started on node 0, it would be evicted with nothing kept.
    scheduler = reserved_rack(AdmissionRule(checkpoint_s=3600))
    scheduler.submit(scavenger(resumable=True), 1000)
    result = scheduler.cycle(1000)
    assert placed(result) == []
    assert result.reservation is not None and result.reservation.job_id == "big"
    reason = scheduler.jobs["scavenger"].reason
    assert reason.endswith(HELD)
    assert scheduler.explain("scavenger", 1000).text.endswith(HELD)
    # When big's turn comes nothing stands in its way and nothing is evicted: it starts on its
    # rack as soon as x1 ends.
    scheduler.finish("x1", 3000)
    at_3000 = scheduler.cycle(3000)
    assert [(d.job_id, sorted(d.allocation.nodes.tolist())) for d in at_3000.bound] == [
        ("big", [0, 1])
    ]
    assert scheduler.jobs["scavenger"].preemptions == 0


def test_it_starts_elsewhere_when_room_exists() -> None:
    # x2 ends at 1000 too: node 2, outside the reservation, takes the scavenger (a start
    # while a reservation fences nodes counts as backfilled), and the reserved node stays
    # free for big.
    scheduler = reserved_rack(AdmissionRule(checkpoint_s=3600), x2_runtime=1000)
    scheduler.submit(scavenger(resumable=True), 1000)
    assert placed(scheduler.cycle(1000)) == [("scavenger", [2], True)]


def test_reserved_nodes_due_after_its_first_checkpoint_take_it() -> None:
    # Checkpointing every 30 min, it keeps work before big is due (in 33 min): it backfills.
    scheduler = reserved_rack(AdmissionRule(checkpoint_s=1800))
    scheduler.submit(scavenger(resumable=True), 1000)
    assert placed(scheduler.cycle(1000)) == [("scavenger", [0], True)]


@pytest.mark.parametrize(
    ("fields", "started"),
    [
        # Cannot resume, ends long after 3000: whatever its checkpoints, it keeps nothing.
        ({"expected_runtime": 10_000}, False),
        # Cannot resume but ends at 2500, before big is due: it backfills.
        ({"expected_runtime": 1500}, True),
        # Cannot resume and declares no runtime: the longer of its min runtime (0) and the
        # checkpoint time (30 min) is 30 min, within the 33 min before big is due.
        ({"expected_runtime": None}, True),
    ],
)
def test_work_that_cannot_resume_keeps_nothing_until_it_ends(
    fields: dict[str, Any], started: bool
) -> None:
    scheduler = reserved_rack(AdmissionRule(checkpoint_s=1800))
    scheduler.submit(scavenger(resumable=False, **fields), 1000)
    expected = [("scavenger", [0], True)] if started else []
    assert placed(scheduler.cycle(1000)) == expected


def test_allocated_work_is_not_affected() -> None:
    # `short` (team-a's, behind big, allocated, ends at 2500) backfills onto the reserved node
    # as without the rule: allocated work may do so only when it ends before big is due.
    scheduler = reserved_rack(AdmissionRule(checkpoint_s=3600))
    scheduler.submit(job("short", "team-a", priority=-1, expected_runtime=1500), 1000)
    assert placed(scheduler.cycle(1000)) == [("short", [0], True)]


@pytest.mark.parametrize("value", [0, -5.0, float("inf"), True, "1h"])
def test_the_rule_refuses_a_bad_checkpoint_time(value: Any) -> None:
    with pytest.raises(InputError, match="checkpoint_s"):
        AdmissionRule(checkpoint_s=value)


def test_simulate_option_builds_the_rule() -> None:
    parser = argparse.ArgumentParser()
    add_options(parser)
    args = parser.parse_args(["--unallocated-admission", "30m"])
    scheduler = scheduler_factory(args)(small_cluster(), two_teams())
    assert isinstance(scheduler, Scheduler)
    assert scheduler.settings.admission == AdmissionRule(checkpoint_s=1800)
    default = scheduler_factory(parser.parse_args([]))(small_cluster(), two_teams())
    assert isinstance(default, Scheduler) and default.settings.admission is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--unallocated-admission", "0"])
