"""Filling chosen domains' nodes: each innermost domain's pods spread over its nodes in the
policy's order, then the GPUs each pod takes on its node."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from toposched.cluster import kernels
from toposched.cluster.state import Allocation, ClusterState
from toposched.cluster.units import MILLI_PER_GPU
from toposched.placement.capacity import CapacityView
from toposched.placement.leaf_kernel import fill_leaves, nodes_of_leaves
from toposched.placement.policies import PlacementPolicy
from toposched.placement.request import GangRequest

__all__ = ["NodeFill", "allocation_of", "node_slices_in_gpus"]

IntArray = NDArray[np.int64]

_ONE_POD = np.ones(1, dtype=np.int64)
_ONE_POD.flags.writeable = False


def allocation_of(request: GangRequest, pod_nodes: IntArray, gpus: IntArray) -> Allocation:
    """The allocation of `request`'s pods on `pod_nodes`, each taking its row of `gpus`."""
    return Allocation(
        nodes=pod_nodes,
        gpus=gpus,
        gpu_milli=request.gpu_milli,
        cpu_milli=request.cpu_milli,
        memory_mib=request.memory_mib,
    )


def node_slices_in_gpus(request: GangRequest) -> bool:
    """Whether the compiled passes count `request`'s node slices: when it has none, or when
    GPUs alone bound its pods per node (their table of pods by free GPUs is in whole slices)."""
    return request.node_slice == 1 or not (request.cpu_milli or request.memory_mib)


