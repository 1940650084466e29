"""The cost/benefit rule of preemption: golden scenarios from tests/scenarios/preemption/
worth.yaml through `Scheduler.cycle`, and the rule's own properties."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from scenario_cases import cases_with_defaults

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation, ClusterState
from toposched.jobs.spec import JobSpec
from toposched.policy.budget import BudgetTree
from toposched.policy.contract import Contract
from toposched.policy.usage import UsageTracker
from toposched.policy.worth import EvictionWorth, VictimCost, WorthScope
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Evict
from toposched.scheduler.refusals import RefusalCode
from toposched.scheduler.worth import WorthGate

HOUR = 3600.0
SCENARIOS = Path(__file__).parent / "scenarios" / "preemption" / "worth.yaml"
BUDGETS = {"team-a": 50, "team-b": 50, "scratch": 0}
CASE_FIELDS = {"name", "now", "worth", "b2", "b2_start", "budgets", "expect"}


def load_cases() -> list[Any]:
    return cases_with_defaults(SCENARIOS, CASE_FIELDS)


def spec(name: str, account: str, **fields: Any) -> JobSpec:
    data: dict[str, Any] = {
        "name": name,
        "account": account,
        "pods": 1,
        "resources_per_pod": {"gpus": 4},
        "min_runtime": "1h",
    }
    data.update(fields)
    return JobSpec.from_dict(data)


def contract_of(worth: dict[str, Any] | str | None) -> Contract:
    if worth is None:
        return Contract(worth=None)
    if worth == "default":
        return Contract()
    assert isinstance(worth, dict)
    budget = worth.get("loss_budget_h")
    account_budget = worth.get("account_loss_budget_h")
    own_budgets = worth.get("account_loss_budgets_h") or {}
    return Contract(
        worth=EvictionWorth(
            max_lost_per_gained=worth["max_lost_per_gained"],
            horizon=worth["horizon_h"] * HOUR,
            shortfall_weight=worth.get("shortfall_weight", 0.0),
            owed_only=worth.get("owed_only", False),
            loss_budget=None if budget is None else budget * HOUR,
            age_wait=worth.get("age_wait", 0.0),
            restart_cost=worth.get("restart_h", 0.0) * HOUR,
            scope=WorthScope(worth.get("scope", "all")),
            unallocated=worth.get("unallocated", False),
            account_loss_budget=None if account_budget is None else account_budget * HOUR,
            account_loss_budgets=tuple((a, h * HOUR) for a, h in own_budgets.items()),
        )
    )


def scheduler_for(case: dict[str, Any]) -> Scheduler:
    usage = UsageTracker()
    state = ClusterState(nvl72_cluster(1, 1, 1, nodes_per_rack=4))
    sched = Scheduler(
        state,
        BudgetTree.from_dict({"accounts": case.get("budgets") or BUDGETS}),
        usage=usage,
        contract=contract_of(case["worth"]),
    )
    b2 = dict(case.get("b2") or {})
    b2_account = b2.pop("account", "team-b")
    checkpoint = b2.pop("checkpoint_h", None)
    start = case["b2_start"] * HOUR
    for name, account, node, since, fields in (
        ("b0", "team-b", 0, 0.0, {}),
        ("b1", "team-b", 1, 0.0, {}),
        ("a0", "team-a", 3, 0.0, {}),
        ("b2", b2_account, 2, start, b2),
    ):
        job = spec(name, account, **fields)
        sched.adopt(job, Allocation.of([node], [[0, 1, 2, 3]]), start_time=since, now=since)
    if checkpoint is not None:
        sched.report_checkpoint("b2", checkpoint * HOUR)
    return sched


@pytest.mark.parametrize("case", load_cases())
def test_worth_scenario(case: dict[str, Any]) -> None:
    sched = scheduler_for(case)
    now = case["now"] * HOUR
    sched.submit(spec("a-job", "team-a"), now)
    result = sched.cycle(now)
    evicted = [d.job_id for d in result.decisions if isinstance(d, Evict)]
    expect = case["expect"]
    assert evicted == expect["evicted"]
    job = sched.jobs["a-job"]
    if "reason" in expect:
        assert job.reason.endswith(expect["reason"]), job.reason
        assert job.refusal is not None and job.refusal.code is RefusalCode.NOT_WORTH_IT
    if evicted:
        assert job.nomination is not None


def test_a_refused_job_is_reconsidered_as_its_victims_change() -> None:
    # Refused at 5 h (18 GPU-hours lost for 8 gained); once b2 ends on its own the job starts.
    case = {"b2_start": 0.5, "worth": {"max_lost_per_gained": 1.0, "horizon_h": 2.0}}
    sched = scheduler_for(case)
    sched.submit(spec("a-job", "team-a"), 5 * HOUR)
    sched.cycle(5 * HOUR)
    sched.finish("b2", 5.5 * HOUR)
    assert [d.job_id for d in sched.cycle(5.5 * HOUR).bound] == ["a-job"]


def test_the_shortfall_credit() -> None:
    rule = EvictionWorth(shortfall_weight=2.0)
    assert rule.credit(budget=8, running=4) == 2.0
    assert rule.credit(budget=8, running=0) == 3.0
    assert rule.credit(budget=8, running=12) == 1.0
    assert rule.credit(budget=0, running=0) == 1.0
    assert EvictionWorth().credit(budget=8, running=0) == 1.0


def test_bad_settings_are_refused_with_the_field_named() -> None:
    with pytest.raises(InputError, match="max_lost_per_gained"):
        EvictionWorth(max_lost_per_gained=-1)
    with pytest.raises(InputError, match="horizon"):
        EvictionWorth(horizon=float("inf"))
    with pytest.raises(InputError, match="worth"):
        Contract(worth="yes")  # type: ignore[arg-type]


victims = st.lists(
    st.builds(
        VictimCost,
        job_id=st.just("v"),
        gpus=st.floats(0.5, 64),
        lost_gpu_seconds=st.floats(0, 1e7),
        remaining=st.none() | st.floats(-1e4, 1e6),
    ),
    max_size=6,
)


@given(
    victims,
    st.floats(0.5, 512),
    st.floats(0, 10),
    st.floats(0, 1e5),
    st.floats(1, 1e6),
)
def test_the_rule_is_monotone(
    costs: list[VictimCost], gpus: float, ratio: float, horizon: float, extra: float
) -> None:
    # A larger preemptor, a looser ratio or a longer horizon never turns an eviction into a
    # wait; more work lost never turns a wait into an eviction; the figures quoted are those
    # compared.
    rule = EvictionWorth(max_lost_per_gained=ratio, horizon=horizon)
    verdict = rule.judge(gpus, costs)
    assert verdict.lost_gpu_seconds == pytest.approx(sum(c.lost_gpu_seconds for c in costs))
    assert verdict.gained_gpu_seconds <= gpus * horizon * (1 + 1e-12)
    looser = [
        rule.judge(gpus * 2, costs),
        EvictionWorth(max_lost_per_gained=ratio * 2, horizon=horizon).judge(gpus, costs),
        EvictionWorth(max_lost_per_gained=ratio, horizon=horizon * 2).judge(gpus, costs),
    ]
    if verdict.worth_it:
        assert all(other.worth_it for other in looser)
    elif costs:
        first = costs[0]
        heavier = [replace(first, lost_gpu_seconds=first.lost_gpu_seconds + extra), *costs[1:]]
        assert not rule.judge(gpus, heavier).worth_it
        assert verdict.reason.endswith(": waiting")


@given(victims, st.floats(0.5, 512), st.floats(0, 3600), st.floats(1, 3600))
def test_a_restart_cost_only_makes_evictions_dearer(
    costs: list[VictimCost], gpus: float, restart: float, more: float
) -> None:
    # The restart weighed is the victims' GPUs x the cost, beside the work lost; a dearer
    # restart never turns a wait into an eviction, and without one the rule is unchanged.
    plain = EvictionWorth().judge(gpus, costs)
    rule = EvictionWorth(restart_cost=restart)
    verdict = rule.judge(gpus, costs)
    assert verdict.restart_gpu_seconds == pytest.approx(restart * sum(c.gpus for c in costs))
    assert verdict.lost_gpu_seconds == plain.lost_gpu_seconds
    assert EvictionWorth(restart_cost=0.0).judge(gpus, costs) == plain
    if verdict.worth_it:
        assert plain.worth_it
    else:
        assert not EvictionWorth(restart_cost=restart + more).judge(gpus, costs).worth_it


def test_the_loss_budget_rations_what_is_left() -> None:
    # 6 GPU-hours lost for 8 gained passes with the day's budget of 12 untouched; with 4 spent
    # (8 left) an eviction must gain lost / (8/12) = 9 GPU-hours; with 7 spent only 5 are left.
    rule = EvictionWorth(loss_budget=12 * HOUR)
    victim = [VictimCost("v", 4, 6 * HOUR, None)]
    assert rule.judge(4, victim).worth_it
    assert rule.judge(4, victim, spent=0.0).worth_it
    rationed = rule.judge(4, victim, spent=4 * HOUR)
    assert not rationed.worth_it
    assert rationed.reason.endswith(
        "(at most 0.67 lost per GPU-hour gained) with 8.0 GPU-hours left of the day's budget "
        "of lost work: waiting"
    )
    assert rule.judge(5, victim, spent=4 * HOUR).worth_it  # 10 GPU-hours gained
    assert not rule.judge(512, victim, spent=7 * HOUR).worth_it  # 6 > 5 left


def gate_after_b2_is_evicted(worth: dict[str, Any]) -> WorthGate:
    """The rule's gate once a-job, submitted at 2 h, has evicted b2 under `worth`."""
    sched = scheduler_for({"b2_start": 0.5, "worth": worth})
    sched.submit(spec("a-job", "team-a"), 2 * HOUR)
    evicted = [d.job_id for d in sched.cycle(2 * HOUR).decisions if isinstance(d, Evict)]
    assert evicted == ["b2"]
    gate = sched.preemptor.worth
    assert gate is not None
    return gate


