"""The cluster as a tree of named levels, with nodes ordered depth-first in flat arrays."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.errors import InputError
from toposched.cluster.limits import MAX_CPU_MILLI, MAX_MEMORY_MIB, MAX_NODES
from toposched.cluster.limits import MAX_GPUS_PER_NODE as MAX_GPUS_PER_NODE
from toposched.cluster.units import ROOT_LEVEL

IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class GpuModel:
    """A GPU model of the catalogue: its name and memory per GPU."""

    name: str
    memory_gib: float = 0.0


@dataclass
class Topology:
    """A cluster's shape: levels outermost first, domains as contiguous node ranges.

    Level 0 is always the implicit root `cluster` (one domain); `levels` are the named levels
    below it, outermost first (e.g. zone, block, rack). Nodes are ordered depth-first through the
    tree, so every domain at every level is the node range
    `domain_starts[level][d] : domain_starts[level][d + 1]`.
    """

    levels: tuple[str, ...]
    # Per domain level (0 = root): CSR boundaries over nodes, length n_domains + 1.
    domain_starts: list[IntArray]
    # Per domain level >= 1: the parent domain's index at the level above.
    domain_parent: list[IntArray]
    # Per domain level: display names (root: ["cluster"]).
    domain_names: list[Sequence[str]]
    node_names: Sequence[str]
    gpu_count: NDArray[np.int8]
    gpu_model: NDArray[np.int16]
    cpu_milli: NDArray[np.int64]
    memory_mib: NDArray[np.int64]
    gpu_models: tuple[GpuModel, ...]
    # Per domain level: domain index of every node (derived from domain_starts).
    node_domain: list[NDArray[np.int32]] = field(init=False)
    _name_index: dict[str, int] | None = field(default=None, init=False, repr=False)
    _descendants: dict[tuple[int, int], IntArray] = field(
        default_factory=dict, init=False, repr=False
    )
    _child_rows: tuple[IntArray, IntArray] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    _most_nodes: dict[int, int] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        n = self.n_nodes
        self.node_domain = []
        for starts in self.domain_starts:
            sizes = np.diff(starts)
            self.node_domain.append(np.repeat(np.arange(len(sizes), dtype=np.int32), sizes))
            if int(starts[-1]) != n:
                raise InputError("domain_starts", int(starts[-1]), f"must end at n_nodes={n}")

    # --- sizes -------------------------------------------------------------------------------
    @property
    def n_nodes(self) -> int:
        return int(self.gpu_count.shape[0])

    @property
    def n_gpus(self) -> int:
        return int(self.gpu_count.sum(dtype=np.int64))

    @property
    def max_gpus_per_node(self) -> int:
        return int(self.gpu_count.max()) if self.n_nodes else 0

    @property
    def domain_levels(self) -> tuple[str, ...]:
        """All domain levels, root first: ("cluster", *levels)."""
        return (ROOT_LEVEL, *self.levels)

    def n_domains(self, level: int) -> int:
        return int(self.domain_starts[level].shape[0] - 1)

    def level_index(self, name: str, field_name: str = "level") -> int:
        """Index of a domain level by name (0 = root); a clear error for unknown names."""
        try:
            return self.domain_levels.index(name)
        except ValueError:
            raise InputError(
                field_name, name, f"unknown level; levels are {', '.join(self.levels) or '(none)'}"
            ) from None

    def domain_range(self, level: int, domain: int) -> tuple[int, int]:
        starts = self.domain_starts[level]
        return int(starts[domain]), int(starts[domain + 1])

    def descendant_bounds(self, level: int, deeper: int) -> IntArray:
        """For each domain at `level`, where its descendants at level `deeper` begin.

        Domains are depth-first too, so the descendants of domain d are the contiguous range
        `bounds[d] : bounds[d + 1]` at level `deeper`.
        """
        key = (level, deeper)
        bounds = self._descendants.get(key)
        if bounds is None:
            bounds = np.searchsorted(self.domain_starts[deeper], self.domain_starts[level])
            self._descendants[key] = bounds
        return bounds

    def descendants(self, level: int, domain: int, deeper: int) -> tuple[int, int]:
        """The index range of `domain`'s descendants at level `deeper` (>= level)."""
        bounds = self.descendant_bounds(level, deeper)
        return int(bounds[domain]), int(bounds[domain + 1])

    def child_rows(self) -> tuple[IntArray, IntArray]:
        """With every level's domains stacked in one sequence of rows (root first, each level's
        domains in index order), the rows of each domain's children: `first[r]` to `last[r]`
        (none for innermost domains). For compiled loops that walk down the tree."""
        if self._child_rows is None:
            counts = [self.n_domains(level) for level in range(len(self.domain_starts))]
            offsets = np.cumsum([0, *counts])
            firsts, lasts = [], []
            for level in range(len(counts) - 1):
                bounds = self.descendant_bounds(level, level + 1) + offsets[level + 1]
                firsts.append(bounds[:-1])
                lasts.append(bounds[1:])
            innermost = np.zeros(counts[-1], dtype=np.int64)
            first = np.concatenate([*firsts, innermost]).astype(np.int64)
            last = np.concatenate([*lasts, innermost]).astype(np.int64)
            self._child_rows = (first, last)
        return self._child_rows

    def ancestor(self, level: int, domain: int, outer: int) -> int:
        """The index of `domain`'s ancestor at level `outer` (<= level)."""
        node = int(self.domain_starts[level][domain])
        return int(self.node_domain[outer][node])

    def domain_sizes(self, level: int) -> IntArray:
        """Nodes per domain at `level`."""
        return np.diff(self.domain_starts[level])

    def most_nodes(self, level: int) -> int:
        """The most nodes any domain at `level` holds (0 for a level of no domains)."""
        most = self._most_nodes.get(level)
        if most is None:
            sizes = self.domain_sizes(level)
            most = int(sizes.max()) if sizes.size else 0
            self._most_nodes[level] = most
        return most

    def domain_name(self, level: int, domain: int) -> str:
        return self.domain_names[level][domain]

    def model_index(self, name: str) -> int:
        for i, model in enumerate(self.gpu_models):
            if model.name == name:
                return i
        known = ", ".join(m.name for m in self.gpu_models if m.name)
        raise InputError("gpu_models", name, f"unknown GPU model; this cluster has {known}")

    def node_index(self, name: str) -> int:
        if self._name_index is None:
            self._name_index = {node: i for i, node in enumerate(self.node_names)}
        try:
            return self._name_index[name]
        except KeyError:
            raise InputError("node", name, "no node of that name in the cluster") from None

    def node_path(self, node: int) -> dict[str, str]:
        """The node's domain at every named level, e.g. {"zone": "z0", "rack": "z0-b1-r4"}."""
        return {
            level: self.domain_names[i + 1][int(self.node_domain[i + 1][node])]
            for i, level in enumerate(self.levels)
        }

    def nbytes(self) -> int:
        """Memory held by the topology's arrays (names excluded when generated lazily)."""
        arrays: list[np.ndarray] = [
            self.gpu_count,
            self.gpu_model,
            self.cpu_milli,
            self.memory_mib,
            *self.domain_starts,
            *self.domain_parent,
            *self.node_domain,
        ]
        return sum(a.nbytes for a in arrays)


