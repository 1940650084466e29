"""A preemptor's reason names the domain it frees and the kind of each victim."""

from __future__ import annotations

from test_preemption_scenarios import HOUR, RACK, evicted_ids, racks, run, scheduler, spec


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
