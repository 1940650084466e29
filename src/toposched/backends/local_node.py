"""The one node the local backend serves: this machine, with a given number of pretend GPUs."""

from __future__ import annotations

import os
from typing import Any

from toposched.cluster.errors import InputError
from toposched.cluster.loaders import topology_from_dict
from toposched.cluster.topology import MAX_GPUS_PER_NODE, Topology

__all__ = ["LOCAL_GPU_MODEL", "LOCAL_NODE", "local_cluster", "local_cluster_description"]

LOCAL_NODE = "local-0"
LOCAL_GPU_MODEL = "local"
"""The model name of pretend GPUs: indices handed to pods in CUDA_VISIBLE_DEVICES."""


def _memory_mib() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    except (ValueError, OSError, AttributeError):
        return 0


def local_cluster_description(
    gpus: int = 8, name: str = LOCAL_NODE, gpu_model: str = LOCAL_GPU_MODEL
) -> dict[str, Any]:
    """A cluster document (as `toposched.cluster.loaders.topology_from_dict` reads it) of one
    node: this machine's CPU cores and memory, and `gpus` GPUs of `gpu_model`."""
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_GPUS_PER_NODE:
        raise InputError("gpus", gpus, f"must be a whole number from 1 to {MAX_GPUS_PER_NODE}")
    node = {
        "name": name,
        "gpus": gpus,
        "gpu_model": gpu_model,
        "cpu": os.cpu_count() or 1,
        "memory": _memory_mib(),
    }
    return {"levels": [], "nodes": [node]}


def local_cluster(
    gpus: int = 8, name: str = LOCAL_NODE, gpu_model: str = LOCAL_GPU_MODEL
) -> Topology:
    """The one-node cluster of `local_cluster_description`, ready for the scheduler."""
    return topology_from_dict(
        local_cluster_description(gpus, name, gpu_model), source="local cluster"
    )
