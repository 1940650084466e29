"""The per-allocation figures of many one-shape allocations as columns, read once.

A bulk change (a reservation's releases, a victim search's what-if of every candidate gone)
reads each allocation's pods, GPUs per pod and requests several times; read attribute by
attribute per allocation, those reads cost more than the change itself when thousands of jobs
move at once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.allocation import MILLI_PER_GPU, Allocation


@dataclass(frozen=True, slots=True)
class Shapes:
    """One entry per allocation, in the order given; every allocation of one shape."""

    pods: NDArray[np.int64]
    widths: NDArray[np.int64]
    """GPUs each pod holds."""
    gpu_milli: NDArray[np.int64]
    """The share of each of those GPUs, in thousandths."""
    cpu_milli: NDArray[np.int64]
    memory_mib: NDArray[np.int64]

    @staticmethod
    def of(allocations: Sequence[Allocation]) -> Shapes:
        figures = chain.from_iterable(
            (a.nodes.shape[0], a.gpus.shape[1], a.gpu_milli, a.cpu_milli, a.memory_mib)
            for a in allocations
        )
        table = np.fromiter(figures, dtype=np.int64, count=5 * len(allocations))
        columns = np.ascontiguousarray(table.reshape(-1, 5).T)
        return Shapes(columns[0], columns[1], columns[2], columns[3], columns[4])

    def distinct_widths(self) -> set[int]:
        return set(np.unique(self.widths).tolist())

    def whole_gpus(self) -> bool:
        """Whether every pod holds whole GPUs (none shared); False for no allocations."""
        return bool(self.gpu_milli.size) and bool((self.gpu_milli == MILLI_PER_GPU).all())

    def whole_gpus_each(self) -> bool:
        """Whether every pod holds at least one GPU, each whole."""
        return self.whole_gpus() and bool((self.widths > 0).all())

    def whole_nodes(self, width: int) -> bool:
        """Whether every pod holds all `width` GPUs of its node."""
        return self.whole_gpus() and bool((self.widths == width).all())
