"""Refused preemptions kept across cycles change no decision: on short Ai2-like, frontier and
ITP-like simulations with several seeds, the decision log with refusals kept through changes
equals the log of a scheduler that keeps them only while nothing changed, while the debugging
check (a victim search wherever a refusal kept through a change answered) holds throughout;
and keeping them saves victim searches. Small cases show each change that must send a refusal
back to a search."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
from cycle_log import logged_run
from job_helpers import four_gpu_gang as spec

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState, Health
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.scheduler.decisions import Bind, Evict
from toposched.scheduler.kept_refusals import Keeping
from toposched.scheduler.refusals import RefusalCode
from toposched.workloads.ai2 import ai2_like
from toposched.workloads.frontier import frontier_lab
from toposched.workloads.model import Workload
from toposched.workloads.replay import default_traces_dir, itp_replay
from toposched.workloads.variants import split_among_teams

HOUR = 3600.0


@dataclass(frozen=True)
class Run:
    name: str
    workload: Callable[[], Workload]


RUNS = (
    Run("ai2-seed7", lambda: ai2_like(seed=7, days=0.5, gpus=256)),
    Run("ai2-seed8-team", lambda: ai2_like(seed=8, days=0.5, gpus=256, training_sizes="team")),
    Run("ai2-seed9", lambda: ai2_like(seed=9, days=0.3, gpus=512)),
    Run("frontier-seed5", lambda: frontier_lab(seed=5, days=3.0, racks_per_block=2)),
    Run("frontier-seed6", lambda: frontier_lab(seed=6, days=3.0, racks_per_block=3)),
)

TRACES = default_traces_dir()
ITP_RUNS = (
    # ITP replays draw nothing: their variety comes from the cluster, the teams and the span.
    Run("itp04-12-teams", lambda: split_among_teams(itp_replay(4, nodes=32, days=1.0), 12)),
    Run("itp04-5-teams", lambda: split_among_teams(itp_replay(4, nodes=16, days=1.0), 5)),
)
needs_itp = pytest.mark.skipif(
    not (TRACES / "itp").is_dir(), reason=f"ITP traces not found at {TRACES / 'itp'}"
)


@dataclass
class Log:
    lines: list[str]
    victim_searches: int = 0
    kept_answers: int = 0


def decisions(workload: Workload, keeping: Keeping, **settings: Any) -> Log:
    """The decision log of `workload` under a scheduler keeping refusals by `keeping`, with
    its victim searches and the refusals it answered through changes."""

    def configure(scheduler: Scheduler) -> None:
        scheduler.preemptor.kept.keeping = keeping

    run = logged_run(workload, configure, **settings)
    preemptor = run.scheduler.preemptor
    return Log(run.lines, preemptor.victim_searches, preemptor.kept.answered_through_changes)


def assert_same(run: str, want: Log, got: Log) -> None:
    assert want.lines, f"{run}: no decisions to compare"
    for number, (a, b) in enumerate(zip(want.lines, got.lines, strict=False), start=1):
        assert b == a, f"{run}: decision {number} differs"
    assert len(got.lines) == len(want.lines)


def decide_alike(run: Run) -> None:
    exact = decisions(run.workload(), Keeping.EXACT)
    verified = decisions(run.workload(), Keeping.VERIFY)
    assert_same(run.name, exact, verified)
    assert verified.victim_searches <= exact.victim_searches


@pytest.mark.parametrize("run", RUNS, ids=[run.name for run in RUNS])
def test_kept_refusals_decide_as_exact_ones(run: Run) -> None:
    decide_alike(run)


@needs_itp
@pytest.mark.parametrize("run", ITP_RUNS, ids=[run.name for run in ITP_RUNS])
def test_kept_refusals_decide_as_exact_ones_on_itp_replays(run: Run) -> None:
    decide_alike(run)


def test_kept_refusals_save_victim_searches() -> None:
    workload = RUNS[0].workload
    exact = decisions(workload(), Keeping.EXACT)
    kept = decisions(workload(), Keeping.THROUGH_CHANGES)
    assert_same(RUNS[0].name, exact, kept)
    assert kept.kept_answers > 0
    assert kept.victim_searches < exact.victim_searches * 0.8, (
        kept.victim_searches,
        exact.victim_searches,
    )


# --- each change that can give room sends a kept refusal back to a search -------------------


def one_team(keeping: Keeping = Keeping.VERIFY) -> Scheduler:
    """2 racks x 2 nodes x 4 GPUs (rack 0: nodes 0-1, rack 1: nodes 2-3), one team. `low-0`
    and `low-1` (priority 0) fill rack 0, protected until 1 h; `old` (priority 0, past its
    protection) and `top` (priority 20, protected until 30 min) fill rack 1. `wide` (priority
    10, a whole rack) may take the priority-0 jobs past their protection: only `old` for now,
    which leaves no rack with room. Its first cycle searches and is refused. Every cycle is a
    full one, so that each asks the kept refusals (a cycle after no events skips wide)."""
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))
    tree = BudgetTree.from_dict({"accounts": {"team": 100}})
    scheduler = Scheduler(state, tree, reserve_min_gpus=64, incremental=False)
    scheduler.preemptor.kept.keeping = keeping
    for node, (name, priority, start) in enumerate(
        (("low-0", 0, 0.0), ("low-1", 0, 0.0), ("old", 0, -2 * HOUR), ("top", 20, -HOUR / 2))
    ):
        job = spec(name, "team", priority=priority)
        allocation = Allocation.of([node], [[0, 1, 2, 3]])
        scheduler.adopt(job, allocation, start_time=start, now=0.0)
    scheduler.submit(spec("wide", "team", pods=2, priority=10, topology={"required": "rack"}), 0)
    assert not scheduler.cycle(60).decisions
    assert searches(scheduler) == 1
    return scheduler


def searches(scheduler: Scheduler) -> int:
    return scheduler.preemptor.victim_searches


def evicted(result: CycleResult) -> list[str]:
    return sorted(d.job_id for d in result.decisions if isinstance(d, Evict))


def test_a_protection_end_of_a_job_it_may_not_take_keeps_the_refusal() -> None:
    scheduler = one_team()
    # top's protection ended at 30 min, but wide may not take it (higher priority).
    assert not scheduler.cycle(HOUR / 2 + 60).decisions
    assert searches(scheduler) == 1
    assert scheduler.preemptor.kept.answered_through_changes == 1
    # The low jobs' protection ends: searched again, and both go.
    assert evicted(scheduler.cycle(HOUR)) == ["low-0", "low-1"]
    assert searches(scheduler) == 2


def verified_racks(running: Sequence[tuple[str, int, float]]) -> Scheduler:
    """2 racks x 2 nodes x 4 GPUs of one team, node i holding the i-th of `running` (name,
    priority, start) on all its GPUs; kept refusals verified by a search (`Keeping.VERIFY`)."""
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))
    tree = BudgetTree.from_dict({"accounts": {"team": 100}})
    scheduler = Scheduler(state, tree, reserve_min_gpus=64, incremental=False)
    scheduler.preemptor.kept.keeping = Keeping.VERIFY
    for node, (name, priority, start) in enumerate(running):
        job = spec(name, "team", priority=priority)
        scheduler.adopt(job, Allocation.of([node], [[0, 1, 2, 3]]), start_time=start, now=0.0)
    return scheduler


def test_a_protection_end_of_a_job_it_may_take_where_no_rack_gains_room_keeps_it() -> None:
    # Rack 0 holds low (priority 0, protected until 1 h) and peer (priority 20, past its
    # protection); rack 1 old (priority 0, past its protection) and top (priority 20). wide
    # (priority 10, a whole rack) may take old, too little. low's protection ends: wide may
    # take it, but rack 0 would still hold peer: kept, and checked by a search (VERIFY).
    running = (
        ("low", 0, 0.0),
        ("peer", 20, -2 * HOUR),
        ("old", 0, -2 * HOUR),
        ("top", 20, -2 * HOUR),
    )
    scheduler = verified_racks(running)
    scheduler.submit(spec("wide", "team", pods=2, priority=10, topology={"required": "rack"}), 0)
    assert not scheduler.cycle(60).decisions
    assert searches(scheduler) == 1

    assert not scheduler.cycle(HOUR + 60).decisions
    assert searches(scheduler) == 1
    assert scheduler.preemptor.kept.answered_through_changes == 1


def test_kept_only_while_nothing_changed_searches_at_every_protection_end() -> None:
    scheduler = one_team(Keeping.EXACT)
    assert not scheduler.cycle(HOUR / 2 + 60).decisions
    assert searches(scheduler) == 2


def test_a_release_where_no_rack_gains_room_keeps_the_refusal() -> None:
    scheduler = one_team()
    # low-0 ends: rack 0 has 4 GPUs free, and low-1 is protected.
    scheduler.finish("low-0", 120)
    assert not scheduler.cycle(120).decisions
    assert searches(scheduler) == 1


def test_a_release_where_a_rack_could_gain_room_is_searched_again() -> None:
    scheduler = one_team()
    # top ends: rack 1 could hold 8 GPUs with old gone.
    scheduler.finish("top", 120)
    assert evicted(scheduler.cycle(120)) == ["old"]
    assert searches(scheduler) == 2


def test_a_release_beside_jobs_it_may_not_take_keeps_the_refusal() -> None:
    # wide (priority 10) may take low-1 (priority 0, past its protection), too little in rack
    # 0. Rack 1 holds peer (priority 20, past its protection) and top (protected). top ends:
    # rack 1 has 4 GPUs free and 4 held by an unprotected job, as many as wide needs, but wide
    # may not take peer: kept, and checked by a search (VERIFY).
    running = (
        ("low-0", 0, 0.0),
        ("low-1", 0, -2 * HOUR),
        ("peer", 20, -2 * HOUR),
        ("top", 20, 0.0),
    )
    scheduler = verified_racks(running)
    scheduler.submit(spec("wide", "team", pods=2, priority=10, topology={"required": "rack"}), 0)
    assert not scheduler.cycle(60).decisions
    assert searches(scheduler) == 1

    scheduler.finish("top", 120)
    assert not scheduler.cycle(120).decisions
    assert searches(scheduler) == 1
    assert scheduler.preemptor.kept.answered_through_changes == 1


def test_a_health_change_forgets_every_refusal() -> None:
    scheduler = one_team()
    scheduler.set_health([3], Health.DRAINING, 120)
    scheduler.cycle(120)
    assert searches(scheduler) == 2


def test_a_budget_change_forgets_the_refusal() -> None:
    scheduler = one_team()
    scheduler.set_share("team", 50)
    assert not scheduler.cycle(120).decisions
    assert searches(scheduler) == 2


def test_a_running_job_s_new_priority_forgets_the_refusal() -> None:
    scheduler = one_team()
    scheduler.set_priority("low-0", 1, 120)
    assert not scheduler.cycle(120).decisions
    assert searches(scheduler) == 2
    # Past its protection, wide may now take top too: old and top go.
    scheduler.set_priority("top", 5, HOUR / 2 + 60)
    assert evicted(scheduler.cycle(HOUR / 2 + 60)) == ["old", "top"]


def test_a_start_takes_room_and_keeps_the_refusal() -> None:
    scheduler = one_team()
    scheduler.finish("low-0", 120)
    scheduler.submit(spec("fill", "team"), 120)
    assert [d.job_id for d in scheduler.cycle(120).decisions if isinstance(d, Bind)] == ["fill"]
    # The start since changed the cluster, yet took room only.
    assert not scheduler.cycle(180).decisions
    assert searches(scheduler) == 1
    assert scheduler.preemptor.kept.answered_through_changes == 2


def test_a_release_of_unallocated_work_it_could_take_keeps_the_refusal() -> None:
    # Rack 1 holds scav's unallocated job and top (priority 20, past its protection): wide
    # may take only scav's 4 GPUs there, too few. scav's job ends: the rack has 4 GPUs free
    # and 4 held by an unprotected job, as many as wide needs, but wide counted scav's GPUs
    # as room already, and may not take top: kept. Kept only while nothing changed, the
    # release sends it back to a search.
    for keeping, searched in ((Keeping.VERIFY, 1), (Keeping.EXACT, 2)):
        state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))
        tree = BudgetTree.from_dict({"accounts": {"team": 100, "scav": 0}})
        scheduler = Scheduler(state, tree, reserve_min_gpus=64)
        scheduler.preemptor.kept.keeping = keeping
        jobs = (
            spec("low-0", "team"),
            spec("low-1", "team"),
            spec("scav-2", "scav", min_runtime=0),
            spec("top", "team", priority=20),
        )
        for node, job in enumerate(jobs):
            start = -2 * HOUR if job.name == "top" else 0.0
            scheduler.adopt(job, Allocation.of([node], [[0, 1, 2, 3]]), start_time=start, now=0.0)
        wide = spec("wide", "team", pods=2, priority=10, topology={"required": "rack"})
        scheduler.submit(wide, 0)
        assert not scheduler.cycle(60).decisions
        scheduler.finish("scav-2", 120)
        assert not scheduler.cycle(120).decisions
        assert searches(scheduler) == searched, keeping


def capped_racks() -> Scheduler:
    """2 racks x 2 nodes x 4 GPUs. Team `a` (budget 75%) runs `a0` and `a1` (priority 20) on
    the first node of each rack; team `b` (budget 25%, 4 GPUs) runs `b0` and `b1` past their
    protection on the second, 4 GPUs beyond its budget. `wide` (team a, priority 10, a whole
    rack) may take either of b's jobs but not both (the budget cap), and with both gone no
    rack would hold it either: refused for want of room, caps or not. Every cycle is a full
    one; kept refusals are verified by a search (`Keeping.VERIFY`)."""
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))
    tree = BudgetTree.from_dict({"accounts": {"a": 75, "b": 25}})
    scheduler = Scheduler(state, tree, reserve_min_gpus=64, incremental=False)
    scheduler.preemptor.kept.keeping = Keeping.VERIFY
    for node, (name, account, priority) in enumerate(
        (("a0", "a", 20), ("b0", "b", 0), ("a1", "a", 20), ("b1", "b", 0))
    ):
        job = spec(name, account, priority=priority)
        allocation = Allocation.of([node], [[0, 1, 2, 3]])
        scheduler.adopt(job, allocation, start_time=-2 * HOUR, now=0.0)
    scheduler.submit(spec("wide", "a", pods=2, priority=10, topology={"required": "rack"}), 0)
    return scheduler


def test_a_refusal_for_want_of_room_stands_where_budget_caps_bind() -> None:
    scheduler = capped_racks()
    assert not scheduler.cycle(60).decisions
    refusal = scheduler.explain("wide", 60).refusal
    assert refusal is not None and refusal.code is RefusalCode.NO_ROOM
    assert searches(scheduler) == 1

    assert not scheduler.cycle(120).decisions
    assert searches(scheduler) == 1

    # a0 ends: rack 0 holds wide once b0 goes, within b's cap.
    scheduler.finish("a0", 180)
    assert evicted(scheduler.cycle(180)) == ["b0"]
    assert searches(scheduler) == 2
