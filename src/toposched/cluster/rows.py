"""Row operations on the state's narrow arrays (one row per node or domain), faster than
numpy's generic ones at the sizes the state sees."""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

# Below these sizes plain Python beats numpy's per-call overhead (measured with bench cluster).
SMALL = 64

MARKED_FROM = 4_096
"""From this many values, `distinct` may mark them in a mask of their range (`marked_range`)."""
MARKED_SPAN = 8
"""The largest value, at most this many times the values' count, for the mask: a range that
dense is read in fewer steps than the values are sorted in."""

SavedRows = tuple[NDArray[np.integer], NDArray[np.int64], NDArray[np.integer]]
"""An array (per node or per domain), some of its rows, and copies of them."""

_Item = TypeVar("_Item", bound=np.generic)
_Int = TypeVar("_Int", bound=np.integer)

_WORDS: dict[int, type[np.unsignedinteger]] = {
    1: np.uint8,
    2: np.uint16,
    4: np.uint32,
    8: np.uint64,
}


def row_sums(values: NDArray[np.integer] | NDArray[np.bool_]) -> NDArray[np.int64]:
    """Sum of each row of a narrow 2-D array (one row per node, one column per GPU).

    numpy's reduction along a short last axis costs tens of nanoseconds per element; for many
    rows, bool rows of 1, 2, 4 or 8 columns are read as one integer and their bits counted, and
    other rows are added column by column (a handful of vectorised adds).
    """
    rows, width = values.shape
    if rows < SMALL:
        small: NDArray[np.int64] = values.sum(axis=1, dtype=np.int64)
        return small
    as_word = _WORDS.get(width)
    if values.dtype == np.bool_ and as_word is not None and values.flags.c_contiguous:
        counted: NDArray[np.int64] = np.bitwise_count(values.view(as_word)).reshape(-1)
        return counted.astype(np.int64)
    total = np.zeros(rows, dtype=np.int64)
    for column in range(width):
        total += values[:, column]
    return total


def distinct(values: NDArray[_Int]) -> NDArray[_Int]:
    """Sorted distinct values of a 1-D integer array, like `np.unique` but by sorting (numpy's
    hash-based unique is tens of times slower on node lists), and without even a sort when the
    values are already increasing (a gang's nodes usually are). Many values out of order that
    cover a dense range (the nodes of thousands of pods) are marked in a mask of the range
    instead (`marked_range`)."""
    if values.size < 2:
        return values.copy()
    increasing = values[1:] > values[:-1]
    if increasing.all():
        return values.copy()
    marked = marked_range(values)
    if marked is not None:
        return np.flatnonzero(marked).astype(values.dtype, copy=False)
    if not (values[1:] >= values[:-1]).all():
        values = values.copy()
        values.sort()
        increasing = values[1:] > values[:-1]
    result: NDArray[_Int] = values[np.concatenate(([True], increasing))]
    return result


def marked_range(values: NDArray[np.integer]) -> NDArray[np.bool_] | None:
    """For `MARKED_FROM` values or more, none negative and none above `MARKED_SPAN` times as
    many: a mask of 0..max marking the values, cheaper to make and read than a sort of them.
    None otherwise."""
    if values.size < MARKED_FROM:
        return None
    high = int(values.max())
    if high >= MARKED_SPAN * values.size or int(values.min()) < 0:
        return None
    marked = np.zeros(high + 1, dtype=bool)
    marked[values] = True
    return marked


def distinct_inverse(values: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """`np.unique(values, return_inverse=True)` for a 1-D integer array, by a stable sort (for
    the same reason as `distinct`)."""
    order = values.argsort(kind="stable")
    ordered = values[order]
    first = np.empty(values.size, dtype=bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    inverse = np.empty(values.size, dtype=np.int64)
    inverse[order] = first.cumsum() - 1
    return ordered[first], inverse


def take_rows(array: NDArray[_Item], rows: NDArray[np.integer]) -> NDArray[_Item]:
    """`array[rows]` (rows of a multi-column array), several times faster than fancy indexing."""
    return np.take(array, rows, axis=0)


def put_rows(array: NDArray[_Item], rows: NDArray[np.integer], values: NDArray[_Item]) -> None:
    """`array[rows] = values` for a C-contiguous array, each row moved as one opaque item:
    numpy's fancy assignment of multi-column rows is several times slower (for many rows)."""
    if len(rows) < SMALL:
        array[rows] = values
        return
    target, item = _as_items(array)
    source = np.ascontiguousarray(values, dtype=array.dtype).reshape(len(rows), -1)
    target[rows] = source.view(item).reshape(-1)


def fill_rows(array: NDArray[_Item], rows: NDArray[np.integer], value: int) -> None:
    """`array[rows] = value` for a C-contiguous array, each row written as one opaque item:
    numpy's fancy assignment of multi-column rows is several times slower (for many rows)."""
    if len(rows) < SMALL:
        array[rows] = value
        return
    target, item = _as_items(array)
    target[rows] = np.full(array.shape[1:], value, dtype=array.dtype).reshape(-1).view(item)[0]


def _as_items(array: NDArray[Any]) -> tuple[NDArray[np.void], np.dtype[np.void]]:
    """A C-contiguous array seen as one opaque item per row, and that item's type."""
    item = np.dtype((np.void, array.itemsize * (array.size // max(array.shape[0], 1))))
    return array.reshape(array.shape[0], -1).view(item).reshape(-1), item


def put_back(saved: list[SavedRows]) -> None:
    """Put back rows copied before a change (`SavedRows`), in order."""
    for array, rows, values in saved:
        put_rows(array, rows, values)


def distinct_counts(values: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Distinct values and their counts; one-value arrays skip the sort."""
    if values.size == 1:
        return values, np.ones(1, dtype=np.int64)
    if values.size <= SMALL:
        # A dict counts a few values faster than numpy's sort-based unique.
        tally: dict[int, int] = {}
        for value in values.tolist():
            tally[value] = tally.get(value, 0) + 1
        keys = sorted(tally)
        return (
            np.array(keys, dtype=np.int64),
            np.array([tally[k] for k in keys], dtype=np.int64),
        )
    if not (values[1:] >= values[:-1]).all():
        marked = marked_range(values)
        if marked is not None:
            counts = np.bincount(values, minlength=marked.size)
            found = np.flatnonzero(marked)
            return found.astype(values.dtype, copy=False), counts[found].astype(np.int64)
        values = np.sort(values)  # numpy's hash-based unique is far slower than a sort
    # Sorted (pods are usually listed node by node): distinct values are the runs.
    first = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
    return values[first], np.diff(np.append(first, values.size))
