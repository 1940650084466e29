"""Builders for the cluster shapes operators run: NVL72 racks, DGX SuperPODs, fat trees.

Each builder first checks its arguments into a `BuilderShape` (`nvl72_shape`, `superpod_shape`,
`fat_tree_shape`): the cluster's levels, GPU model, node count and node names, known without
building it. numpy loads in `BuilderShape.topology()`, once every argument has been checked, so
a bad argument, or a workload whose jobs the shape cannot hold, is refused before it loads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from numbers import Integral
from typing import TYPE_CHECKING, Any

from toposched.cluster.errors import InputError
from toposched.cluster.limits import MAX_CPU_MILLI, MAX_GPUS_PER_NODE, MAX_MEMORY_MIB

if TYPE_CHECKING:
    from toposched.cluster.topology import GpuModel, Topology

__all__ = [
    "MILLION_GPU_SHAPE",
    "NVL72_MODELS",
    "SUPERPOD_MODELS",
    "BuilderShape",
    "fat_tree_cluster",
    "fat_tree_shape",
    "million_gpu_cluster",
    "million_gpu_shape",
    "nvl72_cluster",
    "nvl72_shape",
    "superpod_cluster",
    "superpod_shape",
]

NVL72_MODELS = {"GB300": 288.0, "GB200": 186.0}
"""The GPU models of an NVL72 rack: name -> memory GiB per GPU."""
SUPERPOD_MODELS = {"H100": 80.0, "B200": 180.0}
"""The GPU models of a DGX SuperPOD: name -> memory GiB per GPU."""

#: The 1,000,080-GPU GB300 fleet: 2 zones x 15 spine blocks x 463 NVL72 racks = 13,890 racks.
MILLION_GPU_SHAPE = {"zones": 2, "blocks_per_zone": 15, "racks_per_block": 463}


def _positive(field: str, value: Any, maximum: int | None = None) -> int:
    # Integral: int and numpy's integers, without importing numpy.
    if isinstance(value, bool) or not isinstance(value, Integral) or int(value) < 1:
        raise InputError(field, value, "must be an integer >= 1")
    if maximum is not None and int(value) > maximum:
        raise InputError(field, value, f"must be <= {maximum}")
    return int(value)


def _non_negative(field: str, value: Any, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or int(value) < 0:
        raise InputError(field, value, "must be an integer >= 0")
    if int(value) > maximum:
        raise InputError(field, value, f"must be <= {maximum:,} per node")
    return int(value)


def _model(field: str, model: Any, models: dict[str, float]) -> str:
    if not isinstance(model, str) or model not in models:
        raise InputError(field, model, f"must be one of {', '.join(models)}")
    return model


def _split(total: int, group: int) -> list[int]:
    """Sizes of consecutive groups of `group` items covering `total`; the last may be short."""
    full, rest = divmod(total, group)
    return [group] * full + ([rest] if rest else [])


@dataclass(frozen=True)
class BuilderShape:
    """A builder's cluster as its checked arguments describe it, before it is built: a tree of
    uniform nodes (see `toposched.cluster.topology.build_regular`)."""

    levels: tuple[str, ...]
    prefixes: tuple[str, ...]
    """The name prefix of each level's domains, then of the nodes (a node is z0-b1-r4-n7)."""
    children_per_level: tuple[tuple[int, ...], ...]
    """Per level, for every domain of the level above (the root first), its child count."""
    nodes_per_leaf: tuple[int, ...]
    gpus_per_node: int
    gpu_model: str
    memory_gib: float
    """Memory per GPU of `gpu_model`."""
    cpu_milli: int
    memory_mib: int

    @property
    def n_nodes(self) -> int:
        return sum(self.nodes_per_leaf)

    @property
    def gpu_model_names(self) -> tuple[str, ...]:
        """The GPU model catalogue's names, as the topology built holds them."""
        return (self.gpu_model,)

    def has_node(self, name: str) -> bool:
        """Whether the cluster built has a node of this name, found from the name's parts."""
        parts = name.split("-")
        if len(parts) != len(self.prefixes):
            return False
        counts = [*self.children_per_level, self.nodes_per_leaf]
        domain = 0  # the root
        for depth, (part, prefix) in enumerate(zip(parts, self.prefixes, strict=True)):
            match = re.fullmatch(rf"{re.escape(prefix)}(0|[1-9][0-9]*)", part)
            if match is None:
                return False
            local, children = int(match[1]), counts[depth]
            if depth == len(self.children_per_level):
                return local < children[domain]
            if local >= children[domain]:
                return False
            domain = sum(children[:domain]) + local
        return False  # unreachable: the node part ends the loop

    def topology(self) -> Topology:
        """The cluster built (numpy)."""
        import numpy as np

        from toposched.cluster.topology import GpuModel, build_regular

        return build_regular(
            levels=self.levels,
            children_per_level=[list(counts) for counts in self.children_per_level],
            nodes_per_leaf=np.array(self.nodes_per_leaf, dtype=np.int64),
            prefixes=self.prefixes,
            gpus_per_node=self.gpus_per_node,
            gpu_model=GpuModel(self.gpu_model, self.memory_gib),
            cpu_milli=self.cpu_milli,
            memory_mib=self.memory_mib,
        )


