"""Statement: the one way to change a ClusterState and undo the change exactly, with
checkpoints, rollback and commit; `trial` for changes that last one block."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.allocation import Allocation
from toposched.cluster.availability import Closure
from toposched.cluster.errors import InputError
from toposched.cluster.health import Health
from toposched.cluster.rows import SavedRows
from toposched.cluster.state import ClusterState
from toposched.cluster.trials import Before, RangeBefore, RowsBefore, WholeNodesTaken


class OperationKind(Enum):
    ALLOCATE = "allocate"
    RELEASE = "release"
    RELEASE_MANY = "release_many"
    EVICT = "evict"
    HEALTH = "health"
    CLOSE = "close"
    FREE = "free"
    TAKE = "take"


@dataclass(frozen=True, eq=False)
class Allocated:
    """`owner` took `allocation`."""

    kind: ClassVar[OperationKind] = OperationKind.ALLOCATE
    owner: str
    allocation: Allocation

    def undo(self, state: ClusterState) -> None:
        state.release(self.owner)


@dataclass(frozen=True, eq=False)
class Released:
    """`owner` gave back `allocation`: finished or cancelled, or evicted (`kind` EVICT)."""

    owner: str
    allocation: Allocation
    evicted: bool = False

    @property
    def kind(self) -> OperationKind:
        return OperationKind.EVICT if self.evicted else OperationKind.RELEASE

    def undo(self, state: ClusterState) -> None:
        # Re-taking what was released is always possible: nothing else holds it, and the
        # node's health and closures are restored by undoing later operations first.
        state.retake(self.owner, self.allocation)


@dataclass(frozen=True, eq=False)
class ReleasedMany:
    """`owners` gave back `allocations` in one pass; `before`: the rows it changed (None for a
    few pods, undone by taking them again)."""

    kind: ClassVar[OperationKind] = OperationKind.RELEASE_MANY
    owners: tuple[str, ...]
    allocations: tuple[Allocation, ...]
    before: Before | None

    @property
    def saved_rows(self) -> list[SavedRows] | None:
        return self.before.rows if isinstance(self.before, RowsBefore) else None

    def undo(self, state: ClusterState) -> None:
        owners, allocations = list(self.owners), list(self.allocations)
        if self.before is None:
            state.retake_many(owners, allocations)
        else:
            state.put_back(self.before)
            state.hold_again(owners, allocations)


@dataclass(frozen=True, eq=False)
class HealthSet:
    """`nodes` (distinct, sorted) became `health`, from `previous`."""

    kind: ClassVar[OperationKind] = OperationKind.HEALTH
    nodes: NDArray[np.int64]
    previous: NDArray[np.uint8]
    health: Health

    def undo(self, state: ClusterState) -> None:
        state.restore_health(self.nodes, self.previous)


@dataclass(frozen=True, eq=False)
class Closed:
    """`nodes` were closed for `closure` (only those not closed for it before)."""

    kind: ClassVar[OperationKind] = OperationKind.CLOSE
    nodes: NDArray[np.int64]
    closure: Closure

    def undo(self, state: ClusterState) -> None:
        state.reopen(self.nodes, self.closure)


@dataclass(frozen=True, eq=False)
class Freed:
    """Resources freed though nobody stopped holding them (a what-if of evictions)."""

    kind: ClassVar[OperationKind] = OperationKind.FREE
    before: Before

    def undo(self, state: ClusterState) -> None:
        state.put_back(self.before)


@dataclass(frozen=True, eq=False)
class FreedOnNodes:
    """Resources freed in the node arrays alone, the aggregates left as they were (a what-if
    of evictions inside one innermost domain)."""

    kind: ClassVar[OperationKind] = OperationKind.FREE
    before: RangeBefore

    def undo(self, state: ClusterState) -> None:
        state.put_back(self.before)
        state.unsummed_changes -= 1


@dataclass(frozen=True, eq=False)
class Taken:
    """Resources taken though nobody holds them (a what-if of a placement)."""

    kind: ClassVar[OperationKind] = OperationKind.TAKE
    before: RowsBefore | WholeNodesTaken

    def undo(self, state: ClusterState) -> None:
        state.put_back(self.before)


Operation = Allocated | Released | ReleasedMany | HealthSet | Closed | Freed | FreedOnNodes | Taken
"""One recorded change: enough to undo it exactly."""


class Statement:
    """Apply changes to a state now, remember them, and undo them on rollback.

    Operations take effect immediately, so a search sees the scenario it is trying; `checkpoint`
    marks a point, `rollback(mark)` undoes every later operation in reverse order (integer
    arithmetic, so the arrays return bit-exactly), and `commit` ends the statement and hands back
    the operations, which become the decisions a backend carries out. A statement that is
    neither committed nor rolled back holds its changes: call `discard()` to undo them all.

    The what-ifs (`free_gpus`, `free_parts`, `free_on_nodes`) free resources nobody stops
    holding, for a search to look at; they are unchecked: the caller frees resources held right
    now and changes nothing else in the state until they are rolled back. `take` is the
    opposite what-if: resources taken though nobody holds them.
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
        self.operations.append(Allocated(owner, allocation))

    def release(self, owner: str) -> Allocation:
        """A job finished or was cancelled: its resources return."""
        self._open()
        allocation = self.state.release(owner)
        self.operations.append(Released(owner, allocation))
        return allocation

    def evict(self, owner: str) -> Allocation:
        """A job is preempted: its resources return, recorded as an eviction."""
        self._open()
        allocation = self.state.release(owner)
        self.operations.append(Released(owner, allocation, evicted=True))
        return allocation

    def release_many(self, owners: list[str]) -> list[Allocation]:
        """Release many owners in one vectorised pass (e.g. to see a future state)."""
        self._open()
        released, before = self.state.release_many_keeping_rows(owners)
        self.operations.append(ReleasedMany(tuple(owners), tuple(released), before))
        return released

    def set_health(self, nodes: NDArray[np.int64] | list[int], health: Health) -> None:
        self._open()
        node_array = np.unique(np.asarray(nodes, dtype=np.int64).reshape(-1))
        previous = self.state.set_health(node_array, health)
        self.operations.append(HealthSet(node_array, previous, health))

    def close(self, nodes: NDArray[np.int64], closure: Closure = Closure.FENCE) -> None:
        """Keep `nodes` from new work (health unchanged), e.g. a domain being emptied."""
        self._open()
        closed = self.state.close(np.asarray(nodes, dtype=np.int64), closure)
        self.operations.append(Closed(closed, closure))

    def take(self, allocation: Allocation, fresh: bool = False) -> None:
        """The resources of `allocation` are taken though nobody holds them, for a search to
        see the room left (e.g. a job's later pod sets beside its earlier ones); the
        aggregates move. Checked first unless `fresh`: a placement a search found on this
        state, which nothing changed since. Copies of the rows are put back on rollback
        (cheaper than giving the resources back for tens of thousands of nodes), but for a
        fresh placement of whole-node pods, whose nodes get every GPU back."""
        self._open()
        self.operations.append(Taken(self.state.trial_take(allocation, fresh)))

    def free_gpus(self, nodes: NDArray[np.int64], freeing: NDArray[np.bool_]) -> None:
        """The whole GPUs marked in `freeing` (one row per node of `nodes`, sorted and unique;
        one column per GPU), held now by whole-GPU pods, are free; the aggregates move."""
        self._open()
        self.operations.append(Freed(self.state.trial_free_gpus(nodes, freeing)))

    def free_parts(self, parts: list[Allocation]) -> None:
        """The resources of `parts` (pieces of allocations held now) are free; the aggregates
        move. A few parts, or a few pods, are taken again on rollback (compiled, pod by pod);
        of many parts of many pods, copies of the rows are put back (cheaper than the opposite
        vectorised change for tens of thousands of nodes)."""
        self._open()
        if parts:
            self.operations.append(Freed(self.state.trial_free_parts(parts)))

    def free_on_nodes(self, parts: list[Allocation], first: int, last: int) -> None:
        """The pods of `parts` on nodes first..last-1 are free in the node arrays alone;
        domain aggregates keep their values. For a search confined to those nodes (one
        innermost domain), far cheaper than `free_parts`."""
        self._open()
        before = self.state.trial_free_on_nodes(parts, first, last)
        self.state.unsummed_changes += 1
        self.operations.append(FreedOnNodes(before))

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
            self.operations.pop().undo(self.state)

    def commit(self) -> list[Operation]:
        """Keep every change and return the operations, in order."""
        self._open()
        self._closed = True
        return self.operations

    def discard(self) -> None:
        """Undo everything and close."""
        self.rollback(0)
        self._closed = True


@contextmanager
def trial(state: ClusterState) -> Iterator[Statement]:
    """A statement whose changes last the block: discarded at its end, however it ends."""
    statement = Statement(state)
    try:
        yield statement
    finally:
        statement.discard()
