"""Trial releases: resources freed for a search to look at, with the record that puts every
changed row back exactly. A `Statement` makes and undoes them; nothing else should."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit
from numpy.typing import NDArray

from toposched.cluster import kernels
from toposched.cluster.aggregates import LevelSums
from toposched.cluster.allocation import MILLI_PER_GPU, Allocation
from toposched.cluster.changes import FEW_PODS, HoldingChanges, one_shape_parts
from toposched.cluster.errors import InputError
from toposched.cluster.rows import SavedRows, distinct_counts, put_back, take_rows
from toposched.cluster.shapes import Shapes

FEW_PARTS = 4
"""Up to this many parts (of any size), `TrialReleases.trial_free_parts` frees them part by
part in compiled code."""


@dataclass(frozen=True, eq=False)
class RowsBefore:
    """Copies of every node and domain row a change moved (`nodes`: the nodes it touched),
    put back to undo it: cheaper than the opposite change for tens of thousands of nodes."""

    nodes: NDArray[np.int64]
    rows: list[SavedRows]
    added: list[LevelSums] = field(default_factory=list)
    """What the change added to the domain aggregates whose rows are not kept: taken away."""


@dataclass(frozen=True, eq=False)
class PartsFreed:
    """One-shape `parts` freed in compiled code, undone by taking them again: the opposite
    change costs less than copies of every row they touched, kept and put back."""

    parts: list[Allocation]
    whole_nodes: bool = False
    """Whether every pod holds every GPU of its node: freed node by node and taken again as a
    fresh what-if (`TrialReleases.trial_take`), the domains moving once per run of a rack's
    nodes."""


@dataclass(frozen=True, eq=False)
class GpuRowsBefore:
    """The free milli-GPU rows of `nodes` before whole GPUs of theirs were freed; undone by
    setting them again, which moves the aggregates back."""

    nodes: NDArray[np.int64]
    milli: NDArray[np.int16]


@dataclass(frozen=True, eq=False)
class RangeBefore:
    """Node rows first..last-1 of some node arrays before a change confined to them (the
    domain aggregates untouched)."""

    first: int
    last: int
    arrays: list[tuple[NDArray[np.integer], NDArray[np.integer]]]
    """Each array changed, with a copy of its rows first..last-1."""


@dataclass(frozen=True, eq=False)
class WholeNodesTaken:
    """Whole-node pods taken by a fresh what-if (`TrialReleases.trial_take`): each part's nodes,
    CPU and memory per pod, and the runs its take moved (`take_whole_nodes`); undone by giving
    every GPU of those nodes back, which is how they were."""

    parts: list[tuple[Allocation, NDArray[np.int64]]]
    """Each part with its runs: a row per run, its first pod, whether it was a whole
    innermost domain, and the idle nodes it took away."""


Before = RowsBefore | PartsFreed | GpuRowsBefore | RangeBefore | WholeNodesTaken
"""What a trial release or a bulk release kept, to be undone by `TrialReleases.put_back`."""


class TrialReleases(HoldingChanges):
    """Releases that keep what they changed: a bulk release, and what-ifs of evictions that
    free resources nobody stops holding. Unchecked on purpose: the caller frees resources held
    right now, and undoes the change (`put_back`) before anything else changes the rows it
    moved; statements undo later operations first."""

    def release_many_keeping_rows(
        self, owners: list[str]
    ) -> tuple[list[Allocation], RowsBefore | None]:
        """`release_many`, also returning the rows it changed (None when few pods were
        released: undone by `retake_many`), for `put_back` and `hold_again` to undo it."""
        self._check_releasable(owners)
        released = [self.allocations.pop(owner) for owner in owners]
        saved = self._apply_many(released, +1, keep_rows=True)
        if saved is None:
            return released, None
        touched = [rows for array, rows, _ in saved if array is self.gpu_free_milli]
        return released, RowsBefore(touched[0] if touched else np.zeros(0, np.int64), saved)

    def hold_again(self, owners: list[str], allocations: list[Allocation]) -> None:
        """The owners hold `allocations` again, their resources already put back as taken
        (after `put_back` of a bulk release's rows)."""
        self.allocations.update(zip(owners, allocations, strict=True))

    def trial_free_gpus(
        self, nodes: NDArray[np.int64], freeing: NDArray[np.bool_]
    ) -> GpuRowsBefore:
        """Free the whole GPUs marked in `freeing` (one row per node of `nodes`, sorted and
        unique; one column per GPU), held now by whole-GPU pods, though nobody stops holding
        them; the aggregates move with them."""
        old_milli = take_rows(self.gpu_free_milli, nodes)
        new_milli = np.where(freeing, np.int16(MILLI_PER_GPU), old_milli)
        self.version += 1
        self._changed(nodes)
        kernels.set_gpu_rows(nodes, new_milli, self._kernel_arrays())
        return GpuRowsBefore(nodes, old_milli)

    def trial_free_parts(self, parts: list[Allocation]) -> RowsBefore | PartsFreed:
        """Free the resources of `parts` (pieces of allocations held now), though nobody stops
        holding them; every level's aggregates move with them.

        A few parts (a reservation search frees one per pod shape), or a few pods in all, are
        freed by the compiled pod-by-pod change and undone by the opposite one; many parts of
        many pods by the vectorised pass, undone by putting back copies of the rows."""
        if not parts:
            return RowsBefore(np.zeros(0, dtype=np.int64), [])
        if self.holds_sets:
            parts = one_shape_parts(parts)
        if len(parts) <= FEW_PARTS and self._whole_nodes(parts):
            self._free_whole_nodes(parts)
            return PartsFreed(parts, whole_nodes=True)
        if len(parts) <= FEW_PARTS or sum(part.pods for part in parts) <= FEW_PODS:
            self._apply_compiled(parts, +1)
            return PartsFreed(parts)
        nodes, _ = distinct_counts(np.concatenate([part.nodes for part in parts]))
        saved = self._node_rows_copy(nodes) + self._domain_rows(nodes)
        self._apply_many(parts, +1)
        return RowsBefore(nodes, saved)

    def _apply_compiled(self, parts: list[Allocation], sign: int) -> None:
        """Free (sign=+1) or take back (-1) one-shape `parts` in compiled code: a few pods in
        one call, else part by part."""
        if len(parts) > 1 and sum(part.pods for part in parts) <= FEW_PODS:
            self._apply_few(parts, sign)
            return
        for part in parts:
            self._apply(part, sign)

    def _free_whole_nodes(self, parts: list[Allocation]) -> None:
        """Free whole-node pods held now (`free_whole_nodes`), part by part."""
        self.version += 1
        for part in parts:
            self._changes += 1
            free_whole_nodes(
                part.nodes,
                part.cpu_milli,
                part.memory_mib,
                self._kernel_arrays(),
                self.topology.node_domain[-1],
                self._changed_at,
                self._changes,
            )

    def trial_take(self, allocation: Allocation, fresh: bool) -> RowsBefore | WholeNodesTaken:
        """Take the resources of `allocation` though nobody holds it (a what-if of a
        placement, for later searches to see); every level's aggregates move. Checked first,
        each set against what the sets before it left, unless `fresh`: a placement a search
        found on this state, unchanged since, fits by construction. All or nothing."""
        parts = list(allocation.parts) if allocation.sets else [allocation]
        fields = [
            f"allocation.sets[{i}]" if allocation.sets else "allocation" for i in range(len(parts))
        ]
        if fresh and self._whole_nodes(parts):
            return self._take_whole_nodes(parts)
        if not fresh:
            for part, field in zip(parts, fields, strict=True):
                self._validate_shape(part, field)  # its nodes are rows to keep
        shapes = Shapes.of(parts)
        nodes = self._touched(
            shapes,
            np.concatenate([part.nodes for part in parts]) if len(parts) > 1 else parts[0].nodes,
        )
        # Only the node arrays the parts change are kept.
        node_arrays: list[NDArray[np.integer]] = [self.gpu_free_milli, self.free_whole_gpus]
        if any(part.cpu_milli for part in parts):
            node_arrays.append(self.free_cpu_milli)
        if any(part.memory_mib for part in parts):
            node_arrays.append(self.free_memory_mib)
        node_rows: list[SavedRows] = [(a, nodes, take_rows(a, nodes)) for a in node_arrays]
        if fresh and self._by_pods(shapes, nodes):
            # The domain aggregates move by sums found from the pods: kept, and taken away
            # again to undo, cheaper than copies of the domain rows.
            return RowsBefore(nodes, node_rows, self._take_by_pods(parts, shapes, nodes))
        before = RowsBefore(nodes, node_rows + self._domain_rows(nodes))
        try:
            for part, field in zip(parts, fields, strict=True):
                if fresh:
                    self._apply(part, -1)
                else:
                    self._take(part, field)
        except InputError:
            self.put_back(before)
            raise
        return before

    def _whole_nodes(self, parts: list[Allocation]) -> bool:
        """Whether every pod of `parts` holds every GPU of its node (whole-node pods)."""
        width = self.gpu_free_milli.shape[1]
        return all(
            part.gpu_milli == MILLI_PER_GPU and part.gpus.shape[1] == width for part in parts
        )

    def _take_whole_nodes(self, parts: list[Allocation]) -> WholeNodesTaken:
        """`trial_take` of whole-node pods a search found on this state (every GPU of their
        nodes free): compiled, run by run of a rack's nodes, nothing copied; undone by giving
        every GPU back. A gang of whole racks moves by the racks' totals alone."""
        self.version += 1
        topology = self.topology
        taken = []
        for part in parts:
            self._changes += 1
            runs = take_whole_nodes(
                part.nodes,
                part.cpu_milli,
                part.memory_mib,
                self._kernel_arrays(),
                topology.node_domain[-1],
                topology.domain_starts[-1],
                self._changed_at,
                self._changes,
            )
            taken.append((part, runs))
        return WholeNodesTaken(taken)

    def trial_free_on_nodes(self, parts: list[Allocation], first: int, last: int) -> RangeBefore:
        """Free the pods of `parts` on nodes first..last-1 in the node arrays alone (GPUs,
        whole GPUs, CPU, memory); domain aggregates keep their values.

        For a search confined to those nodes (one innermost domain) that reads nothing outside
        them: far cheaper than `trial_free_parts`, which moves every level's aggregates.
        """
        if self.holds_sets:
            parts = one_shape_parts(parts)
        # Only the arrays the parts change are saved and restored.
        node_arrays: list[NDArray[np.integer]] = [self.gpu_free_milli, self.free_whole_gpus]
        if any(part.cpu_milli for part in parts):
            node_arrays.append(self.free_cpu_milli)
        if any(part.memory_mib for part in parts):
            node_arrays.append(self.free_memory_mib)
        before = RangeBefore(first, last, [(a, a[first:last].copy()) for a in node_arrays])
        self.version += 1
        self._changed(slice(first, last))
        for part in parts:
            kernels.free_pods_inside(
                part.nodes,
                part.gpus,
                part.gpu_milli,
                part.cpu_milli,
                part.memory_mib,
                first,
                last,
                self.free_whole_gpus,
                self.gpu_free_milli,
                self.free_cpu_milli,
                self.free_memory_mib,
            )
        return before

    def put_back(self, before: Before) -> None:
        """Undo the change that kept `before`: every row it moved is as it was, exactly."""
        self.version += 1
        if isinstance(before, WholeNodesTaken):
            for part, runs in reversed(before.parts):
                self._changes += 1
                give_back_whole_nodes(
                    part.nodes,
                    part.cpu_milli,
                    part.memory_mib,
                    self._kernel_arrays(),
                    runs,
                    self._changed_at,
                    self._changes,
                )
        elif isinstance(before, GpuRowsBefore):
            self._changed(before.nodes)
            kernels.set_gpu_rows(before.nodes, before.milli, self._kernel_arrays())
        elif isinstance(before, PartsFreed):
            if before.whole_nodes:
                # Every GPU of the parts' nodes is free: taken again as a fresh take.
                self._take_whole_nodes(before.parts)
            else:
                self._apply_compiled(before.parts, -1)
        elif isinstance(before, RowsBefore):
            self._changed(before.nodes)
            put_back(before.rows)
            self._add_level_sums(before.added, -1)
        else:
            self._changed(slice(before.first, before.last))
            for array, rows in before.arrays:
                array[before.first : before.last] = rows


# Columns of a run of `take_whole_nodes`: its first pod, whether it is a whole innermost
# domain, and the idle nodes it took away.
_RUN_FIRST, _RUN_WHOLE_DOMAIN, _RUN_IDLE = range(3)
# Columns of the per-domain totals (`kernels.WHOLE` ...).
_WHOLE, _MILLI, _IDLE, _CPU, _MEMORY = range(5)


@njit(cache=True, nogil=True)
def take_whole_nodes(
    nodes: np.ndarray,
    cpu_milli: int,
    memory_mib: int,
    arrays: kernels.StateArrays,
    node_leaf: np.ndarray,
    leaf_starts: np.ndarray,
    changed_at: np.ndarray,
    change: int,
) -> np.ndarray:
    """Take the resources of whole-node pods on `nodes` (distinct; every GPU of each free
    now), the domains moving once per run of nodes in one innermost domain; returns the runs
    (columns `_RUN_*`) for `give_back_whole_nodes`. A run that is a whole innermost domain
    whose nodes are all open (a large gang's whole racks) moves by its domain's own totals,
    without reading its nodes; each node's `changed_at` becomes `change`."""
    free_whole_gpus, gpu_free_milli, free_cpu_milli, free_memory_mib = arrays[:4]
    cpu_capacity, memory_capacity = arrays[5:7]
    closed, node_rows, gpu_model, hist, totals = arrays[7:]
    leaf = node_rows.shape[1] - 1
    width = gpu_free_milli.shape[1]
    runs = np.empty((nodes.size, 3), dtype=np.int64)
    moved = np.zeros(hist.shape[1], dtype=np.int64)
    n_runs = 0
    start = 0
    while start < nodes.size:
        first = nodes[start]
        domain = node_leaf[first]
        lo, hi = leaf_starts[domain], leaf_starts[domain + 1]
        row = node_rows[first, leaf]
        whole_domain = _covers_domain(nodes, start, lo, hi)
        if whole_domain:
            at_width = 0
            for model in range(moved.size):
                moved[model] = hist[row, model, width]
                at_width += moved[model]
            whole_domain = at_width == hi - lo
        if whole_domain:
            stop = start + hi - lo
            count = hi - lo
            idle = totals[row, _IDLE]
            _set_node_range(lo, hi, -1, cpu_milli, memory_mib, arrays, changed_at, change)
        else:
            stop, count, idle = start, 0, 0
            for model in range(moved.size):
                moved[model] = 0
            while stop < nodes.size and node_leaf[nodes[stop]] == domain:
                node = nodes[stop]
                stop += 1
                if closed[node] == 0:
                    count += 1
                    moved[gpu_model[node]] += 1
                    if (
                        free_cpu_milli[node] == cpu_capacity[node]
                        and free_memory_mib[node] == memory_capacity[node]
                    ):
                        idle += 1
                _set_node_range(
                    node, node + 1, -1, cpu_milli, memory_mib, arrays, changed_at, change
                )
        runs[n_runs, _RUN_FIRST] = start
        runs[n_runs, _RUN_WHOLE_DOMAIN] = whole_domain
        runs[n_runs, _RUN_IDLE] = idle
        n_runs += 1
        _move_domains(first, count, idle, moved, -1, cpu_milli, memory_mib, arrays)
        start = stop
    return runs[:n_runs]


@njit(cache=True, nogil=True)
def free_whole_nodes(
    nodes: np.ndarray,
    cpu_milli: int,
    memory_mib: int,
    arrays: kernels.StateArrays,
    node_leaf: np.ndarray,
    changed_at: np.ndarray,
    change: int,
) -> None:
    """Free the resources of whole-node pods on `nodes` (distinct; every GPU of each held by
    its pod now), the domains moving once per run of nodes in one innermost domain: each node
    gets every GPU back, and the CPU and memory of its pod; an open node whose CPU and memory
    are then all free becomes idle. Each node's `changed_at` becomes `change`. Undone by
    `take_whole_nodes` of the same pods."""
    free_cpu_milli, free_memory_mib = arrays[2:4]
    cpu_capacity, memory_capacity = arrays[5:7]
    closed, gpu_model, hist = arrays[7], arrays[9], arrays[10]
    moved = np.zeros(hist.shape[1], dtype=np.int64)
    start = 0
    while start < nodes.size:
        first = nodes[start]
        domain = node_leaf[first]
        count = 0
        idle = 0
        for model in range(moved.size):
            moved[model] = 0
        stop = start
        while stop < nodes.size and node_leaf[nodes[stop]] == domain:
            node = nodes[stop]
            stop += 1
            _set_node_range(node, node + 1, 1, cpu_milli, memory_mib, arrays, changed_at, change)
            if closed[node] == 0:
                count += 1
                moved[gpu_model[node]] += 1
                if (
                    free_cpu_milli[node] == cpu_capacity[node]
                    and free_memory_mib[node] == memory_capacity[node]
                ):
                    idle += 1
        _move_domains(first, count, idle, moved, 1, cpu_milli, memory_mib, arrays)
        start = stop


@njit(cache=True, nogil=True, inline="always")
def _covers_domain(nodes: np.ndarray, start: int, lo: int, hi: int) -> bool:
    """Whether the pods from `start` on are on nodes lo..hi-1 (an innermost domain's), in
    that order, first: a run of pods that covers the domain."""
    if nodes[start] != lo or start + hi - lo > nodes.size:
        return False
    for k in range(hi - lo):
        if nodes[start + k] != lo + k:
            return False
    return True


@njit(cache=True, nogil=True)
def whole_free_leaves(
    nodes: np.ndarray,
    node_leaf: np.ndarray,
    leaf_starts: np.ndarray,
    leaf_hist: np.ndarray,
    width: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The runs of whole-node pods on `nodes` (distinct) that `take_whole_nodes` would take as
    whole innermost domains: each a run of pods covering a domain's nodes in order, every one
    open with every GPU free (`leaf_hist`: the innermost level's histograms). Returns those
    domains, in the pods' order, and the indices of the pods in none of them."""
    leaves = np.empty(nodes.size, dtype=np.int64)
    rest = np.empty(nodes.size, dtype=np.int64)
    n_leaves = 0
    n_rest = 0
    start = 0
    while start < nodes.size:
        domain = node_leaf[nodes[start]]
        lo, hi = leaf_starts[domain], leaf_starts[domain + 1]
        whole = _covers_domain(nodes, start, lo, hi)
        if whole:
            at_width = 0
            for model in range(leaf_hist.shape[1]):
                at_width += leaf_hist[domain, model, width]
            whole = at_width == hi - lo
        if whole:
            leaves[n_leaves] = domain
            n_leaves += 1
            start += hi - lo
        else:
            rest[n_rest] = start
            n_rest += 1
            start += 1
    return leaves[:n_leaves], rest[:n_rest]


@njit(cache=True, nogil=True)
def give_back_whole_nodes(
    nodes: np.ndarray,
    cpu_milli: int,
    memory_mib: int,
    arrays: kernels.StateArrays,
    runs: np.ndarray,
    changed_at: np.ndarray,
    change: int,
) -> None:
    """Undo `take_whole_nodes` of the same pods, which returned `runs`, on the state it left:
    every GPU of each node free again, its CPU and memory given back, the domains moved back."""
    closed, node_rows, gpu_model, hist = arrays[7:11]
    leaf = node_rows.shape[1] - 1
    moved = np.zeros(hist.shape[1], dtype=np.int64)
    for run in range(runs.shape[0]):
        start = runs[run, _RUN_FIRST]
        stop = runs[run + 1, _RUN_FIRST] if run + 1 < runs.shape[0] else nodes.size
        first = nodes[start]
        if runs[run, _RUN_WHOLE_DOMAIN]:
            # Every node of the domain is open and took every GPU: all now have none free.
            row = node_rows[first, leaf]
            count = stop - start
            for model in range(moved.size):
                moved[model] = hist[row, model, 0]
            _set_node_range(
                first, first + count, 1, cpu_milli, memory_mib, arrays, changed_at, change
            )
        else:
            count = 0
            for model in range(moved.size):
                moved[model] = 0
            for i in range(start, stop):
                node = nodes[i]
                if closed[node] == 0:
                    count += 1
                    moved[gpu_model[node]] += 1
                _set_node_range(
                    node, node + 1, 1, cpu_milli, memory_mib, arrays, changed_at, change
                )
        _move_domains(first, count, runs[run, _RUN_IDLE], moved, 1, cpu_milli, memory_mib, arrays)


@njit(cache=True, nogil=True, inline="always")
def _set_node_range(
    lo: int,
    hi: int,
    sign: int,
    cpu_milli: int,
    memory_mib: int,
    arrays: kernels.StateArrays,
    changed_at: np.ndarray,
    change: int,
) -> None:
    """Nodes lo..hi-1 lose (sign=-1) or get back (+1) every GPU, and the CPU and memory of
    one pod each."""
    free_whole_gpus, gpu_free_milli, free_cpu_milli, free_memory_mib = arrays[:4]
    width = gpu_free_milli.shape[1]
    milli = MILLI_PER_GPU if sign > 0 else 0
    whole = width if sign > 0 else 0
    for node in range(lo, hi):
        changed_at[node] = change
        free_whole_gpus[node] = whole
        for gpu in range(width):
            gpu_free_milli[node, gpu] = milli
    if cpu_milli:
        for node in range(lo, hi):
            free_cpu_milli[node] += sign * cpu_milli
    if memory_mib:
        for node in range(lo, hi):
            free_memory_mib[node] += sign * memory_mib


@njit(cache=True, nogil=True, inline="always")
def _move_domains(
    first: int,
    count: int,
    idle: int,
    moved: np.ndarray,
    sign: int,
    cpu_milli: int,
    memory_mib: int,
    arrays: kernels.StateArrays,
) -> None:
    """Move the domains of `first` (a run's first node) at every level by `count` open nodes
    losing (sign=-1) or getting back (+1) every GPU, `idle` of them idle while free, and their
    pods' CPU and memory; `moved`: those nodes per GPU model."""
    width = arrays[1].shape[1]
    node_rows, _, hist, totals = arrays[8:]
    left, entered = (0, width) if sign > 0 else (width, 0)  # histogram bins of free GPUs
    for level in range(node_rows.shape[1]):
        row = node_rows[first, level]
        totals[row, _WHOLE] += sign * width * count
        totals[row, _MILLI] += sign * width * MILLI_PER_GPU * count
        totals[row, _IDLE] += sign * idle
        totals[row, _CPU] += sign * cpu_milli * count
        totals[row, _MEMORY] += sign * memory_mib * count
        for model in range(moved.size):
            if moved[model]:
                hist[row, model, left] -= moved[model]
                hist[row, model, entered] += moved[model]
