"""Rows of varying length per slot, held in one pool per column: what a slot's rows are is
read for thousands of slots with one gather, not one array per slot joined in Python."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

IntArray = NDArray[np.int64]

_FIRST_POOL = 64
"""Entries a pool starts with (it doubles as it fills)."""


class SlotRows:
    """Per slot, a row of `count[slot]` entries in each of `columns` parallel pools, from
    `start[slot]` on (`count` -1: no row yet). Rows are appended at the pool's end; a dropped
    row leaves its entries behind until the pool is full, and then, if they are most of it,
    the rows kept move to its front (else it grows)."""

    def __init__(self, columns: int) -> None:
        self.start: IntArray = np.zeros(0, dtype=np.int64)
        self.count: IntArray = np.zeros(0, dtype=np.int64)
        self.columns: list[IntArray] = [np.zeros(0, dtype=np.int64) for _ in range(columns)]
        self._used = 0
        self._dropped = 0

    def grow_slots(self, size: int) -> None:
        """Room for slots up to `size` (the new ones without rows)."""
        start = np.zeros(size, dtype=np.int64)
        start[: self.start.size] = self.start
        count = np.full(size, -1, dtype=np.int64)
        count[: self.count.size] = self.count
        self.start, self.count = start, count

    def missing(self, slots: IntArray) -> IntArray:
        """Those of `slots` without a row."""
        result: IntArray = slots[self.count[slots] < 0]
        return result

    def drop(self, slot: int) -> None:
        """`slot` has no row any more."""
        counts = self.count
        count: int = counts.item(slot)
        if count >= 0:
            self._dropped += count
            counts[slot] = -1

    def put(self, slots: IntArray, sizes: IntArray, values: list[IntArray]) -> None:
        """Rows for `slots` (none of which has one) of `sizes` entries: each column's entries,
        row after row, in `values`."""
        total = int(sizes.sum())
        if self._used + total > self.columns[0].size:
            self._make_room(total)
        first = self._used
        if total:
            for column, entries in zip(self.columns, values, strict=True):
                column[first : first + total] = entries
        self.start[slots] = first + np.cumsum(sizes) - sizes
        self.count[slots] = sizes
        self._used = first + total

    def gather(self, slots: IntArray, column: int = 0) -> IntArray:
        """The rows of `slots` (each has one) in `column`, row after row."""
        counts = self.count[slots]
        ends = np.cumsum(counts)
        total = int(ends[-1]) if ends.size else 0
        offsets = np.repeat(self.start[slots] - (ends - counts), counts)
        gathered: IntArray = self.columns[column][np.arange(total, dtype=np.int64) + offsets]
        return gathered

    def _make_room(self, more: int) -> None:
        live = self._used - self._dropped
        if self._dropped > live:
            kept = np.flatnonzero(self.count > 0)
            kept = kept[np.argsort(self.start[kept], kind="stable")]
            moved = [self.gather(kept, column) for column in range(len(self.columns))]
            total = int(self.count[kept].sum())
            for column, entries in zip(self.columns, moved, strict=True):
                column[:total] = entries
            sizes = self.count[kept]
            self.start[kept] = np.cumsum(sizes) - sizes
            self._used, self._dropped = total, 0
        needed = self._used + more
        if needed > self.columns[0].size:
            size = max(needed, 2 * self.columns[0].size, _FIRST_POOL)
            grown = []
            for column in self.columns:
                bigger = np.zeros(size, dtype=np.int64)
                bigger[: column.size] = column
                grown.append(bigger)
            self.columns = grown
