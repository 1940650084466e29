"""The admission rule's headroom: unallocated work leaves a share of the cluster's GPUs free,
so that a gang a node failure interrupts restarts without taking it back. Golden scenarios
from tests/scenarios/preemption/headroom.yaml through `Scheduler.cycle`, and the rule's
checks."""

from __future__ import annotations

import argparse
import copy
from pathlib import Path
from typing import Any

import pytest
from scenario_cases import cases_with_defaults
from test_scheduler_cycle import adopt_on, job

from toposched.cli.main import main
from toposched.cli.simulate_options import add_options
from toposched.cli.simulate_run import scheduler_factory
from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.errors import InputError
from toposched.cluster.health import Health
from toposched.cluster.state import ClusterState
from toposched.policy.budget import BudgetTree
from toposched.scheduler.admission import AdmissionRule
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.scheduler.decisions import Evict

HOUR = 3600.0
SCENARIOS = Path(__file__).parent / "scenarios" / "preemption" / "headroom.yaml"
CASE_FIELDS = {"name", "headroom", "scavenger_pods", "failure", "expect"}
RACK = {"required": "rack"}


def load_cases() -> list[Any]:
    return cases_with_defaults(SCENARIOS, CASE_FIELDS)


def scheduler_for(case: dict[str, Any], rule: AdmissionRule | None = None) -> Scheduler:
    """The two racks of the file's comment, with `gang` and team-b's jobs running since 0;
    the case's headroom, or `rule`."""
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=4))
    budgets = BudgetTree.from_dict({"accounts": {"team-a": 50, "team-b": 50, "scratch": 0}})
    headroom = case["headroom"]
    if headroom is not None:
        rule = AdmissionRule(checkpoint_s=None, headroom=headroom / 100)
    scheduler = Scheduler(state, budgets, grace_s=30.0, admission=rule)
    gang = job("gang", "team-a", pods=2, resumable=True, min_runtime="8h", topology=RACK)
    scheduler.submit(gang, 0)
    assert [d.job_id for d in scheduler.cycle(0).bound] == ["gang"]
    for node in (2, 3, 4, 5):
        adopt_on(scheduler, job(f"b{node}", "team-b", min_runtime="10h"), node, range(4))
    return scheduler


def gang_nodes(scheduler: Scheduler) -> list[int]:
    allocation = scheduler.state.allocations.get("gang")
    return [] if allocation is None else sorted(allocation.nodes.tolist())


@pytest.mark.parametrize("case", load_cases())
def test_headroom_scenario(case: dict[str, Any]) -> None:
    scheduler = scheduler_for(case)
    assert gang_nodes(scheduler) == [0, 1]
    expect = case["expect"]
    scavenger = job(
        "scavenger", "scratch", pods=case["scavenger_pods"], resumable=True, topology=RACK
    )
    scheduler.submit(scavenger, HOUR)
    started = [d.job_id for d in scheduler.cycle(HOUR).bound]
    assert started == (["scavenger"] if expect["started"] else [])
    if not expect["started"]:
        reason = " ".join(expect["reason"].split())
        assert scheduler.jobs["scavenger"].reason.endswith(reason)
        assert scheduler.explain("scavenger", HOUR).text.endswith(reason)
    if not case["failure"]:
        return
    now = 1.5 * HOUR
    failed = scheduler.set_health([1], Health.DOWN, now)
    assert [j.job_id for j in failed] == ["gang"]
    result = scheduler.cycle(now)
    evicted = [d.job_id for d in result.decisions if isinstance(d, Evict)]
    assert evicted == expect["evicted"]
    assert gang_nodes(scheduler) == expect["gang"]


def test_headroom_must_be_a_share_below_one() -> None:
    for bad in (-0.1, 1.0, float("nan"), True):
        with pytest.raises(InputError, match="headroom"):
            AdmissionRule(headroom=bad)
    assert AdmissionRule(checkpoint_s=None, headroom=0.5).headroom == 0.5
    with pytest.raises(InputError, match="restarts"):
        AdmissionRule(restarts=1)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="borrowed"):
        AdmissionRule(borrowed="yes")  # type: ignore[arg-type]


