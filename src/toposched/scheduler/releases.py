"""Running jobs released in expected-end order for a reservation search, counted per domain."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.changes import FEW_PODS
from toposched.cluster.statement import Statement
from toposched.scheduler.release_kernels import count_releases, first_enough
from toposched.scheduler.release_order import ReleaseOrder

IntArray = NDArray[np.int64]
NEVER = np.iinfo(np.int64).max
"""`ReleaseBounds.enough_at` of a domain that has not gained enough within the releases read."""
_FIRST_CHUNK = 64
"""Releases `ReleaseBounds` reads first when the search's reach is not known (or fewer)."""


@dataclass(frozen=True)
class LeafRoom:
    """What a gang of whole-GPU pods could use per innermost domain ("leaf") now.

    A leaf holds the gang's pods in whole slices of `granule` pods of `gpus_per_pod` GPUs, so
    with `free[leaf]` whole GPUs free it holds at most `free // (granule x gpus_per_pod)`
    slices; a domain of the gang's required level (`domain_of_leaf`) can hold the gang only if
    its leaves together hold `pods`.
    """

    free: IntArray
    domain_of_leaf: IntArray
    n_domains: int
    gpus_per_pod: int
    granule: int
    pods: int

    def pods_room(self, gpus: IntArray) -> IntArray:
        """The most pods leaves with `gpus` whole GPUs free hold, in whole slices."""
        result: IntArray = gpus // (self.granule * self.gpus_per_pod) * self.granule
        return result


class ReleaseBounds:
    """For a gang and the running jobs in release order (`order`): per domain of the gang's
    required level, the fewest releases after which that domain could hold it, and which
    releases matter for a search after the first k.

    A released GPU slot frees at most one whole GPU, so counting every slot a job holds in a
    leaf (on any node, fenced or not) over-estimates what the leaf gains, and so the whole
    slices it could hold (`LeafRoom`): before `enough_at[d]` releases, domain d cannot hold
    the gang. After k releases, a job among the first k that holds nothing in a domain with
    `enough_at <= k` changes only domains that cannot hold the gang either way, so a search
    after k releases needs only the others (`released_for`).

    Releases are read in chunks of growing size as far as asked, so that the cost follows the
    answer, not the number of running jobs (often the answer is among the first few). What is
    read does not depend on the chunks: a first chunk as large as the search is expected to
    read (`reach`) saves the calls of the smaller ones.
    """

    def __init__(self, order: ReleaseOrder, room: LeafRoom | None, reach: int = 0) -> None:
        """`room`: the gang's room now; None when nothing is known (every release may
        matter). `reach`: how many releases the search is expected to read, if known."""
        self.order = order
        self._slots = order.slots()
        self._everything = room is None
        if room is None:
            room = LeafRoom(np.zeros(1, np.int64), np.zeros(1, np.int64), 1, 1, 1, 1)
        self._room = room
        self._leaf_gpus = room.free.astype(np.int64)  # free now plus slots released so far
        self._domain_pods = np.bincount(
            room.domain_of_leaf, weights=room.pods_room(self._leaf_gpus), minlength=room.n_domains
        ).astype(np.int64)
        self.enough_at = np.where(self._domain_pods >= room.pods, 0, NEVER).astype(np.int64)
        self.read = 0  # releases read
        self._chunk = max(_FIRST_CHUNK, reach)
        # The releases that matter, in the order they come to matter (by key, then release
        # order; a release's key is the fewest releases after which it matters), with keys:
        # each reading appends keys above every key known before (at most the releases read
        # then), so the keys stay sorted.
        self._order = np.zeros(0, dtype=np.int64)
        self._keys = np.zeros(0, dtype=np.int64)
        self._pending = np.zeros(0, dtype=np.int64)  # releases read whose key is beyond `read`

    @property
    def counted(self) -> bool:
        """Whether releases are counted (else every release may matter, and `fewest` is 1)."""
        return not self._everything

    def fewest(self) -> int | None:
        """A lower bound on the releases before the gang can fit: 1 when some domain holds
        enough already or nothing is known, None when even every release is not enough."""
        if self._everything:
            return 1
        while True:
            least = int(self.enough_at.min())
            if least != NEVER:
                return max(least, 1)
            if self.read >= self._slots.size:
                return None
            self._read_to(self.read + 1)

    def released_for(self, count: int) -> int:
        """How many of the releases that matter (in the order they come to matter, see
        `owners`) a search after the first `count` releases needs released."""
        if self._everything:
            return count
        if count > self.read:
            self._read_to(count)
        return int(np.searchsorted(self._keys, count, side="right"))

    def owners(self, start: int, stop: int) -> list[str]:
        """Owners of the releases that matter, from the `start`-th to before the `stop`-th in
        the order they come to matter."""
        return self.order.owners(self.slots(start, stop))

    def slots(self, start: int, stop: int) -> IntArray:
        """The slots (`ReleaseOrder`) of `owners(start, stop)`, in that order."""
        if self._everything:
            return self._slots[start:stop]
        return self._slots[self._order[start:stop]]

    def _read_to(self, count: int) -> None:
        """Read releases until at least `count` are read (or all are)."""
        total = self._slots.size
        while self.read < min(count, total):
            start = self.read
            stop = min(total, start + self._chunk)
            self._chunk *= 4
            self._read_chunk(start, stop)
            self.read = stop
        self._key_pending()

    def _read_chunk(self, start: int, stop: int) -> None:
        order, room, slots = self.order, self._room, self._slots
        order.count(slots[start:stop])
        self._pending = np.concatenate((self._pending, np.arange(start, stop, dtype=np.int64)))
        # Entry by entry in release order, in compiled code: a chunk's numpy passes (sorts,
        # running sums per leaf and per domain) cost more than the entries themselves.
        count_releases(
            slots,
            start,
            stop,
            order.pairs.start,
            order.pairs.count,
            order.pairs.columns[0],
            order.pairs.columns[1],
            room.domain_of_leaf,
            self._leaf_gpus,
            self._domain_pods,
            self.enough_at,
            room.granule,
            room.gpus_per_pod,
            room.pods,
        )

    def _key_pending(self) -> None:
        """Give the releases read whose key is now known (at most `read`) their place among
        the releases that matter: a release's key is the larger of its own position + 1 and
        the fewest releases after which a domain it holds something in could hold the gang."""
        pending = self._pending
        if not pending.size:
            return
        order = self.order
        reached = first_enough(
            self._slots,
            pending,
            order.pairs.start,
            order.pairs.count,
            order.pairs.columns[0],
            self._room.domain_of_leaf,
            self.enough_at,
        )
        keys = np.maximum(pending + 1, reached)
        known = keys <= self.read
        if not known.any():
            return
        ready, ready_keys = pending[known], keys[known]
        ordered = np.lexsort((ready, ready_keys))
        self._order = np.concatenate((self._order, ready[ordered]))
        self._keys = np.concatenate((self._keys, ready_keys[ordered]))
        self._pending = pending[~known]


