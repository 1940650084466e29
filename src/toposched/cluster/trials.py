"""What-ifs of releases: resources freed for a search to look at, and put back exactly."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from numpy.typing import NDArray

from toposched.cluster import kernels
from toposched.cluster.allocation import MILLI_PER_GPU, Allocation
from toposched.cluster.changes import HoldingChanges
from toposched.cluster.rows import SavedRows, distinct_counts, put_back, put_rows, take_rows


class TrialReleases(HoldingChanges):
    """Releases tried and undone: a bulk release that keeps the rows it changed, and
    releases that last only for a block."""

    def release_many_keeping_rows(
        self, owners: list[str]
    ) -> tuple[list[Allocation], list[SavedRows] | None]:
        """`release_many`, also returning copies of every row it changed (None when few pods
        were released), for `restore_released` to undo it by putting them back: cheaper than
        re-taking tens of thousands of nodes and recounting their aggregates."""
        self._check_releasable(owners)
        released = [self.allocations.pop(owner) for owner in owners]
        return released, self._apply_many(released, +1, keep_rows=True)

    def restore_released(
        self, owners: list[str], allocations: list[Allocation], saved: list[SavedRows]
    ) -> None:
        """Undo `release_many_keeping_rows` with the rows it kept: the owners hold exactly what
        they held. Unchecked on purpose: only valid while the state is as the release left it
        (statements undo later operations first)."""
        self.version += 1
        for array, rows, _ in saved:
            if array is self.gpu_free_milli:
                self._changed(rows)
        put_back(saved)
        self.allocations.update(zip(owners, allocations, strict=True))

    @contextmanager
    def gpus_released(self, nodes: NDArray[np.int64], freeing: NDArray[np.bool_]) -> Iterator[None]:
        """Inside the block, the whole GPUs marked in `freeing` (one row per node of `nodes`,
        sorted and unique; one column per GPU), held now by whole-GPU pods, are free, though
        nobody stops holding them: a what-if of evictions for a search to look at, the
        aggregates moved by the change. Afterwards the rows are put back and the aggregates
        moved back, exactly (integer arithmetic).

        Unchecked on purpose: the caller must mark whole GPUs held right now, and must not
        change the state inside the block.
        """
        old_milli = take_rows(self.gpu_free_milli, nodes)
        new_milli = np.where(freeing, np.int16(MILLI_PER_GPU), old_milli)
        self.version += 1
        self._changed(nodes)
        kernels.set_gpu_rows(nodes, new_milli, self._kernel_arrays())
        try:
            yield
        finally:
            self.version += 1
            self._changed(nodes)
            kernels.set_gpu_rows(nodes, old_milli, self._kernel_arrays())

    @contextmanager
    def parts_released(self, parts: list[Allocation]) -> Iterator[None]:
        """Inside the block, the resources of `parts` (pieces of allocations held now) are
        free, though nobody stops holding them: a what-if of evictions for a search to look at.
        Afterwards every touched node row and domain aggregate row is put back as it was,
        copied before (cheaper than undoing the change for tens of thousands of nodes).

        Unchecked on purpose: the caller must pass resources that are held right now, and
        must not change the state inside the block.
        """
        if not parts:
            yield
            return
        nodes, _ = distinct_counts(np.concatenate([part.nodes for part in parts]))
        node_rows: list[tuple[NDArray[np.integer], NDArray[np.integer]]] = [
            (array, take_rows(array, nodes))
            for array in (
                self.gpu_free_milli,
                self.free_whole_gpus,
                self.free_cpu_milli,
                self.free_memory_mib,
            )
        ]
        domain_rows = self._domain_rows(nodes)
        self._apply_many(parts, +1)
        try:
            yield
        finally:
            self.version += 1
            self._changed(nodes)
            for array, saved in node_rows:
                put_rows(array, nodes, saved)
            put_back(domain_rows)

    @contextmanager
    def released_on_nodes(self, parts: list[Allocation], first: int, last: int) -> Iterator[None]:
        """Inside the block, the pods of `parts` on nodes first..last-1 are free in the node
        arrays alone (GPUs, whole GPUs, CPU, memory); domain aggregates keep their values.

        A what-if for a search confined to those nodes (one innermost domain): far cheaper than
        `parts_released`, which moves every level's aggregates. Unchecked on purpose, like
        `parts_released`: the caller passes resources held now, reads nothing outside the nodes
        and changes nothing inside the block.
        """
        # Only the arrays the parts change are saved and restored.
        node_arrays: list[NDArray[np.integer]] = [self.gpu_free_milli, self.free_whole_gpus]
        if any(part.cpu_milli for part in parts):
            node_arrays.append(self.free_cpu_milli)
        if any(part.memory_mib for part in parts):
            node_arrays.append(self.free_memory_mib)
        saved = [array[first:last].copy() for array in node_arrays]
        self.version += 1
        self._changed(slice(first, last))
        try:
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
            yield
        finally:
            self.version += 1
            self._changed(slice(first, last))
            for array, rows_before in zip(node_arrays, saved, strict=True):
                array[first:last] = rows_before
