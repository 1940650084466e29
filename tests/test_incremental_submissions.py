"""Cycles after submissions only skip the pending jobs the last cycle answered alike, and decide
what a full cycle decides: on short Ai2-like, frontier, ITP and openb simulations with several
seeds, the decision log with the shortcut equals the log of a scheduler whose every cycle walks
every pending job, and the shortcut is taken."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cycle_log import CycleLog, logged_run
from job_specs import job

from toposched.cli.main import main
from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState
from toposched.cluster.units import DAY, HOUR
from toposched.policy.budget import BudgetTree
from toposched.policy.checkpoint_wait import CheckpointWait
from toposched.policy.contract import Contract
from toposched.policy.owed_standing import OwedOrder
from toposched.policy.worth import EvictionWorth, WorthScope
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.scheduler.decisions import Evict, Reserve
from toposched.scheduler.incremental import Outcome, differences
from toposched.scheduler.jobs import ReasonCode
from toposched.scheduler.refusals import Refusal, RefusalCode
from toposched.scheduler.turn import FullCycle
from toposched.workloads.ai2 import ai2_like
from toposched.workloads.frontier import frontier_lab
from toposched.workloads.model import Workload
from toposched.workloads.replay import default_traces_dir, itp_replay, openb_replay
from toposched.workloads.variants import with_resumable_share

TRACES = default_traces_dir()
needs_itp = pytest.mark.skipif(
    not (TRACES / "itp").is_dir(), reason=f"ITP traces not found at {TRACES / 'itp'}"
)
needs_openb = pytest.mark.skipif(
    not (TRACES / "openb").is_dir(), reason=f"openb traces not found at {TRACES / 'openb'}"
)


@dataclass(frozen=True)
class Run:
    name: str
    workload: Callable[[], Workload]
    queues: bool = True
    """Whether jobs wait: then cycles after submissions skip some."""


def openb_window(first_day: float, days: float, faster: float) -> Workload:
    """The openb default trace's pods submitted in `days` days from `first_day` (its first
    pod aside, the trace starts on day 116), arriving `faster` times as fast from time 0."""
    trace = openb_replay("default")
    start, end = first_day * DAY, (first_day + days) * DAY
    jobs = [
        dataclasses.replace(
            job,
            submit_time=(job.submit_time - start) / faster,
            spec=job.spec.model_copy(update={"submit_time": None}),
        )
        for job in trace.jobs
        if start <= job.submit_time < end
    ]
    return dataclasses.replace(trace, jobs=jobs, failures=[], horizon=days * DAY / faster)


RUNS = (
    pytest.param(Run("ai2-seed7", lambda: ai2_like(seed=7, days=0.5, gpus=256)), id="ai2-seed7"),
    pytest.param(
        Run("ai2-seed8-team", lambda: ai2_like(seed=8, days=0.5, gpus=256, training_sizes="team")),
        id="ai2-seed8-team",
    ),
    pytest.param(Run("ai2-seed9", lambda: ai2_like(seed=9, days=0.3, gpus=512)), id="ai2-seed9"),
    pytest.param(
        Run("frontier-seed5", lambda: frontier_lab(seed=5, days=2.0, racks_per_block=2)),
        id="frontier-seed5",
    ),
    pytest.param(
        Run("frontier-seed6", lambda: frontier_lab(seed=6, days=2.0, racks_per_block=3)),
        id="frontier-seed6",
    ),
    pytest.param(
        Run("itp04", lambda: itp_replay(4, nodes=16, days=2.0)), id="itp04", marks=needs_itp
    ),
    pytest.param(
        Run("itp07", lambda: itp_replay(7, nodes=8, days=2.0)), id="itp07", marks=needs_itp
    ),
    # On its 6,212 GPUs the trace's pods never wait: the cycles after submissions only are
    # many, and skip nothing.
    pytest.param(
        Run("openb", lambda: openb_window(118.0, 4.0, 40.0), queues=False),
        id="openb",
        marks=needs_openb,
    ),
)


def decisions(run: Run, **settings: Any) -> CycleLog:
    """The decision log of `run` under a scheduler with `settings`, and how many cycles ran
    after submissions only and how many job turns they skipped."""
    return logged_run(run.workload(), None, **settings)


@pytest.mark.parametrize("run", RUNS)
def test_cycles_after_submissions_decide_as_full_cycles(run: Run) -> None:
    full = decisions(run, incremental=False)
    # Never a forced full cycle: as many cycles as can skip jobs do.
    shortcut = decisions(run, incremental=True, full_cycle_every=0.0)

    assert full.lines, f"{run.name}: no decisions to compare"
    assert full.incremental == 0
    for number, (want, got) in enumerate(zip(full.lines, shortcut.lines, strict=False), start=1):
        assert got == want, f"{run.name}: decision {number} differs"
    assert len(shortcut.lines) == len(full.lines)
    assert shortcut.incremental > 0, f"{run.name}: no cycle ran after submissions only"
    if run.queues:
        assert shortcut.skipped > 0, f"{run.name}: no job's turn was skipped"


def test_the_checking_mode_holds_on_a_loaded_cluster() -> None:
    """Beside every cycle that skips jobs, a full cycle on a copy decides the same."""
    run = Run("ai2-seed7", lambda: ai2_like(seed=7, days=0.2, gpus=256))
    checked = decisions(run, check_incremental=True, full_cycle_every=0.0)
    assert checked.incremental > 0
    assert checked.lines == decisions(run, incremental=False).lines


def assert_policy_decides_alike_skipping_or_not(
    run: Run = Run("ai2-seed7", lambda: ai2_like(seed=7, days=0.5, gpus=256)), **policy: Any
) -> None:
    """Under the scheduler settings `policy`, cycles after submissions decide what full cycles
    decide on a short Ai2-like run, and still skip jobs; and the policy decides something
    (its decisions differ from the defaults'), so the comparison covers it."""
    full = decisions(run, incremental=False, **policy)
    shortcut = decisions(run, incremental=True, full_cycle_every=0.0, **policy)
    assert full.lines and shortcut.lines == full.lines
    assert full.lines != decisions(run, incremental=False).lines
    assert shortcut.incremental > 0 and shortcut.skipped > 0


def test_the_owed_teams_least_served_first_decide_alike_skipping_or_not() -> None:
    """With the owed teams reordered every hour (`OwedOrder.LEAST_MET`)."""
    assert_policy_decides_alike_skipping_or_not(owed_order=OwedOrder.LEAST_MET, owed_half_life=HOUR)


def test_jobs_waiting_for_checkpoints_decide_alike_skipping_or_not() -> None:
    """Under the checkpoint wait, where a waiting job keeps its victims between cycles
    (`CheckpointGate.awaited`)."""
    wait = CheckpointWait(first_checkpoint=HOUR, owed_only=True, urgent_priority=10)
    assert_policy_decides_alike_skipping_or_not(contract=Contract(checkpoint_wait=wait))


@pytest.mark.parametrize(
    ("code", "serves"),
    [
        (RefusalCode.WAITING_FOR_CHECKPOINTS, True),
        (RefusalCode.NOT_WORTH_IT, True),
        (RefusalCode.NO_ROOM, False),
    ],
)
def test_a_refusal_in_other_figures_serves_where_its_figures_move_with_the_clock(
    code: RefusalCode, serves: bool
) -> None:
    # An anchor refused again in other words: the checkpoint wait's and the cost/benefit
    # rule's figures move with the clock and no job decides by them, so the walk goes on
    # skipping; any other refusal in other figures is a departure.
    def refused(reason: str) -> Outcome:
        return Outcome(ReasonCode.NO_PREEMPTION, Refusal(code, reason), None)

    earlier = refused("would evict 1 job losing 0.2 GPU-hours now")
    assert refused("would evict 1 job losing 0.2 GPU-hours now").serves_for(earlier)
    assert refused("would evict 1 job losing 0.3 GPU-hours now").serves_for(earlier) is serves
    other_code = Outcome(ReasonCode.NO_PREEMPTION, Refusal(RefusalCode.BUDGET_CAPS, "x"), None)
    assert not other_code.serves_for(earlier)


def test_unallocated_work_weighed_decides_alike_skipping_or_not() -> None:
    """With unallocated victims that cannot resume weighed by the cost/benefit rule, whose
    refusals move with the clock."""
    worth = EvictionWorth(1.0, scope=WorthScope.CANNOT_RESUME, unallocated=True)
    run = Run(
        "ai2-seed3-fifth-resumable",
        lambda: with_resumable_share(ai2_like(seed=3, days=1.0, gpus=256), 0.2),
    )
    assert_policy_decides_alike_skipping_or_not(run, contract=Contract(worth=worth))
    # Weighing the unallocated victims is what decides something here, not the scope alone.
    scoped = dataclasses.replace(worth, unallocated=False)
    weighing = decisions(run, incremental=False, contract=Contract(worth=worth))
    scope_alone = decisions(run, incremental=False, contract=Contract(worth=scoped))
    assert weighing.lines != scope_alone.lines


def _team_a_on_every_gpu(full_cycle_every: float) -> Scheduler:
    """16 GPUs shared half and half by team-a and team-b; team-a's four 4-GPU runs, protected
    for an hour, submitted at 0 s (the first cycle not run)."""
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))
    tree = BudgetTree.from_dict({"accounts": {"team-a": 50, "team-b": 50}})
    scheduler = Scheduler(state, tree, full_cycle_every=full_cycle_every)
    for number in range(4):
        scheduler.submit(job(f"run{number}", "team-a"), 0.0)
    return scheduler


