"""A what-if of evictions (`Statement.free_parts`): while it lasts, the state equals one where
the parts' holders released them, array for array; rolled back, every array of the state is
as before, bit for bit, whether the parts are few (freed and taken again in compiled code,
node by node for whole-node pods) or many (rows copied and put back)."""

from __future__ import annotations

import copy

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_trial_take import assert_same, change_on_top, scenarios

from toposched.cluster.state import Allocation, ClusterState, Health
from toposched.cluster.statement import Freed, Statement
from toposched.cluster.trials import FEW_PARTS, PartsFreed, RowsBefore


def pieces(allocation: Allocation, count: int) -> list[Allocation]:
    """`allocation`'s sets (or itself), each cut into up to `count` runs of its pods."""
    parts: list[Allocation] = []
    for part in allocation.sets or [allocation]:
        cuts = np.linspace(0, part.pods, min(count, part.pods) + 1).astype(int)
        for start, stop in zip(cuts[:-1], cuts[1:], strict=True):
            parts.append(
                Allocation.of(
                    part.nodes[start:stop],
                    part.gpus[start:stop],
                    part.gpu_milli,
                    part.cpu_milli,
                    part.memory_mib,
                )
            )
    return parts


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios(), st.sampled_from([1, 2, 3, 12]))
def test_freed_parts_equal_a_release_and_roll_back_bit_for_bit(
    scenario: tuple[ClusterState, Allocation], count: int
) -> None:
    state, allocation = scenario
    state.allocate("held", allocation)
    # A node under the holder fails: its arrays move, the aggregates do not count it.
    state.set_health(allocation.nodes[:1], Health.DOWN)
    before = state.snapshot()
    released = copy.deepcopy(state)
    released.release("held")
    parts = pieces(allocation, count)

    statement = Statement(state)
    mark = statement.checkpoint()
    statement.free_parts(parts)
    operation = statement.operations[-1]
    assert isinstance(operation, Freed)
    few = len(parts) <= FEW_PARTS or allocation.pods <= 512
    assert isinstance(operation.before, PartsFreed if few else RowsBefore)
    whole_nodes = not allocation.sets and allocation.gpus.shape[1] == 4  # every GPU of a node
    if isinstance(operation.before, PartsFreed):
        assert operation.before.whole_nodes == (whole_nodes and len(parts) <= FEW_PARTS)
    assert_same(released.snapshot(), state.snapshot())
    change_on_top(statement, state)  # undone first
    statement.rollback(mark)
    assert_same(before, state.snapshot())
    assert "late" not in state.allocations and "held" in state.allocations