def test_the_gate_counts_the_lost_work_of_the_last_24_hours() -> None:
    gate = gate_after_b2_is_evicted(
        {"max_lost_per_gained": 1.0, "horizon_h": 2.0, "loss_budget_h": 10.0}
    )
    assert gate.spent(2 * HOUR) == pytest.approx(6 * HOUR)
    assert gate.spent(25.9 * HOUR) == pytest.approx(6 * HOUR)
    assert gate.spent(26 * HOUR) == 0.0


def test_the_gate_counts_restarts_against_the_loss_budget() -> None:
    # b2 evicted at 2 h: 6 GPU-hours lost and 4 GPUs x 0.5 h restarting, 8 of the day's 20.
    worth = {"max_lost_per_gained": 1.0, "horizon_h": 2.0, "loss_budget_h": 20.0}
    gate = gate_after_b2_is_evicted({**worth, "restart_h": 0.5})
    assert gate.spent(2 * HOUR) == pytest.approx(8 * HOUR)


def test_each_account_has_its_own_loss_budget() -> None:
    # 4 GPU-hours of team-b's work and 3 of team-c's against budgets of 5 a day each: team-b
    # has spent 2 already, so only 3 are left to it and the eviction waits.
    rule = EvictionWorth(account_loss_budget=5 * HOUR)
    victims = [
        VictimCost("b", 4, 4 * HOUR, None, account="team-b"),
        VictimCost("c", 4, 3 * HOUR, None, account="team-c"),
    ]
    assert rule.judge(8, victims).worth_it
    assert rule.judge(8, victims, spent_by_account={"team-c": 2 * HOUR}).worth_it
    waiting = rule.judge(8, victims, spent_by_account={"team-b": 2 * HOUR})
    assert not waiting.worth_it
    assert waiting.reason.endswith(
        ", 3.0 GPU-hours left of team-b's day's budget of lost work: waiting"
    )
    assert rule.account_over_budget(victims, {"team-b": 2 * HOUR}) == ("team-b", 3 * HOUR)


