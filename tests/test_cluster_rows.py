"""Row helpers of the cluster's arrays: the same result as numpy's fancy indexing."""

from __future__ import annotations

import numpy as np
import pytest

from toposched.cluster.rows import SMALL, fill_rows


@pytest.mark.parametrize("count", [0, 3, SMALL - 1, SMALL, 5 * SMALL])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8])
def test_fill_rows_writes_every_column_of_the_rows_and_nothing_else(
    count: int, dtype: type[np.integer]
) -> None:
    rng = np.random.default_rng(count)
    array = rng.integers(-5, 5, size=(1000, 4)).astype(dtype)
    expected = array.copy()
    rows = np.sort(rng.choice(1000, count, replace=False)).astype(np.int64)
    expected[rows] = -1
    fill_rows(array, rows, -1)
    assert np.array_equal(array, expected)
    if count:
        assert (array[rows] == -1).all()


def test_fill_rows_of_a_one_column_array() -> None:
    array = np.zeros((200, 1), dtype=np.int32)
    rows = np.arange(0, 200, 2, dtype=np.int64)
    fill_rows(array, rows, 7)
    assert array[::2].tolist() == [[7]] * 100
    assert not array[1::2].any()
