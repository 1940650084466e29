"""Trial releases: resources freed for a search to look at, with the record that puts every
changed row back exactly. A `Statement` makes and undoes them; nothing else should."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from toposched.cluster import kernels
from toposched.cluster.aggregates import LevelSums
from toposched.cluster.allocation import MILLI_PER_GPU, Allocation
from toposched.cluster.changes import HoldingChanges, one_shape_parts
from toposched.cluster.errors import InputError
from toposched.cluster.rows import SavedRows, distinct_counts, put_back, take_rows


@dataclass(frozen=True, eq=False)
class RowsBefore:
    """Copies of every node and domain row a change moved (`nodes`: the nodes it touched),
    put back to undo it: cheaper than the opposite change for tens of thousands of nodes."""

    nodes: NDArray[np.int64]
    rows: list[SavedRows]
    added: list[LevelSums] = field(default_factory=list)
    """What the change added to the domain aggregates whose rows are not kept: taken away."""


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


Before = RowsBefore | GpuRowsBefore | RangeBefore
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

    def trial_free_parts(self, parts: list[Allocation]) -> RowsBefore:
        """Free the resources of `parts` (pieces of allocations held now), though nobody stops
        holding them; every level's aggregates move with them."""
        if not parts:
            return RowsBefore(np.zeros(0, dtype=np.int64), [])
        nodes, _ = distinct_counts(np.concatenate([part.nodes for part in parts]))
        saved = self._node_rows_copy(nodes) + self._domain_rows(nodes)
        self._apply_many(parts, +1)
        return RowsBefore(nodes, saved)

    def trial_take(self, allocation: Allocation, fresh: bool) -> RowsBefore:
        """Take the resources of `allocation` though nobody holds it (a what-if of a
        placement, for later searches to see); every level's aggregates move. Checked first,
        each set against what the sets before it left, unless `fresh`: a placement a search
        found on this state, unchanged since, fits by construction. All or nothing."""
        parts = list(allocation.parts) if allocation.sets else [allocation]
        fields = [
            f"allocation.sets[{i}]" if allocation.sets else "allocation" for i in range(len(parts))
        ]
        if not fresh:
            for part, field in zip(parts, fields, strict=True):
                self._validate_shape(part, field)  # its nodes are rows to keep
        nodes = self._touched(
            parts,
            np.concatenate([part.nodes for part in parts]) if len(parts) > 1 else parts[0].nodes,
        )
        # Only the node arrays the parts change are kept.
        node_arrays: list[NDArray[np.integer]] = [self.gpu_free_milli, self.free_whole_gpus]
        if any(part.cpu_milli for part in parts):
            node_arrays.append(self.free_cpu_milli)
        if any(part.memory_mib for part in parts):
            node_arrays.append(self.free_memory_mib)
        node_rows: list[SavedRows] = [(a, nodes, take_rows(a, nodes)) for a in node_arrays]
        if fresh and self._by_pods(parts, nodes):
            # The domain aggregates move by sums found from the pods: kept, and taken away
            # again to undo, cheaper than copies of the domain rows.
            return RowsBefore(nodes, node_rows, self._take_by_pods(parts, nodes))
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
        if isinstance(before, GpuRowsBefore):
            self._changed(before.nodes)
            kernels.set_gpu_rows(before.nodes, before.milli, self._kernel_arrays())
        elif isinstance(before, RowsBefore):
            self._changed(before.nodes)
            put_back(before.rows)
            self._add_level_sums(before.added, -1)
        else:
            self._changed(slice(before.first, before.last))
            for array, rows in before.arrays:
                array[before.first : before.last] = rows