def test_named_accounts_have_their_own_loss_budgets() -> None:
    rule = EvictionWorth(
        account_loss_budget=5 * HOUR,
        account_loss_budgets=(("team-c", 1 * HOUR), ("team-a", 50 * HOUR)),
    )
    assert rule.account_loss_budgets == (("team-a", 50 * HOUR), ("team-c", 1 * HOUR))
    assert rule.loss_budget_of("team-c") == HOUR and rule.loss_budget_of("team-b") == 5 * HOUR
    victims = [
        VictimCost("b", 4, 4 * HOUR, None, account="team-b"),
        VictimCost("c", 4, 2 * HOUR, None, account="team-c"),
    ]
    # team-b's 4 fit its 5; team-c's 2 are past its own 1.
    assert rule.account_over_budget(victims, {}) == ("team-c", HOUR)
    alone = EvictionWorth(account_loss_budgets=(("team-c", 3 * HOUR),))
    assert alone.per_account and alone.account_over_budget(victims, {}) is None
    assert not EvictionWorth().per_account


@pytest.mark.parametrize(
    "pairs",
    [
        (("team-a", 0.0),),
        (("team-a", HOUR), ("team-a", 2 * HOUR)),
        (("", HOUR),),
        (("team-a",),),
        "team-a=5",
    ],
)
def test_bad_named_loss_budgets_are_refused(pairs: Any) -> None:
    with pytest.raises(InputError, match="account_loss_budgets"):
        EvictionWorth(account_loss_budgets=pairs)


def test_a_loss_budget_for_an_account_the_tree_lacks_is_refused() -> None:
    worth = EvictionWorth(account_loss_budgets=(("team-z", HOUR),))
    state = ClusterState(nvl72_cluster(1, 1, 1, nodes_per_rack=4))
    with pytest.raises(InputError, match="team-z.*names no account of the budget tree"):
        Scheduler(
            state, BudgetTree.from_dict({"accounts": BUDGETS}), contract=Contract(worth=worth)
        )


def test_the_gate_counts_the_lost_work_of_each_account() -> None:
    worth = {"max_lost_per_gained": 1.0, "horizon_h": 2.0, "account_loss_budget_h": 10.0}
    gate = gate_after_b2_is_evicted(worth)
    assert gate.spent_by_account(2 * HOUR) == pytest.approx({"team-b": 6 * HOUR})
    assert gate.spent_by_account(26 * HOUR) == {}


def test_age_wait_and_budget_settings_are_checked() -> None:
    with pytest.raises(InputError, match="account_loss_budget"):
        EvictionWorth(account_loss_budget=-1)
    with pytest.raises(InputError, match="loss_budget"):
        EvictionWorth(loss_budget=0)
    with pytest.raises(InputError, match="loss_budget"):
        EvictionWorth(loss_budget=float("nan"))
    with pytest.raises(InputError, match="age_wait"):
        EvictionWorth(age_wait=-1)
    with pytest.raises(InputError, match="owed_only"):
        EvictionWorth(owed_only=1)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="restart_cost"):
        EvictionWorth(restart_cost=-60)