class ReleasedPrefix:
    """The first m releases that matter (`ReleaseBounds.owners`), released on a statement for
    any m asked: a larger m releases only the jobs it adds; a smaller one rolls back to the
    nearest checkpoint at or below it and releases up from there.

    Many pods are not released job by job: the jobs keep their allocations and what they
    hold is freed (`Statement.free_parts`), as one allocation per pod shape of whole GPUs
    (`ReleaseOrder.parts`), which placement reads as it reads the jobs released, for far fewer
    steps per job. Up to `few_pods` pods (`FEW_PODS`) the jobs are released, pod by pod in
    one compiled call, with no rows copied."""

    def __init__(
        self, statement: Statement, bounds: ReleaseBounds, few_pods: int = FEW_PODS
    ) -> None:
        """`few_pods`: up to how many pods the jobs are released themselves."""
        self.statement = statement
        self.bounds = bounds
        self.few_pods = few_pods
        self._marks: list[tuple[int, int]] = [(0, statement.checkpoint())]  # (released, mark)

    def release_for(self, count: int) -> None:
        """Release what a search after the first `count` releases needs."""
        wanted = self.bounds.released_for(count)
        marks = self._marks
        while marks[-1][0] > wanted:
            marks.pop()
        released, mark = marks[-1]
        self.statement.rollback(mark)
        if wanted > released:
            order = self.bounds.order
            slots = self.bounds.slots(released, wanted)
            if int(order.pods[slots].sum()) <= self.few_pods:
                self.statement.release_many(order.owners(slots))
            else:
                self.statement.free_parts(order.parts(slots))
            marks.append((wanted, self.statement.checkpoint()))