def test_cycles_after_submissions_skip_settled_jobs_until_something_else_happens() -> None:
    scheduler = _team_a_on_every_gpu(full_cycle_every=1000.0)
    first = scheduler.cycle(0.0)
    assert not first.incremental and len(first.bound) == 4
    assert first.full_because is FullCycle.FIRST

    # team-b is owed its budget, but team-a's runs are protected: the waiting jobs are told so.
    scheduler.submit(job("wait0", "team-b"), 10.0)
    second = scheduler.cycle(10.0)
    assert second.incremental and not second.decisions and second.full_because is None
    scheduler.submit(job("wait1", "team-b"), 20.0)
    third = scheduler.cycle(20.0)
    scheduler.submit(job("wait2", "team-b"), 30.0)
    fourth = scheduler.cycle(30.0)
    assert third.incremental and fourth.incremental
    assert fourth.skipped >= 1 and not fourth.decisions
    assert scheduler.jobs["wait1"].reason_code is scheduler.jobs["wait0"].reason_code

    # A completion that may make room for every waiting job: a full cycle, which starts wait0.
    scheduler.finish("run0", 40.0)
    fifth = scheduler.cycle(40.0)
    assert not fifth.incremental and bound(fifth) == ["wait0"]
    assert fifth.full_because is FullCycle.REOPENED
    scheduler.submit(job("wait3", "team-b"), 50.0)
    assert scheduler.cycle(50.0).incremental
    # Anything else, a cancellation here, is followed by a full cycle.
    scheduler.cancel("wait3", 60.0)
    assert scheduler.cycle(60.0).full_because is FullCycle.CANCELLED
    # At least every `full_cycle_every` seconds, a full cycle.
    scheduler.submit(job("wait4", "team-b"), 1070.0)
    assert scheduler.cycle(1070.0).full_because is FullCycle.PERIODIC


