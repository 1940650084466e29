"""Stateful property test: random Statement operations keep ClusterState exact and consistent."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from toposched.cluster.builders import nvl72_cluster
from toposched.cluster.errors import InputError
from toposched.cluster.loaders import topology_from_dict
from toposched.cluster.state import MILLI_PER_GPU, Allocation, Closure, ClusterState, Health
from toposched.cluster.statement import OperationKind, Statement
from toposched.cluster.topology import Topology

LEVEL_CHOICES: list[list[str]] = [[], ["rack"], ["zone", "rack"]]


@st.composite
def described_clusters(draw: st.DrawFn) -> Topology:
    """Up to 2 zones x 2 racks x 3 nodes of 0-8 GPUs of three models, listed in random order."""
    levels = draw(st.sampled_from(LEVEL_CHOICES))
    nodes: list[dict[str, Any]] = []
    for z in range(draw(st.integers(1, 2))):
        for r in range(draw(st.integers(1, 2))):
            for k in range(draw(st.integers(1, 3))):
                gpus = draw(st.sampled_from([0, 1, 2, 4, 8]))
                labels = {"zone": f"z{z}", "rack": f"z{z}-r{r}"}
                record: dict[str, Any] = {
                    "name": f"z{z}-r{r}-n{k}",
                    "gpus": gpus,
                    "cpu": draw(st.sampled_from([2, 16, 64])),
                    "memory": draw(st.sampled_from(["4Gi", "64Gi", 1000])),
                    "labels": {level: labels[level] for level in levels},
                }
                if gpus:
                    record["gpu_model"] = draw(st.sampled_from(["A100", "T4", "H100"]))
                nodes.append(record)
    shuffled = draw(st.permutations(nodes))
    return topology_from_dict({"levels": levels, "nodes": list(shuffled)})


@st.composite
def small_nvl72(draw: st.DrawFn) -> Topology:
    zones, blocks, racks = (draw(st.integers(1, 2)) for _ in range(3))
    return nvl72_cluster(
        zones=zones,
        blocks_per_zone=blocks,
        racks_per_block=racks,
        nodes_per_rack=draw(st.integers(1, 3)),
        gpus_per_node=draw(st.integers(1, 4)),
        cpu_milli=8_000,
        memory_mib=16_384,
        total_racks=draw(st.integers(1, zones * blocks * racks)),
    )


@dataclass
class Model:
    """What the state should hold, kept with plain Python loops independent of the state."""

    milli: np.ndarray
    cpu: np.ndarray
    memory: np.ndarray
    health: np.ndarray
    closures: np.ndarray
    """Per node, the bits of the closures set on it (fence, spare), apart from health."""
    held: dict[str, Allocation] = field(default_factory=dict)

    def copy(self) -> Model:
        return Model(
            self.milli.copy(),
            self.cpu.copy(),
            self.memory.copy(),
            self.health.copy(),
            self.closures.copy(),
            dict(self.held),
        )

    def accepts(self, top: Topology, owner: str, allocation: Allocation) -> bool:
        """Whether `allocation` is valid and fits, by the rules of issue 2."""
        if not owner or owner in self.held:
            return False
        nodes = allocation.nodes.tolist()
        rows = allocation.gpus.tolist()
        milli, cpu, memory = allocation.gpu_milli, allocation.cpu_milli, allocation.memory_mib
        if any(not 0 <= node < top.n_nodes for node in nodes):
            return False
        if any(
            not 0 <= g < int(top.gpu_count[node])
            for node, row in zip(nodes, rows, strict=True)
            for g in row
        ):
            return False
        columns = allocation.gpus.shape[1]
        if columns and not (0 < milli <= MILLI_PER_GPU):
            return False
        if columns > 1 and milli != MILLI_PER_GPU:
            return False
        if cpu < 0 or memory < 0:
            return False
        if any(self.health[node] != Health.HEALTHY or self.closures[node] for node in nodes):
            return False
        wanted_gpu: dict[tuple[int, int], int] = {}
        wanted_cpu: dict[int, int] = {}
        wanted_memory: dict[int, int] = {}
        for node, row in zip(nodes, rows, strict=True):
            for g in row:
                wanted_gpu[node, g] = wanted_gpu.get((node, g), 0) + milli
            wanted_cpu[node] = wanted_cpu.get(node, 0) + cpu
            wanted_memory[node] = wanted_memory.get(node, 0) + memory
        return (
            all(want <= self.milli[node, g] for (node, g), want in wanted_gpu.items())
            and all(want <= self.cpu[node] for node, want in wanted_cpu.items())
            and all(want <= self.memory[node] for node, want in wanted_memory.items())
        )

    def apply(self, allocation: Allocation, sign: int) -> None:
        for node, row in zip(allocation.nodes.tolist(), allocation.gpus.tolist(), strict=True):
            for g in row:
                self.milli[node, g] += sign * allocation.gpu_milli
            self.cpu[node] += sign * allocation.cpu_milli
            self.memory[node] += sign * allocation.memory_mib


def snapshot(state: ClusterState) -> dict[str, np.ndarray]:
    return state.snapshot()


def assert_same(before: dict[str, np.ndarray], after: dict[str, np.ndarray]) -> None:
    assert before.keys() == after.keys()
    for name in before:
        assert before[name].dtype == after[name].dtype, name
        assert before[name].shape == after[name].shape, name
        assert before[name].tobytes() == after[name].tobytes(), name


@dataclass
class Checkpoint:
    mark: int
    arrays: dict[str, np.ndarray]
    model: Model
    kinds: list[OperationKind]


class StatementMachine(RuleBasedStateMachine):
    """Random allocate / release / evict / health / checkpoint / rollback / commit sequences."""

    def __init__(self) -> None:
        super().__init__()
        self.counter = 0

    @initialize(topology=st.one_of(described_clusters(), small_nvl72()))
    def build(self, topology: Topology) -> None:
        self.state = ClusterState(topology)
        top = topology
        self.model = Model(
            self.state.gpu_free_milli.astype(np.int64),
            top.cpu_milli.copy(),
            top.memory_mib.copy(),
            np.zeros(top.n_nodes, dtype=np.int64),
            np.zeros(top.n_nodes, dtype=np.int64),
        )
        self.start_statement()

    def start_statement(self) -> None:
        self.statement = Statement(self.state)
        self.kinds: list[OperationKind] = []
        self.checkpoints = [Checkpoint(0, snapshot(self.state), self.model.copy(), [])]

    # --- operations --------------------------------------------------------------------------
    def draw_owner(self, data: st.DataObject) -> str:
        choice = data.draw(st.sampled_from(["new", "new", "new", "new", "held", "empty"]))
        if choice == "held" and self.model.held:
            return data.draw(st.sampled_from(sorted(self.model.held)))
        if choice == "empty":
            return ""
        self.counter += 1
        return f"job-{self.counter}"

    def draw_allocation(self, data: st.DataObject) -> Allocation:
        top = self.state.topology
        n, width = top.n_nodes, self.state.gpu_free_milli.shape[1]
        pods = data.draw(st.integers(1, 3))
        if data.draw(st.integers(0, 4)) == 0:
            # Wild: indices, fractions and amounts that are often out of range.
            nodes = data.draw(st.lists(st.integers(-1, n), min_size=pods, max_size=pods))
            columns = data.draw(st.integers(0, 3))
            gpus = [
                data.draw(st.lists(st.integers(-1, width), min_size=columns, max_size=columns))
                for _ in range(pods)
            ]
            milli = data.draw(st.sampled_from([-1, 0, 1, 500, 1000, 1001]))
            cpu = data.draw(st.integers(-1, int(top.cpu_milli.max()) + 1))
            memory = data.draw(st.integers(-1, int(top.memory_mib.max()) + 1))
        else:
            # Plausible: real nodes (perhaps unhealthy or full), distinct GPUs of each node.
            nodes = data.draw(st.lists(st.integers(0, n - 1), min_size=pods, max_size=pods))
            fewest = min(int(top.gpu_count[node]) for node in nodes)
            columns = data.draw(st.integers(0, min(fewest, 4)))
            gpus = [
                data.draw(st.permutations(range(int(top.gpu_count[node]))))[:columns]
                for node in nodes
            ]
            milli = MILLI_PER_GPU
            if columns == 1:
                milli = data.draw(st.sampled_from([MILLI_PER_GPU, 500]) | st.integers(1, 1000))
            least_cpu = min(int(top.cpu_milli[node]) for node in nodes)
            least_memory = min(int(top.memory_mib[node]) for node in nodes)
            cpu = data.draw(st.sampled_from([0, least_cpu // pods]) | st.integers(0, least_cpu))
            memory = data.draw(st.sampled_from([0, least_memory]) | st.integers(0, least_memory))
        gpu_array = np.array(gpus, dtype=np.int64).reshape(pods, columns)
        return Allocation.of(nodes, gpu_array, gpu_milli=milli, cpu_milli=cpu, memory_mib=memory)

    def expect_unchanged_error(self, call: Any) -> InputError:
        before = snapshot(self.state)
        operations = len(self.statement.operations)
        try:
            call()
        except InputError as error:
            assert_same(before, snapshot(self.state))
            assert len(self.statement.operations) == operations
            return error
        raise AssertionError("expected an InputError")

    @rule(data=st.data())
    def allocate(self, data: st.DataObject) -> None:
        owner = self.draw_owner(data)
        allocation = self.draw_allocation(data)
        if self.model.accepts(self.state.topology, owner, allocation):
            self.statement.allocate(owner, allocation)
            self.model.apply(allocation, -1)
            self.model.held[owner] = allocation
            self.kinds.append(OperationKind.ALLOCATE)
            event("allocate: accepted")
        else:
            event("allocate: rejected")
            self.expect_unchanged_error(lambda: self.statement.allocate(owner, allocation))

    @precondition(lambda self: bool(self.model.held))
    @rule(data=st.data(), evict=st.booleans())
    def release(self, data: st.DataObject, evict: bool) -> None:
        owner = data.draw(st.sampled_from(sorted(self.model.held)))
        returned = self.statement.evict(owner) if evict else self.statement.release(owner)
        allocation = self.model.held.pop(owner)
        assert returned is allocation
        self.model.apply(allocation, +1)
        self.kinds.append(OperationKind.EVICT if evict else OperationKind.RELEASE)

    @precondition(lambda self: bool(self.model.held))
    @rule(data=st.data())
    def release_many(self, data: st.DataObject) -> None:
        held = sorted(self.model.held)
        owners = data.draw(
            st.lists(st.sampled_from(held), min_size=1, max_size=len(held), unique=True)
        )
        returned = self.statement.release_many(owners)
        for owner, allocation in zip(owners, returned, strict=True):
            assert self.model.held.pop(owner) is allocation
            self.model.apply(allocation, +1)
        self.kinds.append(OperationKind.RELEASE_MANY)

    @rule(evict=st.booleans())
    def release_unknown(self, evict: bool) -> None:
        owner = "never-allocated"
        call = self.statement.evict if evict else self.statement.release
        error = self.expect_unchanged_error(lambda: call(owner))
        assert (error.field, error.value) == ("owner", owner)

    @rule(data=st.data(), health=st.sampled_from([Health.HEALTHY, *Health]))
    def set_health(self, data: st.DataObject, health: Health) -> None:
        n = self.state.topology.n_nodes
        nodes = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3))
        self.statement.set_health(nodes, health)
        self.model.health[nodes] = int(health)
        self.kinds.append(OperationKind.HEALTH)

    @rule(data=st.data(), closure=st.sampled_from([Closure.FENCE, Closure.SPARE]))
    def close(self, data: st.DataObject, closure: Closure) -> None:
        n = self.state.topology.n_nodes
        nodes = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3))
        self.statement.close(np.array(nodes, dtype=np.int64), closure)
        self.model.closures[nodes] |= int(closure)
        self.kinds.append(OperationKind.CLOSE)

    @rule()
    def checkpoint(self) -> None:
        mark = self.statement.checkpoint()
        assert mark == len(self.kinds)
        self.checkpoints.append(
            Checkpoint(mark, snapshot(self.state), self.model.copy(), list(self.kinds))
        )

    @rule(data=st.data())
    def rollback(self, data: st.DataObject) -> None:
        index = data.draw(st.integers(0, len(self.checkpoints) - 1))
        target = self.checkpoints[index]
        self.statement.rollback(target.mark)
        assert_same(target.arrays, snapshot(self.state))
        self.model = target.model.copy()
        self.kinds = list(target.kinds)
        # Later checkpoints marked operations that no longer exist.
        del self.checkpoints[index + 1 :]

    @rule()
    def commit(self) -> None:
        operations = self.statement.commit()
        assert [op.kind for op in operations] == self.kinds
        error = self.expect_unchanged_error(lambda: self.statement.checkpoint())
        assert error.field == "statement"
        self.start_statement()

    @rule()
    def discard(self) -> None:
        self.statement.discard()
        start = self.checkpoints[0]
        assert_same(start.arrays, snapshot(self.state))
        self.model = start.model.copy()
        self.start_statement()

    # --- invariants --------------------------------------------------------------------------
    @invariant()
    def aggregates_equal_recomputation(self) -> None:
        fresh = self.state.compute_aggregates()
        pairs: dict[str, list[Any]] = {
            "free_hist": self.state.free_hist,
            "free_gpus": self.state.free_gpus,
            "free_milli": self.state.free_milli,
            "idle_nodes": self.state.idle_nodes,
            "cpu": self.state.domain_free_cpu,
            "memory": self.state.domain_free_memory,
        }
        for name, incremental in pairs.items():
            for level, (ours, theirs) in enumerate(zip(incremental, fresh[name], strict=True)):
                assert np.array_equal(ours, theirs), f"{name}[{level}]"

    @invariant()
    def nothing_over_allocated(self) -> None:
        top = self.state.topology
        milli = self.state.gpu_free_milli.astype(np.int64)
        exists = np.arange(milli.shape[1])[None, :] < top.gpu_count[:, None]
        assert ((milli >= 0) & (milli <= MILLI_PER_GPU)).all()
        assert (milli[~exists] == 0).all()
        whole = ((milli == MILLI_PER_GPU) & exists).sum(axis=1)
        assert np.array_equal(self.state.free_whole_gpus, whole)
        assert (
            (self.state.free_cpu_milli >= 0) & (self.state.free_cpu_milli <= top.cpu_milli)
        ).all()
        memory = self.state.free_memory_mib
        assert ((memory >= 0) & (memory <= top.memory_mib)).all()

    @invariant()
    def state_matches_model(self) -> None:
        assert np.array_equal(self.state.gpu_free_milli, self.model.milli)
        assert np.array_equal(self.state.free_cpu_milli, self.model.cpu)
        assert np.array_equal(self.state.free_memory_mib, self.model.memory)
        assert np.array_equal(self.state.health, self.model.health)
        unhealthy = (self.model.health != Health.HEALTHY).astype(np.int64)
        assert np.array_equal(self.state.closed, self.model.closures | unhealthy)
        counts = np.bincount(self.model.health, minlength=len(self.state.nodes_by_health))
        assert np.array_equal(self.state.nodes_by_health, counts)
        assert self.state.allocations.keys() == self.model.held.keys()
        for owner, allocation in self.model.held.items():
            assert self.state.allocations[owner] is allocation
        assert len(self.statement.operations) == len(self.kinds)


StatementMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestStatementMachine = StatementMachine.TestCase
