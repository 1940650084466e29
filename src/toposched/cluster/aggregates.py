"""The state's arrays: free capacity per node and GPU, and per-domain aggregates kept in step
with them at every level."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from toposched.cluster import kernels, run_kernels
from toposched.cluster.allocation import MILLI_PER_GPU, Allocation
from toposched.cluster.health import Health
from toposched.cluster.rows import distinct, row_sums, take_rows
from toposched.cluster.topology import Topology

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

_FewBefore = tuple[NDArray[np.int64], NDArray[np.int64]]
"""A few nodes' values (one row per node) and whether each is open."""
_Before = _FewBefore | tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]
"""What `_before_change` kept: few nodes' values, or many open nodes' rows."""
LevelSums = tuple[int, NDArray[np.integer], NDArray[np.int64], NDArray[np.int32] | None]
"""One level's domains touched, the sums of their totals and their histogram cells' changes:
added to the aggregates, and taken away again to undo a change exactly."""


@dataclass(eq=False)
class _Share:
    """What open `nodes` (sorted) add to the aggregates, as of change `stamp`: per run of them
    in one innermost domain, and per domain of every level. Kept in step with the nodes by
    `run_kernels.refresh_runs` when a few of them change."""

    nodes: NDArray[np.int64]
    stamp: int
    first: NDArray[np.int64]
    """Where each run begins (positions in `nodes`), and one more entry: where the last ends."""
    run_sums: NDArray[np.int64]
    """What each run adds to the totals (one row per run)."""
    run_cells: NDArray[np.int64]
    """Each run's histogram cells (one row per run: GPU models x free whole GPUs, flattened)."""
    run_rows: NDArray[np.int64]
    """Per run and level, the position in `rows` of the run's domain there."""
    rows: NDArray[np.int64]
    """The domains the nodes are in, at every level: rows of the stacked aggregates."""
    sums: NDArray[np.int64]
    cells: NDArray[np.int32]
    """What the nodes add to each of `rows`: its totals and histogram cells (flattened)."""

    def refresh(
        self,
        nodes: NDArray[np.int64],
        changed_at: NDArray[np.int64],
        arrays: kernels.StateArrays,
        since: int | None = None,
    ) -> int:
        """Bring the share up to date where its nodes changed after change `since` (its own
        stamp by default; `changed_at`: each node's last change): the runs read again, or -1
        if `nodes` are not the share's (then nothing is read or changed)."""
        refreshed: int = run_kernels.refresh_runs(
            self.nodes,
            nodes,
            changed_at,
            self.stamp if since is None else since,
            self.first,
            self.run_rows,
            self.run_sums,
            self.run_cells,
            self.sums,
            self.cells,
            arrays,
        )
        return refreshed


_ONE_MODEL = np.zeros(0, dtype=np.int64)
"""Stands for the nodes' GPU models where the cluster has one (`StateArrays._models`)."""

# How many shares of many-node health changes and closures are kept to be added again (see
# `_contribute`): a cycle's fence closes its block and a few large nominations.
_RECENT_SHARES = 8


def _sums_per_domain(values: NDArray[np.int64], starts: NDArray[np.integer]) -> NDArray[np.int64]:
    """Sums of per-node `values` over each domain of node ranges `starts` (CSR boundaries)."""
    running = np.concatenate(([0], np.cumsum(values, dtype=np.int64)))
    sums: NDArray[np.int64] = np.diff(running[starts])
    return sums


