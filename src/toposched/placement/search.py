"""The gang placement search: aggregates reject, domains are chosen top-down, nodes filled last."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import MILLI_PER_GPU, Allocation, ClusterState
from toposched.cluster.statement import Statement
from toposched.placement.capacity import CapacityView
from toposched.placement.jobspec import JobSpec
from toposched.placement.policies import BestFit, PlacementPolicy
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


@dataclass(frozen=True)
class Unschedulable:
    """Why a gang cannot be placed now, in words a user can act on.

    `code` is one of: `capacity` (the cluster lacks room in total), `required` (no single
    domain of the required level has room), `slices` (room exists, but not in whole slices),
    `node` (no single node has room for `required: node`).
    """

    request: GangRequest
    code: str
    reason: str

    def __str__(self) -> str:
        return self.reason


PlacementResult = Placement | Unschedulable


class _Search:
    """One placement decision: holds the capacity view and the policy for its helpers."""

    def __init__(self, state: ClusterState, request: GangRequest, policy: PlacementPolicy) -> None:
        self.state = state
        self.topology = state.topology
        self.request = request
        self.policy = policy
        self.leaf_level = len(self.topology.domain_levels) - 1

    def run(self, exact: bool) -> PlacementResult | None:
        """A placement, an Unschedulable, or None when aggregates over-promised."""
        self.view = CapacityView(self.state, self.request, exact)
        request = self.request
        if request.on_one_node:
            return self._one_node()
        total = self.view.total()
        if total < request.pods:
            return self._explain_total(total)
        level = request.required
        if level == 0:
            capacity = np.array([total], dtype=np.int64)  # the cluster: `total` already says
        else:
            capacity = self.view.at(level, 0, self.topology.n_domains(level))
        fits = np.flatnonzero(capacity >= request.pods)
        if fits.size == 0:
            return self._explain_required(level, capacity)
        domain = self._choose_required(level, fits, capacity[fits])
        chosen = self._fill(level, domain, request.pods)
        if chosen is None:
            return None
        leaves, shares = chosen
        allocation = self._assign(leaves, shares)
        if allocation is None:
            return None
        return Placement(request, allocation)

    # --- choosing domains ---------------------------------------------------------------------
    def _best(self, capacity: IntArray, need: int, candidates: IntArray | None = None) -> int:
        """Index (into `capacity`) of the policy's favourite among domains that hold `need`."""
        if candidates is None:
            candidates = np.flatnonzero(capacity >= need)
        scores = self.policy.domain_scores(capacity[candidates], need)
        return int(candidates[int(np.argmin(scores))])

    def _choose_required(self, level: int, candidates: IntArray, capacity: IntArray) -> int:
        preferred = self.request.preferred
        if preferred is None or preferred <= level or candidates.size == 1:
            return int(candidates[self._best(capacity, self.request.pods)])
        # Prefer the required domain needing the fewest preferred-level domains; then policy.
        preferred_capacity = self.view.at(preferred, 0, self.topology.n_domains(preferred))
        bounds = self.topology.descendant_bounds(level, preferred)
        counts = np.empty(candidates.size, dtype=np.int64)
        for i, domain in enumerate(candidates):
            inside = preferred_capacity[bounds[domain] : bounds[domain + 1]]
            counts[i] = _cover_count(inside, self.request.pods)
        fewest = counts == counts.min()
        best = self._best(np.where(fewest, capacity, -1), self.request.pods)
        return int(candidates[best])

    def _fill(self, level: int, domain: int, need: int) -> tuple[IntArray, IntArray] | None:
        """Leaf domains under `domain` and the pods each takes; None if capacity over-promised."""
        if level == self.leaf_level:
            return np.array([domain], dtype=np.int64), np.array([need], dtype=np.int64)
        topology, request = self.topology, self.request
        preferred = request.preferred
        target = preferred if preferred is not None and preferred > level else level + 1
        lo, hi = topology.descendants(level, domain, target)
        capacity = self.view.at(target, lo, hi)
        candidates = np.flatnonzero(capacity >= need)
        if candidates.size:
            return self._fill(target, lo + self._best(capacity, need, candidates), need)
        # No single domain holds it: split where the domain count is minimised. Skipping
        # intermediate levels is only sound when they impose no coarser slices.
        split = target if request.granule(level + 1) == request.granule(target) else level + 1
        if split != target:
            lo, hi = topology.descendants(level, domain, split)
            capacity = self.view.at(split, lo, hi)
        cover = self._cover(capacity, need)
        if cover is None:
            return None
        picked, shares = cover
        if split == self.leaf_level:
            return lo + picked, shares
        parts = [
            self._fill(split, lo + int(p), int(s)) for p, s in zip(picked, shares, strict=True)
        ]
        if any(part is None for part in parts):
            return None
        return (
            np.concatenate([part[0] for part in parts if part is not None]),
            np.concatenate([part[1] for part in parts if part is not None]),
        )

    def _cover(self, capacity: IntArray, need: int) -> tuple[IntArray, IntArray] | None:
        """Fewest domains whose capacities reach `need`: the largest ones, then a best fit.

        Taking the k-1 largest and then the policy's favourite among those that hold the rest
        uses the minimum number of domains k, and leaves the larger remaining domains whole.
        """
        order = np.argsort(-capacity, kind="stable")
        cumulative = np.cumsum(capacity[order])
        if cumulative.size == 0 or cumulative[-1] < need:
            return None
        k = int(np.searchsorted(cumulative, need))
        taken = order[:k]
        remainder = need - (int(cumulative[k - 1]) if k else 0)
        rest = order[k:]
        last = rest[self._best(capacity[rest], remainder)]
        picked = np.append(taken, last)
        shares = np.append(capacity[taken], remainder)
        return picked.astype(np.int64), shares.astype(np.int64)

    # --- filling nodes ------------------------------------------------------------------------
    def _assign(self, leaves: IntArray, shares: IntArray) -> Allocation | None:
        """Spread each leaf domain's share over its nodes in policy order, all leaves at once."""
        state, request = self.state, self.request
        starts = self.topology.domain_starts[self.leaf_level]
        if leaves.size == 1 and shares[0] == 1:
            return self._assign_one_pod(int(starts[leaves[0]]), int(starts[leaves[0] + 1]))
        if leaves.size == 1:
            first, last = int(starts[leaves[0]]), int(starts[leaves[0] + 1])
            nodes = np.arange(first, last, dtype=np.int64)
            leaf_of = np.zeros(last - first, dtype=np.int64)
        else:
            first_nodes, last_nodes = starts[leaves], starts[leaves + 1]
            counts = last_nodes - first_nodes
            offsets = np.cumsum(counts) - counts
            nodes = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(
                first_nodes - offsets, counts
            )
            leaf_of = np.repeat(np.arange(len(leaves), dtype=np.int64), counts)
        capacity = self.view.node_capacity(nodes)
        usable = capacity > 0
        nodes, leaf_of, capacity = nodes[usable], leaf_of[usable], capacity[usable]
        scores = self.policy.node_scores(state, nodes, capacity, request)
        order = np.lexsort((nodes, scores, leaf_of))
        nodes, leaf_of, capacity = nodes[order], leaf_of[order], capacity[order]
        cumulative = np.cumsum(capacity)
        leaf_total = np.bincount(leaf_of, weights=capacity, minlength=len(leaves)).astype(np.int64)
        before_leaf = np.cumsum(leaf_total) - leaf_total
        before_node = cumulative - capacity - before_leaf[leaf_of]
        take = np.clip(shares[leaf_of] - before_node, 0, capacity)
        if (leaf_total < shares).any():
            return None
        used = take > 0
        return self._allocation(nodes[used], take[used])

    def _assign_one_pod(self, first: int, last: int) -> Allocation | None:
        """One pod in one leaf domain: the policy's favourite node that holds it."""
        nodes = np.arange(first, last, dtype=np.int64)
        capacity = self.view.node_capacity(nodes)
        usable = np.flatnonzero(capacity > 0)
        if usable.size == 0:
            return None
        nodes = nodes[usable]
        scores = self.policy.node_scores(self.state, nodes, capacity[usable], self.request)
        best = int(np.argmin(scores))
        return self._allocation(nodes[best : best + 1], np.ones(1, dtype=np.int64))

    def _allocation(self, nodes: IntArray, pods_per_node: IntArray) -> Allocation:
        pod_nodes = np.repeat(nodes, pods_per_node)
        request = self.request
        return Allocation(
            nodes=pod_nodes,
            gpus=self._pick_gpus(nodes, pods_per_node, pod_nodes),
            gpu_milli=request.gpu_milli,
            cpu_milli=request.cpu_milli,
            memory_mib=request.memory_mib,
        )

    def _pick_gpus(self, nodes: IntArray, pods_per_node: IntArray, pod_nodes: IntArray) -> IntArray:
        request, state = self.request, self.state
        per_pod = request.gpus_per_pod
        if per_pod == 0:
            return np.zeros((pod_nodes.size, 0), dtype=np.int64)
        if request.is_fractional:
            return self._pick_shared_gpus(nodes, pods_per_node)
        if pod_nodes.size == 1:
            node = int(nodes[0])
            free_gpus = np.flatnonzero(state.gpu_free_milli[node] == MILLI_PER_GPU)
            return free_gpus[:per_pod].reshape(1, per_pod).astype(np.int64)
        row = np.repeat(np.arange(nodes.size), pods_per_node)
        rank = np.arange(pod_nodes.size) - np.repeat(
            np.cumsum(pods_per_node) - pods_per_node, pods_per_node
        )
        columns = rank[:, None] * per_pod + np.arange(per_pod)[None, :]
        topology = self.topology
        partly_used = np.flatnonzero(state.free_whole_gpus[nodes] != topology.gpu_count[nodes])
        if partly_used.size == 0:
            # Every chosen node is empty (the large-gang case): GPU i is column i.
            return columns.astype(np.int64)
        # Free GPUs first, in index order, for the partly used nodes only.
        gpu_order = np.broadcast_to(
            np.arange(state.gpu_free_milli.shape[1]), (nodes.size, state.gpu_free_milli.shape[1])
        ).copy()
        free = state.gpu_free_milli[nodes[partly_used]] == MILLI_PER_GPU
        gpu_order[partly_used] = np.argsort(~free, axis=1, kind="stable")
        picked: IntArray = gpu_order[row[:, None], columns].astype(np.int64)
        return picked

    def _pick_shared_gpus(self, nodes: IntArray, pods_per_node: IntArray) -> IntArray:
        """Fractional pods: the policy picks a GPU per pod (gangs of shared GPUs are small)."""
        state, request = self.state, self.request
        picked: list[int] = []
        for node, pods in zip(nodes.tolist(), pods_per_node.tolist(), strict=True):
            count = int(self.topology.gpu_count[node])
            free = state.gpu_free_milli[node, :count].astype(np.int64)
            for _ in range(pods):
                gpu = self.policy.gpu_choice(state, node, free, request)
                free[gpu] -= request.gpu_milli
                picked.append(gpu)
        return np.array(picked, dtype=np.int64).reshape(-1, 1)

    def _one_node(self) -> PlacementResult:
        request = self.request
        capacity = self.view.node_capacity()
        candidates = np.flatnonzero(capacity >= request.pods)
        if candidates.size == 0:
            best = int(np.argmax(capacity))
            return Unschedulable(
                request,
                "node",
                f"required node: needs {request.pods} pods of {request.describe_pod(self.topology)}"
                f" on one node; the best node ({self.topology.node_names[best]}) has room for "
                f"{_pods(int(capacity[best]))}",
            )
        scores = self.policy.node_scores(self.state, candidates, capacity[candidates], request)
        best = int(np.argmin(scores))
        node = candidates[best : best + 1]
        pods = np.array([request.pods], dtype=np.int64)
        return Placement(request, self._allocation(node, pods))

    # --- explanations -------------------------------------------------------------------------
    def _needs(self) -> str:
        request = self.request
        pod = request.describe_pod(self.topology)
        text = f"{request.pods:,} pod{'s' if request.pods > 1 else ''} of {pod}"
        if request.gpus_per_pod and not request.is_fractional and request.pods > 1:
            text += f" ({request.pods * request.gpus_per_pod:,} GPUs)"
        if request.slices:
            names = self.topology.domain_levels
            text += " in slices of " + ", ".join(
                f"{pods} pods per {names[level]}" for level, pods in request.slices
            )
        return text

    def _explain_total(self, total: int) -> Unschedulable:
        request = self.request
        free = int(self.view.free_gpu_equivalent(0, 0, 1)[0])
        counted = self.view.exact and (request.cpu_milli or request.memory_mib)
        limit = " (with CPU and memory counted node by node)" if counted else ""
        code = "capacity"
        if request.slices:
            unsliced = CapacityView(self.state, replace(request, slices=()), self.view.exact)
            if unsliced.total() >= request.pods:
                code = "slices"
        return Unschedulable(
            request,
            code,
            f"needs {self._needs()}; the cluster has room for {total:,} such pods{limit} "
            f"({free:,} free GPUs)",
        )

    def _explain_required(self, level: int, capacity: IntArray) -> Unschedulable:
        best = int(np.argmax(capacity))
        name = self.topology.domain_levels[level]
        free = int(self.view.free_gpu_equivalent(level, best, best + 1)[0])
        return Unschedulable(
            self.request,
            "required",
            f"required {name}: needs {self._needs()} in one {name}; the best {name} "
            f"({self.topology.domain_name(level, best)}) has room for "
            f"{_pods(int(capacity[best]))} ({free:,} free GPUs)",
        )


