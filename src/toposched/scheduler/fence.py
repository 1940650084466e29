"""The cycle's fence: nodes kept from later jobs of a cycle (nominated or reserved)."""

from __future__ import annotations

import bisect
import functools
import itertools
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.availability import Closure
from toposched.cluster.run_kernels import increasing, mark_open_nodes, unmark
from toposched.cluster.state import ClusterState, distinct

IntArray = NDArray[np.int64]

_fence_serials = itertools.count()
# Above this many nodes fenced, `FencedNodes.__le__` compares nodes on a mask, not as sets.
_COMPARED_AS_SETS = 4096


class NodeGroup:
    """Nodes the fence closed together, sorted; as a set only once something asks for one
    (a reservation's block holds tens of thousands of nodes, and most groups never are)."""

    __slots__ = ("nodes", "_set")

    def __init__(self, nodes: IntArray) -> None:
        self.nodes = nodes
        self._set: frozenset[int] | None = None

    def __len__(self) -> int:
        return int(self.nodes.size)

    @property
    def set(self) -> frozenset[int]:
        if self._set is None:
            self._set = frozenset(self.nodes.tolist())
        return self._set


@dataclass(frozen=True, eq=False)
class FencedNodes:
    """The nodes fenced at some moment, as the groups the fence closed them in (a reservation's
    block is one group of tens of thousands of nodes, a nomination another). Two moments of a
    cycle share the groups closed before both, so comparing them looks at group identities,
    and at nodes only for the groups that differ."""

    groups: tuple[NodeGroup, ...] = ()
    """Disjoint: a fence closes only nodes it has not fenced yet."""
    origin: int = field(default=-1, compare=False)
    """The serial of the fence these nodes were taken from (-1: none)."""
    generation: int = field(default=-1, compare=False)
    """That fence's generation when they were taken."""
    whole: bool = field(default=True, compare=False)
    """Whether they were all the fence's nodes then (False: the block lifted, left out)."""

    @functools.cached_property
    def _group_ids(self) -> frozenset[int]:
        return frozenset(id(group) for group in self.groups)

    @functools.cached_property
    def _size(self) -> int:
        return sum(len(group) for group in self.groups)

    def __le__(self, other: FencedNodes) -> bool:
        """Whether every node fenced here is fenced in `other` too."""
        known = other._group_ids
        missing = [group for group in self.groups if id(group) not in known]
        if not missing:
            return True
        if self._size > other._size:
            return False  # disjoint groups: more nodes cannot all lie among fewer
        if other._size > _COMPARED_AS_SETS:
            # Marked on a mask: a block of tens of thousands of nodes costs a scatter and a
            # gather, where a set of it costs milliseconds.
            last = max(int(group.nodes.max()) for group in (*missing, *other.groups) if len(group))
            marked = np.zeros(last + 1, dtype=bool)
            for group in other.groups:
                marked[group.nodes] = True
            return all(bool(marked[group.nodes].all()) for group in missing)
        rest = missing[0].set.union(*(group.set for group in missing[1:]))
        for group in other.groups:
            if not rest:
                break
            rest = rest - group.set
        return not rest

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FencedNodes):
            return NotImplemented
        return self._size == other._size and self <= other

    def __hash__(self) -> int:
        return hash(self._size)

    def __len__(self) -> int:
        return self._size

    def misses(self, marked: NDArray[np.bool_], known: dict[int, tuple[NodeGroup, bool]]) -> bool:
        """Whether no node fenced here is marked (one flag per node of the cluster); `known`
        keeps each group's answer for the same marks, by the group's identity."""
        for group in self.groups:
            answer = known.get(id(group))
            if answer is None:
                answer = known[id(group)] = (group, not marked[group.nodes].any())
            if not answer[1]:
                return False
        return True

    def nodes(self) -> frozenset[int]:
        """Every fenced node, as one set."""
        return frozenset().union(*(group.set for group in self.groups))


class FenceMarks:
    """The per-node marks of a scheduler's fences, kept from one cycle to the next: a cycle's
    fence marks the nodes it closes and the next one clears just those, so a cycle pays for
    the nodes it fenced, not for arrays the size of the cluster."""

    __slots__ = ("fenced", "fenced_at", "scratch", "_marked")

    def __init__(self, n_nodes: int) -> None:
        self.fenced = np.zeros(n_nodes, dtype=bool)
        """Whether each node is fenced now."""
        self.fenced_at = np.zeros(n_nodes, dtype=np.int64)
        """The generation at which each node was last fenced (0: not by this fence)."""
        self.scratch = np.zeros(n_nodes, dtype=bool)
        """Cleared after each use: flags for one `Fence.open`."""
        self._marked: list[IntArray] = []
        """The nodes closed since the last `clear`: every node marked anywhere is one."""

    def marked(self, nodes: IntArray) -> None:
        """`nodes` were fenced: `clear` unmarks them."""
        self._marked.append(nodes)

    def clear(self) -> None:
        """No node fenced, none ever (for the next cycle's fence)."""
        for nodes in self._marked:
            unmark(nodes, self.fenced, self.fenced_at, True)
        self._marked.clear()


