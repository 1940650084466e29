"""Changing a live job's priority: a pending job re-sorts, a running one is judged anew."""

from __future__ import annotations

import pytest
from job_helpers import four_gpu_gang

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.errors import InputError
from toposched.cluster.state import ClusterState
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Evict
from toposched.scheduler.jobs import JobState

HOUR = 3600.0
TEAM = "team-a"


def scheduler_of_one_team() -> Scheduler:
    """16 GPUs (4 nodes of 4) and one team holding the whole budget."""
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))
    return Scheduler(state, BudgetTree.from_dict({"accounts": {TEAM: 100}}))


def queue_order(scheduler: Scheduler, now: float) -> list[str]:
    return [row.job for row in scheduler.queue_rows(now)]


def test_a_pending_job_takes_its_new_place_among_its_accounts_jobs() -> None:
    scheduler = scheduler_of_one_team()
    scheduler.submit(four_gpu_gang("filler", TEAM, pods=4), now=0)
    scheduler.cycle(0)
    for name, submitted in (("first", 1.0), ("second", 2.0), ("third", 3.0)):
        scheduler.submit(four_gpu_gang(name, TEAM, pods=4), now=submitted)
    assert queue_order(scheduler, 10) == ["first", "second", "third"]

    job = scheduler.set_priority("third", 5, now=10)

    assert job.spec.priority == 5
    assert job.state is JobState.PENDING
    assert queue_order(scheduler, 10) == ["third", "first", "second"]
    assert job.history[-1] == (10, "priority changed from 0 to 5")
    # Lowered again, it goes back behind the job submitted before it.
    scheduler.set_priority("third", -1, now=11)
    assert queue_order(scheduler, 11) == ["first", "second", "third"]


def _running_low_and_pending_urgent(low_priority_after: int | None) -> list[Evict]:
    """A priority-0 job fills the cluster past its min runtime; a priority-1 job of the same
    team waits. `low_priority_after`: the running job's new priority, if changed."""
    scheduler = scheduler_of_one_team()
    scheduler.submit(four_gpu_gang("low", TEAM, pods=4, priority=0), now=0)
    assert [bind.job_id for bind in scheduler.cycle(0).bound] == ["low"]
    if low_priority_after is not None:
        job = scheduler.set_priority("low", low_priority_after, now=HOUR)
        assert job.state is JobState.RUNNING
        assert "low" in scheduler.running
    scheduler.submit(four_gpu_gang("urgent", TEAM, pods=4, priority=1), now=2 * HOUR)
    result = scheduler.cycle(2 * HOUR)
    assert result.bound == []
    return [decision for decision in result.decisions if isinstance(decision, Evict)]


def test_a_running_jobs_new_priority_counts_in_later_preemption_decisions() -> None:
    unchanged = _running_low_and_pending_urgent(None)
    assert [(evict.job_id, evict.preemptor) for evict in unchanged] == [("low", "urgent")]

    raised = _running_low_and_pending_urgent(5)

    assert raised == []


def test_a_running_job_lowered_below_a_pending_one_can_be_preempted() -> None:
    scheduler = scheduler_of_one_team()
    # Resumable: the contract's cost/benefit rule weighs only work that cannot resume.
    scheduler.submit(four_gpu_gang("high", TEAM, pods=4, priority=3, resumable=True), now=0)
    scheduler.cycle(0)
    scheduler.submit(four_gpu_gang("waiting", TEAM, pods=4, priority=1), now=2 * HOUR)
    assert not any(isinstance(d, Evict) for d in scheduler.cycle(2 * HOUR).decisions)

    scheduler.set_priority("high", 0, now=2 * HOUR)
    decisions = scheduler.cycle(2 * HOUR + 1).decisions

    assert [(d.job_id, d.preemptor) for d in decisions if isinstance(d, Evict)] == [
        ("high", "waiting")
    ]


@pytest.mark.parametrize("priority", [1.5, "7", True, None])
def test_a_priority_that_is_not_an_integer_is_refused_and_nothing_changes(
    priority: object,
) -> None:
    scheduler = scheduler_of_one_team()
    scheduler.submit(four_gpu_gang("job", TEAM), now=0)
    with pytest.raises(InputError) as raised:
        scheduler.set_priority("job", priority, now=1)  # type: ignore[arg-type]
    assert raised.value.field == "priority"
    assert "integer" in raised.value.rule
    assert scheduler.jobs["job"].spec.priority == 0
    assert scheduler.queue.get("job").priority == 0


def test_an_unknown_or_finished_job_is_refused_by_name() -> None:
    scheduler = scheduler_of_one_team()
    with pytest.raises(InputError) as unknown:
        scheduler.set_priority("nobody", 1, now=0)
    assert (unknown.value.field, unknown.value.value) == ("job", "nobody")
    scheduler.submit(four_gpu_gang("done", TEAM), now=0)
    scheduler.cycle(0)
    scheduler.finish("done", now=5)
    with pytest.raises(InputError) as finished:
        scheduler.set_priority("done", 1, now=6)
    assert finished.value.value == "done"
    assert "finished" in finished.value.rule
    assert scheduler.jobs["done"].spec.priority == 0