def bound(result: CycleResult) -> list[str]:
    return [decision.job_id for decision in result.bound]


def test_cycles_after_checkpoints_skip_settled_jobs_too() -> None:
    # A checkpoint moves only the work a victim would lose: the refusals the waiting jobs
    # were told stand, and the next cycle skips them as after a submission.
    scheduler = _team_a_on_every_gpu(full_cycle_every=1000.0)
    scheduler.cycle(0.0)
    for number in range(3):
        scheduler.submit(job(f"wait{number}", "team-b"), 10.0)
    scheduler.cycle(10.0)
    told = {number: scheduler.jobs[f"wait{number}"].reason for number in range(3)}

    scheduler.report_checkpoint("run1", 20.0)
    scheduler.report_checkpoint("run2", 20.0)
    after = scheduler.cycle(20.0)
    assert after.incremental and after.skipped >= 1 and not after.decisions
    assert {number: scheduler.jobs[f"wait{number}"].reason for number in range(3)} == told

    # With a submission too, and then a job's failure: a full cycle again.
    scheduler.report_checkpoint("run3", 30.0)
    scheduler.submit(job("wait3", "team-b"), 30.0)
    assert scheduler.cycle(30.0).incremental
    scheduler.fail("run0", 40.0)
    assert scheduler.cycle(40.0).full_because is FullCycle.JOB_FAILED


