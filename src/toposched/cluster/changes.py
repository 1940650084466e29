"""Taking and giving back allocations: the node arrays and every level's aggregates move
together, validated first, all or nothing."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from toposched.cluster import kernels, run_kernels
from toposched.cluster.aggregates import LevelSums
from toposched.cluster.allocation import MILLI_PER_GPU, Allocation
from toposched.cluster.errors import InputError
from toposched.cluster.rows import (
    SMALL,
    SavedRows,
    distinct,
    put_rows,
    row_sums,
    take_rows,
)
from toposched.cluster.shapes import Shapes
from toposched.cluster.validation import AllocationChecks

FEW_PODS = 512
"""Up to this many pods in all, a bulk change runs pod by pod in one compiled call: a release
on a statement and its rollback cost half to a fifth of the vectorised passes' (measured for
8 to 512 pods of whole GPUs)."""


def one_shape_parts(allocations: list[Allocation]) -> list[Allocation]:
    """`allocations` with each of several pod shapes replaced by its sets."""
    if not any(allocation.sets for allocation in allocations):
        return allocations
    return [part for allocation in allocations for part in allocation.parts]


class _PerTouched:
    """Per-pod amounts of pods on `nodes` summed per touched node (`touched`: their distinct
    nodes, sorted), by the cheapest way their layout allows."""

    def __init__(self, nodes: NDArray[np.int64], touched: NDArray[np.int64], n_nodes: int):
        self.nodes = nodes
        self.touched = touched
        self.n_nodes = n_nodes
        # One pod per touched node (a gang of whole-node pods, the usual case): each node's sum
        # is its pod's amount, found without counting.
        self.one_pod_each = touched.size == nodes.size
        # Pods as many as a sixteenth of the nodes (`distinct_nodes` marks them on a node mask
        # then) are summed over every node, cheaper than locating each; fewer are located.
        self.everywhere = nodes.size * 16 >= n_nodes
        self._position: NDArray[np.int64] | None = None
        self._order: NDArray[np.int64] | None = None

    def sums(self, per_pod: NDArray[np.int64] | None) -> NDArray[np.int64]:
        """Per-pod amounts (None: one per pod) summed per touched node."""
        touched, nodes = self.touched, self.nodes
        if self.one_pod_each:
            if per_pod is None:
                return np.ones(touched.size, dtype=np.int64)
            if per_pod.size and (per_pod == per_pod[0]).all():
                return np.full(touched.size, per_pod[0], dtype=np.int64)
            if self._order is None:
                self._order = np.argsort(nodes, kind="stable")
            return per_pod[self._order].astype(np.int64)
        if self.everywhere:
            summed = np.bincount(nodes, weights=per_pod, minlength=self.n_nodes)
            return summed[touched].astype(np.int64)
        if self._position is None:
            self._position = np.searchsorted(touched, nodes)
        return np.bincount(self._position, weights=per_pod, minlength=touched.size).astype(np.int64)


class HoldingChanges(AllocationChecks):
    """Allocations taken and given back, one at a time or many in one vectorised pass."""

    holds_sets = False
    """Whether an allocation of several pod shapes was ever held: until one is, bulk changes
    skip looking for them."""
    taken = 0
    """Counts the allocations `allocate` took."""
    given_back = 0
    """Counts the allocations `release` and `release_many` gave back (what-ifs on a statement
    that it undoes are not counted)."""

    def allocate(self, owner: str, allocation: Allocation) -> None:
        """Give `owner` the resources of `allocation`; all or nothing, validated first."""
        if not owner:
            raise InputError("owner", owner, "must be a non-empty job id")
        if owner in self.allocations:
            raise InputError("owner", owner, "already holds an allocation; release it first")
        if allocation.sets:
            self._take_sets(owner, allocation)
        else:
            self._take(allocation, f"allocation[{owner}]")
        self.allocations[owner] = allocation
        self.taken += 1

    def _take(self, allocation: Allocation, field: str) -> None:
        """Take the resources of a one-shape allocation, validated first."""
        if not self._fits_now(allocation):
            # The full checks: they raise with the precise reason (or pass what the quick check
            # could not vouch for).
            self._validate_shape(allocation, field)
            self._check_fits(field, allocation)
        self._apply(allocation, -1)

    def _take_sets(self, owner: str, allocation: Allocation) -> None:
        """Take every set of an allocation of several shapes, each checked against what the
        sets before it left free; on an error the sets taken are given back."""
        if allocation.pods != sum(part.pods for part in allocation.sets):
            raise InputError(
                f"allocation[{owner}].nodes", allocation.pods, "must list every set's pods"
            )
        self.holds_sets = True
        taken: list[Allocation] = []
        try:
            for index, part in enumerate(allocation.sets):
                if part.sets:
                    raise InputError(
                        f"allocation[{owner}].sets[{index}]", "sets", "a set holds one shape"
                    )
                self._take(part, f"allocation[{owner}].sets[{index}]")
                taken.append(part)
        except InputError:
            for part in reversed(taken):
                self._apply(part, +1)
            raise

    def release(self, owner: str) -> Allocation:
        """Give back everything `owner` holds and return what it was."""
        allocation = self.allocations.get(owner)
        if allocation is None:
            raise InputError("owner", owner, "holds no allocation; nothing to release")
        self._apply(allocation, +1)
        del self.allocations[owner]
        self.given_back += 1
        return allocation

    def _check_releasable(self, owners: list[str]) -> None:
        missing = [owner for owner in owners if owner not in self.allocations]
        if missing or len(set(owners)) != len(owners):
            bad = missing[0] if missing else owners
            raise InputError("owners", bad, "each must hold an allocation, listed once")

    def release_many(self, owners: list[str]) -> list[Allocation]:
        """Release every owner in one vectorised pass; all or nothing."""
        self._check_releasable(owners)
        if not owners:
            return []
        released = [self.allocations.pop(owner) for owner in owners]
        self._apply_many(released, +1)
        self.given_back += len(released)
        return released

    def retake_many(self, owners: list[str], allocations: list[Allocation]) -> None:
        """Undo `release_many`: the same owners take back exactly what they held.

        Unchecked on purpose: only valid right after the release it undoes (statements use it).
        """
        self._apply_many(allocations, -1)
        self.allocations.update(zip(owners, allocations, strict=True))

    def retake(self, owner: str, allocation: Allocation) -> None:
        """Undo `release`: `owner` takes back exactly what it held.

        Unchecked on purpose: only valid while nothing else took those resources (statements
        undo later operations first).
        """
        self._apply(allocation, -1)
        self.allocations[owner] = allocation

    def _apply(self, allocation: Allocation, sign: int) -> None:
        """Take (sign=-1) or give back (+1) an allocation's resources, updating aggregates."""
        if allocation.sets:
            for part in allocation.sets:
                self._apply(part, sign)
            return
        self.version += 1
        self._changes += 1
        # Pod by pod in compiled code, each pod's changes summed per innermost domain before
        # they reach the aggregates: one pass over the pods with no sort (a gang lists its
        # nodes rack by rack), where numpy's per-call cost would be most of the work for a
        # few pods. Many pods of whole GPUs move each GPU between wholly free and wholly
        # held (a GPU appears once in an allocation: validated), without counting them.
        run_kernels.apply_pods_by_runs(
            allocation.nodes,
            allocation.gpus,
            allocation.gpu_milli,
            allocation.cpu_milli,
            allocation.memory_mib,
            sign,
            self._kernel_arrays(),
            self._changed_at,
            self._changes,
            allocation.nodes.size > kernels.COMPILED_LIMIT,
        )

    def _apply_many(
        self, allocations: list[Allocation], sign: int, keep_rows: bool = False
    ) -> list[SavedRows] | None:
        """`_apply` for many allocations in one vectorised pass (bulk release and re-take).

        With `keep_rows`, returns copies of every node and domain row it is about to change
        (None for `FEW_PODS` pods or fewer, cheaper to undo by the opposite change).
        """
        if not allocations:
            return [] if keep_rows else None
        if self.holds_sets:
            allocations = one_shape_parts(allocations)
        if len(allocations) == 1 and not (keep_rows and allocations[0].pods >= SMALL):
            self.version += 1
            self._apply(allocations[0], sign)
            return None
        if sum(allocation.pods for allocation in allocations) <= FEW_PODS:
            # A few pods (a reservation search releases a handful of small jobs at a time):
            # pod by pod in one compiled call, where the vectorised pass costs tens of numpy
            # calls; no rows kept, since the opposite change undoes it as cheaply.
            self._apply_few(allocations, sign)
            return None
        self.version += 1
        shapes = Shapes.of(allocations)
        nodes = np.concatenate([a.nodes for a in allocations])
        touched = self._touched(shapes, nodes)
        self._changed(touched)
        saved: list[SavedRows] | None = None
        if keep_rows and nodes.size >= SMALL:
            saved = self._node_rows_copy(touched) + self._domain_rows(touched)
        per_node = _PerTouched(nodes, touched, self.topology.n_nodes)
        # Many nodes, each pod holding whole GPUs (at least one): the changes of every total
        # follow from the pods themselves, without reading every touched node's totals before
        # and after (a touched node holds a pod of these, so it is idle only without them).
        if self._by_pods(shapes, touched):
            self._apply_by_pods(allocations, shapes, sign, per_node)
            return saved
        before = self._before_change(touched)
        if self._move_gpus(allocations, shapes, sign, nodes, touched):
            whole = row_sums(take_rows(self.gpu_free_milli, touched) == MILLI_PER_GPU)
            self.free_whole_gpus[touched] = whole.astype(np.int8)
        self._move_cpu_memory(shapes, sign, per_node, None)
        self._after_change(touched, before)
        return saved

    def _apply_few(self, allocations: list[Allocation], sign: int) -> None:
        """`_apply` of several one-shape allocations of a few pods, in one compiled call."""
        self.version += 1
        self._changes += 1
        figures = np.array(
            [
                (a.nodes.shape[0], a.gpus.shape[1], a.gpu_milli, a.cpu_milli, a.memory_mib)
                for a in allocations
            ],
            dtype=np.int64,
        )
        kernels.apply_pods_of_many(
            np.concatenate([a.nodes for a in allocations]),
            np.concatenate([a.gpus.reshape(-1) for a in allocations]),
            figures,
            sign,
            self._kernel_arrays(),
            self._changed_at,
            self._changes,
        )

    def _by_pods(self, shapes: Shapes, touched: NDArray[np.int64]) -> bool:
        """Whether a change of one-shape allocations of `shapes` (on `touched` nodes) moves
        the aggregates by what the pods hold (`_apply_by_pods`): pods each holding whole GPUs
        (at least one) on more nodes than the compiled loops take."""
        return touched.size > kernels.COMPILED_LIMIT and shapes.whole_gpus_each()

    def _take_by_pods(
        self, allocations: list[Allocation], shapes: Shapes, touched: NDArray[np.int64]
    ) -> list[LevelSums]:
        """Take the resources of one-shape `allocations` (of `shapes`, on `touched` nodes,
        `_by_pods`), unchecked; returns what it added to each level's aggregates."""
        self.version += 1
        self._changed(touched)
        nodes = np.concatenate([a.nodes for a in allocations])
        per_node = _PerTouched(nodes, touched, self.topology.n_nodes)
        return self._apply_by_pods(allocations, shapes, -1, per_node)

    def _touched(self, shapes: Shapes, nodes: NDArray[np.int64]) -> NDArray[np.int64]:
        """The distinct nodes of one-shape allocations of `shapes` (`nodes`: their pods'
        nodes), sorted."""
        if shapes.whole_nodes(self.gpu_free_milli.shape[1]):
            # Every pod holds every GPU of its node (whole-node pods): no node holds two, so
            # the distinct nodes are the pods' nodes sorted (runs of increasing nodes, as a
            # placement lists a rack's: a merge sort's best case).
            return np.sort(nodes, kind="stable")
        return self.distinct_nodes(nodes)

    def _move_gpus(
        self,
        allocations: list[Allocation],
        shapes: Shapes,
        sign: int,
        nodes: NDArray[np.int64],
        touched: NDArray[np.int64],
    ) -> bool:
        """Move the free milli-GPU of every GPU the allocations (of `shapes`) hold (pods on
        `nodes`, in order; `touched`: their distinct nodes, sorted); False if they hold none."""
        width = self.gpu_free_milli.shape[1]
        whole_gpus = shapes.whole_gpus()
        gpus_per_pod = shapes.distinct_widths()
        # A whole GPU is held by one pod, all of it: taken, its free share goes from a whole
        # GPU to none; given back, the other way. Set, not added (several times cheaper).
        after = np.int16(MILLI_PER_GPU if sign > 0 else 0)
        if whole_gpus and gpus_per_pod == {width}:
            # Whole-node pods: every GPU of every touched node moves, row by row.
            put_rows(self.gpu_free_milli, touched, np.full((touched.size, width), after))
            return True
        # Flatten with one concatenate per array and repeats of per-allocation scalars: a
        # numpy call per allocation would dominate when tens of thousands are released.
        if len(gpus_per_pod) == 1:
            # Pods of one width (the usual case): GPU slots by broadcasting, without repeats.
            gpus = np.concatenate([a.gpus for a in allocations])
            slots = (nodes[:, None] * width + gpus).reshape(-1)
        else:
            gpus = np.concatenate([a.gpus.reshape(-1) for a in allocations])
            slots = np.repeat(nodes, np.repeat(shapes.widths, shapes.pods)) * width + gpus
        if not slots.size:
            return False
        flat = self.gpu_free_milli.reshape(-1)
        if whole_gpus:
            flat[slots] = after
        else:
            milli = np.repeat(shapes.gpu_milli.astype(np.int16), shapes.pods * shapes.widths)
            np.add.at(flat, slots, sign * milli)
        return True

    def _move_cpu_memory(
        self,
        shapes: Shapes,
        sign: int,
        per_node: _PerTouched,
        unchanged: NDArray[np.int64] | None,
    ) -> tuple[NDArray[np.int64] | None, NDArray[np.int64] | None]:
        """Move free CPU and memory of the touched nodes; returns each one's change per touched
        node (`unchanged` where no allocation asks for it). Per-pod arrays only where some
        allocation asks (whole-GPU pods without CPU or memory requests are the common case),
        summed per touched node: a few small jobs released must not cost a count over every
        node."""
        touched = per_node.touched
        changes: list[NDArray[np.int64] | None] = [unchanged, unchanged]
        for which, (free, asked) in enumerate(
            ((self.free_cpu_milli, shapes.cpu_milli), (self.free_memory_mib, shapes.memory_mib))
        ):
            if asked.any():
                if per_node.one_pod_each and (asked == asked[0]).all():
                    change = np.full(touched.size, sign * asked[0], dtype=np.int64)
                else:
                    change = sign * per_node.sums(np.repeat(asked, shapes.pods))
                free[touched] += change
                changes[which] = change
        return changes[0], changes[1]

    def _apply_by_pods(
        self, allocations: list[Allocation], shapes: Shapes, sign: int, per_node: _PerTouched
    ) -> list[LevelSums]:
        """`_apply_many` for pods each holding whole GPUs on many nodes: the aggregates move by
        what the pods hold, without reading the touched nodes' totals before and after.
        Returns what it added to each level's aggregates."""
        touched = per_node.touched
        gpus_per_pod = shapes.distinct_widths()
        if gpus_per_pod == {self.gpu_free_milli.shape[1]}:
            added = self._apply_whole_nodes(allocations, shapes, sign, per_node)
            if added is not None:
                return added
        old_whole = np.take(self.free_whole_gpus, touched).astype(np.int64)
        old_idle = self._node_idle(touched) if sign < 0 else None
        self._move_gpus(allocations, shapes, sign, per_node.nodes, touched)
        if len(gpus_per_pod) == 1:
            # One width: the pods on each node, times the width (an unweighted count).
            whole_change = (sign * next(iter(gpus_per_pod))) * per_node.sums(None)
        else:
            whole_change = sign * per_node.sums(np.repeat(shapes.widths, shapes.pods))
        self.free_whole_gpus[touched] = (old_whole + whole_change).astype(np.int8)
        cpu_change, memory_change = self._move_cpu_memory(
            shapes, sign, per_node, np.zeros(touched.size, dtype=np.int64)
        )
        if sign > 0:
            idle_change = self._node_idle(touched).astype(np.int64)
        else:
            assert old_idle is not None
            idle_change = -old_idle.astype(np.int64)
        delta = np.empty((5, touched.size), dtype=np.int64)  # one row per total
        delta[0] = whole_change
        np.multiply(whole_change, MILLI_PER_GPU, out=delta[1])
        delta[2] = idle_change
        assert cpu_change is not None and memory_change is not None
        delta[3], delta[4] = cpu_change, memory_change
        return self._add_healthy_changes(touched, delta, old_whole, old_whole + whole_change)

    def _apply_whole_nodes(
        self, allocations: list[Allocation], shapes: Shapes, sign: int, per_node: _PerTouched
    ) -> list[LevelSums] | None:
        """`_apply_by_pods` for whole-node pods (each holding every GPU of its node); None,
        changing nothing, when many nodes are closed. Each node goes from every GPU free to
        none (or back), so an innermost domain's sums follow from how many of its open nodes
        move and how many of them are (or become) idle: no per-node totals. A few closed nodes
        (a failed one under a large gang) move their own arrays and count in no aggregate."""
        touched = per_node.touched
        closed = np.take(self.closed, touched)
        kept: NDArray[np.int64] | None = None
        counted = touched
        if closed.any():
            kept = np.flatnonzero(closed == 0)
            if (touched.size - kept.size) * 8 >= touched.size:
                return None
            counted = touched[kept]
        width = self.gpu_free_milli.shape[1]
        first = self._leaf_runs(counted)
        runs = first.size
        counts = np.diff(np.append(first, counted.size))
        # Taken, idle nodes (every GPU free before) stop being idle; given back, some become.
        idle_before = self._idle_with_gpus_free(counted, first) if sign < 0 else None
        self._move_gpus(allocations, shapes, sign, per_node.nodes, touched)
        self.free_whole_gpus[touched] = width if sign > 0 else 0
        cpu_change, memory_change = self._move_cpu_memory(shapes, sign, per_node, None)
        sums = np.zeros((runs, 5), dtype=np.int64)  # one column per total
        sums[:, 0] = (sign * width) * counts
        sums[:, 1] = sums[:, 0] * MILLI_PER_GPU
        if idle_before is None:
            sums[:, 2] = np.add.reduceat(self._node_idle(counted).astype(np.int64), first)
        else:
            sums[:, 2] = -idle_before
        for column, change in ((3, cpu_change), (4, memory_change)):
            if change is not None:
                sums[:, column] = np.add.reduceat(change if kept is None else change[kept], first)
        n_models = self._n_models
        if n_models == 1:
            per_model = counts[:, None]
        else:
            cell = self._run_of_each(first, counted.size) * n_models + self._models(counted)
            per_model = np.bincount(cell, minlength=runs * n_models).reshape(runs, n_models)
        # Each node leaves the histogram's bin of all its GPUs free for that of none, or back.
        moves = np.zeros((runs, n_models, self._hist_width), dtype=np.int64)
        moves[:, :, width] = sign * per_model
        moves[:, :, 0] = -sign * per_model
        return self._add_domain_sums(counted[first], sums, moves.reshape(runs, -1))

    def _add_healthy_changes(
        self,
        touched: NDArray[np.int64],
        delta: NDArray[np.int64],
        old_whole: NDArray[np.int64],
        new_whole: NDArray[np.int64],
    ) -> list[LevelSums]:
        """Add the changes `delta` of `touched` nodes (every one of them gaining or losing
        whole GPUs) to the aggregates, counting healthy nodes only; returns what it added."""
        healthy = self.closed[touched] == 0
        if not healthy.all():
            unhealthy = np.flatnonzero(~healthy)
            if unhealthy.size * 8 < touched.size:
                # A few unhealthy nodes (a failed one, fenced ones): they count no change and
                # stay where they are in the histogram, cheaper than gathering the rest.
                delta[:, unhealthy] = 0
                new_whole[unhealthy] = old_whole[unhealthy]
            else:
                kept = np.flatnonzero(healthy)
                touched, delta = touched[kept], delta[:, kept]
                old_whole, new_whole = old_whole[kept], new_whole[kept]
        if not touched.size:
            return []
        # Every touched node gains or loses whole GPUs: each moves in the histogram.
        return self._add_counted(touched, delta, None, self._models(touched), old_whole, new_whole)

    def _node_rows_copy(self, nodes: NDArray[np.int64]) -> list[SavedRows]:
        """Copies of the rows of `nodes` in every per-node array a change of holdings moves."""
        return [
            (array, nodes, take_rows(array, nodes))
            for array in (
                self.gpu_free_milli,
                self.free_whole_gpus,
                self.free_cpu_milli,
                self.free_memory_mib,
            )
        ]

    def _domain_rows(self, nodes: NDArray[np.int64]) -> list[SavedRows]:
        """Copies of the aggregate rows of every domain holding one of `nodes` (sorted)."""
        saved: list[SavedRows] = []
        if nodes.size == 0:
            return saved
        if nodes.size <= SMALL:
            # Rows of the stacked arrays (every level at once): fewer numpy calls.
            rows = distinct(self._node_rows[nodes].reshape(-1))
            return [
                (array, rows, take_rows(array, rows))
                for array in (self._totals_all, self._hist_all)
            ]
        # One node per run of the innermost level stands for its domain at every level.
        representative = nodes[self._leaf_runs(nodes)]
        for level, domains in enumerate(self.topology.node_domain):
            d = domains[representative].astype(np.int64)
            touched = d[np.concatenate(([True], d[1:] != d[:-1]))]
            for array in (self._totals[level], self.free_hist[level]):
                saved.append((array, touched, take_rows(array, touched)))
        return saved
