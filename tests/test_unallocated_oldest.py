"""Unallocated work oldest submission first across accounts (`UnallocatedOrder.OLDEST`): the
queue's order, positions and explanations, the scheduler's starts, and its cycles' shortcuts."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import pytest
from cycle_log import logged_run
from hypothesis import given, settings
from hypothesis import strategies as st
from test_policy_fairshare import BUDGET, EVAL, GOLDEN_USAGE, PRODUCT, TEAM_A, TEAM_B
from test_policy_fairshare import used_for_an_hour as fairshare_usage
from test_scheduler_cycle import adopt_on, job, order, small_cluster, two_teams

from toposched.cli.simulate_options import add_options
from toposched.cli.simulate_run import scheduler_factory
from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.errors import InputError
from toposched.cluster.state import ClusterState
from toposched.cluster.units import HOUR
from toposched.policy.budget import BudgetTree
from toposched.policy.fairshare import NOT_OWED, OLDEST_STANDING, PendingQueue, UnallocatedOrder
from toposched.policy.queue_entry import QueueEntry, QueueTier
from toposched.policy.usage import UsageTracker
from toposched.scheduler.core import Scheduler
from toposched.scheduler.settings import SchedulerSettings
from toposched.workloads.ai2 import ai2_like
from toposched.workloads.model import Workload

OLDEST = UnallocatedOrder.OLDEST


def ids(queue: PendingQueue, now: float) -> list[str]:
    return [entry.job_id for entry in queue.ordered(now)]


def golden(unallocated_order: UnallocatedOrder) -> PendingQueue:
    """Fair Tree order: eval, team-b, team-a, product (`test_fair_tree_golden_ranking`)."""
    tree = BudgetTree.from_dict(BUDGET)
    queue = PendingQueue(tree, fairshare_usage(GOLDEN_USAGE), unallocated_order)
    queue.add(QueueEntry("a1", TEAM_A, 9, 1.0))
    queue.add(QueueEntry("p1", PRODUCT, 100, 0.0))
    queue.add(QueueEntry("e-new", EVAL, 5, 40.0, unallocated=True))
    queue.add(QueueEntry("p-old", PRODUCT, 0, 10.0, unallocated=True))
    queue.add(QueueEntry("b-mid", TEAM_B, 0, 20.0, unallocated=True))
    queue.add(QueueEntry("p-mid", PRODUCT, 7, 30.0, unallocated=True))
    queue.add(QueueEntry("e-old", EVAL, 0, 5.0, unallocated=True))
    return queue


def test_unallocated_work_goes_oldest_first_across_accounts() -> None:
    # By rank, the unallocated tier is eval's jobs (priority first), team-b's, product's.
    assert ids(golden(UnallocatedOrder.RANK), HOUR) == [
        *("a1", "p1"),
        *("e-new", "e-old", "b-mid", "p-mid", "p-old"),
    ]
    # Oldest first, the allocated tier is as it was; the unallocated tier goes by submit time,
    # whatever the accounts' rank and the jobs' priority.
    queue = golden(OLDEST)
    assert ids(queue, HOUR) == [*("a1", "p1"), *("e-old", "p-old", "b-mid", "p-mid", "e-new")]
    assert [queue.position(job_id, HOUR) for job_id in ids(queue, HOUR)] == list(range(7))
    # In runs of consecutive jobs of one account (a cycle may leave a run, see the tally).
    runs = [[entry.job_id for entry in run] for run in queue.runs(HOUR)]
    assert runs == [["a1"], ["p1"], ["e-old"], ["p-old"], ["b-mid"], ["p-mid"], ["e-new"]]


def test_explanations_say_the_oldest_order_and_sort_by_it() -> None:
    queue = golden(OLDEST)
    explanation = queue.explain("p-old", HOUR)
    assert explanation.position == 3
    assert explanation.tier is QueueTier.UNALLOCATED
    assert explanation.sort_key == (
        QueueTier.UNALLOCATED,
        NOT_OWED,
        OLDEST_STANDING,
        0,
        10.0,
        "p-old",
    )
    assert explanation.reason == (
        "unallocated (min_runtime 0): runs only on GPUs budgeted work leaves idle; "
        "oldest submission first across accounts"
    )
    explained = list(queue.explanations(HOUR))
    assert [item.entry.job_id for item in explained] == ids(queue, HOUR)
    keys = [item.sort_key for item in explained]
    assert keys == sorted(keys)
    # Allocated work reads as before.
    assert queue.explain("a1", HOUR).reason == "allocated"
    assert golden(UnallocatedOrder.RANK).explain("p-old", HOUR).reason == (
        "unallocated (min_runtime 0): runs only on GPUs budgeted work leaves idle"
    )


def test_jobs_of_an_account_without_budget_join_the_oldest_order() -> None:
    tree = BudgetTree.from_dict(
        {"accounts": {"lab": {"share": 50, "children": {"idle": 0, "team": 100}}, "ops": 50}}
    )
    queue = PendingQueue(tree, UsageTracker(), OLDEST)
    queue.add(QueueEntry("idle-urgent", "lab/idle", 1000, 8.0))
    queue.add(QueueEntry("idle-old", "lab/idle", 0, 1.0))
    queue.add(QueueEntry("ops-fill", "ops", 0, 4.0, unallocated=True))
    queue.add(QueueEntry("team-1", "lab/team", 0, 9.0))
    assert ids(queue, 10) == ["team-1", "idle-old", "ops-fill", "idle-urgent"]
    assert queue.explain("idle-urgent", 10).reason == (
        "unallocated: account lab/idle has no budget; oldest submission first across accounts"
    )
    assert queue.position("ops-fill", 10) == 2
    # One account waiting: ordered without a ranking, the same way.
    queue.remove("team-1")
    queue.remove("ops-fill")
    assert ids(queue, 10) == ["idle-old", "idle-urgent"]
    # Given a budget, its jobs are allocated again, by priority.
    tree.set_shares({"lab/idle": 0.5, "lab/team": 99.5})
    assert ids(queue, 10) == ["idle-urgent", "idle-old"]


def test_an_order_that_is_not_an_unallocated_order_is_refused() -> None:
    with pytest.raises(InputError, match="unallocated_order"):
        PendingQueue(BudgetTree.from_dict(BUDGET), UsageTracker(), "oldest")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="unallocated_order"):
        SchedulerSettings(unallocated_order="oldest")  # type: ignore[arg-type]


ACCOUNTS = (TEAM_A, TEAM_B, EVAL, PRODUCT, "nobody")


@settings(max_examples=150, deadline=None)
@given(
    jobs=st.lists(
        st.tuples(
            st.sampled_from(ACCOUNTS),
            st.integers(0, 2),
            st.integers(0, 5).map(float),
            st.booleans(),
        ),
        max_size=25,
    ),
    removed=st.sets(st.integers(0, 24), max_size=5),
    detach=st.booleans(),
)
def test_the_oldest_order_is_the_rank_order_with_the_unallocated_tier_resorted(
    jobs: Sequence[tuple[str, int, float, bool]], removed: set[int], detach: bool
) -> None:
    spec = {"accounts": {**BUDGET["accounts"], "nobody": 0}}  # type: ignore[dict-item]
    queues = {}
    for unallocated_order in UnallocatedOrder:
        tree = BudgetTree.from_dict(spec)
        queue = PendingQueue(tree, fairshare_usage(GOLDEN_USAGE), unallocated_order)
        for index, (account, priority, submit, unallocated) in enumerate(jobs):
            queue.add(QueueEntry(f"j{index}", account, priority, submit, unallocated))
        for index in removed:
            if f"j{index}" in queue:
                queue.remove(f"j{index}")
        if detach:
            tree.add_account(f"{EVAL}/red-team", 10)  # eval's jobs are detached
        queues[unallocated_order] = queue
    by_rank = list(queues[UnallocatedOrder.RANK].ordered(HOUR))
    oldest = queues[OLDEST]

    def of_tier(tier: QueueTier) -> list[QueueEntry]:
        return [entry for entry in by_rank if oldest.tier(entry) is tier]

    expected = (
        of_tier(QueueTier.ALLOCATED)
        + sorted(of_tier(QueueTier.UNALLOCATED), key=lambda e: (e.submit_time, e.job_id))
        + of_tier(QueueTier.DETACHED)
    )
    order = list(oldest.ordered(HOUR))
    assert order == expected
    assert [oldest.position(entry.job_id, HOUR) for entry in order] == list(range(len(order)))
    keys = [item.sort_key for item in oldest.explanations(HOUR)]
    assert keys == sorted(keys)
    for run in oldest.runs(HOUR):
        assert len({entry.account for entry in run}) <= 1


def test_the_scheduler_starts_the_oldest_unallocated_job_where_one_fits() -> None:
    # team-a runs 12 of the 16 GPUs since 0, so team-b (no usage) ranks first. One node is
    # free: team-a's unallocated job, submitted first, starts under the oldest order; by rank,
    # team-b's newer one does.
    started = {}
    for unallocated_order in UnallocatedOrder:
        scheduler = Scheduler(small_cluster(), two_teams(), unallocated_order=unallocated_order)
        for node in range(3):
            adopt_on(scheduler, job(f"x{node}", "team-a", expected_runtime=9000), node, range(4))
        scheduler.submit(job("a-old", "team-a", min_runtime=0, expected_runtime=HOUR), 0)
        scheduler.submit(job("b-new", "team-b", min_runtime=0, expected_runtime=HOUR), 100)
        assert order(scheduler, 200)[0] == ("a-old" if unallocated_order is OLDEST else "b-new")
        started[unallocated_order] = [d.job_id for d in scheduler.cycle(200).bound]
    assert started == {UnallocatedOrder.RANK: ["b-new"], OLDEST: ["a-old"]}


def test_cycles_after_submissions_decide_as_full_cycles_under_the_oldest_order() -> None:
    """The checking mode (a full cycle on a copy beside each that skips jobs) holds, and the
    decisions equal a scheduler's that walks every job every cycle."""

    def workload() -> Workload:
        return ai2_like(seed=7, days=0.3, gpus=256)

    checked = logged_run(
        workload(), None, check_incremental=True, full_cycle_every=0.0, unallocated_order=OLDEST
    )
    full = logged_run(workload(), None, incremental=False, unallocated_order=OLDEST)
    by_rank = logged_run(workload(), None, incremental=False)
    assert checked.incremental > 0
    assert checked.lines == full.lines
    assert full.lines != by_rank.lines  # the order is felt on this run


def test_the_simulate_option_sets_the_order_and_rank_keeps_the_default() -> None:
    parser = argparse.ArgumentParser()
    add_options(parser)
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=4))
    tree = BudgetTree.from_dict({"accounts": {"team-a": 100}})
    scheduler = scheduler_factory(parser.parse_args(["--unallocated-order", "oldest"]))(state, tree)
    assert isinstance(scheduler, Scheduler)
    assert scheduler.settings.unallocated_order is OLDEST
    assert scheduler_factory(parser.parse_args(["--unallocated-order", "rank"])) is (
        scheduler_factory(parser.parse_args([]))
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["--unallocated-order", "newest"])