def _after_completions(incremental: bool, guests: int = 0, **settings: Any) -> list[CycleResult]:
    """16 GPUs in two racks of two 4-GPU nodes, all held by team-a's four runs (protected for
    an hour); team-b waits with three gangs of two 4-GPU pods, and the guests (no budget) with
    `guests` gangs of four pods in one rack. Then run0 ends (4 GPUs free: no gang fits), a
    gang of team-b joins, and run1 ends (8 free on rack 0: one of team-b's gangs fits, none of
    the guests')."""
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))
    tree = BudgetTree.from_dict({"accounts": {"team-a": 50, "team-b": 50, "guests": 0}})
    scheduler = Scheduler(state, tree, full_cycle_every=0.0, incremental=incremental, **settings)
    for number in range(4):
        scheduler.submit(job(f"run{number}", "team-a"), 0.0)
    results = [scheduler.cycle(0.0)]
    for number in range(guests):
        rack = {"required": "rack"}
        scheduler.submit(job(f"spare{number}", "guests", pods=4, topology=rack), 10.0)
    for number in range(3):
        scheduler.submit(job(f"wait{number}", "team-b", pods=2), 10.0)
    results.append(scheduler.cycle(10.0))
    scheduler.finish("run0", 20.0)
    results.append(scheduler.cycle(20.0))
    scheduler.submit(job("wait3", "team-b", pods=2), 30.0)
    results.append(scheduler.cycle(30.0))
    scheduler.finish("run1", 40.0)
    results.append(scheduler.cycle(40.0))
    return results


def test_cycles_after_completions_that_free_no_room_skip_settled_jobs() -> None:
    # run0's 4 GPUs hold no gang of 8: every remembered failure outlives the release, and the
    # cycle after it skips the jobs the last one settled, deciding as a full cycle; run1's
    # end makes room, and the cycle after it is a full one that starts wait0.
    shortcut, full = _after_completions(True), _after_completions(False)
    for want, got in zip(full, shortcut, strict=True):
        assert differences(want.decisions, got.decisions) is None
    after_first, after_second = shortcut[2], shortcut[4]
    assert after_first.incremental and after_first.skipped >= 1
    # wait0 holds the reservation (an anchor, walked): the cycle reserves again, nothing else.
    assert [type(decision) for decision in after_first.decisions] == [Reserve]
    assert shortcut[3].incremental
    # The gangs' failure does not outlive it, and they are all the queue: a full cycle.
    assert not after_second.incremental and bound(after_second) == ["wait0"]


def test_after_a_completion_only_the_jobs_of_shapes_it_may_fit_take_their_turn() -> None:
    # run1's end undoes the failure of team-b's gangs, not the rack-wide gangs': team-b's
    # jobs take their turn and wait0 starts; the guests' gangs, which never preempt and still
    # find no free rack, are skipped, as a full cycle decides.
    # Without reservations, twelve guests' gangs: team-b's jobs are a quarter of the queue.
    last = _last_as_full(
        lambda incremental: _after_completions(incremental, guests=12, reserve_min_gpus=1000)
    )
    assert last.incremental and bound(last) == ["wait0"] and last.skipped == 12


def _after_a_protection_ends(incremental: bool, own_budget: bool) -> list[CycleResult]:
    """16 GPUs; team-a runs two 4-GPU jobs protected for an hour, team-b two more (or none if
    not `own_budget`) and `guests` (no budget) waits; then team-b submits a job. The cycles at
    10 s and 20 s, and at 1 h, when team-a's protections end."""
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))
    tree = BudgetTree.from_dict({"accounts": {"team-a": 50, "team-b": 50, "guests": 0}})
    scheduler = Scheduler(state, tree, full_cycle_every=0.0, incremental=incremental)
    names = ["a0", "a1", "b0", "b1"] if own_budget else ["a0", "a1", "a2", "a3"]
    for name in names:
        scheduler.submit(job(name, "team-b" if name.startswith("b") else "team-a"), 0.0)
    results = [scheduler.cycle(0.0)]
    scheduler.submit(job("wait", "team-b"), 10.0)
    results.append(scheduler.cycle(10.0))
    scheduler.submit(job("spare", "guests"), 20.0)
    results.append(scheduler.cycle(20.0))
    results.append(scheduler.cycle(3600.0))
    return results


def _last_as_full(run: Callable[[bool], list[CycleResult]]) -> CycleResult:
    """The last cycle of `run` with cycles that skip settled jobs, once every cycle of it
    decided as in `run` with full cycles."""
    shortcut, full = run(True), run(False)
    for want, got in zip(full, shortcut, strict=True):
        assert differences(want.decisions, got.decisions) is None
    return shortcut[-1]


