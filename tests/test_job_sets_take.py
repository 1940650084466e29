"""The what-if a job's later pod sets are placed on (`Statement.take` of a fresh placement of
whole-node pods, the compiled path of `cluster.trials`): while it lasts, the state equals one
where the placement was allocated, array for array; rolled back, every array is as before, bit
for bit. Whole racks taken in order move by their racks' totals; the rest node by node."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_trial_take import allocated, assert_same, busy_state, one_model, two_models

from toposched.cluster.state import MILLI_PER_GPU, Allocation, ClusterState
from toposched.cluster.statement import Statement, Taken
from toposched.cluster.topology import Topology
from toposched.cluster.trials import WholeNodesTaken


def whole_node_pods(
    state: ClusterState, rng: np.random.Generator, share: float, cpu: int, memory: int
) -> Allocation | None:
    """Whole-node pods on open nodes with every GPU free and room for `cpu` and `memory`:
    every such node of a rack where all are (whole racks, in node order) with chance `share`,
    and of other racks some such nodes in random order; None when none is found."""
    topology = state.topology
    width = state.gpu_free_milli.shape[1]
    free = (
        (state.gpu_free_milli == MILLI_PER_GPU).all(axis=1)
        & (state.closed == 0)
        & (state.free_cpu_milli >= cpu)
        & (state.free_memory_mib >= memory)
    )
    starts = topology.domain_starts[-1]
    nodes: list[int] = []
    for rack in range(topology.n_domains(len(topology.domain_levels) - 1)):
        lo, hi = int(starts[rack]), int(starts[rack + 1])
        if free[lo:hi].all() and rng.random() < share:
            nodes.extend(range(lo, hi))
        elif rng.random() < 0.2:
            some = np.flatnonzero(free[lo:hi]) + lo
            nodes.extend(rng.permutation(some)[: int(rng.integers(0, some.size + 1))].tolist())
    if not nodes:
        return None
    gpus = np.tile(np.arange(width, dtype=np.int64), (len(nodes), 1))
    return Allocation.of(nodes, gpus, MILLI_PER_GPU, cpu, memory)


def take_whole_nodes_checked(
    state: ClusterState, allocation: Allocation
) -> tuple[Statement, WholeNodesTaken, dict[str, np.ndarray]]:
    """`allocation` taken on a statement as a fresh placement: checked to go the whole-node way
    and to leave the state array for array as a real allocation does. Returns the statement,
    what the take recorded, and the state's snapshot from before it."""
    before = state.snapshot()
    expected = allocated(state, allocation)
    assert expected is not None
    statement = Statement(state)
    statement.take(allocation, fresh=True)
    taken = statement.operations[-1]
    assert isinstance(taken, Taken) and isinstance(taken.before, WholeNodesTaken)
    assert_same(expected, state.snapshot())
    return statement, taken.before, before


def topologies() -> st.SearchStrategy[Topology]:
    return st.sampled_from([one_model, two_models]).map(lambda build: build())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    topologies(),
    st.integers(0, 2**32 - 1),
    st.sampled_from([0.0, 0.5, 1.0]),
    st.sampled_from([(0, 0), (500, 0), (0, 256), (8_000, 16_384)]),
    st.booleans(),
)
def test_a_take_of_whole_node_pods_equals_an_allocation_and_rolls_back(
    topology: Topology,
    seed: int,
    share: float,
    resources: tuple[int, int],
    two_sets: bool,
) -> None:
    rng = np.random.default_rng(seed)
    state = busy_state(topology, rng)
    allocation = whole_node_pods(state, rng, share, *resources)
    if allocation is None:
        return
    if two_sets and allocation.pods > 1:
        # The same pods as two sets, the second asking no CPU or memory of its own.
        half = allocation.pods // 2
        first = Allocation.of(
            allocation.nodes[:half],
            allocation.gpus[:half],
            MILLI_PER_GPU,
            allocation.cpu_milli,
            allocation.memory_mib,
        )
        second = Allocation.of(allocation.nodes[half:], allocation.gpus[half:], MILLI_PER_GPU)
        allocation = Allocation.of_sets([first, second])
    statement, _, before = take_whole_nodes_checked(state, allocation)
    statement.discard()
    assert_same(before, state.snapshot())


def test_whole_racks_move_rack_by_rack() -> None:
    """Every rack of a free cluster taken, in order: one run per rack, each a whole rack."""
    state = ClusterState(one_model())
    allocation = whole_node_pods(state, np.random.default_rng(0), 1.0, 0, 0)
    assert allocation is not None
    statement, taken, before = take_whole_nodes_checked(state, allocation)
    [(_, runs)] = taken.parts
    racks = state.topology.n_domains(len(state.topology.domain_levels) - 1)
    assert runs.shape[0] == racks and runs[:, 1].all()
    statement.rollback()
    assert_same(before, state.snapshot())
