"""A conflict between the scheduler's records and the cluster state is reported as the
scheduler's own fault, in words for the user, never as bad input."""

from __future__ import annotations

import pytest
from job_helpers import four_gpu_gang

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.errors import InputError, ToposchedError
from toposched.cluster.state import Allocation, ClusterState
from toposched.placement.search import Placement
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler
from toposched.scheduler.errors import InternalError


def scheduler() -> Scheduler:
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))
    return Scheduler(state, BudgetTree.from_dict({"accounts": {"team": 100}}))


def test_an_owner_the_state_already_holds_is_an_internal_error() -> None:
    sched = scheduler()
    sched.submit(four_gpu_gang("job", "team"), now=0)
    # The state holds an allocation under the pending job's name behind the scheduler's back.
    sched.state.allocate("job", Allocation.of([3], [[0]]))

    with pytest.raises(InternalError) as raised:
        sched.cycle(0)

    error = raised.value
    assert isinstance(error, ToposchedError) and not isinstance(error, InputError)
    assert error.job_id == "job"
    assert "already holds an allocation" in error.detail
    assert error.message.startswith("toposched could not change job 'job'")
    assert "fault in the scheduler, not in the request" in str(error)


def test_a_placement_that_does_not_fit_is_still_bad_input() -> None:
    sched = scheduler()
    sched.submit(four_gpu_gang("first", "team"), now=0)
    sched.submit(four_gpu_gang("second", "team"), now=0)
    taken = Allocation.of([0], [[0, 1, 2, 3]])
    sched.bind("first", Placement(sched.jobs["first"].request, taken), now=0)

    with pytest.raises(InputError):
        sched.bind("second", Placement(sched.jobs["second"].request, taken), now=0)
    assert "second" in sched.queue


def test_bind_starts_a_pending_job_and_refuses_any_other() -> None:
    sched = scheduler()
    sched.submit(four_gpu_gang("job", "team"), now=0)
    allocation = Allocation.of([1], [[0, 1, 2, 3]])

    bind = sched.bind("job", Placement(sched.jobs["job"].request, allocation), now=5)

    assert (bind.job_id, bind.allocation.nodes.tolist(), bind.unallocated) == ("job", [1], False)
    assert "job" in sched.running and sched.jobs["job"].start_time == 5
    with pytest.raises(InputError) as again:
        sched.bind("job", Placement(sched.jobs["job"].request, allocation), now=6)
    assert "running" in again.value.rule