def test_budgeted_work_uses_the_headroom() -> None:
    # The headroom is kept from unallocated work only: team-a's job starts on nodes 6-7.
    case = {"headroom": 25}
    scheduler = scheduler_for(case)
    scheduler.submit(job("a-more", "team-a", pods=2, topology=RACK), HOUR)
    assert [d.job_id for d in scheduler.cycle(HOUR).bound] == ["a-more"]


@pytest.mark.parametrize("borrowed", [False, True])
def test_borrowed_work_keeps_the_headroom_with_the_rule(borrowed: bool) -> None:
    # Nodes 6-7 free (8 GPUs, the 25% headroom). team-b runs its whole budget (nodes 2-5):
    # one more node would be borrowed; with `borrowed` it waits, and team-a's job (12 of its
    # 16 GPUs) takes the headroom.
    rule = AdmissionRule(checkpoint_s=None, headroom=0.25, borrowed=borrowed)
    scheduler = scheduler_for({"headroom": None}, rule)
    scheduler.submit(job("b-more", "team-b", min_runtime="10h"), HOUR)
    started = [d.job_id for d in scheduler.cycle(HOUR).bound]
    if not borrowed:
        assert started == ["b-more"]
        return
    assert started == []
    reason = scheduler.jobs["b-more"].reason
    assert reason.startswith(
        "work beyond its team's budget leaves 8 GPUs free for work within its team's budget"
    )
    assert reason.endswith("starting this job's 4 would leave 4")
    scheduler.submit(job("a-more", "team-a", min_runtime="10h"), 2 * HOUR)
    assert [d.job_id for d in scheduler.cycle(2 * HOUR).bound] == ["a-more"]


def simulated(parser: argparse.ArgumentParser, *words: str) -> Scheduler:
    """The scheduler `toposched simulate` builds with `words` on two racks of four nodes."""
    scheduler = scheduler_factory(parser.parse_args(list(words)))(
        ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=4)),
        BudgetTree.from_dict({"accounts": {"team-a": 100}}),
    )
    assert isinstance(scheduler, Scheduler)
    return scheduler


