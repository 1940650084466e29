"""A Ray cluster read into toposched's cluster model, and its nodes followed as they change.

Each Ray node becomes a node of the model (a dead one, which Ray remembers, as `down`): its
GPU and CPU counts and memory from the node's resources, its place in the topology from its
labels (one per configured level, e.g. `ray start --labels="zone=z1,block=b1,rack=r3"`), and its
name from the `name` label (the Ray node id when it has none). A node without a label for some
level, or whose name is taken or malformed, is kept out and reported by name with the reason.

Ray gives a node that restarts a new node id; a node named by label keeps its place in the
model and is mapped to its new id when it comes back.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toposched.backends.protocol import NodeChange
from toposched.cluster.errors import InputError
from toposched.cluster.loaders import topology_from_nodes
from toposched.cluster.state import Health
from toposched.cluster.topology import MAX_GPUS_PER_NODE, Topology

__all__ = [
    "DEFAULT_GPU_MODEL",
    "DEFAULT_NAMESPACE",
    "NAME_LABEL",
    "NODE_ID_LABEL",
    "RayCluster",
    "RayDiscovery",
    "RayNode",
    "SkippedNode",
    "connect",
    "discover_nodes",
]

log = logging.getLogger(__name__)

NAME_LABEL = "name"
"""The node label that names a node in toposched (else its Ray node id names it)."""
NODE_ID_LABEL = "ray.io/node-id"
ACCELERATOR_LABEL = "ray.io/accelerator-type"
DEFAULT_GPU_MODEL = "gpu"
"""The GPU model of nodes without a `ray.io/accelerator-type` label."""
DEFAULT_NAMESPACE = "toposched"
"""The Ray namespace of the placement groups and actors toposched creates."""
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")
_MIB = 1 << 20

RayNodeRecord = Mapping[str, Any]
"""One entry of `ray.nodes()`: NodeID, Alive, NodeManagerAddress, Resources, Labels, ..."""


@dataclass(frozen=True)
class RayNode:
    """A Ray node as toposched knows it."""

    name: str
    node_id: str
    address: str
    """The node's IP address, where its pods listen."""
    alive: bool


@dataclass(frozen=True)
class SkippedNode:
    """A Ray node kept out of the cluster model, and why."""

    name: str
    reason: str


@dataclass(frozen=True)
class RayDiscovery:
    """The cluster model of the Ray nodes and the nodes left out of it."""

    topology: Topology
    nodes: tuple[RayNode, ...]
    skipped: tuple[SkippedNode, ...]


def _node_name(record: RayNodeRecord, name_label: str) -> str:
    labels = record.get("Labels") or {}
    return str(labels.get(name_label) or record.get("NodeID", ""))


def _node_document(
    record: RayNodeRecord, name: str, levels: Sequence[str], gpu_model: str
) -> dict[str, Any] | str:
    """The node's record for `topology_from_nodes`, or why it is kept out."""
    labels = record.get("Labels") or {}
    missing = [level for level in levels if not labels.get(level)]
    if missing:
        return f"has no {', '.join(repr(m) for m in missing)} label (levels: {', '.join(levels)})"
    if not _PLAIN_NAME.match(name):
        return "its name is not a plain name (letters, digits, '.', '_', ':', '/', '-')"
    resources = record.get("Resources") or {}
    gpus = resources.get("GPU", 0)
    if gpus != int(gpus) or gpus > MAX_GPUS_PER_NODE:
        return f"has {gpus} GPUs; a node has a whole number of GPUs up to {MAX_GPUS_PER_NODE}"
    return {
        "name": name,
        "gpus": int(gpus),
        "gpu_model": str(labels.get(ACCELERATOR_LABEL) or gpu_model) if gpus else "",
        "cpu": f"{int(resources.get('CPU', 0) * 1000)}m",
        "memory": int(resources.get("memory", 0)) // _MIB,
        "labels": {level: str(labels[level]) for level in levels},
    }


