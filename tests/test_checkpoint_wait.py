"""Waiting for the victims' checkpoints: golden scenarios from tests/scenarios/preemption/
checkpoint_wait.yaml through `Scheduler.cycle`, and the rule's own properties."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from scenario_cases import cases_with_defaults

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation, ClusterState
from toposched.jobs.spec import JobSpec
from toposched.policy.budget import BudgetTree
from toposched.policy.checkpoint_wait import CheckpointWait, VictimCadence
from toposched.policy.contract import Contract
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Evict
from toposched.scheduler.refusals import RefusalCode

HOUR = 3600.0
SCENARIOS = Path(__file__).parent / "scenarios" / "preemption" / "checkpoint_wait.yaml"
CASE_FIELDS = {
    "name",
    "now",
    "wait",
    "checkpoints_h",
    "gpus",
    "priority",
    "u0",
    "team_a_share",
    "expect",
}


def load_cases() -> list[Any]:
    return cases_with_defaults(SCENARIOS, CASE_FIELDS)


def spec(name: str, account: str, gpus: int = 4, **fields: Any) -> JobSpec:
    data: dict[str, Any] = {
        "name": name,
        "account": account,
        "pods": 1,
        "resources_per_pod": {"gpus": gpus},
        "min_runtime": "8h",
    }
    data.update(fields)
    return JobSpec.from_dict(data)


def scheduler_for(case: dict[str, Any]) -> Scheduler:
    wait = case["wait"]
    rule = None
    if wait is not None:
        first, total = wait.get("first_checkpoint_h"), wait.get("max_total_wait_h")
        rule = CheckpointWait(
            max_wait=wait["max_wait_h"] * HOUR,
            urgent_priority=wait.get("urgent_priority"),
            first_checkpoint=None if first is None else first * HOUR,
            owed_only=wait.get("owed_only", False),
            max_total_wait=None if total is None else total * HOUR,
        )
    share = case["team_a_share"]
    accounts = {"team-a": share, "scratch": 0, **({"team-b": 100 - share} if share < 100 else {})}
    sched = Scheduler(
        ClusterState(nvl72_cluster(1, 1, 1, nodes_per_rack=4)),
        BudgetTree.from_dict({"accounts": accounts}),
        contract=Contract(checkpoint_wait=rule),
    )
    u0 = {"resumable": True, "min_runtime": 0, **(case.get("u0") or {})}
    jobs = [("u0", "scratch", 0, u0)] + [(f"a{node}", "team-a", node, {}) for node in (1, 2, 3)]
    for name, account, node, fields in jobs:
        sched.adopt(spec(name, account, **fields), Allocation.of([node], [[0, 1, 2, 3]]), 0.0, 0.0)
    for hour in case["checkpoints_h"]:
        sched.report_checkpoint("u0", hour * HOUR)
    return sched


@pytest.mark.parametrize("case", load_cases())
def test_checkpoint_wait_scenario(case: dict[str, Any]) -> None:
    sched = scheduler_for(case)
    now = case["now"] * HOUR
    job = spec("a-job", "team-a", case.get("gpus", 4), priority=case.get("priority", 0))
    sched.submit(job, now)
    evicted = [d.job_id for d in sched.cycle(now).decisions if isinstance(d, Evict)]
    expect = case["expect"]
    assert evicted == expect["evicted"]
    waiting = sched.jobs["a-job"]
    if "reason" in expect:
        assert waiting.reason.endswith(expect["reason"]), waiting.reason
        assert waiting.refusal is not None
        assert waiting.refusal.code is RefusalCode.WAITING_FOR_CHECKPOINTS
        assert waiting.refusal.figures["until"] > now


def test_the_awaited_checkpoint_ends_the_wait() -> None:
    # Waiting at 2.75 h; u0 checkpoints at 3 h and the cycle then evicts it, losing nothing.
    case = {"checkpoints_h": [1.0, 2.0], "wait": {"max_wait_h": 1.0}, "team_a_share": 100}
    sched = scheduler_for(case)
    sched.submit(spec("a-job", "team-a"), 2.75 * HOUR)
    assert not sched.cycle(2.75 * HOUR).decisions
    sched.report_checkpoint("u0", 3 * HOUR)
    evictions = [d for d in sched.cycle(3 * HOUR).decisions if isinstance(d, Evict)]
    assert [(d.job_id, d.lost_gpu_seconds) for d in evictions] == [("u0", 0.0)]


def test_a_waiting_job_keeps_its_victims_until_they_checkpoint() -> None:
    # Told at 2.75 h to wait for u0's checkpoint at 3 h, the job's later turns judge u0 again
    # with the figures of their time, without another victim search.
    case = {"checkpoints_h": [1.0, 2.0], "wait": {"max_wait_h": 1.0}, "team_a_share": 100}
    sched = scheduler_for(case)
    sched.submit(spec("a-job", "team-a"), 2.75 * HOUR)
    assert not sched.cycle(2.75 * HOUR).decisions
    searches = sched.preemptor.victim_searches
    assert not sched.cycle(2.9 * HOUR).decisions
    assert sched.preemptor.victim_searches == searches
    reason = sched.jobs["a-job"].reason
    # 4 GPUs x 0.9 h lost now; 6 minutes of the job's 4 GPUs cost 0.4 GPU-hours.
    assert reason.endswith(
        "would evict 1 job losing 3.6 GPU-hours now; they checkpoint within 6 min, which saves "
        "3.6 GPU-hours for 0.4 GPU-hours of this job's wait: waiting"
    ), reason


def test_a_victim_that_leaves_ends_the_kept_wait() -> None:
    # A two-pod job needs u0's node and u1's: told to wait for both, it searches again once u1
    # has ended (u0's node is still needed), and waits for u0 alone.
    case = {"checkpoints_h": [1.0, 2.0], "wait": {"max_wait_h": 1.0}, "team_a_share": 100}
    sched = scheduler_for(case)
    sched.finish("a1", 2.5 * HOUR)
    u1 = spec("u1", "scratch", resumable=True, min_runtime=0)
    sched.adopt(u1, Allocation.of([1], [[0, 1, 2, 3]]), 0.0, 0.0)
    for hour in (1.0, 2.0):
        sched.report_checkpoint("u1", hour * HOUR)
    sched.submit(spec("a-job", "team-a", pods=2), 2.75 * HOUR)
    assert not [d for d in sched.cycle(2.75 * HOUR).decisions if isinstance(d, Evict)]
    refusal = sched.jobs["a-job"].refusal
    assert refusal is not None and refusal.figures["victims"] == 2.0
    searches = sched.preemptor.victim_searches
    sched.finish("u1", 2.8 * HOUR)
    assert not [d for d in sched.cycle(2.8 * HOUR).decisions if isinstance(d, Evict)]
    assert sched.preemptor.victim_searches == searches + 1
    refusal = sched.jobs["a-job"].refusal
    assert refusal is not None and refusal.code is RefusalCode.WAITING_FOR_CHECKPOINTS
    assert refusal.figures["victims"] == 1.0


def test_the_waits_of_a_pending_job_add_up_to_max_total_wait() -> None:
    # team-a runs its whole budget, so under owed_only waiting costs its job nothing; told to
    # wait at 2.25 h, it may keep waiting until 3.25 h at most. At 3.2 h u0 (checkpointed at
    # 3 h) is due again at 4 h: a job first told to wait now would wait, this one evicts.
    case = {
        "checkpoints_h": [1.0, 2.0],
        "wait": {"max_wait_h": 1.0, "owed_only": True, "max_total_wait_h": 1.0},
        "team_a_share": 75,
    }
    told = scheduler_for(case)
    told.submit(spec("a-job", "team-a"), 2.25 * HOUR)
    assert not told.cycle(2.25 * HOUR).decisions
    told.report_checkpoint("u0", 3 * HOUR)
    evictions = [d.job_id for d in told.cycle(3.2 * HOUR).decisions if isinstance(d, Evict)]
    assert evictions == ["u0"]
    fresh = scheduler_for(case)
    fresh.report_checkpoint("u0", 3 * HOUR)
    fresh.submit(spec("a-job", "team-a"), 3.2 * HOUR)
    assert not [d for d in fresh.cycle(3.2 * HOUR).decisions if isinstance(d, Evict)]
    assert fresh.jobs["a-job"].reason.endswith("owed GPU-time delayed: waiting")


def test_bad_settings_are_refused_with_the_field_named() -> None:
    with pytest.raises(InputError, match="max_wait"):
        CheckpointWait(max_wait=-1)
    with pytest.raises(InputError, match="min_saved_per_cost"):
        CheckpointWait(min_saved_per_cost=float("nan"))
    with pytest.raises(InputError, match="urgent_priority"):
        CheckpointWait(urgent_priority=1.5)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="checkpoint_wait"):
        Contract(checkpoint_wait="yes")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="first_checkpoint"):
        CheckpointWait(first_checkpoint=0)
    with pytest.raises(InputError, match="max_total_wait"):
        CheckpointWait(max_total_wait=-1.0)
    with pytest.raises(InputError, match="owed_only"):
        CheckpointWait(owed_only="yes")  # type: ignore[arg-type]


def test_the_cadence_the_rule_uses() -> None:
    assumed = CheckpointWait(first_checkpoint=HOUR)
    # Learned from reports, whatever is assumed; none for work that cannot resume.
    assert assumed.cadence(True, 1800.0, 0.0, 600.0) == 1800.0
    assert assumed.cadence(False, 1800.0, 0.0, 600.0) is None
    # No report yet: the assumed first checkpoint while it is still due, then unknown.
    assert assumed.cadence(True, None, 0.0, 0.9 * HOUR) == HOUR
    assert assumed.cadence(True, None, 0.0, HOUR) is None
    assert CheckpointWait().cadence(True, None, 0.0, 0.5 * HOUR) is None


@given(st.floats(0, 64), st.floats(0, 64), st.floats(-64, 128))
def test_owed_only_costs_at_most_the_shortfall(gpus: float, budget: float, running: float) -> None:
    costed = CheckpointWait(owed_only=True).costed_gpus(gpus, budget, running)
    assert 0 <= costed <= gpus
    assert costed == pytest.approx(min(gpus, max(budget - running, 0.0)))
    assert CheckpointWait().costed_gpus(gpus, budget, running) == gpus


@st.composite
def cadences(draw: st.DrawFn, now: float) -> list[VictimCadence]:
    """Victims as the scheduler knows them at `now`: each reported its last checkpoint (or
    started) less than one cadence ago, when its cadence is known."""
    victims = []
    for _ in range(draw(st.integers(1, 5))):
        gpus = draw(st.sampled_from([1.0, 4.0, 8.0, 32.0]))
        every = draw(st.none() | st.floats(60, 2 * HOUR))
        ago = draw(st.floats(0, 1, exclude_max=True)) * (every or 3 * HOUR)
        assume(every is None or now - ago + every > now)  # its next one is still to come
        victims.append(VictimCadence(gpus, now - ago, every))
    return victims


def lost_at(victims: list[VictimCadence], moment: float) -> float:
    """Brute force: the work each victim would lose if evicted at `moment`, stepping through
    its checkpoints one by one."""
    total = 0.0
    for victim in victims:
        since = victim.since
        if victim.every is not None:
            while since + victim.every <= moment:
                since += victim.every
        total += victim.gpus * max(moment - since, 0.0)
    return total


NOW = 3 * HOUR


@given(cadences(NOW), st.floats(1, 64))
def test_the_verdict_matches_brute_force(victims: list[VictimCadence], gpus: float) -> None:
    # A wait is chosen only when the work saved, counted checkpoint by checkpoint, is at least
    # what the wait costs, and the figures quoted are those counts; and whenever such a wait
    # ending at the last checkpoint due exists, it is chosen.
    verdict = CheckpointWait(max_wait=2 * HOUR).judge(gpus, victims, NOW)
    assert verdict.lost_now_gpu_seconds == pytest.approx(lost_at(victims, NOW))
    due = [v.since + v.every for v in victims if v.every is not None]
    until = max(due, default=NOW)
    saved = lost_at(victims, NOW) - lost_at(victims, until)
    cost = gpus * (until - NOW)
    clearly_worth_it = until > NOW and saved > 1e-3 and saved >= cost * (1 + 1e-6)
    clearly_not = until <= NOW or saved < cost * (1 - 1e-6) or saved <= 0
    assert not (clearly_worth_it and not verdict.wait)
    assert not (clearly_not and verdict.wait)
    if verdict.wait:
        assert verdict.until == until
        assert verdict.saved_gpu_seconds == pytest.approx(saved, abs=1e-6)
        assert verdict.cost_gpu_seconds == pytest.approx(cost)
