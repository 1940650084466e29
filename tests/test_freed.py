"""Capacity freed between cycles: the answers follow every release until the cycle settles."""

from __future__ import annotations

import numpy as np
import pytest

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.state import Allocation, ClusterState
from toposched.scheduler.freed import FreedCapacity


def release(state: ClusterState, freed: FreedCapacity, owner: str, free_to_take: bool) -> None:
    nodes = state.allocations[owner].nodes
    freed.before_release()
    state.release(owner)
    freed.released(nodes, free_to_take)


def test_each_answer_follows_the_releases_since_it_was_last_asked() -> None:
    state = ClusterState(nvl72_cluster(1, 1, 2, nodes_per_rack=2))
    state.allocate("a", Allocation.of([1], [[0, 1]]))
    state.allocate("b", Allocation.of([3], [[0]]))
    state.allocate("c", Allocation.of([2], [[0]]))
    freed = FreedCapacity(state)
    release(state, freed, "b", free_to_take=False)
    released, beyond = freed.since_settled(), freed.beyond_free_to_take()
    assert released is not None and released.tolist() == [3]
    assert beyond is not None and beyond.tolist() == [3]
    with pytest.raises(ValueError):
        released[0] = 0  # shared by every reader of the cycle
    release(state, freed, "a", free_to_take=True)
    released, beyond = freed.since_settled(), freed.beyond_free_to_take()
    assert released is not None and released.tolist() == [1, 3]
    assert beyond is not None and beyond.tolist() == [3]
    state.allocate("d", Allocation.of([0], [[0]]))  # not a release: the record is incomplete
    assert freed.since_settled() is None and freed.beyond_free_to_take() is None
    freed.settle()
    release(state, freed, "c", free_to_take=False)
    released = freed.since_settled()
    assert released is not None and np.array_equal(released, [2])