def nvl72_shape(
    zones: int = 1,
    blocks_per_zone: int = 1,
    racks_per_block: int = 8,
    nodes_per_rack: int = 18,
    gpus_per_node: int = 4,
    model: str = "GB300",
    cpu_milli: int = 144_000,
    memory_mib: int = 960 * 1024,
    total_racks: int | None = None,
) -> BuilderShape:
    """`nvl72_cluster`'s arguments checked, its cluster not built."""
    zones = _positive("zones", zones)
    blocks_per_zone = _positive("blocks_per_zone", blocks_per_zone)
    racks_per_block = _positive("racks_per_block", racks_per_block)
    nodes_per_rack = _positive("nodes_per_rack", nodes_per_rack)
    gpus_per_node = _positive("gpus_per_node", gpus_per_node, MAX_GPUS_PER_NODE)
    model = _model("model", model, NVL72_MODELS)
    capacity = zones * blocks_per_zone * racks_per_block
    racks = capacity if total_racks is None else _positive("total_racks", total_racks)
    if racks > capacity:
        raise InputError(
            "total_racks",
            racks,
            f"must be <= zones x blocks_per_zone x racks_per_block = {capacity}",
        )
    racks_per_block_list = _split(racks, racks_per_block)
    blocks_per_zone_list = _split(len(racks_per_block_list), blocks_per_zone)
    return BuilderShape(
        levels=("zone", "block", "rack"),
        prefixes=("z", "b", "r", "n"),
        children_per_level=(
            (len(blocks_per_zone_list),),
            tuple(blocks_per_zone_list),
            tuple(racks_per_block_list),
        ),
        nodes_per_leaf=(nodes_per_rack,) * racks,
        gpus_per_node=gpus_per_node,
        gpu_model=model,
        memory_gib=NVL72_MODELS[model],
        cpu_milli=_non_negative("cpu_milli", cpu_milli, MAX_CPU_MILLI),
        memory_mib=_non_negative("memory_mib", memory_mib, MAX_MEMORY_MIB),
    )


def nvl72_cluster(
    zones: int = 1,
    blocks_per_zone: int = 1,
    racks_per_block: int = 8,
    nodes_per_rack: int = 18,
    gpus_per_node: int = 4,
    model: str = "GB300",
    cpu_milli: int = 144_000,
    memory_mib: int = 960 * 1024,
    total_racks: int | None = None,
) -> Topology:
    """GB200/GB300 NVL72 fleet: zone > block > rack, each rack one NVLink domain.

    A rack is 18 compute trays of 4 GPUs. `total_racks`, when given, fills blocks in order and
    leaves the last block short, for fleets whose rack count is not a product of group sizes.
    """
    return nvl72_shape(
        zones,
        blocks_per_zone,
        racks_per_block,
        nodes_per_rack,
        gpus_per_node,
        model,
        cpu_milli,
        memory_mib,
        total_racks,
    ).topology()


