"""The gang placement search: aggregates reject, domains are chosen top-down, nodes filled last.

`place` runs it; `domains` chooses the domains and `node_fill` the nodes and GPUs in them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import Allocation, ClusterState
from toposched.cluster.statement import Statement
from toposched.cluster.topology import Topology
from toposched.jobs.spec import JobSpec
from toposched.placement.capacity import CapacityView, pods_per_free
from toposched.placement.closed_leaves import ClosedLeaves
from toposched.placement.domains import DomainChoice, in_rank_order
from toposched.placement.leaf_kernel import best_of_many_rows, place_in_one_leaf
from toposched.placement.node_fill import NodeFill, allocation_of, node_slices_in_gpus
from toposched.placement.node_planner import NodePlanner
from toposched.placement.policies import BestFit, PlacementPolicy, fills_emptiest_first
from toposched.placement.request import GangRequest

IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class Placement:
    """Where every pod of a gang runs: `allocation.nodes[p]` and `allocation.gpus[p]`."""

    request: GangRequest
    allocation: Allocation

    def domains_used(self, state: ClusterState, level: int) -> int:
        """How many distinct domains at `level` the gang touches."""
        domains = state.topology.node_domain[level][self.allocation.nodes]
        return int(np.unique(domains).size)

    def __repr__(self) -> str:
        nodes = self.allocation.nodes
        return (
            f"Placement({self.request.name!r}, pods={nodes.size}, "
            f"nodes={np.unique(nodes).size}, gpus_per_pod={self.allocation.gpus.shape[1]})"
        )

    def pod_nodes(self, state: ClusterState) -> list[str]:
        names = state.topology.node_names
        return [names[int(node)] for node in self.allocation.nodes]


class UnschedulableCode(StrEnum):
    """Why a gang does not fit, as a code."""

    CAPACITY = "capacity"
    """The cluster lacks room in total."""
    REQUIRED = "required"
    """No single domain of the required level has room."""
    SLICES = "slices"
    """Room exists, but not in whole slices."""
    NODE = "node"
    """No single node has room for `required: node`."""
    NEVER_FITS = "never_fits"
    """The gang cannot fit this cluster even empty and healthy (`placement.feasibility`)."""


@dataclass(frozen=True)
class Unschedulable:
    """Why a gang cannot be placed now: `code` for programs, `reason` in words a user can
    act on."""

    request: GangRequest
    code: UnschedulableCode
    reason: str

    def __str__(self) -> str:
        return self.reason


PlacementResult = Placement | Unschedulable


class _Search:
    """One placement decision: holds the capacity view and the policy for its helpers.

    `emptiest` is `fills_emptiest_first(policy)`, decided by the caller; `closed`, innermost
    domains read as full (`CapacityView`).
    """

    def __init__(
        self,
        state: ClusterState,
        request: GangRequest,
        policy: PlacementPolicy,
        emptiest: bool | None,
        closed: ClosedLeaves | None = None,
    ) -> None:
        self.state = state
        self.closed = closed
        self.topology = state.topology
        self.request = request
        self.policy = policy
        self.leaf_level = len(self.topology.domain_levels) - 1
        self.nodes = NodeFill(state, request, policy, emptiest)

    def run(self, exact: bool) -> PlacementResult | None:
        """A placement, an Unschedulable, or None when aggregates over-promised."""
        request = self.request
        within = request.within
        # Confined to `within` at or above the required level, the search reads no domain
        # outside it: its view counts slices inside it alone.
        confined = within if within is not None and request.required >= within[0] else None
        self.view = CapacityView(self.state, request, exact, inside=confined, closed=self.closed)
        if request.on_one_node:
            return self._one_node()
        total = self.view.total()
        if total < request.pods and confined is not None:
            # The confined total counts only the room inside `within`: the cluster's is said.
            self.view = CapacityView(self.state, request, exact, closed=self.closed)
            total = self.view.total()
        if total < request.pods:
            return self._explain_total(total)
        level = request.required
        if level == 0:
            capacity = np.array([total], dtype=np.int64)  # the cluster: `total` already says
        else:
            capacity = self.view.at(level, 0, self.topology.n_domains(level))
        fits = (capacity >= request.pods).nonzero()[0]
        if request.within is not None:
            outer, domain = request.within
            lo, hi = self.topology.descendants(outer, domain, level)
            fits = fits[(fits >= lo) & (fits < hi)]
            if fits.size == 0:
                inside = np.full(capacity.size, -1, dtype=np.int64)
                inside[lo:hi] = capacity[lo:hi]
                return self._explain_required(level, inside)
        if fits.size == 0:
            return self._explain_required(level, capacity)
        domains = DomainChoice(self.topology, self.view, request, self.policy)
        if request.preferred_node and not request.slices:
            return self._fewest_nodes(domains, level, fits, capacity[fits])
        domain = domains.choose_required(level, fits, capacity[fits])
        chosen = domains.fill(level, domain, request.pods)
        if chosen is None:
            return None
        if request.preferred is not None and request.preferred > level:
            chosen = domains.least_preferred(level, domain, *chosen)
            if chosen is None:
                return None
        allocation = self.nodes.assign(self.view, *in_rank_order(self.topology, *chosen))
        if allocation is None:
            return None
        return Placement(request, allocation)

    def refuse_from_total(self, exact: bool) -> Unschedulable | None:
        """`run`'s refusal when the whole cluster holds fewer than the gang's pods (the request
        is not confined `within` a domain nor on one node), else None."""
        self.view = CapacityView(self.state, self.request, exact)
        total = self.view.total()
        return self._explain_total(total) if total < self.request.pods else None

    def _fewest_nodes(
        self, domains: DomainChoice, level: int, fits: IntArray, capacity: IntArray
    ) -> Placement | None:
        """`preferred: node` (no domain slices): the plan of `node_planner.NodePlanner`. None
        when the aggregates over-promised (no candidate holds the gang node by node)."""
        planner = NodePlanner(self.state, self.view, self.request, domains.best)
        plan = planner.choose(level, fits, capacity)
        if plan is None:
            return None
        nodes, pods = planner.nodes_and_pods(plan)
        return Placement(self.request, self.nodes.allocation(nodes, pods))

    def _one_node(self) -> PlacementResult:
        request = self.request
        capacity = self.view.node_capacity()
        if request.within is not None:
            first, last = self.topology.domain_range(*request.within)
            inside = np.zeros_like(capacity)
            inside[first:last] = capacity[first:last]
            capacity = inside
        candidates = np.flatnonzero(capacity >= request.pods)
        if candidates.size == 0:
            best = int(np.argmax(capacity))
            return Unschedulable(
                request,
                UnschedulableCode.NODE,
                f"required node: needs {request.pods} pods of {request.describe_pod(self.topology)}"
                f" on one node; the best node ({self.topology.node_names[best]}) has room for "
                f"{_pods(int(capacity[best]))}",
            )
        scores = self.policy.node_scores(self.state, candidates, capacity[candidates], request)
        best = int(np.argmin(scores))
        node = candidates[best : best + 1]
        pods = np.array([request.pods], dtype=np.int64)
        return Placement(request, self.nodes.allocation(node, pods))

    # --- explanations -------------------------------------------------------------------------
    def _needs(self) -> str:
        return describe_needs(self.request, self.topology)

    def _explain_total(self, total: int) -> Unschedulable:
        request = self.request
        free = int(self.view.free_gpu_equivalent(0, 0, 1)[0])
        counted = self.view.exact and (request.cpu_milli or request.memory_mib)
        limit = " (with CPU and memory counted node by node)" if counted else ""
        code = UnschedulableCode.CAPACITY
        if request.slices or request.node_slice > 1:
            if request.node_slice == 1:
                # The view's own count without domain slices: its node counts serve both.
                unsliced = int(self.view.without_slices_at(0, 0, 1)[0])
            else:
                unsliced = CapacityView(
                    self.state,
                    replace(request, slices=(), node_slice=1),
                    self.view.exact,
                    closed=self.closed,
                ).total()
            if unsliced >= request.pods:
                code = UnschedulableCode.SLICES
        return Unschedulable(
            request,
            code,
            f"needs {self._needs()}; the cluster has room for {total:,} such "
            f"pod{'' if total == 1 else 's'}{limit} "
            f"({free:,} free GPUs)",
        )

    def _explain_required(self, level: int, capacity: IntArray) -> Unschedulable:
        best = int(np.argmax(capacity))
        name = self.topology.domain_levels[level]
        free = int(self.view.free_gpu_equivalent(level, best, best + 1)[0])
        return Unschedulable(
            self.request,
            UnschedulableCode.REQUIRED,
            f"required {name}: needs {self._needs()} in one {name}; the best {name} "
            f"({self.topology.domain_name(level, best)}) has room for "
            f"{_pods(int(capacity[best]))} ({free:,} free GPUs)",
        )


def describe_needs(request: GangRequest, topology: Topology) -> str:
    """What a gang asks for, e.g. "36 pods of 4 GPUs (144 GPUs) in slices of 18 pods per rack"."""
    pod = request.describe_pod(topology)
    text = f"{request.pods:,} pod{'s' if request.pods > 1 else ''} of {pod}"
    if request.gpus_per_pod and not request.is_fractional and request.pods > 1:
        text += f" ({request.pods * request.gpus_per_pod:,} GPUs)"
    names = topology.domain_levels
    layers = [f"{pods} pods per {names[level]}" for level, pods in request.slices]
    if request.node_slice > 1:
        layers.append(f"{request.node_slice} pods per node")
    if layers:
        text += " in slices of " + ", ".join(layers)
    return text


def _pods(count: int) -> str:
    return f"{count:,} pod{'' if count == 1 else 's'}"


def allocate_on(
    state: ClusterState,
    request: GangRequest,
    policy: PlacementPolicy,
    nodes: IntArray,
    pods_per_node: IntArray,
) -> Allocation:
    """The allocation of `pods_per_node[i]` of `request`'s pods on `nodes[i]` (nodes in
    increasing order, each with room for its pods), GPUs picked as `place` picks them: for a
    placement that chose its nodes by other rules."""
    return NodeFill(state, request, policy, fills_emptiest_first(policy)).allocation(
        nodes, pods_per_node
    )


def place(
    state: ClusterState,
    request: GangRequest,
    policy: PlacementPolicy | None = None,
    exact_reasons: bool = True,
    closed: ClosedLeaves | None = None,
) -> PlacementResult:
    """Find where every pod of `request` runs, or say precisely why it cannot run now.

    Aggregates first (O(1) rejection, then domains top-down); if the aggregates over-promised
    because CPU or memory bind on some nodes, the search repeats with exact node capacities.
    The state is not changed: commit a placement with `commit_placement`.

    Aggregate capacities bound exact ones from above, so a gang they reject does not fit; the
    exact pass after such a rejection only makes the reason's figures exact. Callers that
    only ask whether a gang fits pass `exact_reasons=False` to skip it (an O(nodes) pass).

    `closed`: innermost domains an earlier pod set of the job fills whole, read as they would
    be after that set's take (`placement.closed_leaves`), for a gang of whole-GPU pods
    neither preferring the fewest nodes nor placed by a policy that reads the state itself.
    """
    policy = policy or BestFit()
    emptiest = fills_emptiest_first(policy)
    if closed is not None and (request.preferred_node or emptiest is None):
        raise ValueError("closed domains are read by searches of the compiled policies' orders")
    compiled = None if closed is not None else _placed_in_one_leaf(state, request, policy)
    if compiled is not None:
        return compiled
    search = _Search(state, request, policy, emptiest, closed)
    result = search.run(exact=False)
    if isinstance(result, Placement) or search.view.exact:
        if result is None:
            raise AssertionError("exact capacities over-promised: a bug in CapacityView")
        return result
    if result is not None and not exact_reasons:
        return result
    if result is None or request.cpu_milli or request.memory_mib:
        # Aggregates over-promised, or CPU/memory may bind: the exact pass gives the right
        # placement, or a reason whose figures are exact.
        exact_result = search.run(exact=True)
        if exact_result is None:
            raise AssertionError("exact capacities over-promised: a bug in CapacityView")
        return exact_result
    return result


def refuse_from_total(
    state: ClusterState, request: GangRequest, policy: PlacementPolicy | None = None
) -> Unschedulable | None:
    """`place`'s refusal of a gang the whole cluster has too little room for (its figures exact
    where CPU or memory may bind, as `place` gives them), or None when the cluster's aggregates
    hold it: then only `place` decides. One count of the cluster from aggregates, `place`'s own
    first check. For a gang neither confined `within` a domain nor bound to one node."""
    if request.within is not None or request.on_one_node:
        raise ValueError("refuse_from_total counts a gang over the whole cluster, not within one")
    search = _Search(state, request, policy or BestFit(), None)
    refusal = search.refuse_from_total(exact=False)
    if refusal is None or search.view.exact or not (request.cpu_milli or request.memory_mib):
        return refusal
    return search.refuse_from_total(exact=True)


# Gangs up to this many pods try the compiled search for one innermost domain first.
_COMPILED_PODS = 64
# From this many domains at the first level searched, `best_of_many_rows` ranks them.
_COMPILED_DOMAINS = 2048


def _placed_in_one_leaf(
    state: ClusterState, request: GangRequest, policy: PlacementPolicy
) -> Placement | None:
    """`place`'s placement for a small gang of whole GPUs without slices that one domain holds
    at every level, found by one compiled pass (`leaf_kernel`); None when the gang or the
    policy is of another kind, or the search would split the gang or need exact capacities:
    `_Search` then decides. The same answer as `_Search` either way."""
    emptiest = fills_emptiest_first(policy)
    if (
        emptiest is None
        or request.pods > _COMPILED_PODS
        or request.gpus_per_pod == 0
        or request.is_fractional
        or request.slices
        or request.on_one_node
        or request.preferred_node
        or request.within is not None
        or not node_slices_in_gpus(request)
    ):
        return None
    preferred = request.preferred or 0
    if preferred <= request.required:
        preferred = 0  # no level inside the required one is preferred: level by level
    elif request.required > 0:
        return None  # required domains are ranked by the preferred domains they need
    topology = state.topology
    hist, totals, level_offsets = state.stacked_aggregates()
    child_first, child_last = topology.child_rows()
    width = hist.shape[2]
    chosen_row = -1
    first_level = request.required or preferred
    if first_level and topology.n_domains(first_level) >= _COMPILED_DOMAINS:
        # Many domains compete at the first level (e.g. every rack): counted as the aggregate
        # view counts them (free GPUs alone for one-GPU pods of any model without node
        # slices), by the loop made for many rows.
        chosen_row = best_of_many_rows(
            hist,
            totals,
            int(level_offsets[first_level]),
            int(level_offsets[first_level + 1]),
            request.pods,
            request.model_allowed(topology),
            pods_per_free(width, request.gpus_per_pod, request.node_slice),
            request.gpus_per_pod,
            request.cpu_milli,
            request.memory_mib,
            request.gpus_per_pod == 1
            and request.allowed_models is None
            and request.node_slice == 1,
            request.node_slice,
            emptiest,
        )
        if chosen_row < 0:
            return None
    pod_nodes, gpus = place_in_one_leaf(
        hist,
        totals,
        level_offsets,
        child_first,
        child_last,
        request.required,
        preferred,
        chosen_row,
        topology.domain_starts[-1],
        state.free_whole_gpus,
        state.free_cpu_milli,
        state.free_memory_mib,
        state.closed,
        topology.gpu_model,
        state.gpu_free_milli,
        request.model_allowed(topology),
        pods_per_free(width, request.gpus_per_pod, request.node_slice),
        request.pods,
        request.gpus_per_pod,
        request.cpu_milli,
        request.memory_mib,
        request.gpus_per_pod == 1 and request.allowed_models is None,
        request.node_slice,
        emptiest,
    )
    if pod_nodes.size == 0:
        return None
    allocation = allocation_of(request, pod_nodes, gpus)
    return Placement(request, allocation)


def place_in_leaf(
    state: ClusterState, request: GangRequest, leaf: int, policy: PlacementPolicy | None = None
) -> Placement | None:
    """Place every pod of `request` inside innermost domain `leaf`, or None if it has no room.

    Reads the leaf's node arrays alone, never a domain aggregate, with exact capacities (GPUs,
    CPU, memory): valid inside `Statement.free_on_nodes` over the leaf's nodes. Meant for
    gangs bound to one innermost domain (a `required` innermost level, or one pod), which every
    other constraint then holds for.
    """
    if request.on_one_node and request.pods > 1:
        # Not bound to one innermost domain but to one node: `place` searches those.
        raise ValueError("place_in_leaf places gangs bound to one innermost domain, not node")
    policy = policy or BestFit()
    fill = NodeFill(state, request, policy, fills_emptiest_first(policy))
    view = CapacityView(state, request, exact=True)
    leaves = np.array([leaf], dtype=np.int64)
    shares = np.array([request.pods], dtype=np.int64)
    capacity: IntArray | None = None
    if not fill.compiled_fill:
        # Not for the compiled node fill (which counts the nodes' room itself): count here.
        first, last = state.topology.domain_range(fill.leaf_level, leaf)
        capacity = view.node_capacity_in(first, last)
        if int(capacity.sum()) < request.pods:
            return None
    assigned = fill.assign(view, leaves, shares, capacity)
    return None if assigned is None else Placement(request, assigned)


def place_job(
    state: ClusterState, spec: JobSpec, policy: PlacementPolicy | None = None
) -> PlacementResult:
    """`place` for a validated job spec (level and model names resolved against the cluster)."""
    return place(state, GangRequest.from_spec(spec, state.topology), policy)


def commit_placement(statement: Statement, owner: str, placement: Placement) -> None:
    """Record a placement's allocation in a statement (validated again by the state)."""
    statement.allocate(owner, placement.allocation)