class GeneratedNames(Sequence[str]):
    """Names computed on demand from a domain's parent name and its index among siblings.

    A million-GPU cluster has 250,000 nodes; holding their names as Python strings would cost
    more memory and build time than the whole array state, so generated names are lazy.
    """

    def __init__(
        self,
        prefix: str,
        first_child: IntArray,
        parent: IntArray | None,
        parent_names: Sequence[str] | None,
        width: int = 0,
    ) -> None:
        self._prefix = prefix
        self._first_child = first_child  # per parent: index of its first child
        self._parent = parent
        self._parent_names = parent_names
        self._width = width
        self._len = int(len(parent)) if parent is not None else int(first_child[-1])

    def __len__(self) -> int:
        return self._len

    def _name(self, i: int) -> str:
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(i)
        if self._parent is None or self._parent_names is None:
            return f"{self._prefix}{i:0{self._width}d}"
        parent = int(self._parent[i])
        local = i - int(self._first_child[parent])
        return f"{self._parent_names[parent]}-{self._prefix}{local:0{self._width}d}"

    def __getitem__(self, i):  # type: ignore[no-untyped-def]
        if isinstance(i, slice):
            return [self._name(j) for j in range(*i.indices(self._len))]
        return self._name(int(i))

    def __iter__(self) -> Iterator[str]:
        return (self._name(i) for i in range(self._len))


