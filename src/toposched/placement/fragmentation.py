"""Fragmentation-aware placement: each task goes where it least raises expected unusable GPUs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.errors import InputError
from toposched.cluster.state import ClusterState
from toposched.cluster.topology import Topology
from toposched.cluster.units import MILLI_PER_GPU
from toposched.placement.policies import PlacementPolicy
from toposched.placement.request import GangRequest

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

FGD_COVERAGE = 0.95
"""FGD's target workload: the most popular task shapes that cover 95% of the tasks."""


@dataclass(frozen=True)
class TargetWorkload:
    """The task shapes a cluster expects and how many tasks of each shape were seen.

    A shape is (CPU milli, memory MiB, GPUs, milli per GPU, allowed GPU models). `gpu_milli`
    < 1000 means a share of one GPU; CPU-only shapes have `gpus` = 0 and `gpu_milli` = 0.
    `allowed[k, m]` says whether shape k may run on GPU model m of the topology the workload
    was built for; `specs[k]` is the same as text ("" for any model). Shapes are ordered by
    popularity, most popular first.
    """

    cpu_milli: IntArray
    memory_mib: IntArray
    gpus: IntArray
    gpu_milli: IntArray
    allowed: BoolArray
    specs: tuple[str, ...]
    counts: IntArray

    def __post_init__(self) -> None:
        n = self.counts.shape[0]
        for name in ("cpu_milli", "memory_mib", "gpus", "gpu_milli"):
            if getattr(self, name).shape != (n,):
                raise InputError(f"workload.{name}", getattr(self, name).shape, f"must be ({n},)")
        if self.allowed.ndim != 2 or self.allowed.shape[0] != n or len(self.specs) != n:
            raise InputError("workload.allowed", self.allowed.shape, f"must be ({n}, models)")
        if n and min(int(self.cpu_milli.min()), int(self.memory_mib.min())) < 0:
            raise InputError("workload", "cpu/memory", "must be >= 0")
        if n and (int(self.counts.min()) <= 0 or int(self.gpus.min()) < 0):
            raise InputError("workload", "counts/gpus", "counts must be > 0 and gpus >= 0")
        shares = self.gpu_milli[self.gpus > 0]
        if shares.size and (shares.min() <= 0 or shares.max() > MILLI_PER_GPU):
            raise InputError("workload.gpu_milli", int(shares.min()), "must be in (0, 1000]")

    @property
    def n_shapes(self) -> int:
        return int(self.counts.shape[0])

    @staticmethod
    def from_tasks(
        topology: Topology,
        cpu_milli: Sequence[int] | IntArray,
        num_gpu: Sequence[int] | IntArray,
        gpu_milli: Sequence[int] | IntArray,
        models: Sequence[Sequence[str]] | None = None,
        memory_mib: Sequence[int] | IntArray | None = None,
    ) -> TargetWorkload:
        """Count the distinct shapes of a task list; `models[i]` empty means any GPU model.

        Model names the topology lacks are ignored; a shape allowed on none of its models
        stays in the workload (such tasks exist, they just never fit).
        """
        cpu = np.asarray(cpu_milli, dtype=np.int64)
        gpus = np.asarray(num_gpu, dtype=np.int64)
        milli = np.where(gpus > 0, np.asarray(gpu_milli, dtype=np.int64), 0)
        memory = np.zeros_like(cpu) if memory_mib is None else np.asarray(memory_mib, np.int64)
        task_specs = [""] * len(cpu) if models is None else ["|".join(m) for m in models]
        if not len(cpu) == len(gpus) == len(milli) == len(memory) == len(task_specs):
            raise InputError("tasks", len(cpu), "cpu, memory, gpus, milli and models must align")
        # Model constraints only matter for tasks that use a GPU.
        task_specs = [
            spec if g > 0 else "" for spec, g in zip(task_specs, gpus.tolist(), strict=True)
        ]
        spec_codes: dict[str, int] = {}
        spec_of_task = np.array(
            [spec_codes.setdefault(s, len(spec_codes)) for s in task_specs], dtype=np.int64
        )
        keys = np.stack([cpu, memory, milli, gpus, spec_of_task], axis=1).reshape(-1, 5)
        unique, counts = np.unique(keys, axis=0, return_counts=True)
        names = list(spec_codes)
        index = {model.name: i for i, model in enumerate(topology.gpu_models) if model.name}
        allowed = np.ones((len(unique), len(topology.gpu_models)), dtype=bool)
        for row, code in enumerate(unique[:, 4].tolist()):
            wanted = [name for name in names[code].split("|") if name]
            if wanted:
                allowed[row] = False
                allowed[row, [index[name] for name in wanted if name in index]] = True
        return TargetWorkload(
            cpu_milli=unique[:, 0].copy(),
            memory_mib=unique[:, 1].copy(),
            gpus=unique[:, 3].copy(),
            gpu_milli=unique[:, 2].copy(),
            allowed=allowed,
            specs=tuple(names[code] for code in unique[:, 4].tolist()),
            counts=counts.astype(np.int64),
        )._by_popularity()

    def _by_popularity(self) -> TargetWorkload:
        """Shapes by count, then (CPU, milli, GPUs, models text) descending, as FGD orders them."""
        spec_rank = np.argsort(np.argsort(np.array(self.specs, dtype=object)))
        order = np.lexsort(
            (-spec_rank, -self.gpus, -self.gpu_milli, -self.cpu_milli, -self.counts)
        ).astype(np.int64)
        return self.take(order)

    def ignoring_memory(self) -> TargetWorkload:
        """Shapes that differ only in memory merged into one (FGD's shapes have no memory)."""
        spec_codes: dict[str, int] = {}
        codes = np.array([spec_codes.setdefault(s, len(spec_codes)) for s in self.specs])
        keys = np.stack([self.cpu_milli, self.gpu_milli, self.gpus, codes.astype(np.int64)], 1)
        _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        counts = np.bincount(inverse.reshape(-1), weights=self.counts).astype(np.int64)
        merged = self.take(first.astype(np.int64))
        return TargetWorkload(
            cpu_milli=merged.cpu_milli,
            memory_mib=np.zeros_like(merged.memory_mib),
            gpus=merged.gpus,
            gpu_milli=merged.gpu_milli,
            allowed=merged.allowed,
            specs=merged.specs,
            counts=counts,
        )._by_popularity()

    def most_popular(self, coverage: float) -> TargetWorkload:
        """The most popular shapes that together cover at least `coverage` of the tasks."""
        if not 0 < coverage <= 1:
            raise InputError("coverage", coverage, "must be in (0, 1]")
        cumulative = np.cumsum(self.counts)
        if cumulative.size == 0:
            return self
        keep = int(np.searchsorted(cumulative, coverage * cumulative[-1] - 1e-9)) + 1
        return self.take(np.arange(min(keep, self.n_shapes), dtype=np.int64))

    def take(self, shapes: IntArray) -> TargetWorkload:
        return TargetWorkload(
            cpu_milli=self.cpu_milli[shapes],
            memory_mib=self.memory_mib[shapes],
            gpus=self.gpus[shapes],
            gpu_milli=self.gpu_milli[shapes],
            allowed=self.allowed[shapes],
            specs=tuple(self.specs[i] for i in shapes.tolist()),
            counts=self.counts[shapes],
        )

    def gpu_demand(self) -> IntArray:
        """Milli-GPU one task of each shape asks for."""
        demand: IntArray = self.gpus * self.gpu_milli
        return demand


