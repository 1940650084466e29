"""ClusterState: struct-of-arrays free capacity with per-domain aggregates kept incrementally."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import IntEnum
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from toposched.cluster import kernels
from toposched.cluster.errors import InputError
from toposched.cluster.topology import Topology

MILLI_PER_GPU = 1000
_TOTAL_COLUMNS = ("free_gpus", "free_milli", "idle_nodes", "cpu", "memory")
_N_TOTALS = len(_TOTAL_COLUMNS)
# Columns of `stacked_aggregates()`'s totals.
TOTALS_FREE_GPUS = _TOTAL_COLUMNS.index("free_gpus")
TOTALS_CPU = _TOTAL_COLUMNS.index("cpu")
TOTALS_MEMORY = _TOTAL_COLUMNS.index("memory")
_VIEWS = (
    "free_hist",
    "_totals",
    "free_gpus",
    "free_milli",
    "idle_nodes",
    "domain_free_cpu",
    "domain_free_memory",
)
# Below these sizes plain Python beats numpy's per-call overhead (measured with bench cluster).
_SMALL = 64
_MAX_PER_POD = 2**40
_HEALTHY = 0  # Health.HEALTHY as a plain int: enum lookups cost on the hot path


SavedRows = tuple[NDArray[np.integer], NDArray[np.int64], NDArray[np.integer]]
"""An array (per node or per domain), some of its rows, and copies of them."""
_FewBefore = tuple[NDArray[np.int64], NDArray[np.int64]]
"""A few nodes' values (one row per node) and whether each is healthy."""
_Before = _FewBefore | tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]
"""What `_before_change` kept: few nodes' values, or many healthy nodes' rows."""


def row_sums(values: NDArray[np.integer] | NDArray[np.bool_]) -> NDArray[np.int64]:
    """Sum of each row of a narrow 2-D array (one row per node, one column per GPU).

    numpy's reduction along a short last axis costs tens of nanoseconds per element; for many
    rows, bool rows of 1, 2, 4 or 8 columns are read as one integer and their bits counted, and
    other rows are added column by column (a handful of vectorised adds).
    """
    rows, width = values.shape
    if rows < _SMALL:
        small: NDArray[np.int64] = values.sum(axis=1, dtype=np.int64)
        return small
    as_word = _WORDS.get(width)
    if values.dtype == np.bool_ and as_word is not None and values.flags.c_contiguous:
        counted: NDArray[np.int64] = np.bitwise_count(values.view(as_word)).reshape(-1)
        return counted.astype(np.int64)
    total = np.zeros(rows, dtype=np.int64)
    for column in range(width):
        total += values[:, column]
    return total


def distinct(values: NDArray[np.int64]) -> NDArray[np.int64]:
    """Sorted distinct values of a 1-D integer array, like `np.unique` but by sorting (numpy's
    hash-based unique is tens of times slower on node lists), and without even a sort when the
    values are already increasing (a gang's nodes usually are)."""
    if values.size < 2:
        return values.copy()
    increasing = values[1:] > values[:-1]
    if increasing.all():
        return values.copy()
    if not (values[1:] >= values[:-1]).all():
        values = values.copy()
        values.sort()
        increasing = values[1:] > values[:-1]
    result: NDArray[np.int64] = values[np.concatenate(([True], increasing))]
    return result