def _check_uniform_nodes(n_nodes: int, gpus: int, cpu_milli: int, memory_mib: int) -> None:
    """The limits of `toposched.cluster.limits`, checked before any per-node array exists."""
    if not 0 <= n_nodes <= MAX_NODES:
        raise InputError("nodes", n_nodes, f"a cluster has at most {MAX_NODES:,} nodes")
    if not 0 <= gpus <= MAX_GPUS_PER_NODE:
        raise InputError("gpus", gpus, f"must be from 0 to {MAX_GPUS_PER_NODE} per node")
    if not 0 <= cpu_milli <= MAX_CPU_MILLI:
        raise InputError("cpu", cpu_milli, f"must be 0 to {MAX_CPU_MILLI:,} millicores per node")
    if not 0 <= memory_mib <= MAX_MEMORY_MIB:
        raise InputError("memory", memory_mib, f"must be 0 to {MAX_MEMORY_MIB:,} MiB per node")


def build_regular(
    levels: Sequence[str],
    children_per_level: Sequence[Sequence[int] | IntArray],
    nodes_per_leaf: Sequence[int] | IntArray,
    prefixes: Sequence[str],
    gpus_per_node: int,
    gpu_model: GpuModel,
    cpu_milli: int,
    memory_mib: int,
) -> Topology:
    """Build a tree of uniform nodes from child counts per level, all arrays, no node loop.

    `children_per_level[i]` holds, for every domain at level i (0 = root), how many domains of
    level i + 1 it contains; `nodes_per_leaf` holds the node count of every innermost domain.
    """
    if len(children_per_level) != len(levels) or len(prefixes) != len(levels) + 1:
        raise InputError("levels", list(levels), "need child counts per level and a prefix each")
    starts: list[IntArray] = []
    parents: list[IntArray] = []
    names: list[Sequence[str]] = [[ROOT_LEVEL]]
    # Domain counts top-down; first_child[i] maps a level-i domain to its first child.
    first_children: list[IntArray] = []
    for i, counts in enumerate(children_per_level):
        counts_arr = np.asarray(counts, dtype=np.int64)
        first_child = np.concatenate(([0], np.cumsum(counts_arr)))
        first_children.append(first_child)
        parent = np.repeat(np.arange(len(counts_arr), dtype=np.int64), counts_arr)
        parents.append(parent)
        names.append(
            GeneratedNames(
                prefixes[i],
                first_child,
                parent if i > 0 else None,
                names[i] if i > 0 else None,
            )
        )
    leaf_nodes = np.asarray(nodes_per_leaf, dtype=np.int64)
    leaf_starts = np.concatenate(([0], np.cumsum(leaf_nodes)))
    n_nodes = int(leaf_starts[-1])
    _check_uniform_nodes(n_nodes, gpus_per_node, cpu_milli, memory_mib)
    # Node ranges of outer levels follow from their first leaf descendant.
    starts_by_level: list[IntArray] = [leaf_starts]
    for first_child in reversed(first_children[1:]):
        starts_by_level.append(starts_by_level[-1][first_child])
    if levels:
        starts_by_level.append(np.array([0, n_nodes], dtype=np.int64))
    starts = list(reversed(starts_by_level))
    node_parent = np.repeat(np.arange(len(leaf_nodes), dtype=np.int64), leaf_nodes)
    node_names = GeneratedNames(prefixes[-1], leaf_starts, node_parent, names[-1])
    return Topology(
        levels=tuple(levels),
        domain_starts=starts,
        domain_parent=[np.array([-1], dtype=np.int64), *parents],
        domain_names=names,
        node_names=node_names,
        gpu_count=np.full(n_nodes, gpus_per_node, dtype=np.int8),
        gpu_model=np.zeros(n_nodes, dtype=np.int16),
        cpu_milli=np.full(n_nodes, cpu_milli, dtype=np.int64),
        memory_mib=np.full(n_nodes, memory_mib, dtype=np.int64),
        gpu_models=(gpu_model,),
    )
