"""Refused preemptions remembered across cycles: each change that can lift a refusal lifts it."""

from __future__ import annotations

from typing import Any

import pytest
from job_helpers import four_gpu_gang as spec

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState
from toposched.jobs.spec import JobSpec
from toposched.policy.budget import BudgetTree
from toposched.policy.contract import Contract
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.scheduler.decisions import Bind, Evict
from toposched.scheduler.preemptor import Preemptor
from toposched.scheduler.refusals import RefusalCode

BARE = Contract(worth=None)
"""The contract's own rules, without the cost/benefit rule (tests/test_preemption_worth.py)."""

HOUR = 3600.0


def two_racks() -> ClusterState:
    """2 racks x 2 nodes x 4 GPUs: rack 0 is nodes 0-1, rack 1 nodes 2-3."""
    return ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))


def running_on(scheduler: Scheduler, job: JobSpec, node: int, since: float = 0.0) -> None:
    scheduler.adopt(job, Allocation.of([node], [[0, 1, 2, 3]]), start_time=since, now=since)


def evicted(result: CycleResult) -> list[str]:
    return sorted(d.job_id for d in result.decisions if isinstance(d, Evict))


def started(result: CycleResult) -> list[str]:
    return sorted(d.job_id for d in result.decisions if isinstance(d, Bind))


def test_a_refusal_is_lifted_when_a_victim_s_protection_ends() -> None:
    # One team: `low` fills the only rack until its hour of protection ends; `high`, of
    # higher priority, is refused before that (twice, the second time from memory) and
    # preempts `low` at once after, though nothing else changed in between.
    state = ClusterState(nvl72_cluster(1, 1, 1, nodes_per_rack=2))
    scheduler = Scheduler(state, BudgetTree.from_dict({"accounts": {"team": 100}}), contract=BARE)
    low = spec("low", "team", pods=2)
    scheduler.adopt(low, Allocation.of([0, 1], [[0, 1, 2, 3]] * 2), start_time=0.0, now=0.0)
    scheduler.submit(spec("high", "team", priority=10), now=60.0)
    for now in (600.0, 1800.0, HOUR - 1):
        assert evicted(scheduler.cycle(now)) == []
        assert "no preemption" in scheduler.jobs["high"].reason
    assert evicted(scheduler.cycle(HOUR)) == ["low"]


def budget_scenario(shares: dict[str, int], b_3_runs: bool) -> Scheduler:
    """team-b runs b-1 and b-2 on rack 0 (past their protection), team-a runs a-1 on node 2,
    and b-3 on node 3 if `b_3_runs` (else node 3 is free). team-a's `wide` (8 GPUs in one
    rack) waits: no rack has room, and evicting both of team-b's jobs in rack 0 would take
    team-b below its budget. No reservations, so that a free node stays open."""
    tree = BudgetTree.from_dict({"accounts": shares})
    scheduler = Scheduler(two_racks(), tree, reserve_min_gpus=64, contract=BARE)
    running_on(scheduler, spec("b-1", "team-b"), 0)
    running_on(scheduler, spec("b-2", "team-b"), 1)
    running_on(scheduler, spec("a-1", "team-a"), 2)
    if b_3_runs:
        running_on(scheduler, spec("b-3", "team-b"), 3)
    scheduler.submit(spec("wide", "team-a", pods=2, topology={"required": "rack"}), now=2 * HOUR)
    for now in (2 * HOUR, 2 * HOUR + 60):
        assert evicted(scheduler.cycle(now)) == []
        assert "no preemption" in scheduler.jobs["wide"].reason
    return scheduler


def test_a_refusal_is_lifted_when_another_team_starts_beyond_its_budget() -> None:
    # Budgets of 12 and 4 GPUs: team-b runs 8, 4 beyond its budget, so either of its jobs
    # alone could go, but not both. b-3 takes the free node: team-b now runs 8 GPUs beyond its
    # budget, and both may be reclaimed together.
    scheduler = budget_scenario({"team-a": 75, "team-b": 25}, b_3_runs=False)
    scheduler.submit(spec("b-3", "team-b"), now=2 * HOUR + 120)
    first = scheduler.cycle(2 * HOUR + 120)
    assert "b-3" in started(first)
    # The next cycle must ask again: a start changed the loads the contract reads.
    assert evicted(scheduler.cycle(2 * HOUR + 180)) == ["b-1", "b-2"]


