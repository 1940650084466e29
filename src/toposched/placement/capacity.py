"""How many pods of a gang each domain can hold: from aggregates, or exactly from node arrays."""

from __future__ import annotations

import functools

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import ClusterState
from toposched.cluster.units import MILLI_PER_GPU
from toposched.placement import capacity_kernels
from toposched.placement.closed_leaves import ClosedLeaves
from toposched.placement.request import GangRequest

IntArray = NDArray[np.int64]
UNLIMITED = capacity_kernels.UNLIMITED

# The node list of `capacity_kernels.pods_on_nodes` that asks for a range of nodes instead.
_NO_NODES = np.zeros(0, dtype=np.int64)

_NodeArrays = tuple[
    NDArray[np.integer],
    NDArray[np.integer],
    NDArray[np.integer],
    NDArray[np.integer],
    NDArray[np.integer],
    NDArray[np.bool_],
    IntArray,
    int,
    int,
    int,
]
"""What the compiled node counts (`capacity_kernels.pods_on_nodes`, `pods_in_leaves`) read,
in their order: free whole GPUs, CPU and memory, closures and GPU model per node, the models
allowed, `pods_per_free`, then GPUs, milli-CPU and MiB per pod."""

# From this many domains, `pods_by_free` adds columns rather than multiplying matrices.
_MANY_DOMAINS = 2048


def pods_by_free(hist: NDArray[np.integer], pods_per_free: IntArray) -> IntArray:
    """`hist @ pods_per_free` for a (domains, free whole GPUs) histogram. For many domains,
    column by column: numpy's integer matrix product has no fast path, and for most gangs most
    columns weigh 0 (a node with fewer free GPUs than a pod holds none)."""
    if hist.shape[0] < _MANY_DOMAINS:
        product: IntArray = hist @ pods_per_free
        return product
    capacity: IntArray | None = None
    for column, weight in enumerate(pods_per_free.tolist()):
        if not weight:
            continue
        # The first column taken is converted, not added to zeros: one pass instead of two.
        part = (
            hist[:, column].astype(np.int64)
            if weight == 1
            else np.multiply(hist[:, column], weight, dtype=np.int64)
        )
        if capacity is None:
            capacity = part
        else:
            capacity += part
    return capacity if capacity is not None else np.zeros(hist.shape[0], dtype=np.int64)


@functools.lru_cache(maxsize=256)
def pods_per_free(width: int, gpus_per_pod: int, node_slice: int = 1) -> IntArray:
    """Pods a node with k free whole GPUs can hold, for k < width, in whole slices of
    `node_slice` pods (read-only, shared: every search of a small job needs it, and building it
    costs as much as reading a level)."""
    if gpus_per_pod:
        pods = np.arange(width, dtype=np.int64) // gpus_per_pod
        if node_slice > 1:
            pods = pods // node_slice * node_slice
    else:
        pods = np.zeros(width, dtype=np.int64)
    pods.flags.writeable = False
    return pods


def room_bound(state: ClusterState, request: GangRequest) -> int:
    """A bound from above of the pods of `request` the whole cluster holds (`CapacityView`'s
    `total`, aggregate or exact): the free whole GPUs of each domain at the innermost slice
    level (the cluster without slices) in whole pods, rounded down to whole slices there. One
    compiled pass over one aggregate, where the count reads each domain's histogram of its
    nodes' free GPUs. `UNLIMITED` for pods without whole GPUs (CPU-only or shared GPUs)."""
    if request.gpus_per_pod == 0 or request.is_fractional:
        return int(UNLIMITED)
    level = max(level for level, _ in request.slices) if request.slices else 0
    granule = request.granule(level)
    slices = capacity_kernels.whole_units(state.free_gpus[level], request.gpus_per_pod * granule)
    return int(slices) * granule


