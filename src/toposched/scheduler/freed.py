"""Capacity freed between cycles: the nodes whose jobs stopped, while nothing else changed the
cluster state, so that a cycle can tell which remembered failures such releases could undo."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import ClusterState, distinct

IntArray = NDArray[np.int64]


class FreedCapacity:
    """The nodes running jobs released since the last cycle (`settle`), or None once anything
    else changed the cluster state (a node's health, a start outside a cycle, a spare given
    back): then only a full re-examination is safe.

    Each release is checked against the state's version before it: a change between two
    releases that did not come through `released` makes the record incomplete.
    """

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self._version = state.version
        self._nodes: list[IntArray] = []
        self._taken_back: list[IntArray] = []
        """The nodes of releases by anything but unallocated work no eviction had claimed."""
        self._complete = True
        # Each asked once per cycle by several readers: kept until the next release or settle.
        self._since: IntArray | None = None
        self._beyond: IntArray | None = None

    def before_release(self) -> None:
        """Called before a job's GPUs return: any change since the last record is unknown."""
        if self.state.version != self._version:
            self._complete = False

    def released(self, nodes: IntArray, free_to_take: bool = False) -> None:
        """A job's GPUs on `nodes` returned (after `before_release`); `free_to_take`: it was
        unallocated work no eviction had claimed, which every allocated job may take."""
        if self._complete:
            self._nodes.append(nodes)
            if not free_to_take:
                self._taken_back.append(nodes)
            self._version = self.state.version
            self._since = self._beyond = None

    @property
    def any(self) -> bool:
        """Whether nodes were released since the last `settle`."""
        return bool(self._nodes)

    def since_settled(self) -> IntArray | None:
        """The nodes released since the last `settle`, or None when other changes happened."""
        if not self._complete or self.state.version != self._version:
            return None
        if self._since is None:
            self._since = _union(self._nodes)
        return self._since

    def beyond_free_to_take(self) -> IntArray | None:
        """`since_settled` without the releases of unallocated work no eviction had claimed:
        a preemptor that may take such work counted its GPUs as room already."""
        if self.since_settled() is None:
            return None
        if self._beyond is None:
            self._beyond = _union(self._taken_back)
        return self._beyond

    def settle(self) -> None:
        """A cycle ended: the state as it is now is the new reference."""
        self._version = self.state.version
        self._nodes.clear()
        self._taken_back.clear()
        self._complete = True
        self._since = self._beyond = None


def _union(releases: list[IntArray]) -> IntArray:
    """The nodes of `releases`, sorted and distinct; read-only, for it is shared."""
    nodes = distinct(np.concatenate(releases)) if releases else np.zeros(0, dtype=np.int64)
    nodes.setflags(write=False)
    return nodes
