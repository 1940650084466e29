"""A gang a node failure interrupts within its team's budget heads the next cycle."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_preemption_scenarios import RACK, assert_consistent, bound, racks, run, scheduler, spec

from toposched.cli.main import main
from toposched.cluster.state import Health
from toposched.scheduler.core import Scheduler
from toposched.scheduler.jobs import JobState


def two_racks_with_a_failed_gang(gang_account: str, gang_pods: int, **options: Any) -> Scheduler:
    """Two racks of 4 nodes x 4 GPUs (budgets: 9.6 GPUs for each team, none for scratch).

    Rack r0: `gang` (resumable, in one rack) on nodes 0 .. gang_pods - 1, then `b-protected`
    (team-b, 8 h) on node 2 when the gang leaves it free; node 3 free. Rack r1: team-b's
    protected `b-rest` on nodes 4-6, node 7 free. `c-pair` (team-c, two nodes in one rack, no
    usage yet) waits: no rack has two free nodes and every other job is protected. Node 1 then
    fails, and the gang is requeued with nodes 0, 3 (and 2 if it held it) free in rack r0.
    """
    sched = scheduler(racks(2, 4), **options)
    gang = spec("gang", gang_account, pods=gang_pods, resumable=True, topology=RACK)
    run(sched, gang, list(range(gang_pods)), 0)
    if gang_pods < 3:
        run(sched, spec("b-protected", "team-b", min_runtime="8h"), [2], 0)
    run(sched, spec("b-rest", "team-b", pods=3, min_runtime="8h"), [4, 5, 6], 0)
    sched.submit(spec("c-pair", "team-c", pods=2, topology=RACK), 10)
    assert bound(sched.cycle(10)) == {}
    failed = sched.set_health([1], Health.DOWN, 100)
    assert [job.job_id for job in failed] == ["gang"]
    return sched


def test_a_gang_within_its_budget_restarts_before_a_better_ranked_job() -> None:
    # The gang's 8 GPUs are within team-a's 9.6. team-c, with no usage, ranks above team-a
    # and would take rack r0's free nodes 0 and 3; the interrupted gang goes first instead.
    sched = two_racks_with_a_failed_gang("team-a", 2)
    assert "node failure" in sched.jobs["gang"].reason

    result = sched.cycle(100)

    assert bound(result) == {"gang": [0, 3]}
    assert sched.jobs["gang"].attempts == 2
    assert sched.jobs["c-pair"].state is JobState.PENDING
    assert_consistent(sched.state)


def test_in_the_queue_s_order_the_better_ranked_job_takes_the_surviving_nodes() -> None:
    sched = two_racks_with_a_failed_gang("team-a", 2, failed_first=False)

    result = sched.cycle(100)

    assert bound(result) == {"c-pair": [0, 3]}
    assert sched.jobs["gang"].state is JobState.PENDING


@pytest.mark.parametrize(
    ("account", "pods", "why"),
    [("team-a", 3, "12 GPUs, beyond team-a's budget of 9.6"), ("scratch", 2, "unallocated work")],
)
def test_a_gang_beyond_its_budget_or_unallocated_keeps_the_queue_s_order(
    account: str, pods: int, why: str
) -> None:
    sched = two_racks_with_a_failed_gang(account, pods)

    result = sched.cycle(100)

    assert bound(result)["c-pair"] == ([0, 2] if pods == 3 else [0, 3]), why
    assert sched.jobs["gang"].state is JobState.PENDING, why


def test_the_head_start_lasts_one_cycle() -> None:
    # Rack r0 has no room for the gang at the cycle after the failure (node 3 is taken by a
    # protected job meanwhile); once node 3 frees, the queue's order decides again.
    sched = scheduler(racks(2, 4))
    run(sched, spec("gang", "team-a", pods=2, resumable=True, topology=RACK), [0, 1], 0)
    run(sched, spec("b-protected", "team-b", min_runtime="8h"), [2], 0)
    run(sched, spec("b-rest", "team-b", pods=3, min_runtime="8h"), [4, 5, 6], 0)
    run(sched, spec("b-short", "team-b", min_runtime="8h"), [3], 0)
    sched.submit(spec("c-pair", "team-c", pods=2, topology=RACK), 10)
    sched.cycle(10)
    sched.set_health([1], Health.DOWN, 100)

    assert bound(sched.cycle(100)) == {}
    sched.finish("b-short", 200)
    result = sched.cycle(200)

    assert bound(result) == {"c-pair": [0, 3]}
    assert sched.jobs["gang"].state is JobState.PENDING


WORKLOAD = """\
cluster: {builder: superpod, spine_groups: 1, units_per_group: 1, nodes_per_unit: 5}
budget: {accounts: {a: 40, c: 40, e: 20}}
failures:
  - {time: 2h, nodes: [1]}
jobs:
  - {name: x, submit: 0, runtime: 4h, class: training, account: a, pods: 2, resumable: true,
     min_runtime: 1h, resources_per_pod: {gpus: 8}, topology: {required: su}}
  - {name: y, submit: 1, runtime: 10h, account: c, pods: 2, min_runtime: 8h,
     resources_per_pod: {gpus: 8}}
  - {name: w, submit: 1h, runtime: 1h, class: waiting, account: e, pods: 2,
     min_runtime: 1h, resources_per_pod: {gpus: 8}}
"""


@pytest.mark.parametrize(("mode", "wait_s"), [("first", 3 * 3600.0), ("in-order", 3600.0)])
def test_simulate_failed_gangs_option_decides_who_takes_the_surviving_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str, wait_s: float
) -> None:
    # Five nodes of 8 GPUs: x (team a, its whole budget of 16 GPUs) on two of them, y (team c,
    # protected) on two, one free; w (team e, no usage, 16 GPUs) waits for two from 1 h. Node 1
    # fails at 2 h. First: x restarts at once on the two healthy free nodes and w starts when
    # x ends, at 4 h; in order: w, better ranked, takes them at 2 h and x waits.
    path = tmp_path / "failure.yaml"
    path.write_text(WORKLOAD)
    arguments = ["simulate", "--workload", str(path), "--failed-gangs", mode]
    arguments += ["--no-progress", "--json", "--out", str(tmp_path)]
    assert main(arguments) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["classes"]["waiting"]["wait_s"]["p50"] == wait_s
    assert summary["conservation"]["holds"]


def test_simulate_names_a_bad_failed_gangs_setting(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--failed-gangs", "never"])
    assert "--failed-gangs" in capsys.readouterr().err


def test_with_spares_a_gang_left_without_a_spare_goes_first() -> None:
    # Spares: nodes 3 and 7 held. Node 3 goes down first, so rack r0 has no spare left when
    # node 1 fails under the gang; it heads the next cycle and restarts on nodes 0 and 2.
    for failed_first, expected in ((True, {"gang": [0, 2]}), (False, {"c-pair": [0, 2]})):
        sched = scheduler(racks(2, 4), spares=("rack", 1), failed_first=failed_first)
        run(sched, spec("gang", "team-a", pods=2, resumable=True, topology=RACK), [0, 1], 0)
        run(sched, spec("b-rest", "team-b", pods=3, min_runtime="8h"), [4, 5, 6], 0)
        sched.set_health([3], Health.DOWN, 5)
        sched.submit(spec("c-pair", "team-c", pods=2, topology=RACK), 10)
        assert bound(sched.cycle(10)) == {}
        sched.set_health([1], Health.DOWN, 100)
        assert "no spare" in sched.jobs["gang"].history[-1][1]

        assert bound(sched.cycle(100)) == expected, failed_first