def test_simulate_option_builds_the_rule() -> None:
    parser = argparse.ArgumentParser()
    add_options(parser)
    args = parser.parse_args(["--unallocated-headroom", "1.5"])
    assert args.unallocated_headroom == pytest.approx(0.015)
    scheduler = simulated(parser, "--unallocated-headroom", "1.5")
    assert scheduler.settings.admission == AdmissionRule(checkpoint_s=None, headroom=0.015)
    restarting = simulated(parser, "--unallocated-headroom-restarts")
    assert restarting.settings.admission == AdmissionRule(checkpoint_s=None, restarts=True)
    for bad in ("100", "-1", "x"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--unallocated-headroom", bad])
    borrowing = simulated(parser, "--unallocated-headroom", "2", "--unallocated-headroom-borrowed")
    assert borrowing.settings.admission == AdmissionRule(
        checkpoint_s=None, headroom=0.02, borrowed=True
    )
    with pytest.raises(InputError, match="applies only with --unallocated-headroom"):
        scheduler_factory(parser.parse_args(["--unallocated-headroom-borrowed"]))


@pytest.mark.parametrize("restarts", [False, True])
def test_an_interrupted_gang_waiting_to_restart_keeps_its_gpus_free(restarts: bool) -> None:
    # The two racks, and team-a's a7 on node 7 until 2 h. At 1 h nodes 0 and 1 go down: the
    # gang, within team-a's budget (8 + 4 of 16 GPUs), finds only node 6 free in a whole rack
    # and waits. At 1.5 h scavenger (one node) arrives; at 2 h a7 ends and rack z0-b0-r1 has
    # nodes 6-7 for the gang.
    rule = AdmissionRule(checkpoint_s=None, restarts=restarts)
    scheduler = scheduler_for({"headroom": None}, rule)
    adopt_on(scheduler, job("a7", "team-a", min_runtime="10h", expected_runtime=7200), 7, range(4))
    assert [j.job_id for j in scheduler.set_health([0, 1], Health.DOWN, HOUR)] == ["gang"]
    assert scheduler.cycle(HOUR).bound == []
    scheduler.submit(job("scavenger", "scratch", resumable=True), 1.5 * HOUR)
    started = [d.job_id for d in scheduler.cycle(1.5 * HOUR).bound]
    reason = scheduler.jobs["scavenger"].reason
    scheduler.finish("a7", 2 * HOUR)
    result = scheduler.cycle(2 * HOUR)
    evicted = [d.job_id for d in result.decisions if isinstance(d, Evict)]
    if not restarts:
        # scavenger ran on node 6 for half an hour, and is taken back before its checkpoint.
        assert started == ["scavenger"]
        assert evicted == ["scavenger"]
        return
    assert started == []
    assert reason.endswith(
        "unallocated work leaves 8 GPUs free for budgeted work (8 of them for gangs a node "
        "failure interrupted, waiting to restart) (restarts after node failures, new "
        "arrivals), and 0 are free outside reservations: starting this job's 4 would leave 0"
    )
    assert evicted == []
    assert gang_nodes(scheduler) == [6, 7]


def test_a_copy_of_the_scheduler_reads_its_own_free_gpus() -> None:
    # The check of cycles after submissions runs a full cycle on a copy: the copy's headroom
    # must count the copy's free GPUs. Nodes 6-7 are free (8 GPUs, the 25% headroom).
    original = scheduler_for({"headroom": 25})
    copied = copy.deepcopy(original)
    for name in ("b2", "b3"):
        copied.finish(name, HOUR)  # the copy alone has nodes 2-3 free as well
    for scheduler in (original, copied):
        scheduler.submit(job("scavenger", "scratch", resumable=True), HOUR)
    assert [d.job_id for d in copied.cycle(HOUR).bound] == ["scavenger"]
    assert [d.job_id for d in original.cycle(HOUR).bound] == []


def test_cycles_after_submissions_with_a_headroom_decide_as_full_ones(tmp_path: Path) -> None:
    # Each cycle that skips jobs is checked against a full cycle on a copy of the scheduler.
    args = ["simulate", "--gpus", "128", "--days", "0.5", "--unallocated-headroom", "1"]
    out = ["--check-incremental", "--no-progress", "--out", str(tmp_path)]
    assert main([*args, *out]) == 0


def _start_beside_held_work(restarts: bool) -> CycleResult:
    """The two racks; team-a (40% of 32 GPUs) runs `gang` on nodes 0-1 and a7 on node 7,
    team-b nodes 2, 4 and 5; node 3 is free. At 1 h nodes 0-1 go down: the gang, within
    team-a's budget (4 + 8 of 12.8 GPUs), waits for rack z0-b0-r1. At 1.2 h the scratch
    account's 2-GPU scavenger is held: 4 GPUs are free outside the reservation and the
    headroom keeps 8 (a quarter of the GPUs, or with `restarts` none but the gang's). At
    1.5 h team-a's 2-GPU `extra` starts on node 3. Every cycle that skips jobs is checked
    against a full one on a copy. Returns the cycle at 1.5 h."""
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=4))
    budgets = BudgetTree.from_dict({"accounts": {"team-a": 40, "team-b": 60, "scratch": 0}})
    rule = AdmissionRule(checkpoint_s=None, headroom=0.0 if restarts else 0.25, restarts=restarts)
    scheduler = Scheduler(
        state, budgets, admission=rule, full_cycle_every=0.0, check_incremental=True
    )
    scheduler.submit(job("gang", "team-a", pods=2, resumable=True, topology=RACK), 0)
    assert [d.job_id for d in scheduler.cycle(0).bound] == ["gang"]
    for node in (2, 4, 5):
        adopt_on(scheduler, job(f"b{node}", "team-b", min_runtime="10h"), node, range(4))
    adopt_on(scheduler, job("a7", "team-a", min_runtime="10h"), 7, range(4))
    scheduler.set_health([0, 1], Health.DOWN, HOUR)
    scheduler.cycle(HOUR)
    scheduler.submit(job("scavenger", "scratch", gpus=2, resumable=True), 1.2 * HOUR)
    assert scheduler.cycle(1.2 * HOUR).bound == []
    assert "starting this job's 2 would leave 2" in scheduler.jobs["scavenger"].reason
    scheduler.submit(job("extra", "team-a", gpus=2), 1.5 * HOUR)
    return scheduler.cycle(1.5 * HOUR)


