"""Entries kept in key order in chunks, so that adding or removing one costs O(log n)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from typing import Generic, TypeVar

__all__ = ["EntryKey", "SortedEntries", "item_key"]

EntryKey = tuple[int, float, str]
"""(-priority, submit time, job id): a job's place among its account's pending jobs."""

Entry = TypeVar("Entry")


class SortedEntries(Generic[Entry]):
    """One account's entries in queue order, chunked so that add and remove cost O(log n).

    A single sorted list would shift every later element on insert; chunks bound that to one
    chunk, and bisecting the chunks' last keys finds the chunk.
    """

    _CHUNK = 256

    def __init__(self) -> None:
        self._chunks: list[list[tuple[EntryKey, Entry]]] = []
        self._last_keys: list[EntryKey] = []
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, key: EntryKey, entry: Entry) -> None:
        self._size += 1
        if not self._chunks:
            self._chunks.append([(key, entry)])
            self._last_keys.append(key)
            return
        chunk_index = min(bisect_left(self._last_keys, key), len(self._chunks) - 1)
        chunk = self._chunks[chunk_index]
        chunk.insert(bisect_left(chunk, key, key=item_key), (key, entry))
        self._last_keys[chunk_index] = chunk[-1][0]
        if len(chunk) > 2 * self._CHUNK:
            self._chunks[chunk_index : chunk_index + 1] = [
                chunk[: self._CHUNK],
                chunk[self._CHUNK :],
            ]
            self._last_keys[chunk_index : chunk_index + 1] = [
                chunk[self._CHUNK - 1][0],
                chunk[-1][0],
            ]

    def remove(self, key: EntryKey) -> None:
        chunk_index = bisect_left(self._last_keys, key)
        chunk = self._chunks[chunk_index]
        position = bisect_left(chunk, key, key=item_key)
        assert chunk[position][0] == key, "removing an entry that was never added"
        del chunk[position]
        self._size -= 1
        if chunk:
            self._last_keys[chunk_index] = chunk[-1][0]
        else:
            del self._chunks[chunk_index]
            del self._last_keys[chunk_index]

    def count_before(self, key: EntryKey) -> int:
        """How many entries sort before `key`."""
        chunk_index = bisect_left(self._last_keys, key)
        before = sum(len(chunk) for chunk in self._chunks[:chunk_index])
        if chunk_index < len(self._chunks):
            before += bisect_left(self._chunks[chunk_index], key, key=item_key)
        return before

    def items(self, after: EntryKey | None = None) -> Iterator[tuple[EntryKey, Entry]]:
        """The entries in order (those whose key follows `after`, if given), a chunk copied at
        a time as the caller reaches it: a caller that stops early reads only the chunks it
        reached, and the entries may change while it walks them (it sees those after its
        place as they are when it gets there)."""
        chunks, last_keys = self._chunks, self._last_keys
        if not chunks:
            return
        if after is None:
            part = chunks[0].copy()
        else:
            index = bisect_right(last_keys, after)
            if index >= len(chunks):
                return
            chunk = chunks[index]
            part = chunk[bisect_right(chunk, after, key=item_key) :]
        while True:
            yield from part
            last = part[-1][0]
            # The chunk now holding the first key after the last one read, if any.
            index = bisect_right(last_keys, last)
            if index >= len(chunks):
                return
            chunk = chunks[index]
            part = chunk[bisect_right(chunk, last, key=item_key) :]


def item_key(item: tuple[EntryKey, Entry]) -> EntryKey:
    return item[0]