class StateArrays:
    """Free capacity of every node and GPU, and aggregates for every domain at every level.

    Per node: free milli-GPU of each GPU (`gpu_free_milli`, padded with 0 past the node's GPU
    count), free whole GPUs, free CPU millicores and memory MiB, health, and whether it is open
    to new work (`closed`). Per domain level (0 = the whole cluster): a histogram
    `free_hist[level][domain, model, k]` of open nodes with exactly k free whole GPUs, plus free
    whole GPUs, free milli-GPU, idle nodes, free CPU and memory, all counting open nodes only
    (healthy, not fenced, not a held spare). The methods here keep the aggregates in step with
    changes of nodes: O(levels x touched nodes), never O(cluster).
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
        self.closed: NDArray[np.uint8] = np.zeros(n, dtype=np.uint8)
        """Per node, 0 where it may take new work; else the bits of why not (`Closure`: not
        healthy, fenced, held as a spare). What placement reads, and what the aggregates
        count: only open nodes."""
        # Nodes in each health state (closures aside), so "any draining node?" needs no pass over
        # the nodes.
        self.nodes_by_health: NDArray[np.int64] = np.zeros(len(Health), dtype=np.int64)
        self.nodes_by_health[Health.HEALTHY] = n
        self.allocations: dict[str, Allocation] = {}
        # What an idle node's free CPU, memory and whole GPUs add up to (see `_node_idle`).
        self._idle_sum = top.cpu_milli.astype(np.int64) + top.memory_mib + top.gpu_count
        # Per innermost domain, the CPU and memory its nodes hold (see `_idle_with_gpus_free`).
        self._leaf_capacity = np.stack(
            [_sums_per_domain(a, top.domain_starts[-1]) for a in (top.cpu_milli, top.memory_mib)]
        )
        # Per node, the number of the last change of its free GPUs, CPU or memory (`_changed`),
        # so that a share found for nodes none of which changed since is still theirs.
        self._changes = 0
        self._changed_at = np.zeros(n, dtype=np.int64)
        self._recent_shares: list[_Share] = []
        self.unsummed_changes = 0
        """Changes of node arrays under way that the aggregates do not follow (a search's
        what-if, `Statement.free_on_nodes`): while there are any, what nodes add to the
        aggregates is read from the nodes alone, never from their domains' rows."""
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
        # `np.take`: several times faster than fancy indexing for many nodes.
        free = np.take(self.free_cpu_milli, nodes) + np.take(self.free_memory_mib, nodes)
        free += np.take(self.free_whole_gpus, nodes)
        idle: NDArray[np.bool_] = free == np.take(self._idle_sum, nodes)
        return idle

    def _models(self, nodes: NDArray[np.int64]) -> NDArray[np.integer]:
        """The GPU model of each of `nodes`, for `_hist_moves` (which reads none when the
        cluster has one model: then not gathered)."""
        if self._n_models == 1:
            return _ONE_MODEL
        models: NDArray[np.integer] = np.take(self.topology.gpu_model, nodes)
        return models

    def compute_aggregates(self) -> dict[str, list[NDArray[np.int64]]]:
        """Every aggregate recomputed from the node arrays (the oracle for incremental ones)."""
        top = self.topology
        healthy = self.closed == 0
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
        """Add (sign=+1) or remove (-1) the share of open `nodes` (distinct, sorted)."""
        if nodes.size <= kernels.COMPILED_LIMIT:
            # Compiled, node by node: fewer steps than numpy calls for a few nodes.
            kernels.add_nodes(nodes, sign, self._kernel_arrays())
            return
        self._contribute_open(run_kernels.open_nodes(nodes, self.closed), sign)

    def _contribute_open(self, nodes: NDArray[np.int64], sign: int) -> None:
        """`_contribute` for `nodes` all open (for sign=-1, still counted in the aggregates),
        however few: added as one share, found again while they are the same nodes. A new
        share keeps `nodes`: an array nobody changes afterwards."""
        if nodes.size == 0:
            return
        share = self._recent_share(nodes)
        if share is None:
            # Nodes leaving count in their domains' rows now, so a domain all of whose counted
            # nodes leave gives its row; nodes coming back are not in them yet.
            share = self._share_of(nodes, sign < 0 and self.unsummed_changes == 0)
            self._recent_shares.insert(0, share)
            del self._recent_shares[_RECENT_SHARES:]
        self._add_share(share, sign)

    def _recent_share(self, nodes: NDArray[np.int64]) -> _Share | None:
        """A share found before for exactly these open nodes, brought up to date where some of
        them changed since (only their runs read again). A fence takes the reservation's nodes
        out of the aggregates and puts them back several times a cycle, a few of them changed
        by backfills in between."""
        shares = self._recent_shares
        for at, share in enumerate(shares):
            if share.nodes.size != nodes.size:
                continue
            if share.refresh(nodes, self._changed_at, self._kernel_arrays()) < 0:
                continue
            share.stamp = self._changes
            if at:
                shares.insert(0, shares.pop(at))
            return share
        return None

    def _share_of(self, nodes: NDArray[np.int64], from_rows: bool) -> _Share:
        """What open `nodes` (sorted) add to the aggregates now. Nodes are sorted and domains
        depth-first: summed per innermost domain once (whole domains passed over), then per
        domain of each upper level from those sums (two compiled passes). With `from_rows`
        (the nodes count in their domains' rows, which sum the node arrays), a domain all of
        whose counted nodes are among them gives its row."""
        top = self.topology
        first, run_sums, run_cells = run_kernels.domain_run_sums(
            nodes, top.node_domain[-1], top.domain_starts[-1], self._kernel_arrays(), from_rows
        )
        rows, sums, cells, run_rows = run_kernels.runs_per_domain(
            nodes[first], self._node_rows, run_sums, run_cells
        )
        ends = np.append(first, nodes.size)
        return _Share(nodes, self._changes, ends, run_sums, run_cells, run_rows, rows, sums, cells)

    def _add_share(self, share: _Share, sign: int) -> None:
        """Add (sign=+1) or take away (-1) what `share`'s nodes add to the aggregates."""
        run_kernels.add_to_rows(self._totals_all, share.rows, share.sums, sign)
        hist = self._hist_all
        run_kernels.add_to_rows(hist.reshape(hist.shape[0], -1), share.rows, share.cells, sign)

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
        with their health, of many open nodes as rows, so that `_after_change` adds
        differences."""
        if touched.size <= kernels.COMPILED_LIMIT:
            return self._values_of(touched), self.closed[touched] == 0
        healthy = touched[self.closed[touched] == 0]
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
        model = self._models(nodes[moved])
        # More nodes than the compiled loops take: summed per rack, then per upper domain.
        self._add_counted(nodes, delta, moved, model, old_whole, new_whole)

    def _idle_with_gpus_free(
        self, nodes: NDArray[np.int64], first: NDArray[np.int64]
    ) -> NDArray[np.int64]:
        """For open `nodes` (sorted) with every GPU free, how many are idle in each run of
        them in one innermost domain (runs begin at `first`). A domain whose open nodes have
        as much CPU and memory free as all its nodes hold has every open node idle: its
        runs are counted without reading their nodes (the usual case: free racks)."""
        counts = np.diff(np.append(first, nodes.size))
        leaves = np.take(self.topology.node_domain[-1], np.take(nodes, first))
        leaf = len(self._totals) - 1
        free_cpu = np.take(self.domain_free_cpu[leaf], leaves)
        free_memory = np.take(self.domain_free_memory[leaf], leaves)
        all_free = (free_cpu == np.take(self._leaf_capacity[0], leaves)) & (
            free_memory == np.take(self._leaf_capacity[1], leaves)
        )
        if all_free.all():
            return counts
        read = np.repeat(~all_free, counts)
        idle = np.zeros(nodes.size, dtype=np.int64)
        idle[read] = self._node_idle(nodes[read])
        idle_per_run: NDArray[np.int64] = np.where(all_free, counts, np.add.reduceat(idle, first))
        return idle_per_run

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
    ) -> list[LevelSums]:
        """Add per-node changes of open `nodes` (sorted) to the aggregates: `delta` of the
        totals (one row per total, one column per node), and for the `moved` nodes (None: every
        node) a histogram move from `old_whole` to `new_whole` (None: nodes not counted before,
        or no longer). Returns what it added to each level.

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
        return self._add_domain_sums(nodes[first], sums, moves)

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
    ) -> list[LevelSums]:
        """Add per-run `sums` of the totals and histogram `moves` (None: none) to every level,
        each run standing as one node of its innermost domain (`representative`, sorted);
        returns what it added to each level."""
        added = self._level_sums(representative, sums, moves)
        self._add_level_sums(added, 1)
        return added

    def _level_sums(
        self,
        representative: NDArray[np.int64],
        sums: NDArray[np.int64],
        moves: NDArray[np.int64] | None,
    ) -> list[LevelSums]:
        """Per-run `sums` and `moves` (as for `_add_domain_sums`) summed per domain of every
        level, innermost first."""
        levels = self.topology.node_domain
        leaf = len(levels) - 1
        per_level: list[LevelSums] = []
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

    def _add_level_sums(self, per_level: list[LevelSums], sign: int) -> None:
        """Add (sign=+1) or take away (-1) sums per domain of `_level_sums`."""
        for level, rows, level_sums, cells in per_level:
            run_kernels.add_to_rows(self._totals[level], rows, level_sums, sign)
            if cells is not None:
                hist = self.free_hist[level]
                run_kernels.add_to_rows(
                    hist.reshape(hist.shape[0], -1), rows, cells.reshape(rows.size, -1), sign
                )

    def distinct_nodes(self, nodes: NDArray[np.int64]) -> NDArray[np.int64]:
        """Sorted distinct `nodes`; many of them are marked on a node mask instead of sorted."""
        if nodes.size * 16 < self.topology.n_nodes:
            return distinct(nodes)
        mask = np.zeros(self.topology.n_nodes, dtype=bool)
        mask[nodes] = True
        return np.flatnonzero(mask)

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
            self.closed,
            self._node_rows,
            top.gpu_model,
            self._hist_all,
            self._totals_all,
        )

    def _values_of(self, nodes: NDArray[np.int64]) -> NDArray[np.int64]:
        """`nodes`' shares of the totals, one row per node (compiled: for a few nodes)."""
        values: NDArray[np.int64] = kernels.node_values(nodes, self._kernel_arrays())
        return values