def test_after_a_protection_ends_the_refused_jobs_are_asked_again() -> None:
    # team-b runs nothing and is owed its budget: once team-a's protections end, wait takes
    # a team-a job. The cycle at 1 h walks wait again, as a full cycle would.
    last = _last_as_full(
        lambda incremental: _after_a_protection_ends(incremental, own_budget=False)
    )
    assert last.incremental
    assert [d.job_id for d in last.decisions if isinstance(d, Evict)]


def test_after_a_protection_ends_the_other_settled_jobs_stay_skipped() -> None:
    # team-b runs its budget: team-a's jobs, unprotected at 1 h, are still not its to take.
    # wait is asked again and refused again; the guests' job, which never preempts, skipped.
    last = _last_as_full(lambda incremental: _after_a_protection_ends(incremental, own_budget=True))
    assert last.incremental and not last.decisions
    assert last.skipped == 1


def _after_a_start(incremental: bool, protected: bool) -> list[CycleResult]:
    """4 racks x 2 nodes x 4 GPUs (racks: nodes 0-1, 2-3, 4-5, 6-7). team-a (a quarter of the
    budget) runs `held` on node 0, protected for an hour if `protected`, else for a minute;
    guests run 2 GPUs of node 1; team-b runs a job on nodes 2, 4, 6 and 7, so team-a is the
    more under-served. At 120 s team-b's `whole` (a rack) and the guests' `spare` (a rack)
    do not fit: no rack is free, and team-a runs below its budget, so `held` is not team-b's
    to take. At 140 s team-a's `wide` (8 GPUs anywhere) goes first and starts on nodes 3
    and 5: team-a then runs 4 GPUs beyond its budget. The cycles at 120, 130 and 140 s."""
    state = ClusterState(nvl72_cluster(1, 1, 4, nodes_per_rack=2))
    tree = BudgetTree.from_dict({"accounts": {"team-a": 25, "team-b": 75, "guests": 0}})
    scheduler = Scheduler(
        state,
        tree,
        incremental=incremental,
        full_cycle_every=0.0,
        reserve_min_gpus=1000,
        defragment=False,
    )
    held = job("held", "team-a", min_runtime="1h" if protected else "1m")
    running = [(held, 0, [0, 1, 2, 3]), (job("guest", "guests", gpus=2), 1, [0, 1])]
    running += [(job(f"b{node}", "team-b"), node, [0, 1, 2, 3]) for node in (2, 4, 6, 7)]
    for spec, node, gpus in running:
        scheduler.adopt(spec, Allocation.of([node], [gpus]), start_time=0.0, now=0.0)
    rack = {"required": "rack"}
    scheduler.submit(job("whole", "team-b", pods=2, topology=rack), 120.0)
    scheduler.submit(job("spare", "guests", pods=2, topology=rack), 120.0)
    results = [scheduler.cycle(120.0), scheduler.cycle(130.0)]
    scheduler.submit(job("wide", "team-a", pods=2), 140.0)
    results.append(scheduler.cycle(140.0))
    return results


def test_after_a_new_job_starts_the_refused_jobs_are_asked_again() -> None:
    # wide's start takes team-a beyond its budget: held, unprotected, becomes team-b's to take,
    # and whole evicts it and the guests' job for rack 0, as a full cycle does.
    last = _last_as_full(lambda incremental: _after_a_start(incremental, protected=False))
    assert last.incremental and bound(last) == ["wide"]
    assert sorted(d.job_id for d in last.decisions if isinstance(d, Evict)) == ["guest", "held"]


def test_after_a_new_job_starts_the_other_settled_jobs_stay_skipped() -> None:
    # held is protected: whole is refused again once wide started, and the guests' spare,
    # which never preempts and still finds no free rack, is skipped.
    last = _last_as_full(lambda incremental: _after_a_start(incremental, protected=True))
    assert last.incremental and bound(last) == ["wide"] and last.skipped == 1


