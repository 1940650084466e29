"""Tests for the scheduling contract: protection, unallocated work, preemption eligibility."""

from __future__ import annotations

import math
from typing import Any

import pytest

from toposched.cluster.errors import InputError
from toposched.cluster.units import HOUR
from toposched.policy.budget import BudgetTree
from toposched.policy.contract import (
    Contract,
    PreemptedFate,
    PreemptionRule,
    RunningJob,
)
from toposched.policy.fairshare import PendingQueue
from toposched.policy.queue_entry import QueueEntry
from toposched.policy.ranking import Ranking, rank_accounts
from toposched.policy.usage import UsageTracker

# research 70 { pretraining 60 { team-a 50, team-b 50 }, eval 40 }, product 30, ops 0
BUDGET = {
    "accounts": {
        "research": {
            "share": 70,
            "children": {
                "pretraining": {"share": 60, "children": {"team-a": 50, "team-b": 50}},
                "eval": 40,
            },
        },
        "product": 30,
        "ops": 0,
    }
}
TEAM_A = "research/pretraining/team-a"
EVAL = "research/eval"
PRODUCT = "product"
OPS = "ops"  # no budget


@pytest.fixture
def tree() -> BudgetTree:
    return BudgetTree.from_dict(BUDGET)


@pytest.fixture
def ranking(tree: BudgetTree) -> Ranking:
    # GPU-hours over the last hour: team-a 300, team-b 100, eval 100, product 300. As worked out
    # in test_policy_fairshare: leaves rank eval, team-b, team-a, product (then ops, no budget).
    usage = UsageTracker()
    held = {TEAM_A: 300, "research/pretraining/team-b": 100, EVAL: 100, PRODUCT: 300}
    for account, gpus in held.items():
        usage.start(account, gpus, now=0)
    for account, gpus in held.items():
        usage.stop(account, gpus, now=HOUR)
    ranking = rank_accounts(tree, usage, now=HOUR)
    assert ranking.leaves == (EVAL, "research/pretraining/team-b", TEAM_A, PRODUCT, OPS)
    return ranking


def running(
    contract: Contract,
    tree: BudgetTree,
    job_id: str,
    account: str,
    *,
    priority: int = 0,
    start: float = 0.0,
    min_runtime: float = 2 * HOUR,
    resumable: bool = True,
) -> RunningJob:
    return contract.running_job(
        job_id=job_id,
        account=account,
        priority=priority,
        submit_time=start - 60,
        start_time=start,
        min_runtime=min_runtime,
        resumable=resumable,
        tree=tree,
    )


def test_min_runtime_is_capped_at_eight_hours_by_default() -> None:
    contract = Contract()
    assert contract.effective_min_runtime(10 * HOUR) == 8 * HOUR
    assert contract.effective_min_runtime(2 * HOUR) == 2 * HOUR
    assert contract.effective_min_runtime(0) == 0
    assert Contract(max_min_runtime=HOUR).effective_min_runtime(2 * HOUR) == HOUR


def test_protection_lasts_exactly_the_capped_min_runtime(tree: BudgetTree) -> None:
    contract = Contract()
    assert contract.protected_until(start_time=100, min_runtime=2 * HOUR) == 100 + 2 * HOUR
    # Asking for a day buys the cap: protected until 8 h after the start, not a second more.
    job = running(contract, tree, "long", TEAM_A, start=100, min_runtime=24 * HOUR)
    assert job.min_runtime == 8 * HOUR
    assert contract.is_protected(job, now=100)
    assert contract.is_protected(job, now=100 + 8 * HOUR - 1)
    assert not contract.is_protected(job, now=100 + 8 * HOUR)


def test_min_runtime_zero_or_no_budget_makes_work_unallocated(tree: BudgetTree) -> None:
    contract = Contract()
    assert contract.is_unallocated(0, TEAM_A, tree)
    assert contract.is_unallocated(4 * HOUR, OPS, tree)
    assert not contract.is_unallocated(4 * HOUR, TEAM_A, tree)
    with pytest.raises(InputError, match="names no account"):
        contract.is_unallocated(HOUR, "nobody", tree)


def test_unallocated_work_is_never_protected(tree: BudgetTree) -> None:
    contract = Contract()
    filler = running(contract, tree, "filler", TEAM_A, start=0, min_runtime=0)
    unbudgeted = running(contract, tree, "ops-job", OPS, start=0, min_runtime=4 * HOUR)
    assert filler.unallocated and unbudgeted.unallocated
    # Even at their very first second, where an allocated job would be protected.
    assert not contract.is_protected(filler, now=0)
    assert not contract.is_protected(unbudgeted, now=1)


