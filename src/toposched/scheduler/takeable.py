"""The running jobs a preemption may weigh at one time, read once and shared by the cycle's
victim searches while no job of them stops or joins them."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from toposched.scheduler.preemptible import PreemptibleIndex, domain_nodes

IntArray = NDArray[np.int64]


def pods_of_slots(index: PreemptibleIndex, slots: IntArray) -> tuple[IntArray, IntArray]:
    """For `slots` of `index`, in that order: where each one's pods start in the second array
    (one more entry than slots) and their nodes, job after job."""
    allocations = index.allocations
    nodes = [allocations[slot].nodes for slot in slots.tolist()]
    starts: IntArray = np.concatenate(([0], index.pods[slots].cumsum())).astype(np.int64)
    return starts, np.concatenate(nodes) if nodes else np.zeros(0, dtype=np.int64)


@dataclass
class Takeable:
    """`slots` of the preemptible index, in the order victim searches read them, and their
    pods' nodes, gathered when first asked."""

    slots: IntArray
    index: PreemptibleIndex
    _pod_starts: IntArray | None = field(default=None, init=False)
    _pod_nodes: IntArray | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.slots.setflags(write=False)  # shared by every search until forgotten

    def pods(self, rows: IntArray) -> tuple[IntArray, IntArray]:
        """For the slots at `rows`, in that order: where each one's pods start in the second
        array (one more entry than rows) and their nodes, job after job."""
        if self._pod_starts is None or self._pod_nodes is None:
            self._pod_starts, self._pod_nodes = pods_of_slots(self.index, self.slots)
        starts = self._pod_starts
        counts = starts[rows + 1] - starts[rows]
        pod_starts: IntArray = np.concatenate(([0], counts.cumsum())).astype(np.int64)
        pod_nodes: IntArray = self._pod_nodes[domain_nodes(starts, rows)]
        return pod_starts, pod_nodes
