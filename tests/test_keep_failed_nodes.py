"""A gang a node failure interrupts keeps the nodes it ran on until it restarts
(`keep_failed_nodes`, docs/preemption.md, "Interrupted gangs keep their nodes")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli_eviction_worth import assert_exits_2_before_the_run
from test_failed_first import WORKLOAD as FAILED_FIRST_WORKLOAD
from test_failed_first import two_racks_with_a_failed_gang
from test_preemption_scenarios import (
    RACK,
    assert_consistent,
    bound,
    evicted_ids,
    racks,
    run,
    scheduler,
    spec,
)

from toposched.cli.main import main
from toposched.cluster.state import Health
from toposched.scheduler.core import Scheduler
from toposched.scheduler.interruptions import KeptFrom
from toposched.scheduler.jobs import JobState


def test_a_gang_beyond_its_budget_restarts_where_it_was() -> None:
    # The gang's 12 GPUs are beyond team-a's 9.6: it keeps the queue's order, and without the
    # rule c-pair (team-c, better ranked) takes nodes 0 and 2 (tests/test_failed_first.py).
    # Its nodes kept, c-pair finds no two free nodes in a rack and the gang restarts on its
    # surviving nodes 0 and 2 and the free node 3 of its rack.
    sched = two_racks_with_a_failed_gang("team-a", 3, keep_failed_nodes=3600.0)
    assert sched.jobs["gang"].reason.endswith("its nodes are kept for it")

    result = sched.cycle(100)

    assert bound(result) == {"gang": [0, 2, 3]}
    assert sched.jobs["c-pair"].state is JobState.PENDING
    assert_consistent(sched.state)


def one_failed_gang(
    keep: float | None, kept_from: KeptFrom = KeptFrom.ALL, arrival: str = "team-b"
) -> Scheduler:
    """Two racks of 2 nodes x 4 GPUs: `gang` (team-a, resumable, one rack) on nodes 0-1,
    team-b's protected `b-rest` on nodes 2-3. Node 1 fails at 100 s; the gang fits nowhere
    and may evict no one. `b-one` (of `arrival`'s account, one node) arrives at 200 s;
    `keep`: seconds the gang's nodes are kept (None: not kept), from `kept_from`."""
    sched = scheduler(racks(2, 2), keep_failed_nodes=keep, keep_failed_nodes_from=kept_from)
    run(sched, spec("gang", "team-a", pods=2, resumable=True, topology=RACK), [0, 1], 0)
    run(sched, spec("b-rest", "team-b", pods=2, min_runtime="8h"), [2, 3], 0)
    sched.set_health([1], Health.DOWN, 100)
    assert bound(sched.cycle(100)) == {}
    sched.submit(spec("b-one", arrival), 200)
    return sched


@pytest.mark.parametrize(
    ("keep", "at_200", "at_300"), [(3600.0, {}, {"gang": [0, 1]}), (None, {"b-one": [0]}, {})]
)
def test_the_gang_restarts_in_place_once_its_failed_node_is_repaired(
    keep: float | None, at_200: dict[str, list[int]], at_300: dict[str, list[int]]
) -> None:
    sched = one_failed_gang(keep)

    assert bound(sched.cycle(200)) == at_200
    sched.set_health([1], Health.HEALTHY, 300)
    assert bound(sched.cycle(300)) == at_300
    assert_consistent(sched.state)


@pytest.mark.parametrize(
    ("arrival", "at_200", "at_300"),
    [("team-b", {"b-one": [0]}, {}), ("scratch", {}, {"gang": [0, 1]})],
)
def test_kept_from_unallocated_work_only(
    arrival: str, at_200: dict[str, list[int]], at_300: dict[str, list[int]]
) -> None:
    # Budgeted work may still take node 0; unallocated work (scratch has no budget) may not.
    sched = one_failed_gang(3600.0, KeptFrom.UNALLOCATED, arrival)

    assert bound(sched.cycle(200)) == at_200
    sched.set_health([1], Health.HEALTHY, 300)
    assert bound(sched.cycle(300)) == at_300
    assert_consistent(sched.state)


def three_racks_with_a_failed_gang(kept_from: KeptFrom, arrival: str | None) -> Scheduler:
    """Three racks of 2 nodes x 4 GPUs (budgets of 8 GPUs for team-a, team-b and team-c,
    none for scratch): `gang` (team-a, resumable, one rack) on nodes 0-1, team-a's protected
    `a-rest` on nodes 2-3 and team-b's `b-rest` on nodes 4-5. Node 1 fails at 100 s: team-a
    and team-b still run their whole budgets, the gang is beyond team-a's, fits nowhere and
    may evict no one. `b-one` (one node of `arrival`'s account; None: no arrival) arrives at
    200 s. The gang's nodes are kept for an hour from `kept_from`."""
    sched = scheduler(racks(3, 2), keep_failed_nodes=3600.0, keep_failed_nodes_from=kept_from)
    run(sched, spec("gang", "team-a", pods=2, resumable=True, topology=RACK), [0, 1], 0)
    run(sched, spec("a-rest", "team-a", pods=2, min_runtime="8h"), [2, 3], 0)
    run(sched, spec("b-rest", "team-b", pods=2, min_runtime="8h"), [4, 5], 0)
    sched.set_health([1], Health.DOWN, 100)
    assert bound(sched.cycle(100)) == {}
    if arrival is not None:
        sched.submit(spec("b-one", arrival), 200)
    return sched


@pytest.mark.parametrize(
    ("kept_from", "arrival", "at_200", "at_300"),
    [
        # team-c runs below its budget (owed GPU-time): it may take node 0.
        (KeptFrom.ALL_BUT_OWED, "team-c", {"b-one": [0]}, {}),
        # team-b runs its whole budget and scratch has none: they may not.
        (KeptFrom.ALL_BUT_OWED, "team-b", {}, {"gang": [0, 1]}),
        (KeptFrom.ALL_BUT_OWED, "scratch", {}, {"gang": [0, 1]}),
        # Kept from unallocated work only, team-b's job takes node 0; from every job, team-c's
        # waits too.
        (KeptFrom.UNALLOCATED, "team-b", {"b-one": [0]}, {}),
        (KeptFrom.ALL, "team-c", {}, {"gang": [0, 1]}),
    ],
)
def test_kept_from_every_job_but_those_of_teams_owed_gpu_time(
    kept_from: KeptFrom, arrival: str, at_200: dict[str, list[int]], at_300: dict[str, list[int]]
) -> None:
    sched = three_racks_with_a_failed_gang(kept_from, arrival)
    assert sched.owed_accounts() == ({"team-c"} if arrival == "team-c" else set())

    assert bound(sched.cycle(200)) == at_200
    sched.set_health([1], Health.HEALTHY, 300)
    assert bound(sched.cycle(300)) == at_300
    assert_consistent(sched.state)


def test_a_gang_whose_turn_comes_first_among_those_kept_from_still_sees_its_nodes() -> None:
    # Alone in the queue, the gang's own turn is the cycle's first of a job the nodes are kept
    # from (team-a runs its whole budget without it): the fence keeps them from the others,
    # not from the gang, which restarts there once node 1 is repaired.
    sched = three_racks_with_a_failed_gang(KeptFrom.ALL_BUT_OWED, None)
    sched.set_health([1], Health.HEALTHY, 200)

    assert bound(sched.cycle(200)) == {"gang": [0, 1]}
    assert_consistent(sched.state)


@pytest.mark.parametrize(
    ("kept_from", "at_120"),
    [
        (KeptFrom.UNALLOCATED, {}),
        (KeptFrom.ALL_BUT_OWED, {}),
        # Kept from every job, the nodes went with the nomination.
        (KeptFrom.ALL, {"u2": [0, 3]}),
    ],
)
def test_nodes_are_kept_again_when_the_gang_s_nomination_falls_through(
    kept_from: KeptFrom, at_120: dict[str, list[int]]
) -> None:
    # Three racks of 2 nodes x 4 GPUs: `gang` (team-a, one rack) on nodes 0-1, scratch's
    # unallocated `u1` on nodes 2-3, team-b's protected `b-rest` on nodes 4-5. Node 1 fails at
    # 100 s: the gang evicts u1 to restart on rack 1, and its nodes 0-1 are left to that
    # nomination. Node 2 fails at 110 s, before the gang starts: the nomination no longer holds
    # it, and nothing is left to evict. scratch's `u2` (two nodes anywhere) arrives at 120 s:
    # it would take the gang's node 0 and the free node 3, and be evicted by the gang once
    # node 1 is back. Kept again, node 0 waits for the gang, which restarts there at 300 s.
    sched = scheduler(racks(3, 2), keep_failed_nodes=3600.0, keep_failed_nodes_from=kept_from)
    run(sched, spec("gang", "team-a", pods=2, resumable=True, topology=RACK), [0, 1], 0)
    run(sched, spec("u1", "scratch", pods=2), [2, 3], 0)
    run(sched, spec("b-rest", "team-b", pods=2, min_runtime="8h"), [4, 5], 0)
    sched.set_health([1], Health.DOWN, 100)
    assert evicted_ids(sched.cycle(100)) == ["u1"]
    sched.set_health([2], Health.DOWN, 110)
    assert bound(sched.cycle(110)) == {}
    assert sched.jobs["gang"].nomination is None

    sched.submit(spec("u2", "scratch", pods=2), 120)
    assert bound(sched.cycle(120)) == at_120
    sched.set_health([1], Health.HEALTHY, 300)
    assert bound(sched.cycle(300)) == ({} if at_120 else {"gang": [0, 1]})
    assert_consistent(sched.state)


def test_the_nodes_go_back_to_the_queue_once_kept_for_the_bound() -> None:
    # Kept for 50 s from the failure at 100 s: the gang's turn at 200 s gives them back, and
    # b-one takes node 0 then or at the next cycle (whichever comes after the gang's turn).
    sched = one_failed_gang(keep=50.0)

    started = bound(sched.cycle(200)) | bound(sched.cycle(250))

    assert started == {"b-one": [0]}
    assert "no longer kept" in sched.jobs["gang"].history[-1][1]


def test_a_cancelled_gang_leaves_its_nodes_to_the_queue() -> None:
    sched = one_failed_gang(keep=3600.0)
    assert bound(sched.cycle(200)) == {}

    sched.cancel("gang", 250)

    assert bound(sched.cycle(250)) == {"b-one": [0]}
    assert_consistent(sched.state)


# The failed-first workload with team a's budget halved: its gang, interrupted at 2 h, runs
# beyond its budget.
BEYOND_BUDGET = FAILED_FIRST_WORKLOAD.replace("{a: 40, c: 40, e: 20}", "{a: 20, c: 40, e: 40}")
assert BEYOND_BUDGET != FAILED_FIRST_WORKLOAD


@pytest.mark.parametrize(
    ("flags", "wait_s"),
    [
        ([], 3600.0),
        (["--keep-failed-nodes", "1h"], 3 * 3600.0),
        (["--keep-failed-nodes", "1h", "--keep-failed-nodes-from", "all-but-owed"], 3600.0),
    ],
)
def test_simulate_keeps_the_failed_gangs_nodes_on_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], wait_s: float
) -> None:
    # Five nodes of 8 GPUs: x (team a, 16 GPUs, beyond its budget of 8) on two of them, y
    # (team c, protected) on two, one free; w (team e, no usage, 16 GPUs) waits for two from
    # 1 h. Node 1 fails at 2 h. By default w, better ranked, takes x's surviving node and the
    # free one; with the rule x restarts there at once and w starts when x ends, at 4 h;
    # kept from all but owed teams, w's (running nothing, below its budget) may take them.
    path = tmp_path / "failure.yaml"
    path.write_text(BEYOND_BUDGET)
    arguments = ["simulate", "--workload", str(path), "--no-progress", "--json"]
    arguments += ["--out", str(tmp_path), *flags]
    assert main(arguments) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["classes"]["waiting"]["wait_s"]["p50"] == wait_s
    assert summary["conservation"]["holds"]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--keep-failed-nodes", "0"], "a duration > 0"),
        (["--keep-failed-nodes", "soon"], "--keep-failed-nodes"),
        (["--keep-failed-nodes-from", "all"], "applies only with --keep-failed-nodes"),
        (["--keep-failed-nodes", "1h", "--keep-failed-nodes-from", "queue"], "invalid choice"),
    ],
)
def test_bad_keep_values_exit_2_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    assert_exits_2_before_the_run(tmp_path, capsys, flags, message)


