"""Whether a gang could ever run on a cluster: placed on the cluster empty and healthy.

A job that cannot fit even then (more GPUs than the cluster has, a pod larger than every node,
more pods than the largest domain of its required level or of a slice level holds, GPU models
the cluster lacks) waits forever if accepted; `never_fits` says so, and why, at submit time.

The answer is read from the aggregates of an empty, healthy copy of the cluster's state, built
once per topology and kept while the topology lives: per domain histograms of nodes by GPUs,
CPU and memory, so a check costs what one level's capacities cost, not a pass over nodes.
Only when CPU or memory may bind and the aggregates say "fits" are nodes counted exactly (one
array pass), so that "never" is never said of a job that fits.
"""

from __future__ import annotations

import weakref
from dataclasses import replace

import numpy as np

from toposched.cluster.errors import InputError
from toposched.cluster.state import ClusterState
from toposched.cluster.topology import Topology
from toposched.cluster.units import format_cpu_milli, format_memory_mib
from toposched.jobs.spec import JobSpec
from toposched.placement.capacity import UNLIMITED, CapacityView
from toposched.placement.request import GangRequest
from toposched.placement.search import Unschedulable, UnschedulableCode, describe_needs

__all__ = ["empty_state", "never_fits", "never_fits_job"]

# Empty states by topology identity (topologies compare by value and are not hashable); an
# entry goes when its topology does.
_EMPTY: dict[int, ClusterState] = {}

_NEVER = "never fits this cluster, even empty and healthy"


def empty_state(topology: Topology) -> ClusterState:
    """The cluster of `topology` with every node healthy and free (shared, not to be changed)."""
    key = id(topology)
    state = _EMPTY.get(key)
    if state is None or state.topology is not topology:
        state = _EMPTY[key] = ClusterState(topology)
        weakref.finalize(topology, _EMPTY.pop, key, None)
    return state


def never_fits(cluster: Topology | ClusterState, request: GangRequest) -> Unschedulable | None:
    """An `Unschedulable` with code `NEVER_FITS` when `request` cannot be placed on the cluster
    even with every node healthy and free, saying why; None when it could be.

    Checked as the search checks present capacity: the whole cluster, then a single node
    (`required: node`), the required level's largest domain, and each slice layer's largest
    domain. The state's present allocations and health are ignored.
    """
    topology = cluster.topology if isinstance(cluster, ClusterState) else cluster
    state = empty_state(topology)
    answer = _never(state, request, exact=False)
    if answer is not None or not (request.cpu_milli or request.memory_mib):
        return answer
    # CPU or memory may bind: aggregates over-promise, so the "fits" is confirmed exactly.
    return _never(state, request, exact=True)


def never_fits_job(cluster: Topology | ClusterState, spec: JobSpec) -> Unschedulable | None:
    """`never_fits` for a job spec. A spec whose GPU models are all absent from the cluster
    never fits either (instead of the `InputError` of `GangRequest.from_spec`); other bad input
    still raises `InputError`."""
    topology = cluster.topology if isinstance(cluster, ClusterState) else cluster
    try:
        request = GangRequest.from_spec(spec, topology)
    except InputError as error:
        if error.field != "resources_per_pod.gpu_models":
            raise
        models = spec.resources_per_pod.gpu_models or ()
        unmodelled = spec.model_copy(
            update={
                "resources_per_pod": spec.resources_per_pod.model_copy(update={"gpu_models": None})
            }
        )
        request = replace(
            GangRequest.from_spec(unmodelled, topology),
            allowed_models=np.zeros(0, dtype=np.int64),
        )
        present = ", ".join(m.name for m in topology.gpu_models if m.name) or "none named"
        return Unschedulable(
            request,
            UnschedulableCode.NEVER_FITS,
            f"{_NEVER}: asks for GPU models {', '.join(models)}; the cluster has {present}",
        )
    return never_fits(topology, request)


