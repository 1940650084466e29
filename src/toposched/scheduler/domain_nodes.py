"""The nodes of domains of one level, from the level's `domain_starts`."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

IntArray = NDArray[np.int64]


def uniform_size(starts: IntArray) -> int:
    """The nodes every domain of a level has (given its `starts`), or 0 if sizes differ."""
    sizes = np.diff(starts)
    return int(sizes[0]) if sizes.size and bool((sizes == sizes[0]).all()) else 0


def domain_nodes(starts: IntArray, domains: IntArray, size: int = 0) -> IntArray:
    """Every node of `domains` (indices into one level's `starts`), domain after domain.
    `size`: the level's `uniform_size`, when known (fewer steps: racks are alike)."""
    if size:
        uniform: IntArray = (starts[domains][:, None] + np.arange(size)).reshape(-1)
        return uniform
    first = starts[domains]
    sizes = starts[domains + 1] - first
    offsets = (first - (sizes.cumsum() - sizes)).repeat(sizes)
    nodes: IntArray = np.arange(int(sizes.sum()), dtype=np.int64) + offsets
    return nodes