class NodeFill:
    """Pods of one request onto nodes and GPUs, in the policy's order.

    `emptiest` is whether the policy fills nodes emptiest first (`fills_emptiest_first`; None
    for an order compiled loops lack).
    """

    def __init__(
        self,
        state: ClusterState,
        request: GangRequest,
        policy: PlacementPolicy,
        emptiest: bool | None,
    ) -> None:
        self.state = state
        self.topology = state.topology
        self.request = request
        self.policy = policy
        self.leaf_level = len(self.topology.domain_levels) - 1
        self.emptiest = emptiest
        # Whether `fill_leaves` may fill this request's nodes (pods of whole GPUs).
        self.compiled_fill = (
            emptiest is not None
            and request.gpus_per_pod > 0
            and not request.is_fractional
            and node_slices_in_gpus(request)
        )

    def assign(
        self,
        view: CapacityView,
        leaves: IntArray,
        shares: IntArray,
        capacity: IntArray | None = None,
    ) -> Allocation | None:
        """Spread each leaf domain's share over its nodes in policy order, all leaves at once.
        `capacity`: the leaves' node capacities, when the caller has them already."""
        state, request = self.state, self.request
        starts = self.topology.domain_starts[self.leaf_level]
        if capacity is None and self.compiled_fill:
            nodes_in_leaves = int((starts[leaves + 1] - starts[leaves]).sum())
            if nodes_in_leaves <= kernels.COMPILED_LIMIT:
                # A few racks: their nodes ranked and filled in one compiled pass.
                pod_nodes, gpus = fill_leaves(
                    leaves,
                    shares,
                    starts,
                    state.free_whole_gpus,
                    state.free_cpu_milli,
                    state.free_memory_mib,
                    state.closed,
                    self.topology.gpu_model,
                    state.gpu_free_milli,
                    request.model_allowed(self.topology),
                    view.pods_per_free,
                    request.gpus_per_pod,
                    request.cpu_milli,
                    request.memory_mib,
                    bool(self.emptiest),
                )
                if pod_nodes.size == 0:
                    return None
                return allocation_of(request, pod_nodes, gpus)
        if leaves.size == 1 and shares[0] == 1:
            return self._assign_one_pod(view, int(starts[leaves[0]]), int(starts[leaves[0] + 1]))
        first_nodes = starts[leaves]
        counts = starts[leaves + 1] - first_nodes
        offsets = counts.cumsum() - counts
        if capacity is None and self.compiled_fill and view.closed is None:
            # Many racks (a large gang): their nodes and room in one compiled pass; taken whole
            # in index order, as a large gang takes free racks, they need no more.
            nodes, capacity, whole, every_gpu_free = nodes_of_leaves(
                leaves,
                shares,
                starts,
                state.free_whole_gpus,
                state.free_cpu_milli,
                state.free_memory_mib,
                state.closed,
                self.topology.gpu_model,
                request.model_allowed(self.topology),
                view.pods_per_free,
                request.gpus_per_pod,
                request.cpu_milli,
                request.memory_mib,
                request.node_slice,
                bool(self.emptiest),
                self.topology.gpu_count,
            )
            if whole:
                return self.allocation(nodes, capacity, every_gpu_free)
        elif leaves.size == 1:
            nodes = np.arange(int(first_nodes[0]), int(first_nodes[0] + counts[0]), dtype=np.int64)
        else:
            nodes = np.arange(int(offsets[-1] + counts[-1]), dtype=np.int64) + np.repeat(
                first_nodes - offsets, counts
            )
        if capacity is None:
            capacity = view.node_capacity(nodes)
        # Leaf domains are never empty, so no reduceat segment is; nodes without room add 0.
        leaf_total = np.add.reduceat(capacity, offsets)
        if (leaf_total < shares).any():
            return None
        usable = capacity > 0
        if not usable.all():
            # Nodes without room take no pod. Every leaf keeps one node at least, since each
            # share is positive and covered.
            counts = np.add.reduceat(usable, offsets).astype(np.int64)
            offsets = np.cumsum(counts) - counts
            nodes, capacity = nodes[usable], capacity[usable]
        scores = self.policy.node_scores(state, nodes, capacity, request)
        # Nodes are grouped by leaf, in index order within each: policy order is a stable sort
        # by score within leaves, which the empty racks a large gang takes already satisfy.
        in_order = scores[1:] >= scores[:-1]
        in_order[offsets[1:] - 1] = True  # a new leaf may start at any score
        if not in_order.all():
            leaf_of = np.repeat(np.arange(leaves.size, dtype=np.int64), counts)
            order = np.lexsort((scores, leaf_of))
            nodes, capacity = nodes[order], capacity[order]
        if (leaf_total == shares).all():
            # Whole leaves (the large-gang case): every node is filled to its capacity.
            return self.allocation(nodes, capacity)
        before_leaf = np.cumsum(leaf_total) - leaf_total
        before_node = np.cumsum(capacity) - capacity - np.repeat(before_leaf, counts)
        take = np.minimum(np.maximum(np.repeat(shares, counts) - before_node, 0), capacity)
        used = take > 0
        return self.allocation(nodes[used], take[used])

    def _assign_one_pod(self, view: CapacityView, first: int, last: int) -> Allocation | None:
        """One pod in one leaf domain: the policy's favourite node that holds it."""
        capacity = view.node_capacity_in(first, last)
        usable = (capacity > 0).nonzero()[0]
        if usable.size == 0:
            return None
        nodes = usable + first
        scores = self.policy.node_scores(self.state, nodes, capacity[usable], self.request)
        best = int(scores.argmin())
        node = nodes[best : best + 1]
        request = self.request
        # `allocation` of one pod on one node, without its checks for several pods per node.
        return allocation_of(request, node, self._pick_gpus(node, _ONE_POD, node))

    def allocation(
        self, nodes: IntArray, pods_per_node: IntArray, every_gpu_free: bool = False
    ) -> Allocation:
        """The allocation of `pods_per_node[i]` pods on `nodes[i]`, each pod taking its node's
        free GPUs in index order. `every_gpu_free`: the caller knows every GPU of every node
        is free (then pod k of a node takes its GPUs from k times the GPUs per pod)."""
        request = self.request
        if (
            request.gpus_per_pod
            and not request.is_fractional
            and nodes.size <= kernels.COMPILED_LIMIT
        ):
            # A few nodes: their free GPUs picked in one compiled pass, not a dozen numpy calls.
            pod_nodes, gpus = kernels.pick_free_gpus(
                nodes, pods_per_node, request.gpus_per_pod, self.state.gpu_free_milli
            )
            return allocation_of(request, pod_nodes, gpus)
        one_pod_each = pods_per_node.size == 0 or bool((pods_per_node == 1).all())
        pod_nodes = nodes if one_pod_each else np.repeat(nodes, pods_per_node)
        gpus = self._pick_gpus(nodes, pods_per_node, pod_nodes, every_gpu_free)
        return allocation_of(request, pod_nodes, gpus)

    def _pick_gpus(
        self,
        nodes: IntArray,
        pods_per_node: IntArray,
        pod_nodes: IntArray,
        every_gpu_free: bool = False,
    ) -> IntArray:
        request, state = self.request, self.state
        per_pod = request.gpus_per_pod
        if per_pod == 0:
            return np.zeros((pod_nodes.size, 0), dtype=np.int64)
        if request.is_fractional:
            return self._pick_shared_gpus(nodes, pods_per_node)
        if pod_nodes.size == 1:
            node = int(nodes[0])
            free_gpus: IntArray = (state.gpu_free_milli[node] == MILLI_PER_GPU).nonzero()[0]
            return free_gpus[:per_pod].reshape(1, per_pod).astype(np.int64)
        # Pod p is the rank[p]-th pod on its node and takes that node's free GPUs
        # rank*per_pod .. rank*per_pod+per_pod-1. Built flat: numpy's broadcasting over a short
        # last axis costs a loop call per row.
        if pod_nodes.size == nodes.size:
            # Repeated copies, not a modulo: integer division costs ~30x more on a large gang.
            columns = np.tile(np.arange(per_pod, dtype=np.int64), nodes.size)
        else:
            rank = np.arange(pod_nodes.size, dtype=np.int64) - np.repeat(
                np.cumsum(pods_per_node) - pods_per_node, pods_per_node
            )
            columns = np.repeat(rank * per_pod, per_pod) + np.tile(
                np.arange(per_pod, dtype=np.int64), pod_nodes.size
            )
        if every_gpu_free:
            return columns.reshape(pod_nodes.size, per_pod)
        topology = self.topology
        partly_used = (state.free_whole_gpus[nodes] != topology.gpu_count[nodes]).nonzero()[0]
        if partly_used.size == 0:
            # Every chosen node is empty (the large-gang case): GPU i is column i.
            return columns.reshape(pod_nodes.size, per_pod)
        # Free GPUs first, in index order; empty nodes keep the identity order.
        width = state.gpu_free_milli.shape[1]
        gpu_order = np.tile(np.arange(width, dtype=np.int64), (nodes.size, 1))
        free = state.gpu_free_milli[nodes[partly_used]] == MILLI_PER_GPU
        gpu_order[partly_used] = np.argsort(~free, axis=1, kind="stable")
        row = np.repeat(np.arange(nodes.size, dtype=np.int64), pods_per_node * per_pod)
        picked: IntArray = gpu_order.reshape(-1)[row * width + columns]
        return picked.reshape(pod_nodes.size, per_pod)

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
