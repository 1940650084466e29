"""Statement: a transaction over ClusterState with checkpoints, exact rollback and commit."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation, ClusterState, Health, SavedRows


class OperationKind(Enum):
    ALLOCATE = "allocate"
    RELEASE = "release"
    RELEASE_MANY = "release_many"
    EVICT = "evict"
    HEALTH = "health"


@dataclass(frozen=True)
class Operation:
    """One recorded change: enough to undo it exactly."""

    kind: OperationKind
    owner: str = ""
    allocation: Allocation | None = None
    nodes: NDArray[np.int64] | None = None
    previous_health: NDArray[np.uint8] | None = None
    health: Health | None = None
    owners: tuple[str, ...] = ()
    allocations: tuple[Allocation, ...] = ()
    saved_rows: list[SavedRows] | None = None
    """For a bulk release, copies of the rows it changed: undone by putting them back."""


class Statement:
    """Apply changes to a state now, remember them, and undo them on rollback.

    Operations take effect immediately, so a search sees the scenario it is trying; `checkpoint`
    marks a point, `rollback(mark)` undoes every later operation in reverse order (integer
    arithmetic, so the arrays return bit-exactly), and `commit` ends the statement and hands back
    the operations, which become the decisions a backend carries out. A statement that is
    neither committed nor rolled back holds its changes: call `discard()` to undo them all.
    """

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.operations: list[Operation] = []
        self._closed = False

    def _open(self) -> None:
        if self._closed:
            raise InputError("statement", "closed", "a committed or discarded statement is final")

    def allocate(self, owner: str, allocation: Allocation) -> None:
        self._open()
        self.state.allocate(owner, allocation)
        self.operations.append(Operation(OperationKind.ALLOCATE, owner, allocation))

    def release(self, owner: str) -> Allocation:
        """A job finished or was cancelled: its resources return."""
        self._open()
        allocation = self.state.release(owner)
        self.operations.append(Operation(OperationKind.RELEASE, owner, allocation))
        return allocation

    def evict(self, owner: str) -> Allocation:
        """A job is preempted: its resources return, recorded as an eviction."""
        self._open()
        allocation = self.state.release(owner)
        self.operations.append(Operation(OperationKind.EVICT, owner, allocation))
        return allocation

    def release_many(self, owners: list[str]) -> list[Allocation]:
        """Release many owners in one vectorised pass (e.g. to see a future state)."""
        self._open()
        released, saved = self.state.release_many_keeping_rows(owners)
        self.operations.append(
            Operation(
                OperationKind.RELEASE_MANY,
                owners=tuple(owners),
                allocations=tuple(released),
                saved_rows=saved,
            )
        )
        return released

    def set_health(self, nodes: NDArray[np.int64] | list[int], health: Health) -> None:
        self._open()
        node_array = np.unique(np.asarray(nodes, dtype=np.int64).reshape(-1))
        previous = self.state.set_health(node_array, health)
        self.operations.append(
            Operation(
                OperationKind.HEALTH, nodes=node_array, previous_health=previous, health=health
            )
        )

    def checkpoint(self) -> int:
        """A mark to roll back to: the number of operations so far."""
        self._open()
        return len(self.operations)

    def rollback(self, mark: int = 0) -> None:
        """Undo every operation after `mark`, newest first."""
        self._open()
        if not 0 <= mark <= len(self.operations):
            raise InputError("mark", mark, f"must be a checkpoint in [0, {len(self.operations)}]")
        while len(self.operations) > mark:
            operation = self.operations.pop()
            if operation.kind is OperationKind.ALLOCATE:
                self.state.release(operation.owner)
            elif operation.kind is OperationKind.RELEASE_MANY:
                owners, allocations = list(operation.owners), list(operation.allocations)
                if operation.saved_rows is None:
                    self.state.retake_many(owners, allocations)
                else:
                    self.state.restore_released(owners, allocations, operation.saved_rows)
            elif operation.kind is OperationKind.HEALTH:
                assert operation.nodes is not None and operation.previous_health is not None
                self.state.restore_health(operation.nodes, operation.previous_health)
            else:
                assert operation.allocation is not None
                # Re-taking what was released is always possible: nothing else holds it, and
                # the node's health is restored by undoing later operations first.
                self.state._apply(operation.allocation, -1)
                self.state.allocations[operation.owner] = operation.allocation

    def commit(self) -> list[Operation]:
        """Keep every change and return the operations, in order."""
        self._open()
        self._closed = True
        return self.operations

    def discard(self) -> None:
        """Undo everything and close."""
        self.rollback(0)
        self._closed = True
