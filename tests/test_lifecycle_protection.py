"""How a starting job runs (unallocated or protected) follows the budget tree as it is when the
job starts, though it is fixed once per (min runtime, account) while the tree stands."""

from __future__ import annotations

from job_helpers import four_gpu_gang

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import ClusterState
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler
from toposched.scheduler.jobs import JobState

HOUR = 3600.0


def test_a_budget_given_between_two_starts_protects_the_second_job() -> None:
    # 16 GPUs (4 nodes of 4); team-b has no budget at first.
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))
    tree = BudgetTree.from_dict({"accounts": {"team-a": 100, "team-b": 0}})
    scheduler = Scheduler(state, tree)
    for name in ("b1", "b2"):
        scheduler.submit(four_gpu_gang(name, "team-b"), 0.0)
    scheduler.cycle(0.0)
    first = [scheduler.jobs[name] for name in ("b1", "b2")]
    assert all(job.state is JobState.RUNNING for job in first)
    assert all(job.unallocated and job.min_runtime == 0.0 for job in first)
    assert first[0].reason == first[1].reason == "running as unallocated work"
    assert first[1].history[-1][1] == "started (as unallocated work)"

    tree.set_shares({"team-a": 50, "team-b": 50})
    scheduler.submit(four_gpu_gang("b3", "team-b"), 10.0)
    scheduler.cycle(10.0)
    third = scheduler.jobs["b3"]
    assert third.state is JobState.RUNNING
    assert not third.unallocated and third.min_runtime == HOUR
    assert third.reason == "running" and third.history[-1] == (10.0, "started")
