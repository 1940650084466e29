"""Victim search on inputs a cycle can hand it: never a crash, always a verified plan."""

from __future__ import annotations

import numpy as np
from test_preemption_scenarios import racks

from toposched.cluster.state import Allocation
from toposched.placement.policies import BestFit
from toposched.placement.request import simple_request
from toposched.scheduler.preemption import Candidate, PreemptionPlan, VictimSearch


def test_a_rack_that_already_has_room_needs_no_victims_and_does_not_break_the_search() -> None:
    # Rack r0 (nodes 0-1) is free; rack r1 (nodes 2-3) holds unallocated `u`. A one-rack gang
    # of 2 pods is asked for anyway (a cycle may do so when capacity grew after its last
    # search): rack r0 has room with no candidate in it, which used to end in an IndexError.
    state = racks(2, 2)
    state.allocate("u", Allocation.of([2, 3], [[0, 1, 2, 3]] * 2))
    u = Candidate("u", "unallocated-victim", 800.0, 0.0, np.array([2, 3]), 4.0)
    request = simple_request(2, gpus_per_pod=4, name="gang", required=3)  # level 3: rack
    plan = VictimSearch(state, BestFit()).plan("gang", request, [u])
    # Rack r0 needs no victim: the least impact, an empty set, placed there.
    assert isinstance(plan, PreemptionPlan)
    assert plan.victims == ()
    assert sorted(plan.placement.allocation.nodes.tolist()) == [0, 1]
