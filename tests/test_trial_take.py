"""A what-if of a placement (`Statement.take`): while it lasts, the state equals one where the
placement was allocated, array for array; rolled back, every array of the state is as before,
bit for bit; an allocation that does not fit is refused and changes nothing."""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.errors import InputError
from toposched.cluster.loaders import topology_from_dict
from toposched.cluster.state import MILLI_PER_GPU, Allocation, Closure, ClusterState, Health
from toposched.cluster.statement import OperationKind, Statement
from toposched.cluster.topology import Topology


@cache
def one_model() -> Topology:
    """160 racks x 18 nodes x 4 GPUs of one model (2,880 nodes: more than the compiled loops
    take, so a large take runs the vectorised paths)."""
    return nvl72_cluster(1, 4, 40, cpu_milli=8_000, memory_mib=16_384)


@cache
def two_models() -> Topology:
    """3,000 nodes of 4 GPUs in 60 racks of 50 and 6 blocks; the GPU model alternates every
    7 nodes, so racks mix models."""
    nodes: list[dict[str, Any]] = [
        {
            "name": f"n{i}",
            "block": f"b{i // 500}",
            "rack": f"r{i // 50}",
            "gpus": 4,
            "gpu_model": "A100" if (i // 7) % 2 else "H100",
            "cpu": 8,
            "memory": "16Gi",
        }
        for i in range(3000)
    ]
    return topology_from_dict({"levels": ["block", "rack"], "nodes": nodes})


def busy_state(topology: Topology, rng: np.random.Generator) -> ClusterState:
    """`topology` with random holders (whole-GPU pods of 1, 2 or 4 GPUs, some with CPU and
    memory, shared GPUs, CPU alone), then some nodes cordoned, down or fenced."""
    state = ClusterState(topology)
    n_nodes = topology.n_nodes
    for index in range(int(rng.integers(0, 40))):
        width = int(rng.choice([1, 2, 4]))
        first = int(rng.integers(4 - width + 1))
        columns = list(range(first, first + width))
        free = np.flatnonzero((state.gpu_free_milli[:, columns] == MILLI_PER_GPU).all(1))
        pods = min(int(rng.integers(1, 20)), free.size)
        if pods == 0:
            continue
        nodes = rng.choice(free, size=pods, replace=False)
        if index % 5 == 0:
            # CPU alone: nodes with every GPU free that are not idle.
            allocation = Allocation.of(nodes, [], cpu_milli=500, memory_mib=64 * (index % 2))
        elif index % 7 == 0:
            allocation = Allocation.of(nodes, [[first]] * pods, gpu_milli=250, cpu_milli=100)
        else:
            cpu, memory = (0, 0) if index % 3 else (1000, 512)
            allocation = Allocation.of(nodes, [columns] * pods, MILLI_PER_GPU, cpu, memory)
        state.allocate(f"o{index}", allocation)
    for health in (Health.CORDONED, Health.DOWN):
        state.set_health(rng.choice(n_nodes, size=int(rng.integers(0, 30))), health)
    fenced = rng.choice(n_nodes, size=int(rng.integers(0, 30)))
    state.close(np.unique(fenced), Closure.FENCE)
    return state


def pods_on_free_gpus(
    state: ClusterState, rng: np.random.Generator, pods: int, width: int, cpu: int, memory: int
) -> Allocation:
    """Up to `pods` pods of `width` whole GPUs on free GPUs of open nodes (several pods to a
    node where it has room for them), nodes in random order."""
    free = (state.gpu_free_milli == MILLI_PER_GPU) & (state.closed == 0)[:, None]
    nodes: list[int] = []
    gpus: list[list[int]] = []
    for node in rng.permutation(np.flatnonzero(free.sum(axis=1) >= width)).tolist():
        columns = np.flatnonzero(free[node]).tolist()
        room = len(columns) // width
        if cpu:
            room = min(room, int(state.free_cpu_milli[node]) // cpu)
        if memory:
            room = min(room, int(state.free_memory_mib[node]) // memory)
        for start in range(0, room * width, width):
            if len(nodes) < pods:
                nodes.append(node)
                gpus.append(columns[start : start + width])
    assume(nodes)
    return Allocation.of(
        nodes,
        np.array(gpus, dtype=np.int64).reshape(len(nodes), width),
        cpu_milli=cpu,
        memory_mib=memory,
    )


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[ClusterState, Allocation]:
    """A busy cluster and an allocation on its free GPUs: a few pods (compiled paths) or
    thousands (vectorised ones: whole-node pods, or narrower), of one shape or two sets."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    topology = draw(st.sampled_from([one_model, two_models]))()
    state = busy_state(topology, rng)
    pods = draw(st.sampled_from([1, 5, 300, 2100, 12_000]))  # 12,000: every free GPU
    cpu, memory = draw(st.sampled_from([(0, 0), (500, 0), (0, 256), (8_000, 16_384)]))
    width = draw(st.sampled_from([1, 2, 4]))
    if not draw(st.booleans()):
        return state, pods_on_free_gpus(state, rng, pods, width, cpu, memory)
    # Two sets of different widths, the second on what the first left free.
    first = pods_on_free_gpus(state, rng, pods // 2 + 1, width, cpu, memory)
    taken = copy.deepcopy(state)
    taken.allocate("first", first)
    other = 4 if width != 4 else 2
    second = pods_on_free_gpus(taken, rng, pods // 2 + 1, other, 0, 0)
    return state, Allocation.of_sets([first, second])


def allocated(state: ClusterState, allocation: Allocation) -> dict[str, np.ndarray] | None:
    """Every array of `state` with `allocation` allocated, or None if it does not fit."""
    copied = copy.deepcopy(state)
    try:
        copied.allocate("reference", allocation)
    except InputError:
        return None
    return copied.snapshot()


def change_on_top(statement: Statement, state: ClusterState) -> None:
    """A change on a statement over a what-if: one GPU taken ("late") and three nodes
    cordoned, for a rollback to undo before the what-if."""
    spare = np.flatnonzero((state.free_whole_gpus > 0) & (state.closed == 0))
    if spare.size:
        node = int(spare[0])
        gpu = int(np.flatnonzero(state.gpu_free_milli[node] == MILLI_PER_GPU)[0])
        statement.allocate("late", Allocation.of([node], [[gpu]]))
    statement.set_health(spare[:3], Health.CORDONED)


def assert_same(expected: dict[str, np.ndarray], actual: dict[str, np.ndarray]) -> None:
    assert expected.keys() == actual.keys()
    for name in expected:
        assert expected[name].dtype == actual[name].dtype, name
        assert expected[name].tobytes() == actual[name].tobytes(), name


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios(), st.booleans())
def test_a_take_equals_an_allocation_and_rolls_back_bit_for_bit(
    scenario: tuple[ClusterState, Allocation], fresh: bool
) -> None:
    state, allocation = scenario
    before = state.snapshot()
    expected = allocated(state, allocation)
    assert expected is not None  # built on free GPUs of open nodes
    statement = Statement(state)
    mark = statement.checkpoint()
    statement.take(allocation, fresh=fresh)
    assert statement.operations[-1].kind is OperationKind.TAKE
    assert_same(expected, state.snapshot())
    change_on_top(statement, state)  # undone first
    statement.rollback(mark)
    assert_same(before, state.snapshot())
    assert "late" not in state.allocations and "reference" not in state.allocations


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_a_take_that_does_not_fit_is_refused_and_changes_nothing(
    scenario: tuple[ClusterState, Allocation],
) -> None:
    state, allocation = scenario
    # Its last pod asks again for a GPU its first pod holds, or for a closed node's.
    parts = list(allocation.parts)
    last = parts[-1]
    if last.pods < 2:
        closed = np.flatnonzero(state.closed != 0)
        if closed.size == 0:
            return
        nodes = last.nodes.copy()
        nodes[-1] = closed[0]
        bad = Allocation.of(nodes, np.zeros_like(last.gpus), cpu_milli=last.cpu_milli)
    else:
        nodes, gpus = last.nodes.copy(), last.gpus.copy()
        nodes[-1], gpus[-1] = nodes[0], gpus[0]
        bad = Allocation.of(nodes, gpus, cpu_milli=last.cpu_milli, memory_mib=last.memory_mib)
    parts[-1] = bad
    refused = Allocation.of_sets(parts) if len(parts) > 1 else bad
    assert allocated(state, refused) is None
    before = state.snapshot()
    statement = Statement(state)
    with pytest.raises(InputError):
        statement.take(refused)
    assert statement.operations == []
    assert_same(before, state.snapshot())