def test_a_refusal_is_lifted_when_the_budgets_change() -> None:
    # Budgets of 8 GPUs each: team-b runs 12, 4 beyond its budget. Nothing runs or stops: only
    # team-b's budget shrinks to 4 GPUs, so its 8 GPUs beyond it in rack 0 may be reclaimed by
    # team-a, which is below its own.
    scheduler = budget_scenario({"team-a": 50, "team-b": 50}, b_3_runs=True)
    scheduler.set_share("team-b", 25)
    scheduler.set_share("team-a", 75)
    assert evicted(scheduler.cycle(2 * HOUR + 120)) == ["b-1", "b-2"]


def teams_at_their_budgets(contract: Contract | None = None) -> Scheduler:
    """Four teams with 4 GPUs of budget each, each running one 4-GPU job past its protection:
    team-b's and team-d's at priority 10, team-c's at priority 0. Nothing is unallocated."""
    shares = {"team-a": 25, "team-b": 25, "team-c": 25, "team-d": 25}
    tree = BudgetTree.from_dict({"accounts": shares})
    scheduler = Scheduler(two_racks(), tree, contract=BARE if contract is None else contract)
    running_on(scheduler, spec("a-1", "team-a"), 0)
    running_on(scheduler, spec("b-1", "team-b", priority=10), 1)
    running_on(scheduler, spec("c-low", "team-c"), 2)
    running_on(scheduler, spec("d-1", "team-d", priority=10), 3)
    return scheduler


class SiteContract(Contract):
    """A site's contract that keeps the built-in rules (it only names itself)."""


@pytest.mark.parametrize(
    "contract",
    [None, SiteContract(worth=None), Contract()],
    ids=["built-in", "subclass", "default-cost-rule"],
)
def test_jobs_that_may_take_only_unallocated_work_share_a_refusal(
    monkeypatch: Any, contract: Contract | None
) -> None:
    # team-b and team-d run their whole budgets and hold nothing of lower priority: each may
    # evict unallocated work only, and there is none. The second job of the same shape is
    # answered by the first one's refusal, without a search. A contract class that keeps the
    # built-in rules keeps that shortcut.
    scheduler = teams_at_their_budgets(contract)
    searches: list[str] = []
    search = Preemptor.search

    def counted(self: Preemptor, job: Any, *args: Any) -> Any:
        searches.append(job.job_id)
        return search(self, job, *args)

    monkeypatch.setattr(Preemptor, "search", counted)
    scheduler.submit(spec("b-new", "team-b", priority=10), now=2 * HOUR)
    assert evicted(scheduler.cycle(2 * HOUR)) == []
    scheduler.submit(spec("d-new", "team-d", priority=10), now=2 * HOUR + 60)
    assert evicted(scheduler.cycle(2 * HOUR + 60)) == []
    assert searches == ["b-new"]
    refusal = scheduler.jobs["b-new"].reason.partition("no preemption: ")[2]
    assert refusal == "no running job may be preempted for it under the contract"
    assert scheduler.jobs["d-new"].reason.endswith(f"no preemption: {refusal}")
    shared = scheduler.explain("d-new", 2 * HOUR + 60).refusal
    assert shared is not None and shared.code is RefusalCode.NO_ALLOWED_VICTIM
    assert shared.reason == refusal
    assert scheduler.jobs["b-new"].refusal == shared
    assert "a job of the same pod shape with 1 pod did not fit" in scheduler.jobs["d-new"].reason


def test_a_shared_refusal_does_not_answer_for_a_job_with_its_own_victims() -> None:
    # team-c also runs its whole budget, but its own c-low is of lower priority than c-new: the
    # refusal remembered for team-b's job of the same shape does not hold for it.
    scheduler = teams_at_their_budgets()
    scheduler.submit(spec("b-new", "team-b", priority=10), now=2 * HOUR)
    assert evicted(scheduler.cycle(2 * HOUR)) == []
    scheduler.submit(spec("c-new", "team-c", priority=10), now=2 * HOUR + 60)
    assert evicted(scheduler.cycle(2 * HOUR + 60)) == ["c-low"]
