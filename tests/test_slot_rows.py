"""Rows per slot in pooled columns read back as put, through drops, compaction and growth
(a pool starts at 64 entries: rows of up to 30 fill it within a few puts)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.scheduler.slot_rows import SlotRows

SLOTS = 16


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, SLOTS - 1), st.integers(0, 30))))
def test_rows_read_back_as_put(moves: list[tuple[bool, int, int]]) -> None:
    rows = SlotRows(2)
    rows.grow_slots(SLOTS)
    model: dict[int, list[int]] = {}
    for number, (put, slot, size) in enumerate(moves):
        if put and slot not in model:
            values = list(range(number * 100, number * 100 + size))
            rows.put(
                np.array([slot]),
                np.array([size]),
                [np.array(values, dtype=np.int64), -np.array(values, dtype=np.int64)],
            )
            model[slot] = values
        elif not put and slot in model:
            rows.drop(slot)
            del model[slot]
        kept = np.array(sorted(model), dtype=np.int64)
        assert rows.missing(np.arange(SLOTS)).tolist() == sorted(set(range(SLOTS)) - set(model))
        expected = [value for slot in sorted(model) for value in model[slot]]
        assert rows.gather(kept).tolist() == expected
        assert rows.gather(kept, 1).tolist() == [-value for value in expected]
