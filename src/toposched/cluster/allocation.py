"""Allocation: what one gang holds, node by node and GPU by GPU."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

MILLI_PER_GPU = 1000


@dataclass(frozen=True)
class Allocation:
    """What one gang holds: every pod's node and GPUs, with uniform per-pod resources.

    `gpus[p]` lists the GPU indices (on node `nodes[p]`) that pod p uses; each listed GPU gives
    `gpu_milli` (1000 for a whole GPU, less for a shared fraction). CPU-only pods have no GPU
    columns (`gpus.shape == (pods, 0)`).

    A job whose pod sets ask different resources per pod holds one allocation of several
    shapes (`Allocation.of_sets`): `sets` lists each set's pods as an allocation of one shape,
    in rank order; `nodes` lists every pod's node, set after set, and the per-pod fields of
    the whole hold nothing (no GPU columns, no CPU or memory): each set's say what its pods
    hold (`parts`).
    """

    nodes: NDArray[np.int64]
    gpus: NDArray[np.int64]
    gpu_milli: int = MILLI_PER_GPU
    cpu_milli: int = 0
    memory_mib: int = 0
    sets: tuple[Allocation, ...] = ()
    """Each set's pods, when the allocation holds pods of several shapes; else empty."""

    @property
    def pods(self) -> int:
        return int(self.nodes.shape[0])

    @property
    def parts(self) -> tuple[Allocation, ...]:
        """The allocations of one shape this one is made of: its sets, or itself."""
        return self.sets or (self,)

    @property
    def gpu_milli_total(self) -> int:
        if self.sets:
            return sum(part.gpu_milli_total for part in self.sets)
        return int(self.gpus.size) * self.gpu_milli

    def pod_gpus(self) -> NDArray[np.float64]:
        """GPUs each pod holds, in rank order (a shared pod its fraction)."""
        if self.sets:
            return np.concatenate([part.pod_gpus() for part in self.sets])
        per_pod = self.gpus.shape[1] * self.gpu_milli / MILLI_PER_GPU
        return np.full(self.pods, per_pod, dtype=np.float64)

    @property
    def largest(self) -> Allocation:
        """The part holding the most milli-GPU (the first of equals): what a record keeping one
        pod shape per holder keeps of an allocation of several; all of it, as one shape, when
        its sets share one (an elastic job's, kept apart for their counts)."""
        if not self.sets:
            return self
        first = _shape(self.sets[0])
        if all(_shape(part) == first for part in self.sets):
            return Allocation.of_sets(self.sets)
        return max(self.sets, key=lambda part: part.gpu_milli_total)

    def with_nodes(self, nodes: NDArray[np.int64]) -> Allocation:
        """This allocation with pod p on `nodes[p]` (the same GPU indices and resources)."""
        nodes = np.asarray(nodes, dtype=np.int64).reshape(-1)
        if not self.sets:
            return Allocation(nodes, self.gpus, self.gpu_milli, self.cpu_milli, self.memory_mib)
        ends = np.cumsum([part.pods for part in self.sets]).tolist()
        starts = [0, *ends[:-1]]
        moved = tuple(
            part.with_nodes(nodes[start:end])
            for part, start, end in zip(self.sets, starts, ends, strict=True)
        )
        return Allocation.of_sets(moved, keep_sets=True)

    def renumbered(self, moved: NDArray[np.int64]) -> Allocation:
        """This allocation with each node `n` as node `moved[n]` (a cluster numbered anew)."""
        return self.with_nodes(moved[self.nodes])

    @staticmethod
    def of_sets(parts: Sequence[Allocation], keep_sets: bool = False) -> Allocation:
        """The pods of `parts` (allocations of one shape each, in rank order) as one
        allocation: of one shape when they all share it, else of several (`sets`); with
        `keep_sets`, of several whatever their shapes (an elastic job's sets, whose pod counts
        the allocation keeps)."""
        if not parts:
            raise ValueError("an allocation of sets needs at least one set")
        if any(part.sets for part in parts):
            raise ValueError("the sets of an allocation each hold pods of one shape")
        first = parts[0]
        nodes = np.concatenate([part.nodes for part in parts])
        if not keep_sets and all(_shape(part) == _shape(first) for part in parts):
            if len(parts) == 1:
                return first
            gpus = np.concatenate([part.gpus for part in parts])
            return Allocation(nodes, gpus, first.gpu_milli, first.cpu_milli, first.memory_mib)
        no_gpus = np.zeros((nodes.size, 0), dtype=np.int64)
        return Allocation(nodes, no_gpus, MILLI_PER_GPU, 0, 0, tuple(parts))

    @staticmethod
    def of(
        nodes: list[int] | NDArray[np.int64],
        gpus: list[list[int]] | NDArray[np.int64],
        gpu_milli: int = MILLI_PER_GPU,
        cpu_milli: int = 0,
        memory_mib: int = 0,
    ) -> Allocation:
        nodes_array = np.asarray(nodes, dtype=np.int64).reshape(-1)
        gpus_array = np.asarray(gpus, dtype=np.int64)
        if gpus_array.size == 0:
            gpus_array = np.zeros((len(nodes_array), 0), dtype=np.int64)
        gpus_array = gpus_array.reshape(len(nodes_array), -1)
        return Allocation(nodes_array, gpus_array, gpu_milli, cpu_milli, memory_mib)


def _shape(allocation: Allocation) -> tuple[int, int, int, int]:
    """What each pod of a one-shape allocation holds: GPUs, milli-GPU each, CPU, memory."""
    return (
        int(allocation.gpus.shape[1]),
        allocation.gpu_milli,
        allocation.cpu_milli,
        allocation.memory_mib,
    )
