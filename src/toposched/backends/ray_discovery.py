"""A Ray cluster read into toposched's cluster model, and its nodes followed as they change.

Each Ray node becomes a node of the model (a dead one, which Ray remembers, as `down`): its
GPU and CPU counts and memory from the node's resources, its place in the topology from its
labels (one per configured level, e.g. `ray start --labels="zone=z1,block=b1,rack=r3"`), and its
name from the `name` label (the Ray node id when it has none). A node without a label for some
level, or whose name is taken or malformed, is kept out and reported by name with the reason.

Ray gives a node that restarts a new node id; a node named by label keeps its place in the
model and is mapped to its new id when it comes back. A labelled node that joins later grows
the model: `RayCluster.grown` gives the model with it, the same model a restart would read.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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
    documents: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, repr=False)
    """Each node's record as `topology_from_nodes` reads it, by name."""


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


def _build(levels: Sequence[str], documents: Mapping[str, Mapping[str, Any]]) -> Topology:
    """The cluster model of the node documents, taken in name order."""
    ordered = [documents[name] for name in sorted(documents)]
    return topology_from_nodes(levels, ordered, source="ray nodes")


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
    documents: dict[str, dict[str, Any]] = {}
    nodes: list[RayNode] = []
    for name in sorted(chosen):
        record = chosen[name]
        document = _node_document(record, name, levels, gpu_model)
        if isinstance(document, str):
            if record.get("Alive"):
                skipped.append(SkippedNode(name, document))
            continue
        documents[name] = document
        nodes.append(_ray_node(record, name))
    if not any(node.alive for node in nodes):
        reasons = "; ".join(f"{s.name}: {s.reason}" for s in skipped) or "no live nodes"
        raise InputError("ray nodes", len(records), f"no node can be used ({reasons})")
    return RayDiscovery(_build(levels, documents), tuple(nodes), tuple(skipped), documents)


