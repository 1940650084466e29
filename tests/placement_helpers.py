"""Shared helpers for placement tests: build a cluster state from data and check placements."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from toposched.cluster import builders
from toposched.cluster.loaders import topology_from_dict
from toposched.cluster.state import MILLI_PER_GPU, Allocation, ClusterState, Health
from toposched.cluster.statement import Statement
from toposched.cluster.topology import Topology
from toposched.cluster.units import parse_cpu_milli, parse_memory_mib
from toposched.placement.request import GangRequest
from toposched.placement.search import Placement

BUILDERS: dict[str, Callable[..., Topology]] = {
    "nvl72_cluster": builders.nvl72_cluster,
    "superpod_cluster": builders.superpod_cluster,
    "fat_tree_cluster": builders.fat_tree_cluster,
}
ALLOCATION_FIELDS = {"owner", "node", "gpus", "gpu_milli", "cpu", "memory"}

# A domain label per node at every domain level (level 0 = the whole cluster).
DomainLabels = Sequence[Sequence[object]]


# --- building states -------------------------------------------------------------------------


def build_topology(
    cluster: Mapping[str, Any] | None, builder: Mapping[str, Any] | None
) -> Topology:
    """A topology from a `topology_from_dict` description or a builder `{name, args}`."""
    if (cluster is None) == (builder is None):
        raise ValueError("give exactly one of `cluster` (a description) or `builder`")
    if cluster is not None:
        return topology_from_dict(cluster)
    assert builder is not None
    unknown = set(builder) - {"name", "args"}
    if unknown or builder.get("name") not in BUILDERS:
        raise ValueError(f"builder needs name in {sorted(BUILDERS)} and optional args: {builder}")
    return BUILDERS[builder["name"]](**builder.get("args", {}))


def allocate_pod(state: ClusterState, entry: Mapping[str, Any]) -> None:
    """Allocate one pre-existing pod: `{owner, node, gpus: [indices], gpu_milli, cpu, memory}`."""
    unknown = set(entry) - ALLOCATION_FIELDS
    if unknown or "owner" not in entry or "node" not in entry:
        raise ValueError(f"allocation needs owner and node, may have {ALLOCATION_FIELDS}: {entry}")
    node = state.topology.node_index(entry["node"])
    gpus = list(entry.get("gpus", []))
    allocation = Allocation.of(
        [node],
        [gpus],
        gpu_milli=int(entry.get("gpu_milli", MILLI_PER_GPU)),
        cpu_milli=parse_cpu_milli(entry.get("cpu", 0)),
        memory_mib=parse_memory_mib(entry.get("memory", 0)),
    )
    state.allocate(str(entry["owner"]), allocation)


def set_health(state: ClusterState, health: Mapping[str, str]) -> None:
    """Set each named node's health (`healthy`, `draining`, `cordoned` or `down`)."""
    for name, value in health.items():
        state.set_health([state.topology.node_index(name)], Health[str(value).upper()])


def state_arrays(state: ClusterState) -> dict[str, np.ndarray]:
    """Copies of the state's per-node and per-domain arrays, to show `place` changed nothing."""
    return state.snapshot()


def assert_state_unchanged(before: dict[str, np.ndarray], state: ClusterState) -> None:
    after = state_arrays(state)
    for name, array in before.items():
        assert np.array_equal(array, after[name]), f"place() changed the state's {name}"


# --- checking placements -----------------------------------------------------------------------


def topology_labels(topology: Topology) -> list[list[object]]:
    """Each node's domain index at every domain level, from the topology's own arrays."""
    return [[int(d) for d in domains] for domains in topology.node_domain]