def million_gpu_cluster(model: str = "GB300") -> Topology:
    """The 1,000,080-GPU reference fleet (13,890 NVL72 racks, 250,020 nodes)."""
    return nvl72_cluster(model=model, **MILLION_GPU_SHAPE)


def million_gpu_shape(model: str = "GB300") -> BuilderShape:
    """`million_gpu_cluster`'s arguments checked, its cluster not built."""
    return nvl72_shape(model=model, **MILLION_GPU_SHAPE)


def superpod_shape(
    spine_groups: int = 1,
    units_per_group: int = 4,
    nodes_per_unit: int = 32,
    model: str = "H100",
) -> BuilderShape:
    """`superpod_cluster`'s arguments checked, its cluster not built."""
    spine_groups = _positive("spine_groups", spine_groups)
    units_per_group = _positive("units_per_group", units_per_group)
    nodes_per_unit = _positive("nodes_per_unit", nodes_per_unit)
    model = _model("model", model, SUPERPOD_MODELS)
    return BuilderShape(
        levels=("group", "su"),
        prefixes=("g", "su", "n"),
        children_per_level=((spine_groups,), (units_per_group,) * spine_groups),
        nodes_per_leaf=(nodes_per_unit,) * (spine_groups * units_per_group),
        gpus_per_node=8,
        gpu_model=model,
        memory_gib=SUPERPOD_MODELS[model],
        cpu_milli=224_000,
        memory_mib=(2048 if model == "H100" else 4096) * 1024,
    )


def superpod_cluster(
    spine_groups: int = 1,
    units_per_group: int = 4,
    nodes_per_unit: int = 32,
    model: str = "H100",
) -> Topology:
    """DGX H100/B200 SuperPOD: spine group > scalable unit (32 nodes) > 8-GPU node."""
    return superpod_shape(spine_groups, units_per_group, nodes_per_unit, model).topology()


def fat_tree_shape(
    k: int = 8,
    gpus_per_node: int = 8,
    model: GpuModel | None = None,
    cpu_milli: int = 128_000,
    memory_mib: int = 1024 * 1024,
) -> BuilderShape:
    """`fat_tree_cluster`'s arguments checked, its cluster not built."""
    k = _positive("k", k)
    if k % 2:
        raise InputError("k", k, "must be even (k/2 edge switches and hosts per switch)")
    half = k // 2
    return BuilderShape(
        levels=("pod", "edge"),
        prefixes=("p", "e", "h"),
        children_per_level=((k,), (half,) * k),
        nodes_per_leaf=(half,) * (k * half),
        gpus_per_node=_positive("gpus_per_node", gpus_per_node, MAX_GPUS_PER_NODE),
        gpu_model="H100" if model is None else model.name,
        memory_gib=SUPERPOD_MODELS["H100"] if model is None else model.memory_gib,
        cpu_milli=_non_negative("cpu_milli", cpu_milli, MAX_CPU_MILLI),
        memory_mib=_non_negative("memory_mib", memory_mib, MAX_MEMORY_MIB),
    )


def fat_tree_cluster(
    k: int = 8,
    gpus_per_node: int = 8,
    model: GpuModel | None = None,
    cpu_milli: int = 128_000,
    memory_mib: int = 1024 * 1024,
) -> Topology:
    """A k-ary fat tree: k pods > k/2 edge switches per pod > k/2 hosts per edge switch; its
    nodes H100 unless `model` says."""
    return fat_tree_shape(k, gpus_per_node, model, cpu_milli, memory_mib).topology()
