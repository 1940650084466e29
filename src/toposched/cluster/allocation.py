"""Allocation: what one gang holds, node by node and GPU by GPU."""

from __future__ import annotations

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
    """

    nodes: NDArray[np.int64]
    gpus: NDArray[np.int64]
    gpu_milli: int = MILLI_PER_GPU
    cpu_milli: int = 0
    memory_mib: int = 0

    @property
    def pods(self) -> int:
        return int(self.nodes.shape[0])

    @property
    def gpu_milli_total(self) -> int:
        return int(self.gpus.size) * self.gpu_milli

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
