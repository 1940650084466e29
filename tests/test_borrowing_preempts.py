"""Whom a job that would take its team beyond its budget may preempt (`Contract`'s
`borrowing_preempts`): golden scenarios from tests/scenarios/preemption/borrowing.yaml through
`Scheduler.cycle`, the contract's verdict for one pair, and the option of `toposched simulate`
and `toposched serve`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
from job_specs import job
from scenario_cases import cases_with_defaults
from test_scheduler_cycle import adopt_on

from toposched.cli.main import main
from toposched.cli.simulate_options import add_options
from toposched.cli.simulate_run import scheduler_factory
from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.errors import InputError
from toposched.cluster.state import ClusterState
from toposched.policy.budget import BudgetTree
from toposched.policy.contract import BorrowingPreempts, Contract, PreemptionRule
from toposched.policy.queue_entry import QueueEntry
from toposched.policy.ranking import rank_accounts
from toposched.policy.usage import UsageTracker
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Evict
from toposched.scheduler.kept_refusals import Keeping

HOUR = 3600.0
SCENARIOS = Path(__file__).parent / "scenarios" / "preemption" / "borrowing.yaml"
CASE_FIELDS = {"name", "rule", "pods", "priority", "budget_a", "expect"}


def scheduler_for(case: dict[str, Any]) -> Scheduler:
    """The two racks of the file's comment, with every job but a-job running."""
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=4))
    share = case["budget_a"]
    budgets = BudgetTree.from_dict(
        {"accounts": {"team-a": share, "team-b": 100 - share, "scratch": 0}}
    )
    contract = Contract(borrowing_preempts=BorrowingPreempts(case["rule"]))
    scheduler = Scheduler(state, budgets, contract=contract, grace_s=30.0)
    for node in (0, 1):
        adopt_on(scheduler, job(f"b{node}", "team-b", min_runtime="10h"), node, range(4))
    scheduler.submit(job("a-low", "team-a", pods=2, resumable=True), 0)
    assert [d.job_id for d in scheduler.cycle(0).bound] == ["a-low"]
    assert sorted(scheduler.state.allocations["a-low"].nodes.tolist()) == [2, 3]
    for node, start in ((5, 0.5), (6, 1.0), (7, 1.5)):
        filler = job(f"f{node}", "scratch", min_runtime=0)
        adopt_on(scheduler, filler, node, range(4), start * HOUR)
    return scheduler


@pytest.mark.parametrize("case", cases_with_defaults(SCENARIOS, CASE_FIELDS))
def test_borrowing_scenario(case: dict[str, Any]) -> None:
    scheduler = scheduler_for(case)
    now = 2 * HOUR
    scheduler.submit(job("a-job", "team-a", pods=case["pods"], priority=case["priority"]), now)
    result = scheduler.cycle(now)
    evicted = sorted(d.job_id for d in result.decisions if isinstance(d, Evict))
    expect = case["expect"]
    assert evicted == expect["evicted"]
    if "reason" in expect:
        reason = " ".join(expect["reason"].split())
        assert reason in scheduler.jobs["a-job"].reason
        assert reason in scheduler.explain("a-job", now).text


class Loads:
    """Running GPUs and budgets by account, as the contract reads them."""

    def __init__(self, running: dict[str, float], budgets: dict[str, float]) -> None:
        self.running, self.budgets = running, budgets

    def running_gpus(self, account: str) -> float:
        return self.running.get(account, 0.0)

    def budget_gpus(self, account: str) -> float:
        return self.budgets.get(account, 0.0)


