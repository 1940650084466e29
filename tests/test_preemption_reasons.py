"""A preemptor's reason names the domain it frees and the kind of each victim."""

from __future__ import annotations

import pytest
from test_preemption_scenarios import (
    FAIR_SHARE,
    HOUR,
    RACK,
    evicted_ids,
    racks,
    run,
    scheduler,
    spec,
)


def test_the_reason_names_the_rack_and_counts_victims_by_the_rule_that_allowed_them() -> None:
    # Rack r1 (nodes 2-3): unallocated u0 on node 2, team-a's `low` (priority 1, min runtime
    # 1 h) on node 3, both since 0. Rack r0 is full of protected work. At 2 h, team-a's `high`
    # (priority 5, 2 pods in one rack) may take rack r1: u0 as unallocated work, `low` as a
    # lower-priority job of its own team past its min runtime.
    sched = scheduler(racks(2, 2))
    run(sched, spec("keep0", "team-b", min_runtime="8h"), [0], 0)
    run(sched, spec("keep1", "team-b", min_runtime="8h"), [1], 0)
    run(sched, spec("u0", "scratch", min_runtime=0), [2], 0)
    run(sched, spec("low", "team-a", priority=1, min_runtime="1h"), [3], 0)
    sched.submit(spec("high", "team-a", pods=2, priority=5, topology=RACK), 2 * HOUR)

    assert evicted_ids(sched.cycle(2 * HOUR)) == ["low", "u0"]
    # 4 GPUs x 2 h lost on each victim: 16 GPU-hours.
    assert sched.jobs["high"].reason == (
        "preempting 1 job of lower priority in the team and 1 unallocated job in rack "
        "z0-b0-r1 (16.0 GPU-hours of work lost); starts when they exit"
    )


def test_a_spread_gang_s_refusal_says_how_much_room_evicting_everyone_would_leave() -> None:
    # Two racks of two nodes. Rack r0: u0 (unallocated, may go) and team-a's own `mine`
    # (past its min runtime, but of the preemptor's priority: it may not go); team-b's jobs in
    # rack r1 are protected. team-a's 2-pod gang (no required rack) would have room for 1 pod
    # with every preemptible job gone: its reason says so, counted from the aggregates.
    sched = scheduler(racks(2, 2))
    run(sched, spec("u0", "scratch", min_runtime=0), [0], 0)
    run(sched, spec("mine", "team-a", min_runtime="1h"), [1], 0)
    for node in (2, 3):
        run(sched, spec(f"keep{node}", "team-b", min_runtime="8h"), [node], 0)
    sched.submit(spec("wide", "team-a", pods=2), 2 * HOUR)

    assert evicted_ids(sched.cycle(2 * HOUR)) == []
    reason = sched.jobs["wide"].reason
    assert (
        "no preemption: even evicting all 1 preemptible jobs leaves room for at most 1 of its "
        "2 pods (" in reason
    )
    # team-a's budget is 30% of the 16 GPUs: the gang asks for more than all of it.
    assert (
        "(it asks for 8 GPUs, more than its account's whole budget of 4.8: preemption never "
        "takes another account below its budget, so it starts only while other accounts leave "
        "part of theirs unused); no defragmentation" in reason
    )


@pytest.mark.parametrize(
    ("pods", "options", "noted"),
    [(2, {}, True), (1, {}, False), (2, {"contract": FAIR_SHARE}, False)],
    ids=["beyond the budget", "within the budget", "fair-share rule"],
)
def test_only_a_job_larger_than_its_whole_budget_is_told_so_under_the_budget_rule(
    pods: int, options: dict[str, object], noted: bool
) -> None:
    # Every GPU held by protected work of team-b and team-c: nothing may be preempted. team-a's
    # budget is 4.8 GPUs; its job asks for 4 or 8.
    sched = scheduler(racks(2, 2), **options)
    for node in range(4):
        run(
            sched,
            spec(f"keep{node}", "team-b" if node < 2 else "team-c", min_runtime="8h"),
            [node],
            0,
        )
    sched.submit(spec("ask", "team-a", pods=pods), HOUR)
    assert evicted_ids(sched.cycle(HOUR)) == []
    reason = sched.jobs["ask"].reason
    assert "no preemption: " in reason
    assert ("more than its account's whole budget of 4.8" in reason) is noted
