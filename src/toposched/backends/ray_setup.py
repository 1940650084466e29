"""Everything a service needs to schedule on a Ray cluster, from one call."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from toposched.backends.ray_backend import DEFAULT_GANG_GRACE, RayBackend
from toposched.backends.ray_discovery import (
    DEFAULT_NAMESPACE,
    NAME_LABEL,
    RayCluster,
    SkippedNode,
    connect,
)
from toposched.cluster.topology import Topology

__all__ = ["RaySetup", "connect_backend"]


@dataclass(frozen=True)
class RaySetup:
    """What a service needs to run on a Ray cluster: its cluster model, the nodes left out of
    it, and the backend (which also follows node health, `backend.node_changes()`, and nodes
    that join, `backend.grown_model()`)."""

    topology: Topology
    skipped: tuple[SkippedNode, ...]
    backend: RayBackend


def connect_backend(
    address: str | None,
    levels: Sequence[str],
    name_label: str = NAME_LABEL,
    namespace: str = DEFAULT_NAMESPACE,
    gang_grace_s: float = DEFAULT_GANG_GRACE,
) -> RaySetup:
    """Join the Ray cluster at `address`, read its live nodes into a cluster model with
    `levels` (outermost first, each a node label), and adopt the gangs an earlier service left
    running. InputError when Ray cannot be reached or no node has every level's label."""
    connect(address, namespace)
    cluster = RayCluster(levels, name_label=name_label)
    found = cluster.discover()
    backend = RayBackend(cluster, gang_grace_s=gang_grace_s)
    return RaySetup(found.topology, found.skipped, backend)
