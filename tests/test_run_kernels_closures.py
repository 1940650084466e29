"""The compiled passes that close, reopen and mark many nodes (`cluster/run_kernels.py`)
against the same steps in numpy."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.cluster import run_kernels

_NODES = 400


@st.composite
def closures(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, int]:
    """Each node's closure bits (0-7), sorted distinct nodes, and one bit."""
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    closed = rng.choice(np.arange(8, dtype=np.uint8), size=_NODES, p=[0.5, *[0.5 / 7] * 7])
    nodes = np.flatnonzero(rng.random(_NODES) < draw(st.floats(0.0, 1.0)))
    return closed.astype(np.uint8), nodes.astype(np.int64), draw(st.sampled_from([2, 4]))


@settings(max_examples=80, deadline=None)
@given(case=closures())
def test_closing_and_reopening_set_bits_and_pick_nodes_as_numpy(
    case: tuple[np.ndarray, np.ndarray, int],
) -> None:
    closed, nodes, bit = case
    expected = closed.copy()
    newly, leaving = run_kernels.close_nodes(nodes, closed, bit)
    lacking = nodes[(expected[nodes] & bit) == 0]
    assert newly.tolist() == lacking.tolist()
    assert leaving.tolist() == lacking[expected[lacking] == 0].tolist()
    expected[nodes] |= bit
    assert np.array_equal(closed, expected)

    opening = run_kernels.reopen_nodes(nodes, closed, bit)
    assert opening.tolist() == nodes[expected[nodes] == bit].tolist()
    expected[nodes] &= ~np.uint8(bit)
    assert np.array_equal(closed, expected)


@settings(max_examples=80, deadline=None)
@given(
    case=closures(),
    repeats=st.lists(st.integers(0, _NODES - 1), max_size=20),
    marked_before=st.lists(st.integers(0, _NODES - 1), max_size=20),
    mark=st.integers(1, 50),
)
def test_marking_picks_open_unmarked_nodes_once_in_order(
    case: tuple[np.ndarray, np.ndarray, int],
    repeats: list[int],
    marked_before: list[int],
    mark: int,
) -> None:
    # Nodes listed out of order, some twice; some marked already, some marked once before.
    closed, nodes, _ = case
    listed = np.concatenate([nodes[::-1], np.array(repeats, dtype=np.int64)])
    marked = np.zeros(_NODES, dtype=bool)
    marked[marked_before] = True
    marked_at = np.zeros(_NODES, dtype=np.int64)
    marked_at[::7] = 3
    old_marked, old_at = marked.copy(), marked_at.copy()
    picked, again = run_kernels.mark_open_nodes(listed, marked, marked_at, closed, mark)
    expected: list[int] = []
    for node in listed.tolist():
        if not old_marked[node] and closed[node] == 0 and node not in expected:
            expected.append(node)
    assert picked.tolist() == expected
    assert again == bool((old_at[expected] != 0).any())
    old_marked[expected] = True
    old_at[expected] = mark
    assert np.array_equal(marked, old_marked)
    assert np.array_equal(marked_at, old_at)

    run_kernels.unmark(picked, marked, marked_at, False)
    assert not marked[picked].any() and (marked_at[picked] == mark).all()
    run_kernels.unmark(picked, marked, marked_at, True)
    assert not marked_at[picked].any()


@settings(max_examples=80, deadline=None)
@given(values=st.lists(st.integers(-5, 5), max_size=12))
def test_increasing_answers_as_numpy(values: list[int]) -> None:
    array = np.array(values, dtype=np.int64)
    assert run_kernels.increasing(array) == bool((array[1:] > array[:-1]).all())