def request(
    job_id: str, account: str, priority: int = 0, *, unallocated: bool = False
) -> QueueEntry:
    return QueueEntry(job_id, account, priority, submit_time=0.0, unallocated=unallocated)


# (preemptor, victim account, victim min runtime, victim priority, now, allowed, rule)
PREEMPTION_CASES: list[tuple[str, QueueEntry, str, float, int, float, bool, PreemptionRule]] = [
    (
        "protected during min runtime",
        request("p", EVAL),
        TEAM_A,
        2 * HOUR,
        0,
        2 * HOUR - 1,
        False,
        PreemptionRule.PROTECTED,
    ),
    (
        "eval outranks team-a once protection ends",
        request("p", EVAL),
        TEAM_A,
        2 * HOUR,
        0,
        2 * HOUR,
        True,
        PreemptionRule.BETTER_FAIR_SHARE,
    ),
    (
        "product ranks below team-a, whatever its priority",
        request("p", PRODUCT, priority=1000),
        TEAM_A,
        2 * HOUR,
        0,
        5 * HOUR,
        False,
        PreemptionRule.NOT_BETTER_FAIR_SHARE,
    ),
    (
        "same team, higher priority",
        request("p", TEAM_A, priority=5),
        TEAM_A,
        2 * HOUR,
        1,
        3 * HOUR,
        True,
        PreemptionRule.HIGHER_PRIORITY,
    ),
    (
        "same team, equal priority",
        request("p", TEAM_A, priority=1),
        TEAM_A,
        2 * HOUR,
        1,
        3 * HOUR,
        False,
        PreemptionRule.NOT_HIGHER_PRIORITY,
    ),
    (
        "same team, higher priority, still protected",
        request("p", TEAM_A, priority=5),
        TEAM_A,
        2 * HOUR,
        1,
        HOUR,
        False,
        PreemptionRule.PROTECTED,
    ),
    (
        "unallocated victim (min runtime 0) goes at once, even for a lower-ranked account",
        request("p", PRODUCT),
        EVAL,
        0,
        50,
        1,
        True,
        PreemptionRule.UNALLOCATED_VICTIM,
    ),
    (
        "victim without budget is unallocated despite its min runtime",
        request("p", PRODUCT),
        OPS,
        8 * HOUR,
        0,
        1,
        True,
        PreemptionRule.UNALLOCATED_VICTIM,
    ),
    (
        "declared-unallocated preemptor preempts nobody, not even unallocated work",
        request("p", EVAL, priority=100, unallocated=True),
        PRODUCT,
        0,
        0,
        5 * HOUR,
        False,
        PreemptionRule.UNALLOCATED_PREEMPTOR,
    ),
    (
        "preemptor without budget preempts nobody",
        request("p", OPS, priority=100),
        PRODUCT,
        0,
        0,
        5 * HOUR,
        False,
        PreemptionRule.UNALLOCATED_PREEMPTOR,
    ),
]


@pytest.mark.parametrize(
    ("preemptor", "victim_account", "min_runtime", "victim_priority", "now", "allowed", "rule"),
    [case[1:] for case in PREEMPTION_CASES],
    ids=[case[0] for case in PREEMPTION_CASES],
)
def test_may_preempt(
    tree: BudgetTree,
    ranking: Ranking,
    preemptor: QueueEntry,
    victim_account: str,
    min_runtime: float,
    victim_priority: int,
    now: float,
    allowed: bool,
    rule: PreemptionRule,
) -> None:
    # These cases predate the budget rule: across accounts, the fair-share ranking decides.
    contract = Contract(cross_account="fair_share")
    victim = running(
        contract,
        tree,
        "victim",
        victim_account,
        priority=victim_priority,
        start=0,
        min_runtime=min_runtime,
    )
    verdict = contract.may_preempt(preemptor, victim, now, ranking)
    assert (verdict.allowed, verdict.rule) == (allowed, rule)
    assert bool(verdict) is allowed
    assert verdict.reason


def test_protection_reason_says_until_when(tree: BudgetTree, ranking: Ranking) -> None:
    contract = Contract()
    victim = running(contract, tree, "victim", TEAM_A, start=0, min_runtime=2 * HOUR)
    verdict = contract.may_preempt(request("p", EVAL), victim, HOUR, ranking)
    assert verdict.reason == "victim is protected by its min runtime until 7200 s (3600 s from now)"


def test_a_job_cannot_preempt_itself(tree: BudgetTree, ranking: Ranking) -> None:
    contract = Contract()
    victim = running(contract, tree, "same", TEAM_A, priority=0, start=0, min_runtime=0)
    verdict = contract.may_preempt(request("same", TEAM_A, priority=9), victim, HOUR, ranking)
    assert verdict.rule is PreemptionRule.SAME_JOB and not verdict


