"""Running jobs in release order as arrays: what a reservation search reads of each job (the
innermost domains it holds GPUs in and how many GPU slots in each), gathered in bulk."""

from __future__ import annotations

from operator import attrgetter, itemgetter
from typing import TypeVar, cast

import numpy as np
from numpy.typing import NDArray
from sortedcontainers import SortedList

from toposched.cluster.state import MILLI_PER_GPU, Allocation
from toposched.scheduler.release_kernels import gather_rows, leaves_held
from toposched.scheduler.slot_rows import SlotRows

IntArray = NDArray[np.int64]
BoolArray = NDArray[np.bool_]

_Item = TypeVar("_Item", bound=np.generic)

Key = tuple[float, str]
"""A running job's place in the release order: (expected release time, job id)."""

_COUNTED_TOGETHER_FROM = 8
"""From this many jobs on, `ReleaseOrder.count` counts their holdings together."""
_WAITING = 1024
"""Starts and stops beyond the running jobs' count that wait for a merge before one is made
without a search asking."""
_FEW_PODS = 32
"""Up to this many pods, a job's holdings are counted in a dict (cheaper than numpy calls)."""


class ReleaseOrder:
    """Running jobs by slot, and the slots in release order (`slots`), kept as jobs start and
    stop so that a reservation search reads thousands of releases with a few array gathers.

    Each job's leaves and GPU slots per leaf ("pairs") are counted when a search first reads
    them and kept in pools (`pairs`). Of an allocation of several pod shapes its largest set
    is counted, as the preemptible index keeps it.

    The order follows `releases` (the ledger's sorted (release time, job id) records): starts
    and stops since the last read are merged in then, in one pass, not one array shift each.
    A stopped job's slot is taken again only after that merge.

    Jobs of one pod shape holding whole GPUs are also kept by shape (`_shape`), so that a
    search frees many of them as one allocation per shape (`parts`): whole GPUs are never
    shared, so their pods together free exactly what each job frees. Their pods' nodes are
    kept in a pool; their GPUs are most often 0, 1, ... in order (whole-node pods), read then
    from rows kept once for all, else from the jobs' allocations.
    """

    def __init__(self, releases: SortedList, leaf_of_node: IntArray, n_leaves: int) -> None:
        self.releases = releases
        self.leaf_of_node = leaf_of_node
        self.n_leaves = n_leaves
        self.ids: list[str] = []
        """The job holding each slot ('' for a free one)."""
        self.allocations: list[Allocation | None] = []
        self._slot_of: dict[str, int] = {}
        self._alive: BoolArray = np.zeros(0, dtype=bool)
        self._reusable: list[int] = []
        self._stopped: list[int] = []  # slots freed since the last merge
        self._started: list[tuple[Key, int]] = []  # since the last merge
        self._order: IntArray = np.zeros(0, dtype=np.int64)
        self.pairs = SlotRows(2)
        """Per slot, the leaves its job holds GPUs in (column 0) and its GPU slots in each
        (column 1); counted when a search first reads them."""
        self._nodes = SlotRows(1)
        """Per slot of a job of one pod shape of whole GPUs, its pods' nodes, kept when a
        search first frees it."""
        self._in_order: BoolArray = np.zeros(0, dtype=bool)
        """Per slot with pods kept, whether each of its pods holds GPUs 0, 1, ... in that
        order (as whole-node pods are placed): their GPUs need not be read."""
        self._ordered_gpus: dict[int, IntArray] = {}
        """Per GPUs per pod, rows of GPUs 0, 1, ... (as many as a search freed at once)."""
        self._shape: IntArray = np.zeros(0, dtype=np.int64)
        """Per slot, its job's pod shape (an index into `_shapes`), or -1 for a job of several
        shapes or of shared GPUs."""
        self.pods: IntArray = np.zeros(0, dtype=np.int64)
        """Per slot, the pods its job holds."""
        self._shapes: dict[tuple[int, int, int], int] = {}
        """(GPUs per pod, CPU per pod, memory per pod) of whole-GPU pods, numbered."""

    def __len__(self) -> int:
        return len(self.releases)

    def add(self, key: Key, allocation: Allocation) -> None:
        """The job of `key` started, holding `allocation` (its record already in `releases`)."""
        self._add(key, allocation)
        self._merge_now_and_then()

    def add_many(self, keys: list[Key], allocations: list[Allocation]) -> None:
        """`add` of each job, in one pass (a restart adopts tens of thousands; their records
        already in `releases`)."""
        for key, allocation in zip(keys, allocations, strict=True):
            self._add(key, allocation)
        self._merge_now_and_then()

    def _add(self, key: Key, allocation: Allocation) -> None:
        slot = self._new_slot()
        job_id = key[1]
        self.ids[slot] = job_id
        self.allocations[slot] = allocation
        self._slot_of[job_id] = slot
        self._started.append((key, slot))
        self.pods[slot] = allocation.pods
        if allocation.sets or allocation.gpu_milli != MILLI_PER_GPU:
            self._shape[slot] = -1
        else:
            shape = (allocation.gpus.shape[1], allocation.cpu_milli, allocation.memory_mib)
            self._shape[slot] = self._shapes.setdefault(shape, len(self._shapes))

    def remove(self, job_id: str) -> None:
        """The job stopped running."""
        slot = self._slot_of.pop(job_id)
        self.ids[slot] = ""
        self.allocations[slot] = None
        self._alive[slot] = False
        self.pairs.drop(slot)
        self._nodes.drop(slot)
        self._stopped.append(slot)
        self._merge_now_and_then()

    def _merge_now_and_then(self) -> None:
        """Merge when the starts and stops waiting for it outnumber the running jobs, so that
        they do not pile up (and stopped slots are taken again) where no search reads the
        order."""
        if len(self._started) + len(self._stopped) > len(self.releases) + _WAITING:
            self._merge()

    def slots(self) -> IntArray:
        """Every running job's slot, in release order (as `releases`)."""
        if self._started or self._stopped:
            self._merge()
        return self._order

    def owners(self, slots: IntArray) -> list[str]:
        """The jobs holding `slots`, in that order."""
        ids = self.ids
        return [ids[slot] for slot in slots.tolist()]

    def parts(self, slots: IntArray) -> list[Allocation]:
        """What the jobs of `slots` hold, as allocations of one shape each: one per pod shape
        for the jobs of whole GPUs (`_shape`), and each other job's sets."""
        shapes = self._shape[slots]
        by_shape = np.argsort(shapes, kind="stable")
        slots, shapes = slots[by_shape], shapes[by_shape]
        ends = np.flatnonzero(np.diff(shapes)) + 1
        parts: list[Allocation] = []
        for group in np.split(slots, ends.tolist()) if slots.size else []:
            if self._shape[group[0]] < 0:
                for slot in group.tolist():
                    parts.extend(self._held(slot).parts)
                continue
            first = self._held(int(group[0]))
            if group.size == 1:
                parts.append(first)
                continue
            self._keep_pods(group)
            width = first.gpus.shape[1]
            nodes = _gathered(self._nodes, group)
            if self._in_order[group].all():
                gpus = self._gpus_in_order(nodes.size, width)
            else:
                gpus = np.concatenate([self._held(slot).gpus for slot in group.tolist()])
            parts.append(Allocation(nodes, gpus, MILLI_PER_GPU, first.cpu_milli, first.memory_mib))
        return parts

    def _keep_pods(self, slots: IntArray) -> None:
        """Keep the pods of those of `slots` (jobs of one shape) not kept yet."""
        missing = self._nodes.missing(slots)
        if not missing.size:
            return
        held = list(map(self.allocations.__getitem__, missing.tolist()))
        nodes = list(map(_NODES, held))
        pods = np.fromiter(map(len, nodes), np.int64, len(nodes))
        self._nodes.put(missing, pods, [np.concatenate(nodes)])
        gpus = np.concatenate(list(map(_GPUS, held)))
        self._in_order[missing] = _each_in_order(gpus, pods)

    def _gpus_in_order(self, pods: int, width: int) -> IntArray:
        """`pods` rows of GPUs 0 to `width` - 1 (a view of rows kept: read, never write)."""
        rows = self._ordered_gpus.get(width)
        if rows is None or rows.shape[0] < pods:
            size = max(pods, 2 * rows.shape[0] if rows is not None else 0)
            rows = np.tile(np.arange(width, dtype=np.int64), (size, 1))
            self._ordered_gpus[width] = rows
        ordered: IntArray = rows[:pods]
        return ordered

    def count(self, slots: IntArray) -> None:
        """Count the pairs of those of `slots` not counted yet."""
        missing = self.pairs.missing(slots)
        if not missing.size:
            return
        # Slots read are those of running jobs: each holds an allocation.
        allocations = cast(
            list[Allocation], list(map(self.allocations.__getitem__, missing.tolist()))
        )
        if (self._shape[missing] < 0).any():
            # Of a job of several pod shapes, its largest set.
            allocations = list(map(_LARGEST, allocations))
        if missing.size >= _COUNTED_TOGETHER_FROM:
            sizes, leaves, gpus = count_held_together(allocations, self.leaf_of_node, self.n_leaves)
            self.pairs.put(missing, sizes, [leaves, gpus])
            return
        counts = [count_held(a, self.leaf_of_node, self.n_leaves) for a in allocations]
        sizes = np.fromiter((leaves.size for leaves, _ in counts), np.int64, len(counts))
        self.pairs.put(
            missing,
            sizes,
            [
                np.concatenate([leaves for leaves, _ in counts]),
                np.concatenate([gpus for _, gpus in counts]),
            ],
        )

    def count_every_job(self) -> None:
        """Bring the order up to date, count every running job's pairs (`count`) and keep the
        pods of those of one shape (`parts`): all a search reads of them, read here in one
        pass over their allocations (a restart's tens of thousands adopted), so that the first
        search finds them as any later one does."""
        missing = self.pairs.missing(self.slots())
        if not missing.size:
            return
        held = cast(list[Allocation], list(map(self.allocations.__getitem__, missing.tolist())))
        one_shape = self._shape[missing] >= 0
        if not one_shape.all():
            # Of a job of several pod shapes, its largest set (as `count` counts it).
            held = [
                allocation if one else allocation.largest
                for allocation, one in zip(held, one_shape.tolist(), strict=True)
            ]
        nodes = list(map(_NODES, held))
        pods = np.fromiter(map(len, nodes), np.int64, len(nodes))
        width = np.fromiter(map(_SECOND, map(_GPUS_SHAPE, held)), np.int64, len(nodes))
        every_node = np.concatenate(nodes)
        sizes, leaves, slots = leaves_held(
            self.leaf_of_node[every_node], pods, width, self.n_leaves
        )
        self.pairs.put(missing, sizes, [leaves, slots])
        kept = one_shape & (self._nodes.count[missing] < 0)
        if not kept.any():
            return
        self._nodes.put(missing[kept], pods[kept], [every_node[np.repeat(kept, pods)]])
        for gpus_per_pod in np.unique(width[kept]).tolist():
            rows = np.flatnonzero(kept & (width == gpus_per_pod))
            gpus = np.concatenate([held[row].gpus for row in rows.tolist()])
            self._in_order[missing[rows]] = _each_in_order(gpus, pods[rows])

    def _held(self, slot: int) -> Allocation:
        allocation = self.allocations[slot]
        assert allocation is not None
        return allocation

    def _new_slot(self) -> int:
        if self._reusable:
            slot = self._reusable.pop()
        else:
            slot = len(self.ids)
            self.ids.append("")
            self.allocations.append(None)
            if slot >= self._alive.size:
                size = max(64, 2 * self._alive.size)
                self._alive = _grown(self._alive, size, False)
                for rows in (self.pairs, self._nodes):
                    rows.grow_slots(size)
                self._shape = _grown(self._shape, size, -1)
                self._in_order = _grown(self._in_order, size, False)
                self.pods = _grown(self.pods, size, 0)
        self._alive[slot] = True
        return slot

    def _merge(self) -> None:
        """Bring the order up to date: drop the slots stopped since the last merge, insert
        those started (and still running) where `releases` has them."""
        kept = self._order
        if self._stopped:
            kept = kept[self._alive[kept]]
        if len(self._started) * 8 > len(self.releases):
            # Many started (a restart): the order read from `releases` whole, not each
            # start's place looked up.
            kept = np.fromiter(
                map(self._slot_of.__getitem__, map(_SECOND, self.releases)),
                np.int64,
                len(self.releases),
            )
            started = []
        else:
            alive = self._alive
            started = [(key, slot) for key, slot in self._started if alive[slot]]
        if started:
            index = self.releases.index
            at = np.fromiter((index(key) for key, _ in started), np.int64, len(started))
            new = np.fromiter((slot for _, slot in started), np.int64, len(started))
            ranked = np.argsort(at, kind="stable")
            at, new = at[ranked], new[ranked]
            kept = np.insert(kept, at - np.arange(at.size), new)
        assert kept.size == len(self.releases)
        self._order = kept
        self._reusable.extend(self._stopped)
        self._stopped.clear()
        self._started.clear()