def _never(state: ClusterState, request: GangRequest, exact: bool) -> Unschedulable | None:
    topology = state.topology
    view = CapacityView(state, request, exact)
    needs = describe_needs(request, topology)

    def never(why: str) -> Unschedulable:
        return Unschedulable(request, UnschedulableCode.NEVER_FITS, f"{_NEVER}: {why}")

    if request.on_one_node:
        capacity = view.node_capacity()
        best = int(capacity.max()) if capacity.size else 0
        if best < request.pods:
            return never(f"asks {needs} on one node; the largest node holds {_pods(best)}")
        return None
    largest_node = _largest_node(CapacityView(state, replace(request, node_slice=1), exact), exact)
    if largest_node < request.node_slice:
        unit = "pod" if request.node_slice == 1 else f"slice of {request.node_slice} pods"
        return never(
            f"asks {needs}{_cpu_memory(request)}; no node holds one {unit}: the largest holds "
            f"{_pods(largest_node)} (nodes have at most {_node_sizes(topology)})"
        )
    unsliced = CapacityView(state, replace(request, slices=()), exact)
    total = unsliced.total()
    if total < request.pods:
        return never(f"asks {needs}; the whole cluster holds {_pods(total)}")
    if request.required > 0:
        name = topology.domain_levels[request.required]
        largest = _largest(unsliced, topology, request.required)
        if largest < request.pods:
            return never(f"asks {needs} in one {name}; the largest {name} holds {_pods(largest)}")
    for index, (level, pods) in enumerate(request.slices):
        # Capacity at the slice's level counting only the slice layers inside it.
        inner = CapacityView(state, replace(request, slices=request.slices[index + 1 :]), exact)
        largest = _largest(inner, topology, level)
        if largest < pods:
            name = topology.domain_levels[level]
            return never(
                f"asks {needs}: a slice of {pods} pods in one {name}; the largest {name} "
                f"holds {_pods(largest)}"
            )
    whole = view.total()
    if whole < request.pods:
        return never(f"asks {needs}; the whole cluster holds {_pods(whole)} in whole slices")
    if request.required > 0:
        largest = _largest(view, topology, request.required)
        if largest < request.pods:
            name = topology.domain_levels[request.required]
            return never(
                f"asks {needs} in one {name}; the largest {name} holds {_pods(largest)} "
                "in whole slices"
            )
    return None


def _largest_node(view: CapacityView, exact: bool) -> int:
    """The most pods (in whole node slices) one node holds: from the root's histogram of nodes
    by GPUs, or node by node when exact."""
    request = view.request
    if exact or view.exact:
        capacity = view.node_capacity()
        return int(capacity.max()) if capacity.size else 0
    if request.gpus_per_pod == 0:
        return int(UNLIMITED)
    hist = view.state.free_hist[0][0]
    allowed = request.model_allowed(view.state.topology)
    present = (hist[allowed[: hist.shape[0]]].sum(axis=0) > 0).nonzero()[0]
    if present.size == 0:
        return 0
    pods = int(view.pods_per_free[int(present[-1])])
    return pods // request.node_slice * request.node_slice


def _largest(view: CapacityView, topology: Topology, level: int) -> int:
    """The largest capacity of a domain at `level`; the level below the innermost is the node."""
    if level == len(topology.domain_levels):
        capacity = view.node_capacity()
    else:
        capacity = view.at(level, 0, topology.n_domains(level))
    return int(capacity.max()) if capacity.size else 0


def _cpu_memory(request: GangRequest) -> str:
    asks = []
    if request.cpu_milli:
        asks.append(f"{format_cpu_milli(request.cpu_milli)} CPU cores")
    if request.memory_mib:
        asks.append(f"{format_memory_mib(request.memory_mib)} memory")
    return f" with {' and '.join(asks)} each" if asks else ""


def _node_sizes(topology: Topology) -> str:
    gpus = topology.max_gpus_per_node
    cpu = int(topology.cpu_milli.max()) if topology.n_nodes else 0
    memory = int(topology.memory_mib.max()) if topology.n_nodes else 0
    return (
        f"{gpus} GPU{'' if gpus == 1 else 's'}, {format_cpu_milli(cpu)} CPU cores, "
        f"{format_memory_mib(memory)} memory"
    )


def _pods(count: int) -> str:
    return f"{count:,} such pod{'' if count == 1 else 's'}"