def discover_nodes(
    records: Sequence[RayNodeRecord],
    levels: Sequence[str],
    name_label: str = NAME_LABEL,
    gpu_model: str = DEFAULT_GPU_MODEL,
) -> RayDiscovery:
    """The cluster model of the nodes among `records` (as `ray.nodes()` returns them): the live
    ones, and the dead ones named by label that no live node replaced (Ray remembers dead
    nodes; they are in the model as not alive, so a restart while a node is down keeps the
    same model).

    Nodes are taken in name order, so the same nodes always give the same model. Raises
    InputError when no live node is left, naming why each was kept out.
    """
    chosen: dict[str, RayNodeRecord] = {}
    skipped: list[SkippedNode] = []
    for record in sorted(records, key=lambda r: not r.get("Alive")):
        name = _node_name(record, name_label)
        alive = bool(record.get("Alive"))
        if name in chosen:
            if alive:
                skipped.append(SkippedNode(name, "another live node has the same name"))
        elif alive or (record.get("Labels") or {}).get(name_label):
            chosen[name] = record
    documents: list[dict[str, Any]] = []
    nodes: list[RayNode] = []
    for name in sorted(chosen):
        record = chosen[name]
        document = _node_document(record, name, levels, gpu_model)
        if isinstance(document, str):
            if record.get("Alive"):
                skipped.append(SkippedNode(name, document))
            continue
        documents.append(document)
        address = str(record.get("NodeManagerAddress", ""))
        nodes.append(RayNode(name, str(record["NodeID"]), address, bool(record.get("Alive"))))
    if not any(node.alive for node in nodes):
        reasons = "; ".join(f"{s.name}: {s.reason}" for s in skipped) or "no live nodes"
        raise InputError("ray nodes", len(records), f"no node can be used ({reasons})")
    topology = topology_from_nodes(levels, documents, source="ray nodes")
    return RayDiscovery(topology, tuple(nodes), tuple(skipped))


def connect(address: str | None, namespace: str = DEFAULT_NAMESPACE) -> None:
    """Join the Ray cluster at `address` ("HOST:PORT", "auto", or None for a local one) as a
    driver in `namespace`, unless this process already has; a clear error when it cannot."""
    import ray

    if ray.is_initialized():
        return
    try:
        ray.init(
            address=address,
            namespace=namespace,
            log_to_driver=False,
            logging_level=logging.WARNING,
            include_dashboard=False,
        )
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise InputError("ray address", address, f"cannot connect to Ray: {error}") from None


class RayCluster:
    """The Ray cluster toposched drives: its model, and its nodes' ids, addresses and health.

    `read_nodes` returns `ray.nodes()`-style records (the driver must be connected, see
    `connect`); `min_interval_s` spaces the reads `changes` makes.
    """

    def __init__(
        self,
        levels: Sequence[str],
        name_label: str = NAME_LABEL,
        gpu_model: str = DEFAULT_GPU_MODEL,
        min_interval_s: float = 1.0,
        read_nodes: Callable[[], Sequence[RayNodeRecord]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.levels = tuple(levels)
        self.name_label = name_label
        self.gpu_model = gpu_model
        self.min_interval_s = min_interval_s
        self._read_nodes = read_nodes or _ray_nodes
        self._clock = clock
        self._nodes: dict[str, RayNode] = {}
        self._pending: list[NodeChange] = []
        """Changes found by `discover`, handed over by the next `changes`."""
        self._last_read = -float("inf")

    def discover(self) -> RayDiscovery:
        """Read the live nodes into a cluster model; later changes are relative to it."""
        found = discover_nodes(self._read_nodes(), self.levels, self.name_label, self.gpu_model)
        self._nodes = {node.name: node for node in found.nodes}
        self._last_read = self._clock()
        self._pending = [
            NodeChange(node.name, Health.DOWN, "dead in Ray when toposched started")
            for node in found.nodes
            if not node.alive
        ]
        for skipped in found.skipped:
            log.warning("Ray node %s is left out: %s", skipped.name, skipped.reason)
        return found

    def node(self, name: str) -> RayNode | None:
        """The Ray node of the model's node `name` (as last read), if it has one."""
        return self._nodes.get(name)

    def changes(self, force: bool = False) -> list[NodeChange]:
        """Nodes of the model that died or came back since the last read (at most one read
        every `min_interval_s` unless `force`)."""
        changes, self._pending = self._pending, []
        now = self._clock()
        if not force and now - self._last_read < self.min_interval_s:
            return changes
        self._last_read = now
        records = self._read_nodes()
        latest: dict[str, RayNodeRecord] = {}
        for each in records:
            name = _node_name(each, self.name_label)
            if name in self._nodes and (name not in latest or each.get("Alive")):
                latest[name] = each
        for name, known in self._nodes.items():
            record = latest.get(name)
            alive = bool(record is not None and record.get("Alive"))
            if alive == known.alive and (record is None or record["NodeID"] == known.node_id):
                continue
            if record is None:
                self._nodes[name] = RayNode(name, known.node_id, known.address, False)
                changes.append(NodeChange(name, Health.DOWN, "no longer in the Ray cluster"))
                continue
            node = RayNode(
                name, str(record["NodeID"]), str(record.get("NodeManagerAddress", "")), alive
            )
            self._nodes[name] = node
            if alive and not known.alive:
                changes.append(NodeChange(name, Health.HEALTHY, "back in the Ray cluster"))
            elif not alive:
                why = record.get("DeathReasonMessage") or "the Ray node died"
                changes.append(NodeChange(name, Health.DOWN, str(why)))
        return changes


def _ray_nodes() -> Sequence[RayNodeRecord]:
    import ray

    nodes: Sequence[RayNodeRecord] = ray.nodes()
    return nodes