def test_fair_share_rule_a_team_over_its_share_becomes_preemptible_after_min_runtime() -> None:
    # x and y share 50 : 50. y runs 8 GPUs from 0 with a 1 h min runtime; x has used nothing,
    # so x's level FS is infinite and y's finite: x ranks above y.
    tree = BudgetTree.from_dict({"accounts": {"x": 50, "y": 50}})
    usage = UsageTracker()
    usage.start("y", 8, now=0)
    queue = PendingQueue(tree, usage)
    contract = Contract(cross_account="fair_share")
    victim = running(contract, tree, "y-job", "y", start=0, min_runtime=HOUR)
    x_request = request("x-job", "x")
    assert not contract.may_preempt(x_request, victim, HOUR / 2, queue.ranking(HOUR / 2))
    verdict = contract.may_preempt(x_request, victim, HOUR, queue.ranking(HOUR))
    assert verdict.allowed and verdict.rule is PreemptionRule.BETTER_FAIR_SHARE
    # Had x used more than y relative to its share, y would keep running.
    usage.start("x", 32, now=HOUR)
    usage.stop("x", 32, now=2 * HOUR)
    # At 2 h: x 32 GPU-hours, y 16; both share 0.5, so x 0.5 / (32/48) = 0.75 < y 1.5.
    verdict = contract.may_preempt(x_request, victim, 2 * HOUR, queue.ranking(2 * HOUR))
    assert not verdict and verdict.rule is PreemptionRule.NOT_BETTER_FAIR_SHARE


class Loads:
    """Running GPUs per account, and budgets as effective share x a 100-GPU cluster."""

    def __init__(self, tree: BudgetTree, running: dict[str, float]) -> None:
        self.tree = tree
        self.running = running

    def running_gpus(self, account: str) -> float:
        return self.running.get(account, 0.0)

    def budget_gpus(self, account: str) -> float:
        return self.tree.effective_share(account) * 100


# Budgets on 100 GPUs: team-a 0.7 x 0.6 x 0.5 = 21, team-b 21, eval 0.7 x 0.4 = 28, product 30.
BUDGET_RULE_CASES = [
    (
        "below its budget, team-a reclaims from eval, which keeps 32 of its 28",
        {TEAM_A: 10, EVAL: 40},
        EVAL,
        True,
        PreemptionRule.RECLAIM_BUDGET,
    ),
    (
        "team-a already runs its 21-GPU budget: it only borrows idle GPUs",
        {TEAM_A: 21, PRODUCT: 60},
        PRODUCT,
        False,
        PreemptionRule.NO_BUDGET_RECLAIM,
    ),
    (
        "product runs 34 of 30: without the 8-GPU victim it would fall to 26",
        {TEAM_A: 0, PRODUCT: 34},
        PRODUCT,
        False,
        PreemptionRule.NO_BUDGET_RECLAIM,
    ),
    (
        "product runs 38 of 30: without the victim it keeps exactly its budget",
        {TEAM_A: 0, PRODUCT: 38},
        PRODUCT,
        True,
        PreemptionRule.RECLAIM_BUDGET,
    ),
]


@pytest.mark.parametrize(
    ("running_gpus", "victim_account", "allowed", "rule"),
    [case[1:] for case in BUDGET_RULE_CASES],
    ids=[case[0] for case in BUDGET_RULE_CASES],
)
def test_budget_rule_across_accounts(
    tree: BudgetTree,
    ranking: Ranking,
    running_gpus: dict[str, float],
    victim_account: str,
    allowed: bool,
    rule: PreemptionRule,
) -> None:
    # In `ranking` eval ranks above team-a and product below it: the budget rule ignores that.
    contract = Contract()
    victim = contract.running_job(
        job_id="victim",
        account=victim_account,
        priority=0,
        submit_time=0,
        start_time=0,
        min_runtime=HOUR,
        resumable=True,
        tree=tree,
        gpus=8,
    )
    loads = Loads(tree, running_gpus)
    verdict = contract.may_preempt(request("p", TEAM_A), victim, 2 * HOUR, ranking, loads)
    assert (verdict.allowed, verdict.rule) == (allowed, rule)
    assert victim_account in verdict.reason or TEAM_A in verdict.reason