def _ray_node(record: RayNodeRecord, name: str) -> RayNode:
    address = str(record.get("NodeManagerAddress", ""))
    return RayNode(name, str(record["NodeID"]), address, bool(record.get("Alive")))


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
    `connect`); `min_interval_s` spaces the reads `changes` makes. Each read also looks for
    live nodes that joined: a fully labelled one grows the model (see `grown`), another is
    reported once by name and kept out.
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
        self._documents: dict[str, Mapping[str, Any]] = {}
        """The model's nodes as `topology_from_nodes` reads them, by name."""
        self._pending: list[NodeChange] = []
        """Changes found by `discover`, handed over by the next `changes`."""
        self._grown: Topology | None = None
        """The model with the nodes that joined, until `grown` hands it over."""
        self._left_out: set[str] = set()
        """Node ids of live nodes kept out and reported, so each is reported once."""
        self._last_read = -float("inf")

    def discover(self) -> RayDiscovery:
        """Read the live nodes into a cluster model; later changes are relative to it."""
        records = self._read_nodes()
        found = discover_nodes(records, self.levels, self.name_label, self.gpu_model)
        self._nodes = {node.name: node for node in found.nodes}
        self._documents = dict(found.documents)
        self._grown = None
        self._last_read = self._clock()
        self._pending = [
            NodeChange(node.name, Health.DOWN, "dead in Ray when toposched started")
            for node in found.nodes
            if not node.alive
        ]
        for skipped in found.skipped:
            log.warning("Ray node %s is left out: %s", skipped.name, skipped.reason)
        skipped_names = {skipped.name for skipped in found.skipped}
        self._left_out = {
            str(record.get("NodeID"))
            for record in records
            if record.get("Alive") and _node_name(record, self.name_label) in skipped_names
        }
        return found

    def node(self, name: str) -> RayNode | None:
        """The Ray node of the model's node `name` (as last read), if it has one."""
        return self._nodes.get(name)

    def grown(self) -> Topology | None:
        """The cluster model with the nodes that joined since the last call (every node of
        the model before kept, by name), or None when none joined."""
        grown, self._grown = self._grown, None
        return grown

    def changes(self, force: bool = False) -> list[NodeChange]:
        """Nodes of the model that died or came back since the last read (at most one read
        every `min_interval_s` unless `force`). Nodes that joined are taken into the model
        that `grown` hands over."""
        changes, self._pending = self._pending, []
        now = self._clock()
        if not force and now - self._last_read < self.min_interval_s:
            return changes
        self._last_read = now
        records = self._read_nodes()
        latest: dict[str, RayNodeRecord] = {}
        joining: dict[str, list[RayNodeRecord]] = {}
        for each in records:
            name = _node_name(each, self.name_label)
            if name in self._nodes:
                if name not in latest or each.get("Alive"):
                    latest[name] = each
            elif each.get("Alive") and str(each.get("NodeID")) not in self._left_out:
                joining.setdefault(name, []).append(each)
        for name, known in self._nodes.items():
            change = self._follow(name, known, latest.get(name))
            if change is not None:
                changes.append(change)
        if joining:
            self._join(joining)
        return changes

    def _follow(self, name: str, known: RayNode, record: RayNodeRecord | None) -> NodeChange | None:
        """The model's node `name` as Ray now has it (`record`, None if gone): a change of its
        health, if any; its node id and address kept up to date."""
        alive = bool(record is not None and record.get("Alive"))
        if alive == known.alive and (record is None or record["NodeID"] == known.node_id):
            return None
        if record is None:
            self._nodes[name] = RayNode(name, known.node_id, known.address, False)
            return NodeChange(name, Health.DOWN, "no longer in the Ray cluster")
        self._nodes[name] = _ray_node(record, name)
        if alive and not known.alive:
            return NodeChange(name, Health.HEALTHY, "back in the Ray cluster")
        if not alive:
            why = record.get("DeathReasonMessage") or "the Ray node died"
            return NodeChange(name, Health.DOWN, str(why))
        return None

    def _join(self, joining: Mapping[str, list[RayNodeRecord]]) -> None:
        """Take live nodes new to the model into it; report the others once. The model is
        built once for all of them, and node by node only when that fails (a node whose
        labels contradict the model's, e.g. a rack already in another zone)."""
        documents: dict[str, Mapping[str, Any]] = {}
        for name in sorted(joining):
            records = joining[name]
            document = _node_document(records[0], name, self.levels, self.gpu_model)
            if len(records) > 1:
                document = "another live node has the same name"
            if isinstance(document, str):
                self._leave_out(records, name, document)
            else:
                documents[name] = document
        if not documents:
            return
        try:
            topology: Topology | None = _build(self.levels, {**self._documents, **documents})
        except InputError:
            topology, documents = self._join_one_by_one(joining, documents)
        if topology is None:
            return
        self._documents.update(documents)
        self._grown = topology
        for name in documents:
            self._nodes[name] = _ray_node(joining[name][0], name)
            log.info("Ray node %s joined the cluster model", name)

    def _join_one_by_one(
        self,
        joining: Mapping[str, list[RayNodeRecord]],
        documents: Mapping[str, Mapping[str, Any]],
    ) -> tuple[Topology | None, dict[str, Mapping[str, Any]]]:
        """The model grown by each node in name order that the ones before it leave room
        for, and those nodes; the others are reported and kept out."""
        topology: Topology | None = None
        accepted: dict[str, Mapping[str, Any]] = {}
        for name, document in documents.items():
            try:
                topology = _build(self.levels, {**self._documents, **accepted, name: document})
            except InputError as error:
                self._leave_out(joining[name], name, f"cannot join the model: {error.rule}")
                continue
            accepted[name] = document
        return topology, accepted

    def _leave_out(self, records: Sequence[RayNodeRecord], name: str, reason: str) -> None:
        log.warning("Ray node %s is left out: %s", name, reason)
        self._left_out.update(str(record.get("NodeID")) for record in records)


def _ray_nodes() -> Sequence[RayNodeRecord]:
    import ray

    nodes: Sequence[RayNodeRecord] = ray.nodes()
    return nodes