def _pods(count: int) -> str:
    return f"{count:,} pod{'' if count == 1 else 's'}"


def _cover_count(capacity: IntArray, need: int) -> int:
    """Fewest domains whose capacities sum to `need` (a large number if impossible)."""
    cumulative = np.cumsum(np.sort(capacity)[::-1])
    if cumulative.size == 0 or cumulative[-1] < need:
        return np.iinfo(np.int64).max
    return int(np.searchsorted(cumulative, need)) + 1


def place(
    state: ClusterState, request: GangRequest, policy: PlacementPolicy | None = None
) -> PlacementResult:
    """Find where every pod of `request` runs, or say precisely why it cannot run now.

    Aggregates first (O(1) rejection, then domains top-down); if the aggregates over-promised
    because CPU or memory bind on some nodes, the search repeats with exact node capacities.
    The state is not changed: commit a placement with `commit_placement`.
    """
    search = _Search(state, request, policy or BestFit())
    result = search.run(exact=False)
    if isinstance(result, Placement) or search.view.exact:
        if result is None:
            raise AssertionError("exact capacities over-promised: a bug in CapacityView")
        return result
    if result is None or request.cpu_milli or request.memory_mib:
        # Aggregates over-promised, or CPU/memory may bind: the exact pass gives the right
        # placement, or a reason whose figures are exact.
        exact_result = search.run(exact=True)
        if exact_result is None:
            raise AssertionError("exact capacities over-promised: a bug in CapacityView")
        return exact_result
    return result


def place_job(
    state: ClusterState, spec: JobSpec, policy: PlacementPolicy | None = None
) -> PlacementResult:
    """`place` for a validated job spec (level and model names resolved against the cluster)."""
    return place(state, GangRequest.from_spec(spec, state.topology), policy)


def commit_placement(statement: Statement, owner: str, placement: Placement) -> None:
    """Record a placement's allocation in a statement (validated again by the state)."""
    statement.allocate(owner, placement.allocation)