def test_budget_rule_keeps_protection_and_the_rules_within_an_account(
    tree: BudgetTree, ranking: Ranking
) -> None:
    contract = Contract()
    loads = Loads(tree, {TEAM_A: 0, PRODUCT: 90})
    fresh = running(contract, tree, "fresh", PRODUCT, start=HOUR, min_runtime=2 * HOUR)
    verdict = contract.may_preempt(request("p", TEAM_A), fresh, 2 * HOUR, ranking, loads)
    assert verdict.rule is PreemptionRule.PROTECTED
    own = running(contract, tree, "own", TEAM_A, priority=0, start=0, min_runtime=HOUR)
    verdict = contract.may_preempt(request("p", TEAM_A, priority=5), own, 2 * HOUR, ranking, loads)
    assert verdict.rule is PreemptionRule.HIGHER_PRIORITY


def test_reclaim_limit_is_what_the_victims_account_runs_beyond_its_budget(tree: BudgetTree) -> None:
    contract = Contract()
    limit = contract.reclaim_limit(TEAM_A, EVAL, Loads(tree, {TEAM_A: 10, EVAL: 40}))
    assert limit == pytest.approx(40 - 28)
    assert contract.reclaim_limit(TEAM_A, EVAL, Loads(tree, {TEAM_A: 21, EVAL: 40})) == -math.inf


def test_budget_rule_needs_the_loads(tree: BudgetTree, ranking: Ranking) -> None:
    contract = Contract()
    victim = running(contract, tree, "old", PRODUCT, start=0, min_runtime=HOUR)
    with pytest.raises(ValueError, match="pass loads"):
        contract.may_preempt(request("p", TEAM_A), victim, 2 * HOUR, ranking)


def test_a_preempted_resumable_job_requeues_with_its_identity(tree: BudgetTree) -> None:
    contract = Contract(nonresumable_preempted="fail")
    job = running(contract, tree, "ckpt", TEAM_A, priority=3, start=HOUR, resumable=True)
    outcome = contract.after_preemption(job)
    assert outcome.fate is PreemptedFate.RESUME
    # Same id, account, priority and original submit time: it keeps its place in its team.
    assert outcome.requeued == QueueEntry("ckpt", TEAM_A, 3, HOUR - 60)
    queue = PendingQueue(tree, UsageTracker())
    queue.add(QueueEntry("newer", TEAM_A, 3, HOUR + 10))
    assert outcome.requeued is not None
    queue.add(outcome.requeued)
    assert [entry.job_id for entry in queue.ordered(2 * HOUR)] == ["ckpt", "newer"]


def test_a_preempted_unallocated_job_requeues_as_unallocated(tree: BudgetTree) -> None:
    contract = Contract()
    job = running(contract, tree, "filler", TEAM_A, min_runtime=0)
    outcome = contract.after_preemption(job)
    assert outcome.requeued is not None and outcome.requeued.unallocated


@pytest.mark.parametrize(
    ("policy", "fate", "requeued"),
    [("requeue", PreemptedFate.RESTART, True), ("fail", PreemptedFate.FAIL, False)],
)
def test_a_preempted_nonresumable_job_follows_the_policy(
    tree: BudgetTree, policy: Any, fate: PreemptedFate, requeued: bool
) -> None:
    contract = Contract(nonresumable_preempted=policy)
    job = running(contract, tree, "plain", EVAL, resumable=False)
    outcome = contract.after_preemption(job)
    assert outcome.fate is fate
    assert (outcome.requeued is not None) is requeued
    assert outcome.reason


@pytest.mark.parametrize("policy", ["requeue", "fail"])
@pytest.mark.parametrize("resumable", [True, False])
def test_the_preempted_fate_is_after_preemptions_without_the_entry(
    tree: BudgetTree, policy: Any, resumable: bool
) -> None:
    contract = Contract(nonresumable_preempted=policy)
    job = running(contract, tree, "j", EVAL, resumable=resumable)
    outcome = contract.after_preemption(job)
    assert contract.preempted_fate(resumable) == (outcome.fate, outcome.reason)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_min_runtime": 0}, "max_min_runtime"),
        ({"max_min_runtime": -HOUR}, "max_min_runtime"),
        ({"max_min_runtime": float("inf")}, "max_min_runtime"),
        ({"nonresumable_preempted": "retry"}, "nonresumable_preempted"),
        ({"cross_account": "priority"}, "cross_account"),
    ],
)
def test_bad_contract_settings_are_rejected(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InputError) as error:
        Contract(**kwargs)
    assert error.value.field == field


@pytest.mark.parametrize("value", [-1, float("nan"), "8h", None])
def test_bad_min_runtimes_are_rejected(value: Any) -> None:
    with pytest.raises(InputError) as error:
        Contract().effective_min_runtime(value)
    assert error.value.field == "min_runtime"