def pod_capacity(state: ClusterState, request: GangRequest, node: int) -> int:
    """Pods of `request` that `node` can take now, worked out GPU by GPU (capped at the gang).

    Identical fractional pods pack into GPUs independently, so a node holds the sum over its
    GPUs of free // share; whole-GPU pods need GPUs with nothing taken from them.
    """
    topology = state.topology
    if state.health[node] != Health.HEALTHY:
        return 0
    limit = request.pods
    if request.gpus_per_pod:
        allowed = request.allowed_models
        if allowed is not None and int(topology.gpu_model[node]) not in allowed.tolist():
            return 0
        free = [int(state.gpu_free_milli[node, g]) for g in range(int(topology.gpu_count[node]))]
        if request.is_fractional:
            limit = min(limit, sum(milli // request.gpu_milli for milli in free))
        else:
            whole = sum(1 for milli in free if milli == MILLI_PER_GPU)
            limit = min(limit, whole // request.gpus_per_pod)
    if request.cpu_milli:
        limit = min(limit, int(state.free_cpu_milli[node]) // request.cpu_milli)
    if request.memory_mib:
        limit = min(limit, int(state.free_memory_mib[node]) // request.memory_mib)
    return limit


def constraint_violations(
    state: ClusterState, request: GangRequest, pod_nodes: Sequence[int], labels: DomainLabels
) -> list[str]:
    """Every topology, health, model and per-node capacity rule `pod_nodes` breaks, in words.

    `labels[level][node]` names the node's domain at each domain level (0 = whole cluster).
    """
    problems: list[str] = []
    names = state.topology.node_names
    if len(pod_nodes) != request.pods:
        problems.append(f"{len(pod_nodes)} pods placed, the gang has {request.pods}")
    if request.required and len({labels[request.required][n] for n in pod_nodes}) > 1:
        problems.append(f"pods span several domains of required level {request.required}")
    if request.on_one_node and len(set(pod_nodes)) > 1:
        problems.append("required node, but pods are on several nodes")
    for level, size in request.slices:
        for first in range(0, len(pod_nodes), size):
            group = pod_nodes[first : first + size]
            if len({labels[level][n] for n in group}) > 1:
                problems.append(f"pods {first}..{first + size - 1} span domains of level {level}")
    for first in range(0, len(pod_nodes), request.node_slice):
        if len(set(pod_nodes[first : first + request.node_slice])) > 1:
            problems.append(f"pods {first}..{first + request.node_slice - 1} span nodes")
    problems += rank_order_violations(pod_nodes, labels)
    for node in sorted(set(pod_nodes)):
        placed = list(pod_nodes).count(node)
        room = pod_capacity(state, request, node)
        if placed > room:
            health = Health(int(state.health[node])).name.lower()
            problems.append(f"{placed} pods on {names[node]} ({health}) with room for {room}")
    return problems


def rank_order_violations(pod_nodes: Sequence[int], labels: DomainLabels) -> list[str]:
    """Rank order: the pods of each node, and of each domain at every level, are consecutive
    ranks, so a ring over ranks enters every node and domain once."""
    problems: list[str] = []
    for level, domain_of in enumerate([*labels, list(range(max(pod_nodes, default=0) + 1))]):
        sequence = [domain_of[node] for node in pod_nodes]
        runs = 1 + sum(1 for a, b in zip(sequence, sequence[1:], strict=False) if a != b)
        if sequence and runs != len(set(sequence)):
            what = "nodes" if level == len(labels) else f"domains of level {level}"
            problems.append(f"ranks enter {what} {runs} times for {len(set(sequence))} of them")
    return problems


def resource_violations(
    state: ClusterState, request: GangRequest, allocation: Allocation
) -> list[str]:
    """Problems with the GPUs, shares, CPU and memory an allocation takes, checked GPU by GPU."""
    problems: list[str] = []
    topology = state.topology
    if (allocation.gpu_milli, allocation.cpu_milli, allocation.memory_mib) != (
        request.gpu_milli,
        request.cpu_milli,
        request.memory_mib,
    ):
        problems.append("the allocation's per-pod resources differ from the request's")
    if allocation.gpus.shape != (request.pods, request.gpus_per_pod):
        problems.append(f"GPU table of shape {allocation.gpus.shape} for {request.pods} pods")
        return problems
    taken: dict[tuple[int, int], int] = {}
    for pod, node in enumerate(allocation.nodes.tolist()):
        gpus = allocation.gpus[pod].tolist()
        if len(set(gpus)) != len(gpus):
            problems.append(f"pod {pod} lists a GPU twice: {gpus}")
        for gpu in gpus:
            if not 0 <= gpu < int(topology.gpu_count[node]):
                problems.append(f"pod {pod}: no GPU {gpu} on {topology.node_names[node]}")
                continue
            taken[(node, gpu)] = taken.get((node, gpu), 0) + allocation.gpu_milli
    for (node, gpu), milli in taken.items():
        free = int(state.gpu_free_milli[node, gpu])
        if milli > free:
            problems.append(
                f"{topology.node_names[node]} GPU {gpu}: {milli} milli taken, {free} free"
            )
    nodes, counts = np.unique(allocation.nodes, return_counts=True)
    for node, count in zip(nodes.tolist(), counts.tolist(), strict=True):
        if count * allocation.cpu_milli > int(state.free_cpu_milli[node]):
            problems.append(f"{topology.node_names[node]}: CPU over-allocated")
        if count * allocation.memory_mib > int(state.free_memory_mib[node]):
            problems.append(f"{topology.node_names[node]}: memory over-allocated")
    return problems


def assert_valid_placement(
    state: ClusterState,
    request: GangRequest,
    placement: Placement,
    labels: DomainLabels | None = None,
) -> None:
    """The placement keeps every rule, and the state itself accepts it (then it is undone)."""
    allocation = placement.allocation
    problems = constraint_violations(
        state,
        request,
        allocation.nodes.tolist(),
        labels if labels is not None else topology_labels(state.topology),
    )
    problems += resource_violations(state, request, allocation)
    assert not problems, "invalid placement:\n  " + "\n  ".join(problems)
    statement = Statement(state)
    statement.allocate("placement-under-test", allocation)  # raises on any over-allocation
    statement.discard()