class CapacityView:
    """Pod capacity per domain for one request, rounded to the request's slice granules.

    In aggregate mode (`exact=False`) capacities come from the per-domain histograms of free
    GPUs per node, bounded by the domain's free CPU and memory: an upper bound that is exact
    whenever CPU and memory do not bind, and costs O(domains asked for). In exact mode they come
    from every node's free GPUs, CPU and memory (O(nodes), used when aggregates over-promised,
    and always for fractional-GPU pods, which histograms of whole GPUs cannot count).

    With slices, a domain's capacity counts only whole slices: computed at the innermost slice
    level and summed upwards, rounding at each level to that level's granule.

    `inside` (a level and a domain) lets the view count slices over that domain's part of the
    fleet alone, for a search confined to it (`GangRequest.within`): then a domain apart from
    it may show no room, and one above it (the cluster's `total`) only the room inside it.

    `closed` (for pods of whole GPUs) are innermost domains an earlier pod set of the job
    fills whole though the state shows them free: read as after that set's take, with no room
    on their nodes, and every domain above them without their nodes' room, CPU and memory.
    """

    def __init__(
        self,
        state: ClusterState,
        request: GangRequest,
        exact: bool,
        inside: tuple[int, int] | None = None,
        closed: ClosedLeaves | None = None,
    ) -> None:
        if closed is not None and (request.gpus_per_pod == 0 or request.is_fractional):
            raise ValueError("closed innermost domains are read for pods of whole GPUs only")
        self.state = state
        self.request = request
        self.closed = closed
        self._closed_pods: dict[int, IntArray] = {}
        self.exact = exact or request.is_fractional
        topology = state.topology
        self.leaf_level = len(topology.domain_levels) - 1
        self.slice_level = max(level for level, _ in request.slices) if request.slices else None
        self.inside = inside
        self._full: dict[int, IntArray] = {}
        self._node_capacity: IntArray | None = None
        # Exact pods of every innermost domain, once counted (`_leaf_counts`).
        self._leaves: IntArray | None = None
        # Pods a node with k free whole GPUs can hold, by k (in whole node slices).
        self.pods_per_free = pods_per_free(
            state.free_hist[0].shape[2], request.gpus_per_pod, request.node_slice
        )
        self._allowed: NDArray[np.bool_] | None = None

    def _model_allowed(self) -> NDArray[np.bool_]:
        """Per GPU model, whether the pods may use it (built on first use: the aggregate path
        of most searches never needs it)."""
        if self._allowed is None:
            self._allowed = self.request.model_allowed(self.state.topology)
        return self._allowed

    # --- node level --------------------------------------------------------------------------
    def node_capacity(self, nodes: IntArray | None = None) -> IntArray:
        """Exact pods each node can hold now (0 for unhealthy or disallowed nodes)."""
        if nodes is None:
            if self._node_capacity is None:
                self._node_capacity = self._compute_node_capacity(None)
            return self._node_capacity
        if self._node_capacity is not None:
            return self._node_capacity[nodes]
        return self._compute_node_capacity(nodes)

    def node_capacity_in(self, first: int, last: int) -> IntArray:
        """`node_capacity` of the nodes first..last-1 (read-only), read through slices: one
        leaf domain's nodes, cheaper than gathering them by index."""
        if self._node_capacity is not None:
            return self._node_capacity[first:last]
        return self._compute_node_capacity(slice(first, last))

    def _node_arrays(self) -> _NodeArrays:
        """The node arrays and pod figures the compiled node counts read, in their order."""
        state, request = self.state, self.request
        return (
            state.free_whole_gpus,
            state.free_cpu_milli,
            state.free_memory_mib,
            state.closed,
            state.topology.gpu_model,
            self._model_allowed(),
            self.pods_per_free,
            request.gpus_per_pod,
            request.cpu_milli,
            request.memory_mib,
        )

    def _compute_node_capacity(self, nodes: IntArray | slice | None) -> IntArray:
        state, request = self.state, self.request
        if not request.is_fractional:
            arrays = self._node_arrays()
            if nodes is None:
                nodes = slice(0, state.topology.n_nodes)
            if isinstance(nodes, slice):
                held: IntArray = capacity_kernels.pods_on_nodes(
                    _NO_NODES, nodes.start, nodes.stop, *arrays
                )
            elif nodes.size:
                held = capacity_kernels.pods_on_nodes(nodes, 0, 0, *arrays)
            else:
                held = np.zeros(0, dtype=np.int64)
            if self.closed is not None:
                held[self.closed.closed_nodes(nodes)] = 0
            return self._in_node_slices(held)
        pick = slice(None) if nodes is None else nodes
        capacity = (state.gpu_free_milli[pick] // request.gpu_milli).sum(axis=1, dtype=np.int64)
        if request.cpu_milli:
            capacity = np.minimum(capacity, state.free_cpu_milli[pick] // request.cpu_milli)
        if request.memory_mib:
            capacity = np.minimum(capacity, state.free_memory_mib[pick] // request.memory_mib)
        usable = state.closed[pick] == 0
        if request.allowed_models is not None:
            usable &= self._model_allowed()[state.topology.gpu_model[pick]]
        return self._in_node_slices(np.where(usable, capacity, 0))

    def _in_node_slices(self, held: IntArray) -> IntArray:
        """Node capacities rounded down to whole node slices (CPU or memory may have cut one)."""
        node_slice = self.request.node_slice
        return held // node_slice * node_slice if node_slice > 1 else held

    # --- domain level ------------------------------------------------------------------------
    def at(self, level: int, lo: int, hi: int) -> IntArray:
        """Capacity in pods of domains lo..hi-1 at `level`."""
        if self.slice_level is not None and level <= self.slice_level:
            return self._full_level(level)[lo:hi]
        return self.without_slices_at(level, lo, hi)

    def without_slices_at(self, level: int, lo: int, hi: int) -> IntArray:
        """Capacity in pods of domains lo..hi-1 at `level` whatever the slice layers of
        domains (node slices kept): `at` below the innermost slice level, a bound from above
        of it elsewhere."""
        # Node slices: whole per node already; rounded again where CPU or memory bound a domain.
        return self._raw(level, lo, hi, self.request.node_slice)

    def _raw(self, level: int, lo: int, hi: int, granule: int = 1) -> IntArray:
        """Capacity of domains lo..hi-1 at `level`, rounded down to a multiple of `granule`."""
        if not self.exact:
            return self._bound(level, lo, hi, granule)
        topology = self.state.topology
        if self._node_capacity is None and not self.request.is_fractional:
            # Aggregates bound exact counts from above: only innermost domains they give room
            # are read node by node (on a busy fleet, a fraction of them), then summed upwards.
            leaf_bounds = topology.descendant_bounds(level, self.leaf_level)
            leaf_lo, leaf_hi = int(leaf_bounds[lo]), int(leaf_bounds[hi])
            per_leaf = self._leaf_counts(leaf_lo, leaf_hi)
            result: IntArray = (
                per_leaf
                if level == self.leaf_level
                else np.add.reduceat(per_leaf, leaf_bounds[lo:hi] - leaf_lo)
            )
        else:
            starts = topology.domain_starts[level]
            node_lo, node_hi = int(starts[lo]), int(starts[hi])
            per_node = self.node_capacity()[node_lo:node_hi]
            if per_node.size == 0:
                return np.zeros(hi - lo, dtype=np.int64)
            result = np.add.reduceat(per_node, starts[lo:hi] - node_lo)
        return result // granule * granule if granule > 1 else result

    def _leaf_counts(self, leaf_lo: int, leaf_hi: int) -> IntArray:
        """Exact pods of innermost domains leaf_lo..leaf_hi-1, in node slices (a new array).
        Those of every innermost domain, once counted, are kept for the view's life: a search
        asks for them at several levels (the cluster's total, then each level's domains)."""
        if self._leaves is not None:
            return self._leaves[leaf_lo:leaf_hi].copy()
        if self.request.gpus_per_pod:
            # Which domains to read, from their free GPUs alone: those with room are read node
            # by node anyway, so their CPU and memory aggregates need no reading first.
            per_leaf = self._unbounded(self.leaf_level, leaf_lo, leaf_hi)[0]
        else:
            per_leaf = self._bound(self.leaf_level, leaf_lo, leaf_hi, 1)
        if self.closed is None:
            # Each such domain's nodes read by their range, in one compiled pass.
            capacity_kernels.pods_in_leaves(
                per_leaf,
                leaf_lo,
                self.state.topology.domain_starts[self.leaf_level],
                *self._node_arrays(),
                self.request.node_slice,
            )
        else:
            self._read_leaves(leaf_lo, per_leaf)
        if leaf_lo == 0 and leaf_hi == self.state.topology.n_domains(self.leaf_level):
            self._leaves = per_leaf.copy()
        return per_leaf

    def _read_leaves(self, leaf_lo: int, per_leaf: IntArray) -> None:
        """`per_leaf` (innermost domains from leaf_lo) counted node by node where not 0, in
        place: closed leaves' nodes read as holding nothing."""
        some = per_leaf.nonzero()[0]
        if some.size:
            starts = self.state.topology.domain_starts[self.leaf_level]
            first, last = starts[leaf_lo + some], starts[leaf_lo + some + 1]
            counts = last - first
            offsets = np.cumsum(counts) - counts
            nodes = np.arange(int(counts.sum()), dtype=np.int64) + np.repeat(
                first - offsets, counts
            )
            # Domains are never empty, so no reduceat segment is.
            per_leaf[some] = np.add.reduceat(self.node_capacity(nodes), offsets)

    def _bound(self, level: int, lo: int, hi: int, granule: int) -> IntArray:
        """Capacity of domains lo..hi-1 from the aggregates: an upper bound of the exact one."""
        capacity, free_cpu, free_memory = self._unbounded(level, lo, hi)
        request = self.request
        if request.cpu_milli or request.memory_mib or granule > 1:
            capacity_kernels.bound_and_round(
                capacity, free_cpu, free_memory, request.cpu_milli, request.memory_mib, granule
            )
        return capacity

    def _unbounded(self, level: int, lo: int, hi: int) -> tuple[IntArray, IntArray, IntArray]:
        """`_bound`'s pods of domains lo..hi-1 from their free GPUs alone (a new array), and the
        domains' free CPU and memory that bound them (closed leaves' taken from all three)."""
        state, request = self.state, self.request
        if request.gpus_per_pod == 0:
            # CPU-only pods: bounded by CPU/memory, or by nothing when they ask for neither.
            capacity = np.full(hi - lo, UNLIMITED, dtype=np.int64)
        elif (
            request.gpus_per_pod == 1 and request.allowed_models is None and request.node_slice == 1
        ):
            # One GPU per pod, any model, no node slices: as many pods as free whole GPUs, an
            # aggregate kept already (what the histogram gives, without a product over it).
            # Copied, since the aggregate moves with the state.
            capacity = state.free_gpus[level][lo:hi].copy()
        else:
            hist = state.free_hist[level][lo:hi]
            if request.allowed_models is not None:
                hist = hist[:, request.allowed_models, :]
            if hist.shape[1] == 1:
                capacity = pods_by_free(hist[:, 0, :], self.pods_per_free)  # one model
            else:
                capacity = pods_by_free(hist.sum(axis=1, dtype=np.int64), self.pods_per_free)
        free_cpu = state.domain_free_cpu[level][lo:hi]
        free_memory = state.domain_free_memory[level][lo:hi]
        if self.closed is not None:
            free_cpu, free_memory = self._without_closed(
                level, lo, hi, capacity, free_cpu, free_memory
            )
        return capacity, free_cpu, free_memory

    def _without_closed(
        self,
        level: int,
        lo: int,
        hi: int,
        capacity: IntArray,
        free_cpu: IntArray,
        free_memory: IntArray,
    ) -> tuple[IntArray, IntArray]:
        """Take the closed leaves' room from `capacity` (domains lo..hi-1 at `level`, from the
        aggregates before bounds), in place; returns the domains' free CPU and memory without
        what the closed leaves' pods take."""
        assert self.closed is not None
        request = self.request
        capacity -= self._closed_pods_at(level)[lo:hi]
        if not (request.cpu_milli or request.memory_mib):
            return free_cpu, free_memory  # not read
        closed = self.closed.at(level, request.allowed_models)
        if request.cpu_milli and closed.cpu_milli is not None:
            free_cpu = free_cpu - closed.cpu_milli[lo:hi]
        if request.memory_mib and closed.memory_mib is not None:
            free_memory = free_memory - closed.memory_mib[lo:hi]
        return free_cpu, free_memory

    def _closed_pods_at(self, level: int) -> IntArray:
        """Per domain at `level`, the pods its closed leaves' nodes held before (each node had
        every GPU free: `pods_per_free[width]` pods, or as many one-GPU pods as GPUs, as the
        aggregate of free GPUs counts them)."""
        pods = self._closed_pods.get(level)
        if pods is None:
            assert self.closed is not None
            request = self.request
            nodes = self.closed.at(level, request.allowed_models).nodes
            width = self.state.gpu_free_milli.shape[1]
            one_gpu = (
                request.gpus_per_pod == 1
                and request.allowed_models is None
                and request.node_slice == 1
            )
            per_node = width if one_gpu else int(self.pods_per_free[width])
            pods = nodes if per_node == 1 else nodes * per_node
            self._closed_pods[level] = pods
        return pods

    def _full_level(self, level: int) -> IntArray:
        """Slice-rounded capacity of every domain at `level` (at or above the innermost slice)."""
        cached = self._full.get(level)
        if cached is not None:
            return cached
        assert self.slice_level is not None
        topology = self.state.topology
        granule = self.request.granule(level)
        if level == self.slice_level:
            if self.inside is not None and self.inside[0] <= level:
                lo, hi = topology.descendants(*self.inside, level)
                capacity = np.zeros(topology.n_domains(level), dtype=np.int64)
                capacity[lo:hi] = self._raw(level, lo, hi, granule)
            else:
                capacity = self._raw(level, 0, topology.n_domains(level), granule)
        elif not self.exact and (self.inside is None or self.inside[0] > self.slice_level):
            self._every_full_level()
            return self._full[level]
        else:
            below = self._full_level(level + 1)
            bounds = topology.descendant_bounds(level, level + 1)
            capacity = capacity_kernels.sums_of_children(below, bounds, granule)
        self._full[level] = capacity
        return capacity

    def _every_full_level(self) -> None:
        """`_full_level` of the innermost slice level and every level above it, from the
        aggregates in one compiled pass (the same figures level by level)."""
        assert self.slice_level is not None
        level, request, state = self.slice_level, self.request, self.state
        topology = state.topology
        pods, free_cpu, free_memory = self._unbounded(level, 0, topology.n_domains(level))
        offsets = state.stacked_aggregates()[2]
        child_first, child_last = topology.child_rows()
        above = capacity_kernels.slice_level_and_above(
            pods,
            free_cpu,
            free_memory,
            request.cpu_milli,
            request.memory_mib,
            level,
            offsets,
            child_first,
            child_last,
            request.granules(level),
        )
        self._full[level] = pods
        for upper in range(level):
            self._full[upper] = above[offsets[upper] : offsets[upper + 1]]

    def total(self) -> int:
        """Capacity of the whole cluster (at most that, for a view confined `inside`)."""
        return int(self.at(0, 0, 1)[0])

    def free_gpu_equivalent(self, level: int, lo: int, hi: int) -> IntArray:
        """Free GPUs (whole, of allowed models) per domain: what messages report."""
        state, request = self.state, self.request
        if request.is_fractional:
            if request.allowed_models is None:
                return state.free_milli[level][lo:hi] // MILLI_PER_GPU
            # Per-model milli-GPU is not aggregated: count it from the nodes (messages only).
            topology = state.topology
            starts = topology.domain_starts[level][lo : hi + 1]
            nodes = slice(int(starts[0]), int(starts[-1]))
            allowed = np.isin(topology.gpu_model[nodes], request.allowed_models)
            healthy = state.closed[nodes] == 0
            milli = state.gpu_free_milli[nodes].sum(axis=1, dtype=np.int64) * (allowed & healthy)
            per_domain: IntArray = np.add.reduceat(milli, starts[:-1] - starts[0])
            return per_domain // MILLI_PER_GPU
        hist = state.free_hist[level][lo:hi]
        if request.allowed_models is not None:
            hist = hist[:, request.allowed_models, :]
        free: IntArray = hist.sum(axis=1, dtype=np.int64) @ np.arange(hist.shape[2], dtype=np.int64)
        if self.closed is not None:
            closed = self.closed.at(level, request.allowed_models)
            free -= closed.nodes[lo:hi] * state.gpu_free_milli.shape[1]
        return free