class FragmentationModel:
    """Expected GPU capacity a node cannot offer to the next task drawn from a workload.

    For a task shape k, a node's free GPU capacity is unusable when the task cannot run there
    (wrong GPU model, too few GPUs with room, too little CPU or memory): all of it; when it can
    run, the GPUs with less room than one of its GPU shares are unusable. CPU-only shapes use
    no GPU, so for them all free GPU capacity counts as unusable, as in FGD. A node's
    fragmentation is the weighted sum over shapes. Weights are integers (task counts), so
    fragmentation is exact in integer units of weight x milli-GPU.

    Shapes are folded into groups of equal (share, GPUs): per group and GPU model, the weight
    of the group's shapes that given CPU and memory amounts can serve is a step function of
    both, tabulated at the shapes' CPU and memory levels as a 2-D prefix sum, so evaluation
    costs O(groups), not O(shapes), per node.
    """

    def __init__(self, workload: TargetWorkload, weights: IntArray) -> None:
        if weights.shape != (workload.n_shapes,) or (weights.size and weights.min() < 0):
            raise InputError("weights", weights.shape, "must be one weight >= 0 per shape")
        self.workload = workload
        self.total_weight = int(weights.sum())
        uses_gpu = (workload.gpus > 0) & (weights > 0)
        self.thresholds: IntArray = np.unique(workload.gpu_milli[uses_gpu]).astype(np.int64)
        pairs = np.stack([workload.gpu_milli, workload.gpus], axis=1)[uses_gpu]
        groups, group_of_shape = np.unique(pairs, axis=0, return_inverse=True)
        group_of_shape = group_of_shape.reshape(-1)
        self.group_threshold: IntArray = np.searchsorted(self.thresholds, groups[:, 0]).astype(
            np.int64
        )
        self.group_gpus: IntArray = groups[:, 1].astype(np.int64)
        cpu = workload.cpu_milli[uses_gpu]
        memory = workload.memory_mib[uses_gpu]
        self.cpu_levels: IntArray = np.unique(cpu).astype(np.int64)
        self.memory_levels: IntArray = np.unique(memory).astype(np.int64)
        n_models = workload.allowed.shape[1]
        # table[model, cpu rank, memory rank, group]: weight of the group's shapes allowed on
        # `model` whose CPU and memory are at most the ranked levels (rank 0: below all levels).
        table = np.zeros(
            (n_models, self.cpu_levels.size + 1, self.memory_levels.size + 1, groups.shape[0]),
            dtype=np.int64,
        )
        cpu_rank = np.searchsorted(self.cpu_levels, cpu) + 1
        memory_rank = np.searchsorted(self.memory_levels, memory) + 1
        shape_weights = workload.allowed[uses_gpu] * weights[uses_gpu][:, None]
        for gpu_model in range(n_models):  # once per model when built, never per decision
            np.add.at(
                table[gpu_model],
                (cpu_rank, memory_rank, group_of_shape),
                shape_weights[:, gpu_model],
            )
        self.table: IntArray = np.cumsum(np.cumsum(table, axis=1), axis=2)

    @property
    def n_groups(self) -> int:
        return int(self.group_gpus.shape[0])

    def stats(self, free: IntArray) -> tuple[IntArray, IntArray, IntArray]:
        """Per row of free milli per GPU: GPUs with room >= each threshold, their room, total."""
        at_least = free[:, :, None] >= self.thresholds
        counts: IntArray = at_least.sum(axis=1, dtype=np.int64)
        room: IntArray = np.where(at_least, free[:, :, None], 0).sum(axis=1, dtype=np.int64)
        total: IntArray = free.sum(axis=1, dtype=np.int64)
        return counts, room, total

    def unusable(
        self,
        counts: IntArray,
        room: IntArray,
        total: IntArray,
        cpu: IntArray,
        memory: IntArray,
        model: IntArray,
    ) -> IntArray:
        """Fragmentation (weight x milli) of node states given by `stats`, CPU, memory, model."""
        enough_gpus = counts[:, self.group_threshold] >= self.group_gpus
        cpu_rank = np.searchsorted(self.cpu_levels, cpu, side="right")
        memory_rank = np.searchsorted(self.memory_levels, memory, side="right")
        weight = self.table[model, cpu_rank, memory_rank]
        usable = (np.where(enough_gpus, weight, 0) * room[:, self.group_threshold]).sum(
            axis=1, dtype=np.int64
        )
        result: IntArray = total * self.total_weight - usable
        return result

    def fragmentation(
        self,
        free: IntArray,
        cpu: IntArray,
        model: IntArray,
        memory: IntArray | None = None,
    ) -> FloatArray:
        """Expected unusable milli-GPU of node states (free milli per GPU, CPU, model, memory).

        Without `memory`, memory is taken to be plentiful.
        """
        free = np.atleast_2d(np.asarray(free, dtype=np.int64))
        cpu = np.asarray(cpu, dtype=np.int64).reshape(-1)
        if memory is None:
            memory = np.full(cpu.shape, np.iinfo(np.int64).max // 2, dtype=np.int64)
        counts, room, total = self.stats(free)
        scaled = self.unusable(
            counts,
            room,
            total,
            cpu,
            np.asarray(memory, np.int64).reshape(-1),
            np.asarray(model, np.int64).reshape(-1),
        )
        result: FloatArray = scaled / max(self.total_weight, 1)
        return result


class _NodeCache:
    """The fragmentation model's statistics of every node, refreshed where the state changed.

    Placement changes one node per decision, so rather than recomputing all nodes, each call
    compares the state's free GPU, CPU and memory arrays with a snapshot and recomputes the
    rows that differ.
    """

    def __init__(self, model: FragmentationModel) -> None:
        self.model = model
        self.state: ClusterState | None = None
        # The state's own arrays as last seen, in their own dtypes so that comparing is cheap.
        self.seen_free = np.zeros((0, 0), dtype=np.int16)
        self.seen_cpu = np.zeros(0, dtype=np.int64)
        self.seen_memory = np.zeros(0, dtype=np.int64)
        self.cpu = np.zeros(0, dtype=np.int64)
        self.memory = np.zeros(0, dtype=np.int64)
        self.counts = np.zeros((0, 0), dtype=np.int64)
        self.room = np.zeros((0, 0), dtype=np.int64)
        self.total = np.zeros(0, dtype=np.int64)
        self.frag = np.zeros(0, dtype=np.int64)
        self.node_model = np.zeros(0, dtype=np.int64)

    def refresh(self, state: ClusterState) -> None:
        if state is not self.state or self.seen_free.shape != state.gpu_free_milli.shape:
            if len(state.topology.gpu_models) != self.model.table.shape[0]:
                raise InputError(
                    "workload",
                    self.model.table.shape[0],
                    "was built for a cluster with a different number of GPU models",
                )
            self.state = state
            self.node_model = state.topology.gpu_model.astype(np.int64)
            self._recompute(state, np.arange(state.topology.n_nodes, dtype=np.int64), full=True)
            return
        changed = np.flatnonzero(
            (state.gpu_free_milli != self.seen_free).any(axis=1)
            | (state.free_cpu_milli != self.seen_cpu)
            | (state.free_memory_mib != self.seen_memory)
        )
        if changed.size:
            self._recompute(state, changed, full=False)

    def _recompute(self, state: ClusterState, nodes: IntArray, full: bool) -> None:
        if full:
            self.seen_free = state.gpu_free_milli.copy()
            self.seen_cpu = state.free_cpu_milli.copy()
            self.seen_memory = state.free_memory_mib.copy()
        else:
            self.seen_free[nodes] = state.gpu_free_milli[nodes]
            self.seen_cpu[nodes] = state.free_cpu_milli[nodes]
            self.seen_memory[nodes] = state.free_memory_mib[nodes]
        free = state.gpu_free_milli[nodes].astype(np.int64)
        cpu = state.free_cpu_milli[nodes].astype(np.int64)
        memory = state.free_memory_mib[nodes].astype(np.int64)
        counts, room, total = self.model.stats(free)
        frag = self.model.unusable(counts, room, total, cpu, memory, self.node_model[nodes])
        if full:
            self.cpu, self.memory = cpu, memory
            self.counts, self.room, self.total, self.frag = counts, room, total, frag
            return
        self.cpu[nodes], self.memory[nodes] = cpu, memory
        self.counts[nodes], self.room[nodes] = counts, room
        self.total[nodes], self.frag[nodes] = total, frag


@dataclass(frozen=True)
class _Options:
    """Placements of one pod to compare: a node (and for a GPU share, one GPU value) each.

    `rows` index the candidate nodes; `increase` is the fragmentation increase in milli-GPU;
    `total`, `cpu` and `memory` are what the node would have left.
    """

    rows: IntArray
    increase: FloatArray
    total: IntArray
    cpu: IntArray
    memory: IntArray


class _FragmentationPolicy:
    """Shared machinery: the fragmentation increase a request causes on each candidate node."""

    name = "fragmentation"

    def __init__(self, model: FragmentationModel) -> None:
        self.model = model
        self._cache = _NodeCache(model)

    def domain_scores(self, capacity: IntArray, need: int) -> IntArray:
        # Above nodes, fullest domain first: keeps whole domains free for large gangs.
        return capacity

    def _options(self, nodes: IntArray, request: GangRequest) -> _Options:
        """Every way to place one pod on `nodes`: one per node, or per (node, GPU room) pair.

        GPUs of one node with equal room are interchangeable, so for a GPU share each distinct
        value is tried once; options come grouped by node, in the order of `nodes`. The cache
        must be fresh.
        """
        cache, model = self._cache, self.model
        if not request.is_fractional:
            taken = request.gpus_per_pod
            rows = np.arange(nodes.size, dtype=np.int64)
            counts = cache.counts[nodes] - taken
            room = cache.room[nodes] - taken * MILLI_PER_GPU
            total = cache.total[nodes] - taken * MILLI_PER_GPU
            picked = nodes
        else:
            share = request.gpu_milli
            free = np.sort(cache.seen_free[nodes], axis=1).astype(np.int64)
            repeated = np.zeros(free.shape, dtype=bool)
            repeated[:, 1:] = free[:, 1:] == free[:, :-1]
            row_index, columns = np.nonzero((free >= share) & ~repeated)
            rows = row_index.astype(np.int64)
            picked = nodes[rows]
            before = free[rows, columns][:, None]
            after = before - share
            thresholds = model.thresholds
            counts = cache.counts[picked] - (before >= thresholds) + (after >= thresholds)
            room = (
                cache.room[picked]
                - np.where(before >= thresholds, before, 0)
                + np.where(after >= thresholds, after, 0)
            )
            total = cache.total[picked] - share
        cpu = cache.cpu[picked] - request.cpu_milli
        memory = cache.memory[picked] - request.memory_mib
        unusable = model.unusable(counts, room, total, cpu, memory, cache.node_model[picked])
        increase = (unusable - cache.frag[picked]) / max(model.total_weight, 1)
        return _Options(rows, increase, total, cpu, memory)

    def _gpu_increases(
        self, state: ClusterState, node: int, free_milli: IntArray, request: GangRequest
    ) -> tuple[FloatArray, IntArray]:
        """Fragmentation increase (milli) of a share on each GPU with room; and those GPUs."""
        model = self.model
        candidates = np.flatnonzero(free_milli >= request.gpu_milli).astype(np.int64)
        current = np.asarray(free_milli, dtype=np.int64)[None, :]
        rows = np.repeat(current, candidates.size + 1, axis=0)
        rows[np.arange(1, candidates.size + 1), candidates] -= request.gpu_milli
        cpu = np.full(rows.shape[0], int(state.free_cpu_milli[node]), dtype=np.int64)
        memory = np.full(rows.shape[0], int(state.free_memory_mib[node]), dtype=np.int64)
        cpu[1:] -= request.cpu_milli
        memory[1:] -= request.memory_mib
        counts, room, total = model.stats(rows)
        node_model = np.full(rows.shape[0], int(state.topology.gpu_model[node]), dtype=np.int64)
        unusable = model.unusable(counts, room, total, cpu, memory, node_model)
        increase: FloatArray = (unusable[1:] - unusable[0]) / max(model.total_weight, 1)
        return increase, candidates


def fgd_level(increase_milli: FloatArray) -> IntArray:
    """FGD's node score: int(100 x sigmoid(-increase / 1000)), 0..100, higher is better."""
    levels: IntArray = np.floor(100.0 / (1.0 + np.exp(increase_milli / 1000.0))).astype(np.int64)
    return levels


def _best_per_node(n_nodes: int, rows: IntArray, scores: IntArray) -> IntArray:
    """The lowest option score of each node (every candidate node has at least one option)."""
    best = np.full(n_nodes, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(best, rows, scores)
    return best


class FGD(_FragmentationPolicy):
    """Fragmentation Gradient Descent as published (Weng et al., USENIX ATC'23).

    The target workload is the most popular shapes (CPU, GPUs, share, models; memory is not
    part of FGD's shapes) that cover 95% of tasks, weighted by count. A node scores
    int(100 x sigmoid(-increase / 1000)) with the fragmentation increase in milli-GPU; the
    highest score wins, equal scores going to the lowest node index (the artifact's scheduler
    picks the lexicographically smallest node name among equal scores, and openb node names
    follow file order). A GPU share goes to the lowest-indexed GPU with the best score.
    """

    name = "fgd"

    def __init__(self, workload: TargetWorkload) -> None:
        popular = workload.ignoring_memory().most_popular(FGD_COVERAGE)
        super().__init__(FragmentationModel(popular, popular.counts))

    def node_scores(
        self, state: ClusterState, nodes: IntArray, capacity: IntArray, request: GangRequest
    ) -> IntArray:
        self._cache.refresh(state)
        options = self._options(nodes, request)
        # Negated so that lower is better; the search breaks ties by node index.
        return _best_per_node(nodes.size, options.rows, -fgd_level(options.increase))

    def gpu_choice(
        self, state: ClusterState, node: int, free_milli: IntArray, request: GangRequest
    ) -> int:
        increase, candidates = self._gpu_increases(state, node, free_milli, request)
        return int(candidates[int(np.argmax(fgd_level(increase)))])


class BalancedFragmentation(_FragmentationPolicy):
    """FGD's fragmentation, plus the GPUs that CPU and memory would strand, plus model scarcity.

    The cost of an option, in milli-GPU, has three parts; it is scored like FGD's (the sigmoid
    rounded to 101 levels, ties to the lowest node index, which packs nodes in order):

    - the fragmentation increase, with every shape of the workload (not only the 95% most
      popular) and memory as well as CPU deciding whether a shape fits;
    - `stranding` x the increase in GPU capacity that the node's CPU and memory could no longer
      feed: a node's usable GPU is at most its free CPU / c and free memory / m, where c and m
      are the workload's CPU and memory per milli-GPU. Without it, CPU-hungry tasks fill the
      CPU-lean nodes (12 cores per GPU) while CPU-rich ones (52 per GPU) keep idle cores;
    - `scarcity` x the GPU milli taken x the pressure on the node's GPU model: the share of
      the workload's demand restricted to that model, relative to its share of the cluster,
      capped at 1. Tasks that may run anywhere then leave scarce models to the tasks that may
      not. Zero when no task names a model.
    """

    name = "fgd-balanced"

    def __init__(
        self, workload: TargetWorkload, stranding: float = 1.0, scarcity: float = 1.0
    ) -> None:
        super().__init__(FragmentationModel(workload, workload.counts))
        if stranding < 0 or scarcity < 0:
            raise InputError("stranding/scarcity", (stranding, scarcity), "must be >= 0")
        self.stranding = stranding
        self.scarcity = scarcity
        uses_gpu = workload.gpus > 0
        demand = workload.counts * workload.gpu_demand()
        total_demand = max(int(demand.sum()), 1)
        self.cpu_per_milli = float((workload.counts * workload.cpu_milli)[uses_gpu].sum())
        self.cpu_per_milli /= total_demand
        self.memory_per_milli = float((workload.counts * workload.memory_mib)[uses_gpu].sum())
        self.memory_per_milli /= total_demand
        # Demand that only some models may serve, spread evenly over those models.
        restricted = ~workload.allowed.all(axis=1) & uses_gpu
        allowed = workload.allowed[restricted]
        per_model = allowed / np.maximum(allowed.sum(axis=1, keepdims=True), 1)
        self._restricted_share: FloatArray = (demand[restricted][:, None] * per_model).sum(
            axis=0
        ) / total_demand
        self._pressure: FloatArray | None = None
        self._pressure_topology: Topology | None = None

    def _model_pressure(self, topology: Topology) -> FloatArray:
        if self._pressure is None or self._pressure_topology is not topology:
            supply = np.bincount(
                topology.gpu_model.astype(np.int64),
                weights=topology.gpu_count.astype(np.float64),
                minlength=len(topology.gpu_models),
            )
            share = supply / max(float(supply.sum()), 1.0)
            ratio = np.divide(
                self._restricted_share,
                share,
                out=np.zeros_like(self._restricted_share),
                where=share > 0,
            )
            self._pressure = np.minimum(ratio, 1.0)
            self._pressure_topology = topology
        return self._pressure

    def _stranded(self, total: IntArray, cpu: IntArray, memory: IntArray) -> FloatArray:
        """GPU milli the node's free CPU and memory could not feed, at the workload's ratios."""
        usable = total.astype(np.float64)
        if self.cpu_per_milli > 0:
            usable = np.minimum(usable, np.maximum(cpu, 0) / self.cpu_per_milli)
        if self.memory_per_milli > 0:
            usable = np.minimum(usable, np.maximum(memory, 0) / self.memory_per_milli)
        stranded: FloatArray = total - usable
        return stranded

    def _costs(
        self, state: ClusterState, nodes: IntArray, options: _Options, request: GangRequest
    ) -> FloatArray:
        cache = self._cache
        picked = nodes[options.rows]
        cost = options.increase
        if self.stranding:
            before = self._stranded(cache.total[picked], cache.cpu[picked], cache.memory[picked])
            after = self._stranded(options.total, options.cpu, options.memory)
            cost = cost + self.stranding * (after - before)
        if self.scarcity:
            pressure = self._model_pressure(state.topology)[cache.node_model[picked]]
            taken = request.gpus_per_pod * request.gpu_milli
            cost = cost + self.scarcity * taken * pressure
        return cost

    def node_scores(
        self, state: ClusterState, nodes: IntArray, capacity: IntArray, request: GangRequest
    ) -> IntArray:
        self._cache.refresh(state)
        options = self._options(nodes, request)
        levels = fgd_level(self._costs(state, nodes, options, request))
        return _best_per_node(nodes.size, options.rows, -levels)

    def gpu_choice(
        self, state: ClusterState, node: int, free_milli: IntArray, request: GangRequest
    ) -> int:
        # Stranding and scarcity are the same for every GPU of the node: fragmentation decides.
        increase, candidates = self._gpu_increases(state, node, free_milli, request)
        return int(candidates[int(np.argmax(fgd_level(increase)))])


PolicyFactory = Callable[[TargetWorkload, int], PlacementPolicy]


def _fgd(workload: TargetWorkload, seed: int) -> PlacementPolicy:
    return FGD(workload)


def _balanced(workload: TargetWorkload, seed: int) -> PlacementPolicy:
    return BalancedFragmentation(workload)


FRAGMENTATION_POLICIES: dict[str, PolicyFactory] = {"fgd": _fgd, "fgd-balanced": _balanced}
"""Fragmentation-aware policies by name; each is built from the target workload and a seed."""