def test_a_start_leaves_the_held_work_skipped() -> None:
    # With less free capacity the headroom holds what it held: the cycle skips the scavenger.
    result = _start_beside_held_work(restarts=False)
    assert result.incremental and result.skipped == 1
    assert [d.job_id for d in result.bound] == ["extra"]


def test_a_start_that_frees_the_restarting_gangs_gpus_walks_the_held_work() -> None:
    # extra takes team-a beyond its budget (4 + 2 + 8 GPUs of 12.8): the gang no longer
    # restarts within it, the headroom keeps nothing, and the scavenger starts on node 3
    # beside extra, as a full cycle decides.
    result = _start_beside_held_work(restarts=True)
    assert result.skipped == 0
    assert [d.job_id for d in result.bound] == ["extra", "scavenger"]


@pytest.mark.parametrize("reserved", [False, True])
def test_the_reservation_free_gpus_count_towards_the_headroom_with_the_rule(
    reserved: bool,
) -> None:
    # team-b's protected jobs hold nodes 0-5; nodes 6-7 are free (8 GPUs). team-a's job needs
    # a whole rack: it waits for the reservation of rack 4-7, whose free nodes drain idle. The
    # headroom keeps 10% (3.2 GPUs) free: outside the reservation none are, so the scavenger
    # waits beside the idle nodes; counting them, 8 - 4 >= 3.2 and it backfills there.
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=4))
    budgets = BudgetTree.from_dict({"accounts": {"team-a": 75, "team-b": 25, "scratch": 0}})
    rule = AdmissionRule(checkpoint_s=None, headroom=0.1, reserved=reserved)
    scheduler = Scheduler(state, budgets, grace_s=30.0, admission=rule)
    for node in range(6):
        ends = "2h" if node >= 4 else "9h"  # rack 4-7 frees up first
        spec = job(f"b{node}", "team-b", min_runtime="10h", expected_runtime=ends)
        adopt_on(scheduler, spec, node, range(4))
    scheduler.submit(job("big", "team-a", pods=4, min_runtime="8h", topology=RACK), HOUR)
    scavenger = job("scavenger", "scratch", resumable=True)
    scheduler.submit(scavenger, HOUR)
    result = scheduler.cycle(HOUR)
    assert result.reservation is not None and result.reservation.job_id == "big"
    assert scheduler.jobs["big"].reason.startswith(
        "waiting for reservation at +60 min in rack z0-b0-r1"
    )
    started = [d.job_id for d in result.bound]
    if not reserved:
        assert started == []
        assert scheduler.jobs["scavenger"].reason.endswith(
            "0 are free outside reservations: starting this job's 4 would leave 0"
        )
        return
    assert started == ["scavenger"]
    assert scheduler.state.allocations["scavenger"].nodes.tolist()[0] in (6, 7)
    # A second one would leave 0 of the 3.2 GPUs, counting the reservation's 4 left.
    scheduler.submit(job("second", "scratch", resumable=True), 2 * HOUR)
    assert [d.job_id for d in scheduler.cycle(2 * HOUR).bound] == []
    assert scheduler.jobs["second"].reason.endswith(
        "4 are free with the reservation's: starting this job's 4 would leave 0"
    )


def test_the_reserved_option_needs_the_headroom() -> None:
    parser = argparse.ArgumentParser()
    add_options(parser)
    scheduler = simulated(parser, "--unallocated-headroom", "1", "--unallocated-headroom-reserved")
    assert scheduler.settings.admission == AdmissionRule(
        checkpoint_s=None, headroom=0.01, reserved=True
    )
    with pytest.raises(InputError, match="applies only with --unallocated-headroom"):
        scheduler_factory(parser.parse_args(["--unallocated-headroom-reserved"]))
    with pytest.raises(InputError, match="reserved"):
        AdmissionRule(reserved="yes")  # type: ignore[arg-type]