def distinct_inverse(values: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """`np.unique(values, return_inverse=True)` for a 1-D integer array, by a stable sort (for
    the same reason as `distinct`)."""
    order = values.argsort(kind="stable")
    ordered = values[order]
    first = np.empty(values.size, dtype=bool)
    first[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    inverse = np.empty(values.size, dtype=np.int64)
    inverse[order] = first.cumsum() - 1
    return ordered[first], inverse


def _add_to_rows(
    array: NDArray[np.integer], rows: NDArray[np.integer], change: NDArray[np.integer], sign: int
) -> None:
    """`array[rows] += sign * change`, without a signed copy of `change` (sign is +1 or -1)."""
    values = take_rows(array, rows)
    if sign > 0:
        values += change
    else:
        values -= change
    put_rows(array, rows, values)


def take_rows(array: NDArray[_Item], rows: NDArray[np.integer]) -> NDArray[_Item]:
    """`array[rows]` (rows of a multi-column array), several times faster than fancy indexing."""
    return np.take(array, rows, axis=0)


def put_rows(array: NDArray[_Item], rows: NDArray[np.integer], values: NDArray[_Item]) -> None:
    """`array[rows] = values` for a C-contiguous array, each row moved as one opaque item:
    numpy's fancy assignment of multi-column rows is several times slower (for many rows)."""
    if len(rows) < _SMALL:
        array[rows] = values
        return
    item = np.dtype((np.void, array.itemsize * (array.size // max(array.shape[0], 1))))
    target = array.reshape(array.shape[0], -1).view(item).reshape(-1)
    source = np.ascontiguousarray(values, dtype=array.dtype).reshape(len(rows), -1)
    target[rows] = source.view(item).reshape(-1)


_Item = TypeVar("_Item", bound=np.generic)

_WORDS: dict[int, type[np.unsignedinteger]] = {
    1: np.uint8,
    2: np.uint16,
    4: np.uint32,
    8: np.uint64,
}


class Health(IntEnum):
    """Node health; only healthy nodes offer capacity to new work."""

    HEALTHY = 0
    DRAINING = 1
    CORDONED = 2
    DOWN = 3


_LevelSums = tuple[int, NDArray[np.integer], NDArray[np.int64], NDArray[np.int32] | None]
"""One level's domains touched, the sums of their totals and their histogram cells' changes."""


@dataclass(frozen=True, eq=False)
class _Share:
    """What healthy `nodes` (sorted) add to the aggregates, as of change `stamp`."""

    nodes: NDArray[np.int64]
    stamp: int
    levels: list[_LevelSums]
    """The sums per domain of every level (see `ClusterState._level_sums`), added or taken
    away as they are each time the nodes' share is."""


# How many shares of many-node health changes are kept to be added again (see `_contribute`).
_RECENT_SHARES = 4


@dataclass(frozen=True)
class Allocation:
    """What one gang holds: every pod's node and GPUs, with uniform per-pod resources.

    `gpus[p]` lists the GPU indices (on node `nodes[p]`) that pod p uses; each listed GPU gives
    `gpu_milli` (1000 for a whole GPU, less for a shared fraction). CPU-only pods have no GPU
    columns (`gpus.shape == (pods, 0)`).
    """

    nodes: NDArray[np.int64]
    gpus: NDArray[np.int64]
    gpu_milli: int = MILLI_PER_GPU
    cpu_milli: int = 0
    memory_mib: int = 0

    @property
    def pods(self) -> int:
        return int(self.nodes.shape[0])

    @property
    def gpu_milli_total(self) -> int:
        return int(self.gpus.size) * self.gpu_milli

    @staticmethod
    def of(
        nodes: list[int] | NDArray[np.int64],
        gpus: list[list[int]] | NDArray[np.int64],
        gpu_milli: int = MILLI_PER_GPU,
        cpu_milli: int = 0,
        memory_mib: int = 0,
    ) -> Allocation:
        nodes_array = np.asarray(nodes, dtype=np.int64).reshape(-1)
        gpus_array = np.asarray(gpus, dtype=np.int64)
        if gpus_array.size == 0:
            gpus_array = np.zeros((len(nodes_array), 0), dtype=np.int64)
        gpus_array = gpus_array.reshape(len(nodes_array), -1)
        return Allocation(nodes_array, gpus_array, gpu_milli, cpu_milli, memory_mib)


class ClusterState:
    """Free capacity of every node and GPU, and aggregates for every domain at every level.

    Per node: free milli-GPU of each GPU (`gpu_free_milli`, padded with 0 past the node's GPU
    count), free whole GPUs, free CPU millicores and memory MiB, and health. Per domain level
    (0 = the whole cluster): a histogram `free_hist[level][domain, model, k]` of healthy nodes
    with exactly k free whole GPUs, plus free whole GPUs, free milli-GPU, idle nodes, free CPU
    and memory — all counting healthy nodes only. Every change updates the aggregates of the
    nodes it touches at each level: O(levels x touched nodes), never O(cluster).

    Allocations are held per owner (a job id). Mutators validate first and change nothing on
    error; use a `Statement` to try changes and undo them exactly.
    """

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        top = topology
        n, width = top.n_nodes, max(top.max_gpus_per_node, 1)
        gpu_exists = np.arange(width)[None, :] < top.gpu_count[:, None]
        self.gpu_free_milli: NDArray[np.int16] = np.where(gpu_exists, MILLI_PER_GPU, 0).astype(
            np.int16
        )
        self.free_whole_gpus: NDArray[np.int8] = top.gpu_count.copy()
        self.free_cpu_milli: NDArray[np.int64] = top.cpu_milli.copy()
        self.free_memory_mib: NDArray[np.int64] = top.memory_mib.copy()
        self.health: NDArray[np.uint8] = np.zeros(n, dtype=np.uint8)
        # Nodes in each health state, so "any draining node?" needs no pass over the nodes.
        self.nodes_by_health: NDArray[np.int64] = np.zeros(len(Health), dtype=np.int64)
        self.nodes_by_health[Health.HEALTHY] = n
        self.allocations: dict[str, Allocation] = {}
        # What an idle node's free CPU, memory and whole GPUs add up to (see `_node_idle`).
        self._idle_sum = top.cpu_milli.astype(np.int64) + top.memory_mib + top.gpu_count
        # Per node, the number of the last change of its free GPUs, CPU or memory (`_changed`),
        # so that a share found for nodes none of which changed since is still theirs.
        self._changes = 0
        self._changed_at = np.zeros(n, dtype=np.int64)
        self._recent_shares: list[_Share] = []
        self.version = 0
        """Counts changes, so that callers can tell whether anything moved since they looked."""
        self._n_models = max(len(top.gpu_models), 1)
        self._hist_width = width + 1
        self.free_hist: list[NDArray[np.int32]] = []
        self._totals: list[NDArray[np.int64]] = []
        self.free_gpus: list[NDArray[np.int64]] = []
        self.free_milli: list[NDArray[np.int64]] = []
        self.idle_nodes: list[NDArray[np.int64]] = []
        self.domain_free_cpu: list[NDArray[np.int64]] = []
        self.domain_free_memory: list[NDArray[np.int64]] = []
        self._recompute_aggregates()

    # --- aggregates ----------------------------------------------------------------------------
    def _node_idle(self, nodes: NDArray[np.int64]) -> NDArray[np.bool_]:
        """Whether each node has all its whole GPUs, CPU and memory free. No free amount
        exceeds the node's own, so they are all free when their sum is that of the node's:
        one comparison of sums instead of three."""
        free = self.free_cpu_milli[nodes] + self.free_memory_mib[nodes]
        free += self.free_whole_gpus[nodes]
        idle: NDArray[np.bool_] = free == self._idle_sum[nodes]
        return idle

    def compute_aggregates(self) -> dict[str, list[NDArray[np.int64]]]:
        """Every aggregate recomputed from the node arrays (the oracle for incremental ones)."""
        top = self.topology
        healthy = self.health == Health.HEALTHY
        idle = (
            (self.free_whole_gpus == top.gpu_count)
            & (self.free_cpu_milli == top.cpu_milli)
            & (self.free_memory_mib == top.memory_mib)
            & healthy
        )
        milli = row_sums(self.gpu_free_milli)
        result: dict[str, list[NDArray[np.int64]]] = {
            name: []
            for name in ("free_hist", "free_gpus", "free_milli", "idle_nodes", "cpu", "memory")
        }
        for level in range(len(top.domain_levels)):
            domain = top.node_domain[level].astype(np.int64)
            n_domains = top.n_domains(level)
            hist = np.zeros((n_domains, self._n_models, self._hist_width), dtype=np.int64)
            np.add.at(
                hist,
                (domain[healthy], top.gpu_model[healthy], self.free_whole_gpus[healthy]),
                1,
            )
            result["free_hist"].append(hist)

            columns = {
                "free_gpus": self.free_whole_gpus.astype(np.int64),
                "free_milli": milli,
                "idle_nodes": idle.astype(np.int64),
                "cpu": self.free_cpu_milli,
                "memory": self.free_memory_mib,
            }
            for name, values in columns.items():
                sums = np.bincount(domain[healthy], weights=values[healthy], minlength=n_domains)
                result[name].append(sums.astype(np.int64))
        return result

    def _recompute_aggregates(self) -> None:
        fresh = self.compute_aggregates()
        top = self.topology
        levels = len(fresh["free_hist"])
        # Every level's domains stacked in one array (per-level views of it), so that a change
        # to a node reaches its domain at every level in one indexed operation: row
        # `_node_rows[node, level]` is the node's domain at that level.
        counts = [top.n_domains(level) for level in range(levels)]
        self._level_offsets = np.cumsum([0, *counts])
        self._hist_all = np.concatenate(fresh["free_hist"]).astype(np.int32)
        # One (domains x 5) block, so a one-node change is one row add per level.
        self._totals_all = np.concatenate(
            [
                np.stack([fresh[name][level] for name in _TOTAL_COLUMNS], axis=1)
                for level in range(levels)
            ]
        )
        self._node_rows = np.stack(
            [
                top.node_domain[level].astype(np.int64) + self._level_offsets[level]
                for level in range(levels)
            ],
            axis=1,
        )
        self._make_views()

    def _make_views(self) -> None:
        """The per-level and per-aggregate arrays, as views of the stacked ones."""
        offsets = self._level_offsets.tolist()
        levels = range(len(offsets) - 1)
        self.free_hist = [self._hist_all[offsets[i] : offsets[i + 1]] for i in levels]
        self._totals = [self._totals_all[offsets[i] : offsets[i + 1]] for i in levels]
        self.free_gpus = [t[:, 0] for t in self._totals]
        self.free_milli = [t[:, 1] for t in self._totals]
        self.idle_nodes = [t[:, 2] for t in self._totals]
        self.domain_free_cpu = [t[:, 3] for t in self._totals]
        self.domain_free_memory = [t[:, 4] for t in self._totals]

    def __getstate__(self) -> dict[str, object]:
        # Views would come back from a pickle (or deepcopy) as independent copies that changes
        # no longer reach: leave them out and make them again on load.
        state = self.__dict__.copy()
        for name in _VIEWS:
            state.pop(name, None)
        state["_recent_shares"] = []
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._make_views()

    def _contribute(self, nodes: NDArray[np.int64], sign: int) -> None:
        """Add (sign=+1) or remove (-1) the share of healthy `nodes` (distinct, sorted)."""
        if nodes.size <= kernels.COMPILED_LIMIT:
            # Compiled, node by node: fewer steps than numpy calls for a few nodes.
            kernels.add_nodes(nodes, sign, self._kernel_arrays())
            return
        nodes = nodes[self.health[nodes] == _HEALTHY]
        if nodes.size == 0:
            return
        share = self._recent_share(nodes)
        if share is None:
            whole, values = self._rows(nodes)
            # Nodes are sorted and domains depth-first: summed per innermost domain once, then
            # per domain of each upper level from those sums.
            first = self._leaf_runs(nodes)
            run = self._run_of_each(first, nodes.size)
            model = self.topology.gpu_model[nodes]
            levels = self._level_sums(
                nodes[first],
                np.add.reduceat(values, first, axis=1).T,
                self._hist_moves(first.size, run, model, None, whole),
            )
            share = _Share(nodes, self._changes, levels)
            self._recent_shares.insert(0, share)
            del self._recent_shares[_RECENT_SHARES:]
        self._add_level_sums(share.levels, sign)

    def _recent_share(self, nodes: NDArray[np.int64]) -> _Share | None:
        """A share found before for exactly these healthy nodes, if none of them changed since.
        A fence takes the reservation's nodes out of the aggregates and puts them back several
        times a cycle, mostly unchanged in between."""
        for share in self._recent_shares:
            if (
                share.nodes.size == nodes.size
                and np.array_equal(share.nodes, nodes)
                and int(self._changed_at[nodes].max()) <= share.stamp
            ):
                return share
        return None

    def _changed(self, nodes: NDArray[np.int64] | slice) -> None:
        """Record that the free GPUs, CPU or memory of `nodes` may have changed."""
        self._changes += 1
        self._changed_at[nodes] = self._changes

    def _rows(self, nodes: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Free whole GPUs of `nodes`, and their shares of the per-domain totals: one row per
        total, one column per node (stacked row by row: several times faster than column by
        column for many nodes)."""
        rows = np.empty((_N_TOTALS, nodes.size), dtype=np.int64)
        whole, milli, idle, cpu, memory = rows
        whole[:] = self.free_whole_gpus[nodes]
        np.take(self.free_cpu_milli, nodes, out=cpu)
        np.take(self.free_memory_mib, nodes, out=memory)
        gpus = take_rows(self.gpu_free_milli, nodes)
        milli[:] = gpus[:, 0]
        for column in range(1, gpus.shape[1]):
            milli += gpus[:, column]
        # Idle as in `_node_idle`, from the values read already.
        np.add(cpu, memory, out=idle)
        idle += whole
        np.equal(idle, self._idle_sum[nodes], out=idle, casting="unsafe")
        return whole, rows

    def _before_change(self, touched: NDArray[np.int64]) -> _Before:
        """Start a change of `touched` (sorted, unique): the old values of few nodes are kept
        with their health, of many healthy nodes as rows, so that `_after_change` adds
        differences."""
        if touched.size <= kernels.COMPILED_LIMIT:
            return self._values_of(touched), self.health[touched] == _HEALTHY
        healthy = touched[self.health[touched] == _HEALTHY]
        return (healthy, *self._rows(healthy))

    def _after_change(self, touched: NDArray[np.int64], before: _Before) -> None:
        if len(before) == 2:  # a few nodes' values and health (`_FewBefore`)
            old_values, healthy = before
            kernels.add_node_changes(
                touched,
                old_values,
                self._values_of(touched),
                healthy,
                self._node_rows,
                self.topology.gpu_model,
                self._hist_all,
                self._totals_all,
            )
            return
        nodes, old_whole, old_rows = before
        if nodes.size == 0:
            return
        new_whole, new_rows = self._rows(nodes)
        delta = new_rows - old_rows
        moved = np.flatnonzero(new_whole != old_whole)
        model = self.topology.gpu_model[nodes[moved]]
        # More nodes than the compiled loops take: summed per rack, then per upper domain.
        self._add_counted(nodes, delta, moved, model, old_whole, new_whole)

    def _leaf_runs(self, nodes: NDArray[np.int64]) -> NDArray[np.int64]:
        """Where each run of sorted `nodes` sharing an innermost domain begins (positions)."""
        leaves = self.topology.node_domain[-1][nodes]
        changes = np.flatnonzero(leaves[1:] != leaves[:-1]) + 1
        first: NDArray[np.int64] = np.concatenate((np.zeros(1, dtype=np.int64), changes))
        return first

    def _run_of_each(self, first: NDArray[np.int64], size: int) -> NDArray[np.int64]:
        """The run (index into `first`) of each of `size` nodes."""
        marks = np.zeros(size, dtype=np.int64)
        marks[first[1:]] = 1
        run: NDArray[np.int64] = np.cumsum(marks)
        return run

    def _add_counted(
        self,
        nodes: NDArray[np.int64],
        delta: NDArray[np.int64],
        moved: NDArray[np.int64] | None,
        model: NDArray[np.integer],
        old_whole: NDArray[np.int64] | None,
        new_whole: NDArray[np.int64] | None,
    ) -> None:
        """Add per-node changes of healthy `nodes` (sorted) to the aggregates: `delta` of the
        totals (one row per total, one column per node), and for the `moved` nodes (None: every
        node) a histogram move from `old_whole` to `new_whole` (None: nodes not counted before,
        or no longer).

        Summed once per innermost domain (runs of sorted nodes; histogram moves counted, not
        scattered), then per domain of each upper level from those sums: the cost is one pass
        over the nodes plus passes over the domains they touch.
        """
        first = self._leaf_runs(nodes)
        sums = np.add.reduceat(delta, first, axis=1).T
        moves = None
        if moved is None or moved.size:
            run = self._run_of_each(first, nodes.size)
            if moved is not None:
                run = run[moved]
                old_whole = None if old_whole is None else old_whole[moved]
                new_whole = None if new_whole is None else new_whole[moved]
            moves = self._hist_moves(first.size, run, model, old_whole, new_whole)
        self._add_domain_sums(nodes[first], sums, moves)

    def _hist_moves(
        self,
        runs: int,
        run: NDArray[np.int64],
        model: NDArray[np.integer],
        old_whole: NDArray[np.int64] | None,
        new_whole: NDArray[np.int64] | None,
    ) -> NDArray[np.int64]:
        """Per run, the change of its histogram cells (models x free whole GPUs, flattened)
        when nodes of `run` move from `old_whole` to `new_whole` free GPUs."""
        size = runs * self._n_models * self._hist_width
        cell = (
            run * self._hist_width
            if self._n_models == 1
            else ((run * self._n_models + model) * self._hist_width)
        )
        moves = np.zeros(size, dtype=np.int64)
        if new_whole is not None:
            moves += np.bincount(cell + new_whole, minlength=size)
        if old_whole is not None:
            moves -= np.bincount(cell + old_whole, minlength=size)
        return moves.reshape(runs, -1)

    def _add_domain_sums(
        self,
        representative: NDArray[np.int64],
        sums: NDArray[np.int64],
        moves: NDArray[np.int64] | None,
    ) -> None:
        """Add per-run `sums` of the totals and histogram `moves` (None: none) to every level,
        each run standing as one node of its innermost domain (`representative`, sorted)."""
        self._add_level_sums(self._level_sums(representative, sums, moves), 1)

    def _level_sums(
        self,
        representative: NDArray[np.int64],
        sums: NDArray[np.int64],
        moves: NDArray[np.int64] | None,
    ) -> list[_LevelSums]:
        """Per-run `sums` and `moves` (as for `_add_domain_sums`) summed per domain of every
        level, innermost first."""
        levels = self.topology.node_domain
        leaf = len(levels) - 1
        per_level: list[_LevelSums] = []
        for level in range(leaf, -1, -1):
            domains = levels[level][representative]
            if level == leaf:
                rows, level_sums, level_moves = domains, sums, moves
            else:
                upper = np.flatnonzero(np.concatenate(([True], domains[1:] != domains[:-1])))
                rows = domains[upper]
                level_sums = np.add.reduceat(sums, upper, axis=0)
                level_moves = None if moves is None else np.add.reduceat(moves, upper, axis=0)
            cells = None
            if level_moves is not None:
                shape = (rows.size, *self.free_hist[level].shape[1:])
                cells = level_moves.reshape(shape).astype(np.int32)
            per_level.append((level, rows, level_sums, cells))
        return per_level

    def _add_level_sums(self, per_level: list[_LevelSums], sign: int) -> None:
        """Add (sign=+1) or take away (-1) sums per domain of `_level_sums`."""
        for level, rows, level_sums, cells in per_level:
            _add_to_rows(self._totals[level], rows, level_sums, sign)
            if cells is not None:
                _add_to_rows(self.free_hist[level], rows, cells, sign)

    def _validate_shape(self, allocation: Allocation, field: str) -> None:
        top = self.topology
        nodes, gpus = allocation.nodes, allocation.gpus
        if gpus.ndim != 2 or gpus.shape[0] != nodes.shape[0]:
            raise InputError(f"{field}.gpus", gpus.shape, "must have one row per pod")
        if nodes.size and (nodes.min() < 0 or nodes.max() >= top.n_nodes):
            bad = int(nodes[(nodes < 0) | (nodes >= top.n_nodes)][0])
            raise InputError(f"{field}.nodes", bad, f"must be a node index in [0, {top.n_nodes})")
        if gpus.size:
            counts = top.gpu_count[nodes].astype(np.int64)[:, None]
            bad_mask = (gpus < 0) | (gpus >= counts)
            if bad_mask.any():
                pod = int(np.argwhere(bad_mask)[0][0])
                raise InputError(
                    f"{field}.gpus[{pod}]",
                    gpus[pod].tolist(),
                    f"node {top.node_names[int(nodes[pod])]} has {int(counts[pod, 0])} GPUs",
                )
        milli = allocation.gpu_milli
        if isinstance(milli, bool) or not isinstance(milli, int | np.integer):
            raise InputError(f"{field}.gpu_milli", milli, "must be an integer milli-GPU")
        if gpus.size and not 0 < allocation.gpu_milli <= MILLI_PER_GPU:
            raise InputError(f"{field}.gpu_milli", allocation.gpu_milli, "must be in (0, 1000]")
        if gpus.shape[1] > 1 and allocation.gpu_milli != MILLI_PER_GPU:
            raise InputError(
                f"{field}.gpu_milli", allocation.gpu_milli, "a fraction applies to one GPU per pod"
            )
        for name, value in (
            ("cpu_milli", allocation.cpu_milli),
            ("memory_mib", allocation.memory_mib),
        ):
            if isinstance(value, bool) or not isinstance(value, int | np.integer):
                raise InputError(f"{field}.{name}", value, "must be an integer")
            if value < 0:
                raise InputError(f"{field}.{name}", value, "must be >= 0")
            if value > _MAX_PER_POD:
                # The bound keeps pod count x request far from int64 overflow.
                raise InputError(f"{field}.{name}", value, f"must be <= {_MAX_PER_POD}")

    def distinct_nodes(self, nodes: NDArray[np.int64]) -> NDArray[np.int64]:
        """Sorted distinct `nodes`; many of them are marked on a node mask instead of sorted."""
        if nodes.size * 16 < self.topology.n_nodes:
            return distinct(nodes)
        mask = np.zeros(self.topology.n_nodes, dtype=bool)
        mask[nodes] = True
        return np.flatnonzero(mask)

    @staticmethod
    def _unique(values: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Distinct values and their counts; one-value arrays skip the sort."""
        if values.size == 1:
            return values, np.ones(1, dtype=np.int64)
        if values.size <= _SMALL:
            # A dict counts a few values faster than numpy's sort-based unique.
            tally: dict[int, int] = {}
            for value in values.tolist():
                tally[value] = tally.get(value, 0) + 1
            keys = sorted(tally)
            return (
                np.array(keys, dtype=np.int64),
                np.array([tally[k] for k in keys], dtype=np.int64),
            )
        if not (values[1:] >= values[:-1]).all():
            values = np.sort(values)  # numpy's hash-based unique is far slower than a sort
        # Sorted (pods are usually listed node by node): distinct values are the runs.
        first = np.flatnonzero(np.concatenate(([True], values[1:] != values[:-1])))
        return values[first], np.diff(np.append(first, values.size))

    def _gpu_slots(self, allocation: Allocation) -> NDArray[np.int64]:
        width = self.gpu_free_milli.shape[1]
        slots: NDArray[np.int64] = (allocation.nodes[:, None] * width + allocation.gpus).reshape(-1)
        return slots

    def _distinct_and_free(self, slots: NDArray[np.int64]) -> bool:
        """Whether the GPUs at flat `slots` are all different and wholly free; when not, the
        full check counts them. A few slots are compared as a set; many, in whatever order the
        placement lists them (policy order within racks), in one compiled pass without a sort."""
        if slots.size <= _SMALL:
            if len(set(slots.tolist())) != slots.size:
                return False
            return bool((self.gpu_free_milli.reshape(-1)[slots] == MILLI_PER_GPU).all())
        return bool(
            kernels.whole_gpus_distinct_and_free(
                self.gpu_free_milli.reshape(-1), slots, MILLI_PER_GPU
            )
        )

    def _check_fits(self, owner: str, allocation: Allocation) -> None:
        """Raise unless every GPU, CPU and memory request fits what is free now."""
        top = self.topology
        field = f"allocation[{owner}]"
        unhealthy = self.health[allocation.nodes] != _HEALTHY
        if unhealthy.any():
            node = int(allocation.nodes[unhealthy][0])
            raise InputError(
                f"{field}.nodes",
                top.node_names[node],
                f"node is {Health(int(self.health[node])).name.lower()}; only healthy nodes take "
                "new work",
            )
        slots = self._gpu_slots(allocation)
        # Whole GPUs, each asked for once and free, fit without counting.
        if slots.size and not (
            allocation.gpu_milli == MILLI_PER_GPU and self._distinct_and_free(slots)
        ):
            unique, counts = self._unique(slots)
            wanted = counts * allocation.gpu_milli
            free = self.gpu_free_milli.reshape(-1)[unique]
            over = wanted > free
            if over.any():
                slot = int(unique[over][0])
                node, gpu = divmod(slot, self.gpu_free_milli.shape[1])
                raise InputError(
                    f"{field}.gpus",
                    f"{top.node_names[node]} GPU {gpu}",
                    f"needs {int(wanted[over][0])} milli-GPU, {int(free[over][0])} free",
                )
        if not (allocation.cpu_milli or allocation.memory_mib):
            return
        if allocation.nodes.size > _SMALL and all(
            kernels.per_pod_requests_fit(free_array, allocation.nodes, per_pod)
            for per_pod, free_array in (
                (allocation.cpu_milli, self.free_cpu_milli),
                (allocation.memory_mib, self.free_memory_mib),
            )
            if per_pod
        ):
            return  # many pods, in policy order: checked without sorting their nodes
        unique, counts = self._unique(allocation.nodes)
        for name, per_pod, free_array in (
            ("cpu_milli", allocation.cpu_milli, self.free_cpu_milli),
            ("memory_mib", allocation.memory_mib, self.free_memory_mib),
        ):
            if per_pod == 0:
                continue
            over = counts * per_pod > free_array[unique]
            if over.any():
                node = int(unique[over][0])
                raise InputError(
                    f"{field}.{name}",
                    int(counts[over][0] * per_pod),
                    f"exceeds the {int(free_array[node])} free on node {top.node_names[node]}",
                )

    # --- changes ------------------------------------------------------------------------------
    def _apply(self, allocation: Allocation, sign: int) -> None:
        """Take (sign=-1) or give back (+1) an allocation's resources, updating aggregates."""
        if allocation.nodes.size > kernels.COMPILED_LIMIT and (
            allocation.gpu_milli == MILLI_PER_GPU and allocation.gpus.shape[1]
        ):
            # Many pods of whole GPUs: moved by what the pods hold (see `_apply_many`).
            self._apply_many([allocation], sign, one=True)
            return
        self.version += 1
        if allocation.nodes.size <= kernels.COMPILED_LIMIT:
            # Pod by pod in compiled code: for a few pods numpy's per-call cost would be most
            # of the work.
            self._changes += 1
            kernels.apply_pods(
                allocation.nodes,
                allocation.gpus,
                allocation.gpu_milli,
                allocation.cpu_milli,
                allocation.memory_mib,
                sign,
                self._kernel_arrays(),
                self._changed_at,
                self._changes,
            )
            return
        self._changed(allocation.nodes)
        touched, pods_per_node = self._unique(allocation.nodes)
        before = self._before_change(touched)
        slots = self._gpu_slots(allocation)
        flat = self.gpu_free_milli.reshape(-1)
        if slots.size:
            if allocation.gpu_milli == MILLI_PER_GPU:
                # A whole GPU appears once in an allocation (validated): no scatter needed.
                flat[slots] += np.int16(sign * MILLI_PER_GPU)
            else:
                np.add.at(flat, slots, np.int16(sign * allocation.gpu_milli))
            whole = row_sums(take_rows(self.gpu_free_milli, touched) == MILLI_PER_GPU)
            self.free_whole_gpus[touched] = whole.astype(np.int8)
        if allocation.cpu_milli:
            self.free_cpu_milli[touched] += sign * allocation.cpu_milli * pods_per_node
        if allocation.memory_mib:
            self.free_memory_mib[touched] += sign * allocation.memory_mib * pods_per_node
        self._after_change(touched, before)

    def stacked_aggregates(
        self,
    ) -> tuple[NDArray[np.int32], NDArray[np.int64], NDArray[np.int64]]:
        """Every level's domain aggregates stacked, for compiled loops that walk several levels:
        the free-GPU histograms (rows x GPU models x free whole GPUs), the totals (rows x
        `TOTALS_*` columns), and where each level's rows begin (level l: rows `offsets[l]` to
        `offsets[l + 1]`, domains in index order). The live arrays: read, never write."""
        return self._hist_all, self._totals_all, self._level_offsets

    def _kernel_arrays(self) -> kernels.StateArrays:
        """The node arrays and aggregates the compiled loops change, in their argument order."""
        top = self.topology
        return (
            self.free_whole_gpus,
            self.gpu_free_milli,
            self.free_cpu_milli,
            self.free_memory_mib,
            top.gpu_count,
            top.cpu_milli,
            top.memory_mib,
            self.health,
            self._node_rows,
            top.gpu_model,
            self._hist_all,
            self._totals_all,
        )

    def _values_of(self, nodes: NDArray[np.int64]) -> NDArray[np.int64]:
        """`nodes`' shares of the totals, one row per node (compiled: for a few nodes)."""
        values: NDArray[np.int64] = kernels.node_values(nodes, self._kernel_arrays())
        return values

    def _apply_many(
        self, allocations: list[Allocation], sign: int, keep_rows: bool = False, one: bool = False
    ) -> list[SavedRows] | None:
        """`_apply` for many allocations in one vectorised pass (bulk release and re-take).

        With `keep_rows`, returns copies of every node and domain row it is about to change
        (None for a handful of pods, cheaper to undo by the opposite change). `one`: called by
        `_apply` for one allocation.
        """
        if not allocations:
            return [] if keep_rows else None
        pods = np.array([a.pods for a in allocations], dtype=np.int64)
        saved: list[SavedRows] | None = None
        if len(allocations) == 1 and not one and not (keep_rows and pods[0] >= _SMALL):
            self.version += 1
            self._apply(allocations[0], sign)
            return None
        self.version += 1
        width = self.gpu_free_milli.shape[1]
        # Flatten with one concatenate per array and repeats of per-allocation scalars: a
        # numpy call per allocation would dominate when tens of thousands are released.
        gpus_per_pod = {a.gpus.shape[1] for a in allocations}
        milli_per_gpu = {a.gpu_milli for a in allocations}
        nodes = np.concatenate([a.nodes for a in allocations])
        if len(gpus_per_pod) == 1:
            # Pods of one width (the usual case): GPU slots by broadcasting, without repeats.
            gpus = np.concatenate([a.gpus for a in allocations])
            slots = (nodes[:, None] * width + gpus).reshape(-1)
        else:
            per_pod = np.array([a.gpus.shape[1] for a in allocations], dtype=np.int64)
            gpus = np.concatenate([a.gpus.reshape(-1) for a in allocations])
            slots = np.repeat(nodes, np.repeat(per_pod, pods)) * width + gpus
        # Per-pod CPU and memory arrays only where some allocation asks for them (whole-GPU
        # pods without CPU or memory requests are the common case).
        cpu_of = [a.cpu_milli for a in allocations]
        memory_of = [a.memory_mib for a in allocations]
        touched = self.distinct_nodes(nodes)
        self._changed(touched)
        if keep_rows and nodes.size >= _SMALL:
            saved = self._node_rows_copy(touched) + self._domain_rows(touched)
        # Pods as many as a sixteenth of the nodes (`distinct_nodes` marks them on a node mask
        # then) are summed over every node, cheaper than locating each; fewer are located.
        everywhere = nodes.size * 16 >= self.topology.n_nodes
        position: NDArray[np.int64] | None = None

        # One pod per touched node (a gang of whole-node pods, the usual case): each node's sum
        # is its pod's amount, found without counting.
        one_pod_each = touched.size == nodes.size
        order: NDArray[np.int64] | None = None

        def per_touched(per_pod: NDArray[np.int64] | None) -> NDArray[np.int64]:
            """Per-pod amounts (None: one per pod) summed per touched node."""
            nonlocal position, order
            if one_pod_each:
                if per_pod is None:
                    return np.ones(touched.size, dtype=np.int64)
                if per_pod.size and (per_pod == per_pod[0]).all():
                    return np.full(touched.size, per_pod[0], dtype=np.int64)
                if order is None:
                    order = np.argsort(nodes, kind="stable")
                return per_pod[order].astype(np.int64)
            if everywhere:
                summed = np.bincount(nodes, weights=per_pod, minlength=self.topology.n_nodes)
                return summed[touched].astype(np.int64)
            if position is None:
                position = np.searchsorted(touched, nodes)
            return np.bincount(position, weights=per_pod, minlength=touched.size).astype(np.int64)

        # Many nodes, each pod holding whole GPUs (at least one): the changes of every total
        # follow from the pods themselves, without reading every touched node's totals before
        # and after (a touched node holds a pod of these, so it is idle only without them).
        by_pods = (
            milli_per_gpu == {MILLI_PER_GPU}
            and 0 not in gpus_per_pod
            and touched.size > kernels.COMPILED_LIMIT
        )
        before: _Before | None = None
        if by_pods:
            old_whole = self.free_whole_gpus[touched].astype(np.int64)
            old_idle = self._node_idle(touched) if sign < 0 else None
        else:
            before = self._before_change(touched)
        if slots.size:
            flat = self.gpu_free_milli.reshape(-1)
            if milli_per_gpu == {MILLI_PER_GPU}:
                # Whole GPUs are held by one pod each: no slot repeats, a plain add will do.
                flat[slots] += np.int16(sign * MILLI_PER_GPU)
            else:
                milli = np.repeat(
                    np.array([a.gpu_milli for a in allocations], dtype=np.int16),
                    pods * np.array([a.gpus.shape[1] for a in allocations], dtype=np.int64),
                )
                np.add.at(flat, slots, sign * milli)
        whole_change: NDArray[np.int64] | None = None
        if by_pods:
            if len(gpus_per_pod) == 1:
                # One width: the pods on each node, times the width (an unweighted count).
                whole_change = (sign * next(iter(gpus_per_pod))) * per_touched(None)
            else:
                widths = np.array([a.gpus.shape[1] for a in allocations], dtype=np.int64)
                whole_change = sign * per_touched(np.repeat(widths, pods))
            self.free_whole_gpus[touched] = (old_whole + whole_change).astype(np.int8)
        elif slots.size:
            whole = row_sums(take_rows(self.gpu_free_milli, touched) == MILLI_PER_GPU)
            self.free_whole_gpus[touched] = whole.astype(np.int8)
        # Summed per touched node: a few small jobs released must not cost a count over every
        # node.
        no_change = np.zeros(touched.size, dtype=np.int64) if by_pods else None
        changes: list[NDArray[np.int64] | None] = [no_change, no_change]
        for which, (free, asked) in enumerate(
            ((self.free_cpu_milli, cpu_of), (self.free_memory_mib, memory_of))
        ):
            if any(asked):
                if one_pod_each and len(set(asked)) == 1:
                    change = np.full(touched.size, sign * asked[0], dtype=np.int64)
                else:
                    change = sign * per_touched(np.repeat(np.array(asked, dtype=np.int64), pods))
                free[touched] += change
                changes[which] = change
        if not by_pods:
            assert before is not None
            self._after_change(touched, before)
            return saved
        assert whole_change is not None
        if sign > 0:
            idle_change = self._node_idle(touched).astype(np.int64)
        else:
            assert old_idle is not None
            idle_change = -old_idle.astype(np.int64)
        delta = np.empty((5, touched.size), dtype=np.int64)  # one row per total
        delta[0] = whole_change
        np.multiply(whole_change, MILLI_PER_GPU, out=delta[1])
        delta[2] = idle_change
        cpu_change, memory_change = changes
        assert cpu_change is not None and memory_change is not None
        delta[3], delta[4] = cpu_change, memory_change
        new_whole = old_whole + whole_change
        healthy = self.health[touched] == _HEALTHY
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
        if touched.size:
            # Every touched node gains or loses whole GPUs: each moves in the histogram.
            self._add_counted(
                touched,
                delta,
                None,
                self.topology.gpu_model[touched],
                old_whole,
                new_whole,
            )
        return saved

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
        return released

    def release_many_keeping_rows(
        self, owners: list[str]
    ) -> tuple[list[Allocation], list[SavedRows] | None]:
        """`release_many`, also returning copies of every row it changed (None when few pods
        were released), for `restore_released` to undo it by putting them back: cheaper than
        re-taking tens of thousands of nodes and recounting their aggregates."""
        self._check_releasable(owners)
        released = [self.allocations.pop(owner) for owner in owners]
        return released, self._apply_many(released, +1, keep_rows=True)

    def restore_released(
        self, owners: list[str], allocations: list[Allocation], saved: list[SavedRows]
    ) -> None:
        """Undo `release_many_keeping_rows` with the rows it kept: the owners hold exactly what
        they held. Unchecked on purpose: only valid while the state is as the release left it
        (statements undo later operations first)."""
        self.version += 1
        for array, rows, _ in saved:
            if array is self.gpu_free_milli:
                self._changed(rows)
        self._restore_domain_rows(saved)
        self.allocations.update(zip(owners, allocations, strict=True))

    @contextmanager
    def gpus_released(self, nodes: NDArray[np.int64], freeing: NDArray[np.bool_]) -> Iterator[None]:
        """Inside the block, the whole GPUs marked in `freeing` (one row per node of `nodes`,
        sorted and unique; one column per GPU), held now by whole-GPU pods, are free, though
        nobody stops holding them: a what-if of evictions for a search to look at, the
        aggregates moved by the change. Afterwards the rows are put back and the aggregates
        moved back, exactly (integer arithmetic).

        Unchecked on purpose: the caller must mark whole GPUs held right now, and must not
        change the state inside the block.
        """
        old_milli = take_rows(self.gpu_free_milli, nodes)
        new_milli = np.where(freeing, np.int16(MILLI_PER_GPU), old_milli)
        self.version += 1
        self._changed(nodes)
        kernels.set_gpu_rows(nodes, new_milli, self._kernel_arrays())
        try:
            yield
        finally:
            self.version += 1
            self._changed(nodes)
            kernels.set_gpu_rows(nodes, old_milli, self._kernel_arrays())

    def _domain_rows(self, nodes: NDArray[np.int64]) -> list[SavedRows]:
        """Copies of the aggregate rows of every domain holding one of `nodes` (sorted)."""
        saved: list[SavedRows] = []
        if nodes.size == 0:
            return saved
        if nodes.size <= _SMALL:
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

    @staticmethod
    def _restore_domain_rows(saved: list[SavedRows]) -> None:
        for array, touched, rows in saved:
            put_rows(array, touched, rows)

    @contextmanager
    def parts_released(self, parts: list[Allocation]) -> Iterator[None]:
        """Inside the block, the resources of `parts` (pieces of allocations held now) are
        free, though nobody stops holding them: a what-if of evictions for a search to look at.
        Afterwards every touched node row and domain aggregate row is put back as it was,
        copied before (cheaper than undoing the change for tens of thousands of nodes).

        Unchecked on purpose: the caller must pass resources that are held right now, and
        must not change the state inside the block.
        """
        if not parts:
            yield
            return
        nodes, _ = self._unique(np.concatenate([part.nodes for part in parts]))
        node_rows: list[tuple[NDArray[np.integer], NDArray[np.integer]]] = [
            (array, take_rows(array, nodes))
            for array in (
                self.gpu_free_milli,
                self.free_whole_gpus,
                self.free_cpu_milli,
                self.free_memory_mib,
            )
        ]
        domain_rows = self._domain_rows(nodes)
        self._apply_many(parts, +1)
        try:
            yield
        finally:
            self.version += 1
            self._changed(nodes)
            for array, saved in node_rows:
                put_rows(array, nodes, saved)
            self._restore_domain_rows(domain_rows)

    @contextmanager
    def released_on_nodes(self, parts: list[Allocation], first: int, last: int) -> Iterator[None]:
        """Inside the block, the pods of `parts` on nodes first..last-1 are free in the node
        arrays alone (GPUs, whole GPUs, CPU, memory); domain aggregates keep their values.

        A what-if for a search confined to those nodes (one innermost domain): far cheaper than
        `parts_released`, which moves every level's aggregates. Unchecked on purpose, like
        `parts_released`: the caller passes resources held now, reads nothing outside the nodes
        and changes nothing inside the block.
        """
        # Only the arrays the parts change are saved and restored.
        node_arrays: list[NDArray[np.integer]] = [self.gpu_free_milli, self.free_whole_gpus]
        if any(part.cpu_milli for part in parts):
            node_arrays.append(self.free_cpu_milli)
        if any(part.memory_mib for part in parts):
            node_arrays.append(self.free_memory_mib)
        saved = [array[first:last].copy() for array in node_arrays]
        self.version += 1
        self._changed(slice(first, last))
        try:
            for part in parts:
                kernels.free_pods_inside(
                    part.nodes,
                    part.gpus,
                    part.gpu_milli,
                    part.cpu_milli,
                    part.memory_mib,
                    first,
                    last,
                    self.free_whole_gpus,
                    self.gpu_free_milli,
                    self.free_cpu_milli,
                    self.free_memory_mib,
                )
            yield
        finally:
            self.version += 1
            self._changed(slice(first, last))
            for array, rows_before in zip(node_arrays, saved, strict=True):
                array[first:last] = rows_before

    def retake_many(self, owners: list[str], allocations: list[Allocation]) -> None:
        """Undo `release_many`: the same owners take back exactly what they held.

        Unchecked on purpose: only valid right after the release it undoes (statements use it).
        """
        self._apply_many(allocations, -1)
        self.allocations.update(zip(owners, allocations, strict=True))

    def allocate(self, owner: str, allocation: Allocation) -> None:
        """Give `owner` the resources of `allocation`; all or nothing, validated first."""
        if not owner:
            raise InputError("owner", owner, "must be a non-empty job id")
        if owner in self.allocations:
            raise InputError("owner", owner, "already holds an allocation; release it first")
        if not self._fits_now(allocation):
            # The full checks: they raise with the precise reason (or pass what the quick check
            # could not vouch for).
            self._validate_shape(allocation, f"allocation[{owner}]")
            self._check_fits(owner, allocation)
        self._apply(allocation, -1)
        self.allocations[owner] = allocation

    def _fits_now(self, allocation: Allocation) -> bool:
        """True if `allocation` is well formed, of at most `COMPILED_LIMIT` pods, and fits now:
        scalars checked here, nodes and GPUs in one compiled pass (numpy's per-call cost
        would dominate at this size). False means "run the full checks", not "invalid"."""
        nodes, gpus = allocation.nodes, allocation.gpus
        if nodes.ndim != 1 or nodes.size > kernels.COMPILED_LIMIT:
            return False
        if gpus.ndim != 2 or gpus.shape[0] != nodes.shape[0]:
            return False
        if nodes.dtype.kind not in "iu" or gpus.dtype.kind not in "iu":
            return False
        milli, cpu, memory = allocation.gpu_milli, allocation.cpu_milli, allocation.memory_mib
        if type(milli) is not int or not 0 < milli <= MILLI_PER_GPU:
            return False
        if gpus.shape[1] > 1 and milli != MILLI_PER_GPU:
            return False
        if type(cpu) is not int or type(memory) is not int:
            return False
        if not (0 <= cpu <= _MAX_PER_POD and 0 <= memory <= _MAX_PER_POD):
            return False
        fits: bool = kernels.fits_now(
            nodes,
            gpus,
            milli,
            cpu,
            memory,
            self.topology.gpu_count,
            self.health,
            self.gpu_free_milli,
            self.free_cpu_milli,
            self.free_memory_mib,
        )
        return fits

    def release(self, owner: str) -> Allocation:
        """Give back everything `owner` holds and return what it was."""
        allocation = self.allocations.get(owner)
        if allocation is None:
            raise InputError("owner", owner, "holds no allocation; nothing to release")
        self._apply(allocation, +1)
        del self.allocations[owner]
        return allocation

    def set_health(self, nodes: NDArray[np.int64] | list[int], health: Health) -> NDArray[np.uint8]:
        """Set the health of `nodes`; returns their previous health (for undo)."""
        node_array = distinct(np.asarray(nodes, dtype=np.int64).reshape(-1))
        if node_array.size and (node_array[0] < 0 or node_array[-1] >= self.topology.n_nodes):
            raise InputError("nodes", node_array.tolist()[:5], "must be valid node indices")
        try:
            value = Health(health)
        except ValueError:
            raise InputError(
                "health", health, f"must be one of {', '.join(h.name.lower() for h in Health)}"
            ) from None
        previous = self.health[node_array].copy()
        self.version += 1
        self._contribute(node_array, -1)
        self.health[node_array] = value
        self._contribute(node_array, +1)
        self.nodes_by_health -= np.bincount(previous, minlength=len(Health))
        self.nodes_by_health[value] += node_array.size
        return previous

    def restore_health(self, nodes: NDArray[np.int64], previous: NDArray[np.uint8]) -> None:
        """Undo `set_health`: put each node back to its recorded health."""
        self.version += 1
        changed = distinct(nodes)
        self._contribute(changed, -1)
        self.nodes_by_health -= np.bincount(self.health[changed], minlength=len(Health))
        self.health[nodes] = previous
        self.nodes_by_health += np.bincount(self.health[changed], minlength=len(Health))
        self._contribute(changed, +1)

    # --- queries ---------------------------------------------------------------------------------
    def owners_on(self, nodes: NDArray[np.int64] | list[int]) -> list[str]:
        """Owners holding anything on any of `nodes` (O(allocations); for failures and drains)."""
        wanted = np.zeros(self.topology.n_nodes, dtype=bool)
        wanted[np.asarray(nodes, dtype=np.int64)] = True
        return [owner for owner, a in self.allocations.items() if wanted[a.nodes].any()]

    @property
    def total_free_gpus(self) -> int:
        return int(self.free_gpus[0][0])

    def snapshot(self) -> dict[str, np.ndarray]:
        """Copies of every array of the state, per node and per domain at every level, by name
        (to check that something changed nothing, or that a rollback restored everything)."""
        arrays: dict[str, np.ndarray] = {
            "gpu_free_milli": self.gpu_free_milli,
            "free_whole_gpus": self.free_whole_gpus,
            "free_cpu_milli": self.free_cpu_milli,
            "free_memory_mib": self.free_memory_mib,
            "health": self.health,
            "nodes_by_health": self.nodes_by_health,
        }
        for level in range(len(self.free_hist)):
            arrays[f"free_hist[{level}]"] = self.free_hist[level]
            arrays[f"free_gpus[{level}]"] = self.free_gpus[level]
            arrays[f"free_milli[{level}]"] = self.free_milli[level]
            arrays[f"idle_nodes[{level}]"] = self.idle_nodes[level]
            arrays[f"domain_free_cpu[{level}]"] = self.domain_free_cpu[level]
            arrays[f"domain_free_memory[{level}]"] = self.domain_free_memory[level]
        return {name: array.copy() for name, array in arrays.items()}

    def nbytes(self) -> int:
        """Memory held by the state's arrays, topology included."""
        arrays: list[np.ndarray] = [
            self.gpu_free_milli,
            self.free_whole_gpus,
            self.free_cpu_milli,
            self.free_memory_mib,
            self.health,
            self._hist_all,
            self._totals_all,
            self._node_rows,
        ]
        return self.topology.nbytes() + sum(a.nbytes for a in arrays)