def test_the_rule_forbids_a_borrower_unallocated_and_other_accounts_victims() -> None:
    tree = BudgetTree.from_dict({"accounts": {"team-a": 50, "team-b": 50, "scratch": 0}})
    ranking = rank_accounts(tree, UsageTracker(), now=0.0)
    contract = Contract(borrowing_preempts=BorrowingPreempts.OWN_ACCOUNT)
    loads = Loads({"team-a": 10.0, "team-b": 20.0}, {"team-a": 16.0, "team-b": 16.0})

    def victim(name: str, account: str, priority: int = 0) -> Any:
        return contract.running_job(
            job_id=name,
            account=account,
            priority=priority,
            submit_time=0.0,
            start_time=0.0,
            min_runtime=0.0 if account == "scratch" else HOUR,
            resumable=True,
            tree=tree,
            gpus=4.0,
        )

    def preemptor(gpus: float, priority: int = 5) -> QueueEntry:
        return QueueEntry("a-job", "team-a", priority, 0.0, gpus=gpus)

    now = 2 * HOUR
    for name, account in (("fill", "scratch"), ("b-old", "team-b")):
        borrowing = contract.may_preempt(preemptor(8.0), victim(name, account), now, ranking, loads)
        assert not borrowing.allowed and borrowing.rule is PreemptionRule.BORROWING
        assert "beyond its 16-GPU budget (10 running + 8)" in borrowing.reason
        within = contract.may_preempt(preemptor(6.0), victim(name, account), now, ranking, loads)
        assert within.allowed
    own = contract.may_preempt(preemptor(8.0), victim("a-old", "team-a"), now, ranking, loads)
    assert own.allowed and own.rule is PreemptionRule.HIGHER_PRIORITY
    default = Contract().may_preempt(preemptor(8.0), victim("fill", "scratch"), now, ranking, loads)
    assert default.allowed and default.rule is PreemptionRule.UNALLOCATED_VICTIM
    with pytest.raises(ValueError, match="pass loads"):
        contract.may_preempt(preemptor(8.0), victim("fill", "scratch"), now, ranking)
    with pytest.raises(InputError, match="borrowing_preempts"):
        Contract(borrowing_preempts="own-account")  # type: ignore[arg-type]


def test_simulate_option_sets_the_rule() -> None:
    parser = argparse.ArgumentParser()
    add_options(parser)

    def built(*words: str) -> Contract:
        scheduler = scheduler_factory(parser.parse_args(list(words)))(
            ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=4)),
            BudgetTree.from_dict({"accounts": {"team-a": 100}}),
        )
        assert isinstance(scheduler, Scheduler)
        return scheduler.settings.contract

    assert built().borrowing_preempts is BorrowingPreempts.ANY
    chosen = built("--borrowing-preempts", "own-account")
    assert chosen.borrowing_preempts is BorrowingPreempts.OWN_ACCOUNT
    assert chosen.worth == Contract().worth
    with pytest.raises(SystemExit):
        parser.parse_args(["--borrowing-preempts", "never"])


def test_cycles_that_skip_jobs_decide_as_full_ones_under_the_rule(tmp_path: Path) -> None:
    # Each cycle that skips jobs is checked against a full cycle on a copy of the scheduler.
    args = ["simulate", "--gpus", "128", "--days", "0.5", "--borrowing-preempts", "own-account"]
    assert main([*args, "--check-incremental", "--no-progress", "--out", str(tmp_path)]) == 0
    counts = json.loads((tmp_path / "summary.json").read_text())["counts"]
    assert counts["incremental_cycles"] > 0 and counts["evictions"] > 0


def test_a_refusal_of_a_job_held_to_its_own_team_stands_through_other_teams_changes() -> None:
    # a-job borrows (4 pods, team-a's a-low not of lower priority): refused. b0 ends at 2.5 h:
    # nodes 0 and 4 free (8 GPUs) and nothing a-job may take beside them, so the refusal
    # stands without a search (the unallocated work on nodes 5-7 is not its to take).
    case = {"rule": "own-account", "budget_a": 50}
    scheduler = scheduler_for(case)
    scheduler.preemptor.kept.keeping = Keeping.VERIFY  # a search that finds victims raises
    scheduler.submit(job("a-job", "team-a", pods=4), 2 * HOUR)
    assert not [d for d in scheduler.cycle(2 * HOUR).decisions if isinstance(d, Evict)]
    searches = scheduler.preemptor.victim_searches
    refusal = scheduler.jobs["a-job"].refusal
    assert refusal is not None and "no running job may be preempted" in refusal.reason
    scheduler.finish("b0", 2.5 * HOUR)
    assert not [d for d in scheduler.cycle(2.5 * HOUR).decisions if isinstance(d, Evict)]
    assert scheduler.preemptor.victim_searches == searches
    assert scheduler.preemptor.kept.answered_through_changes >= 1
    assert scheduler.jobs["a-job"].refusal == refusal