class Fence:
    """Nodes kept from the rest of a cycle (reserved or nominated), closed while it runs
    (`Closure.FENCE`: their health unchanged).

    Only open nodes are fenced, so lifting the fence opens them again. Every change
    of which nodes are fenced moves `generation`, so what was checked against the fence is
    re-checked only after it moved.

    The reservation's nodes form one block. Jobs that end before the reservation may use them
    (backfill): `lift` opens the block for their searches and `settle` closes it again before
    any other search. Consecutive backfills share one lift, since each lift or settle recounts
    the aggregates of every node of the block. `frozen` and `fenced` give the fence a search
    sees once settled; `seen`, the one it sees now. Lifting does not move `generation`.

    `marks` are the scheduler's, reused by each cycle's fence (the fence clears what the last
    one marked); without them the fence allocates its own.
    """

    def __init__(self, state: ClusterState, marks: FenceMarks | None = None) -> None:
        self.state = state
        self._groups: list[NodeGroup] = []
        self._block: NodeGroup | None = None
        self._lifted = False
        if marks is None:
            marks = FenceMarks(state.topology.n_nodes)
        else:
            assert marks.fenced.size == state.topology.n_nodes
            marks.clear()
        self._marks = marks
        # The fenced nodes as a mask: a reservation fences tens of thousands of nodes, too many
        # to test one by one against a set.
        self._fenced_mask = marks.fenced
        self.generation = 0
        self._serial = next(_fence_serials)
        # For `holds`: the generation at which each node was fenced (0: not yet; every close
        # moves the generation past 0), and per `open`, the generation it moved to and the
        # earliest generation at which a node it let go had been fenced. Until a node is fenced
        # again after an open or `open_all` (`_compare_sets`), each node is fenced and opened
        # at most once.
        self._fenced_at = marks.fenced_at
        self._open_generations: list[int] = []
        self._open_earliest: list[int] = []
        self._earliest_after: IntArray | None = None  # suffix minima of `_open_earliest`
        self._compare_sets = False
        self._frozen: FencedNodes | None = FencedNodes((), self._serial, 0)
        self._seen: FencedNodes | None = None
        # `holds`' answers compared group by group, by the identity of the nodes asked about
        # (kept alive here), until the fence moves: refusals and failures kept from earlier
        # cycles share one such object per fence they were found under, and each answer looks
        # at every node of its groups.
        self._held: dict[int, tuple[FencedNodes, bool]] = {}

    @property
    def any(self) -> bool:
        return bool(self._groups)

    @property
    def fenced(self) -> FencedNodes:
        return self.frozen()

    def frozen(self) -> FencedNodes:
        """The fenced nodes now, as a value that later changes leave alone."""
        if self._frozen is None:
            self._frozen = FencedNodes(tuple(self._groups), self._serial, self.generation)
        return self._frozen

    def seen(self) -> FencedNodes:
        """The nodes a placement search sees fenced now: without the block while lifted."""
        if not self._lifted:
            return self.frozen()
        if self._seen is None:
            self._seen = FencedNodes(
                tuple(g for g in self._groups if g is not self._block),
                self._serial,
                self.generation,
                whole=False,
            )
        return self._seen

    def _kept_since(self, generation: int) -> bool:
        """Whether no open after `generation` let go a node fenced by then. If none did, every
        node fenced at that generation is fenced now: a node fenced without a break since
        `generation` still has the fencing generation it had then, so an open letting it go
        would have recorded that one or an earlier as its earliest."""
        first_after = bisect.bisect_right(self._open_generations, generation)
        if first_after == len(self._open_generations):
            return True  # nothing opened since
        if self._earliest_after is None:
            earliest = np.array(self._open_earliest[::-1], dtype=np.int64)
            self._earliest_after = np.minimum.accumulate(earliest)[::-1]
        return bool(self._earliest_after[first_after] > generation)

    def holds(self, fenced: FencedNodes) -> bool:
        """Whether every node of `fenced` is fenced now (`fenced <= self.frozen()`).

        For nodes taken from this fence, from its record first: a node fenced then and not
        now was let go by an `open` since. Where no open since let go a node fenced by then,
        all of them are still fenced, even if some node was fenced again after an open. Where
        one did, while every node is fenced and opened at most once, that node is open now.
        Otherwise (a node fenced again, the block left out, another fence's nodes) each of
        their groups is fenced now as it is, or all its nodes are marked fenced."""
        if fenced.origin == self._serial:
            if self._kept_since(fenced.generation):
                return True
            if not self._compare_sets and fenced.whole:
                return False
        known = self._held.get(id(fenced))
        if known is not None and known[0] is fenced:
            return known[1]
        current = self.frozen()._group_ids
        marked = self._fenced_mask
        held = all(
            id(group) in current or bool(marked[group.nodes].all()) for group in fenced.groups
        )
        self._held[id(fenced)] = (fenced, held)
        return held

    def equals(self, fenced: FencedNodes) -> bool:
        """Whether `fenced` are exactly the nodes fenced now (`fenced == self.frozen()`)."""
        return len(fenced) == len(self.frozen()) and self.holds(fenced)

    def within(self, fenced: FencedNodes) -> bool:
        """Whether every node fenced now is one of `fenced` (`self.frozen() <= fenced`).

        For all the nodes this fence held at some generation, without comparing sets: a
        group fenced now that was closed by then has been fenced without a break since, so it
        was among them. Groups keep the order they were closed in, so the last one is the
        newest. A group closed later is not among them, unless its nodes were fenced then,
        opened and fenced again: only then are the sets compared."""
        if fenced.origin != self._serial or not fenced.whole:
            return self.frozen() <= fenced
        if not self._groups:
            return True
        if self._fenced_at[self._groups[-1].nodes[0]] <= fenced.generation:
            return True
        return self.frozen() <= fenced if self._compare_sets else False

    def close(self, nodes: IntArray) -> None:
        self._close(nodes)

    def close_block(self, nodes: IntArray) -> None:
        """Fence the reservation's nodes (those not fenced yet) as the cycle's block."""
        self.settle()
        self._block = self._close(nodes)

    def _close(self, nodes: IntArray) -> NodeGroup | None:
        """Fence the open ones of `nodes` not fenced yet, as one group (None: none)."""
        # Marked fenced at the generation the fence moves to, in one compiled pass.
        picked, again = mark_open_nodes(
            nodes, self._fenced_mask, self._fenced_at, self.state.closed, self.generation + 1
        )
        if not picked.size:
            return None
        if self._open_generations and again:
            self._compare_sets = True
        opened = picked if increasing(picked) else distinct(picked)
        self.state.close(opened, Closure.FENCE)
        self._marks.marked(opened)
        group = NodeGroup(opened)
        self._groups.append(group)
        self._moved()
        return group

    def lift(self) -> None:
        """Open the block for a backfill search, until `settle`."""
        if self._block is not None and not self._lifted:
            self.state.reopen(self._block.nodes, Closure.FENCE)
            self._lifted = True
            self._seen = None

    def settle(self) -> None:
        """Close the block again if it was lifted: every search but a backfill's sees it."""
        if self._lifted:
            assert self._block is not None  # only a block is lifted
            # Closed again as they were: a job backfilled onto a node keeps it.
            self.state.close(self._block.nodes, Closure.FENCE)
            self._lifted = False

    def open(self, nodes: IntArray) -> None:
        mine = distinct(nodes[self._fenced_mask[nodes]])
        if not mine.size:
            return
        opening = self._marks.scratch
        opening[mine] = True
        try:
            if self._block is not None and opening[self._block.nodes].any():
                # A nomination reaching into the reservation: the rest of the block is an
                # ordinary group from now on.
                self.settle()
                self._block = None
            self.state.reopen(mine, Closure.FENCE)
            self._fenced_mask[mine] = False
            kept: list[NodeGroup] = []
            for group in self._groups:
                opened = opening[group.nodes]
                if not opened.any():
                    kept.append(group)
                elif not opened.all():
                    kept.append(NodeGroup(group.nodes[~opened]))
            self._groups = kept
        finally:
            opening[mine] = False
        self._moved()
        self._open_generations.append(self.generation)
        self._open_earliest.append(int(self._fenced_at[mine].min()))
        self._earliest_after = None

    def open_all(self) -> None:
        if self._groups:
            lifted = self._block if self._lifted else None  # open already
            # Group by group (each sorted): the block's share of the aggregates is found again.
            for group in self._groups:
                if group is not lifted:
                    self.state.reopen(group.nodes, Closure.FENCE)
            earliest = min(int(self._fenced_at[group.nodes[0]]) for group in self._groups)
            for group in self._groups:
                unmark(group.nodes, self._fenced_mask, self._fenced_at, False)
            self._groups = []
            self._block, self._lifted = None, False
            self._compare_sets = True  # the record ends
            self._moved()
            # Recorded as an open, so that nothing fenced before is said to be held still.
            self._open_generations.append(self.generation)
            self._open_earliest.append(earliest)
            self._earliest_after = None

    def _moved(self) -> None:
        self.generation += 1
        self._frozen = self._seen = None
        if self._held:
            self._held = {}