def _preemption_course(
    wait_gpus: int = 4, small_guest: bool = False, **settings: Any
) -> tuple[Scheduler, list[str]]:
    """16 GPUs all held by team-a's four 4-GPU runs (protected for an hour); team-b (owed its
    budget) submits `wait` (one pod of `wait_gpus`), and twelve of the guests' gangs of a rack
    wait too, settled: no release here makes room; with `small_guest`, also the guests'
    `small` (one 2-GPU pod). At 1 h wait evicts one of team-a's runs: the scheduler after that
    cycle and the victims. Every cycle that skips jobs is checked against a full one on a
    copy (`check_incremental`)."""
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))
    tree = BudgetTree.from_dict({"accounts": {"team-a": 50, "team-b": 50, "guests": 0}})
    scheduler = Scheduler(state, tree, full_cycle_every=0.0, check_incremental=True, **settings)
    for number in range(4):
        scheduler.submit(job(f"run{number}", "team-a"), 0.0)
    scheduler.cycle(0.0)
    rack = {"required": "rack"}
    for number in range(12):
        scheduler.submit(job(f"spare{number}", "guests", pods=2, topology=rack), 10.0)
    if small_guest:
        scheduler.submit(job("small", "guests", gpus=2), 10.0)
    scheduler.submit(job("wait", "team-b", gpus=wait_gpus), 10.0)
    assert scheduler.cycle(10.0).full_because is None
    evicting = scheduler.cycle(3600.0)
    victims = [d.job_id for d in evicting.decisions if isinstance(d, Evict)]
    assert victims and evicting.full_because is None
    return scheduler, victims


def test_a_preemptions_course_skips_the_settled_jobs() -> None:
    # The cycle after the preemption (wait now waits for its victim), the victim's leaving (a
    # release, the victim queued again: wait starts) and wait's start (the nodes kept for it
    # opened, a release to the jobs before it) are followed by cycles that skip the guests.
    scheduler, victims = _preemption_course()
    waiting = scheduler.cycle(3610.0)
    assert waiting.incremental and waiting.skipped == 12 and not waiting.decisions
    for victim in victims:
        scheduler.evicted(victim, 3630.0)
    started = scheduler.cycle(3630.0)
    assert bound(started) == ["wait"] and started.incremental and started.skipped == 12
    after = scheduler.cycle(3640.0)
    assert after.incremental and after.skipped == 12 and not after.decisions


def test_after_a_victim_left_the_jobs_after_its_preemptor_may_start_on_what_is_left() -> None:
    # wait needs 2 GPUs and evicts a 4-GPU run: once the victim left, wait starts, and the 2
    # GPUs left on its node start the guests' small job, settled before, walked now (its
    # shape's failure the release may undo).
    scheduler, victims = _preemption_course(wait_gpus=2, small_guest=True)
    assert scheduler.cycle(3610.0).incremental
    for victim in victims:
        scheduler.evicted(victim, 3630.0)
    started = scheduler.cycle(3630.0)
    assert started.incremental and started.skipped == 12
    assert bound(started) == ["wait", "small"]


def test_a_cycle_that_made_every_preemption_it_may_is_followed_by_a_full_one() -> None:
    # Jobs after the last preemption a cycle allows asked for none: the next cycle walks them.
    scheduler, _ = _preemption_course(max_preemptions_per_cycle=1)
    assert scheduler.cycle(3610.0).full_because is FullCycle.PREEMPTIONS_SPENT


def test_simulate_walks_the_whole_queue_as_often_as_asked(tmp_path: Path) -> None:
    # The same run with no periodic full cycle and with every cycle a full one: the same
    # outcome; only how many cycles skipped settled jobs differs.
    summaries = {}
    for every in ("0", "always"):
        out = tmp_path / every
        args = ["simulate", "--gpus", "128", "--days", "0.5", "--full-cycle-every", every]
        assert main([*args, "--no-progress", "--out", str(out)]) == 0
        summaries[every] = json.loads((out / "summary.json").read_text())
    skipping, full = summaries["0"], summaries["always"]
    assert skipping["counts"]["incremental_cycles"] > 0
    assert full["counts"]["incremental_cycles"] == 0
    for key in ("jobs", "utilisation", "fairness", "classes", "disruption", "timeline"):
        assert skipping[key] == full[key], key


def test_simulate_refuses_a_full_cycle_setting_it_cannot_follow(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):  # argparse's usage error
        main(["simulate", "--days", "0.1", "--full-cycle-every", "soon"])
    assert "'soon': must be a duration >= 0" in capsys.readouterr().err
    checked = ["--full-cycle-every", "always", "--check-incremental"]
    assert main(["simulate", "--days", "0.1", *checked]) != 0
    assert "not with --full-cycle-every always" in capsys.readouterr().err