def _gathered(rows: SlotRows, slots: IntArray) -> IntArray:
    """The rows of `slots` (each has one) in `rows`' one column, row after row."""
    gathered: IntArray = gather_rows(slots, rows.start, rows.count, rows.columns[0])
    return gathered


def _each_in_order(gpus: IntArray, pods: IntArray) -> BoolArray:
    """Of jobs whose pods' GPUs are the rows of `gpus` (one width), job after job (`pods`
    each): whether each one's pods all hold GPUs 0, 1, ... in that order."""
    width = gpus.shape[1]
    # Pods out of order counted per job: the count before its first pod and after its last.
    out_of_order = np.concatenate(([0], np.cumsum((gpus != np.arange(width)).any(axis=1))))
    ends = np.cumsum(pods)
    in_order: BoolArray = out_of_order[ends] == out_of_order[ends - pods]
    return in_order


def _grown(array: NDArray[_Item], size: int, fill: object) -> NDArray[_Item]:
    """`array` with room for `size` entries, the new ones `fill`."""
    grown: NDArray[_Item] = np.full(size, fill, dtype=array.dtype)
    grown[: array.size] = array
    return grown


def count_held(
    allocation: Allocation, leaf_of_node: IntArray, n_leaves: int
) -> tuple[IntArray, IntArray]:
    """An allocation's innermost domains (distinct, in any order) and GPU slots in each."""
    leaf_of_pod = leaf_of_node[allocation.nodes]
    width = allocation.gpus.shape[1]
    if leaf_of_pod.size <= _FEW_PODS:
        # A few pods: counted in a dict, cheaper than numpy's calls.
        tally: dict[int, int] = {}
        for leaf in leaf_of_pod.tolist():
            tally[leaf] = tally.get(leaf, 0) + width
        return (
            np.fromiter(tally.keys(), dtype=np.int64, count=len(tally)),
            np.fromiter(tally.values(), dtype=np.int64, count=len(tally)),
        )
    if leaf_of_pod.size * 4 >= n_leaves:
        # A gang over many leaves: counted over every leaf, cheaper than sorting its pods.
        pods_per_leaf = np.bincount(leaf_of_pod, minlength=n_leaves)
        leaves = np.flatnonzero(pods_per_leaf)
        return leaves, pods_per_leaf[leaves] * width
    leaves = np.sort(leaf_of_pod)
    first = np.flatnonzero(np.concatenate(([True], leaves[1:] != leaves[:-1])))
    pods = np.diff(np.append(first, leaves.size))
    return leaves[first], pods * width


def count_held_together(
    allocations: list[Allocation], leaf_of_node: IntArray, n_leaves: int
) -> tuple[IntArray, IntArray, IntArray]:
    """`count_held` of many allocations in one pass (a restart's first reservation reads tens
    of thousands of running jobs), as rows: how many leaves each allocation holds GPUs in,
    then every allocation's leaves (distinct, in any order) and GPU slots in each, allocation
    after allocation."""
    nodes = list(map(_NODES, allocations))
    pods = np.fromiter(map(len, nodes), np.int64, len(nodes))
    width = np.fromiter(map(_SECOND, map(_GPUS_SHAPE, allocations)), np.int64, len(nodes))
    leaf_of_pod = leaf_of_node[np.concatenate(nodes)] if nodes else np.zeros(0, np.int64)
    sizes, leaves, slots = leaves_held(leaf_of_pod, pods, width, n_leaves)
    return sizes, leaves, slots


_LARGEST, _NODES, _GPUS = attrgetter("largest"), attrgetter("nodes"), attrgetter("gpus")
_GPUS_SHAPE, _SECOND = attrgetter("gpus.shape"), itemgetter(1)
"""Fields of many allocations, read in C."""