def test_a_kept_gang_takes_its_turn_where_jobs_alike_ahead_were_answered_alike() -> None:
    # team-a's `a-twin1` and `a-twin2`, of the gang's shape, wait ahead of it (same submit
    # time, names first). Node 1 is repaired at 200 s: the twins, kept from the gang's nodes,
    # fit nowhere, the second answered alike the first; the gang, which would be answered
    # alike them, has its nodes opened at its own turn and restarts there.
    sched = scheduler(
        racks(3, 2), keep_failed_nodes=3600.0, keep_failed_nodes_from=KeptFrom.ALL_BUT_OWED
    )
    gang = spec("gang", "team-a", pods=2, resumable=True, topology=RACK)
    for twin in ("a-twin1", "a-twin2"):
        sched.submit(gang.model_copy(update={"name": twin}), 0)
    run(sched, gang, [0, 1], 0)
    run(sched, spec("a-rest", "team-a", pods=2, min_runtime="8h"), [2, 3], 0)
    run(sched, spec("b-rest", "team-b", pods=2, min_runtime="8h"), [4, 5], 0)
    sched.set_health([1], Health.DOWN, 100)
    assert bound(sched.cycle(100)) == {}
    sched.set_health([1], Health.HEALTHY, 200)

    assert bound(sched.cycle(200)) == {"gang": [0, 1]}
    assert_consistent(sched.state)
