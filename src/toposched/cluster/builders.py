"""Builders for the cluster shapes operators run: NVL72 racks, DGX SuperPODs, fat trees."""

from __future__ import annotations

import numpy as np

from toposched.cluster.errors import InputError
from toposched.cluster.topology import MAX_GPUS_PER_NODE, GpuModel, Topology, build_regular

GB300 = GpuModel("GB300", 288.0)
GB200 = GpuModel("GB200", 186.0)
H100 = GpuModel("H100", 80.0)
B200 = GpuModel("B200", 180.0)

_NVL72_MODELS = {"GB300": GB300, "GB200": GB200}
_SUPERPOD_MODELS = {"H100": H100, "B200": B200}

#: The 1,000,080-GPU GB300 fleet: 2 zones x 15 spine blocks x 463 NVL72 racks = 13,890 racks.
MILLION_GPU_SHAPE = {"zones": 2, "blocks_per_zone": 15, "racks_per_block": 463}


def _positive(field: str, value: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise InputError(field, value, "must be an integer >= 1")
    if maximum is not None and value > maximum:
        raise InputError(field, value, f"must be <= {maximum}")
    return int(value)


def _non_negative(field: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
        raise InputError(field, value, "must be an integer >= 0")
    return int(value)


def _split(total: int, group: int) -> list[int]:
    """Sizes of consecutive groups of `group` items covering `total`; the last may be short."""
    full, rest = divmod(total, group)
    return [group] * full + ([rest] if rest else [])


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
    zones = _positive("zones", zones)
    blocks_per_zone = _positive("blocks_per_zone", blocks_per_zone)
    racks_per_block = _positive("racks_per_block", racks_per_block)
    nodes_per_rack = _positive("nodes_per_rack", nodes_per_rack)
    gpus_per_node = _positive("gpus_per_node", gpus_per_node, MAX_GPUS_PER_NODE)
    if model not in _NVL72_MODELS:
        raise InputError("model", model, f"must be one of {', '.join(_NVL72_MODELS)}")
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
    return build_regular(
        levels=("zone", "block", "rack"),
        children_per_level=[
            [len(blocks_per_zone_list)],
            blocks_per_zone_list,
            racks_per_block_list,
        ],
        nodes_per_leaf=np.full(racks, nodes_per_rack, dtype=np.int64),
        prefixes=("z", "b", "r", "n"),
        gpus_per_node=gpus_per_node,
        gpu_model=_NVL72_MODELS[model],
        cpu_milli=_non_negative("cpu_milli", cpu_milli),
        memory_mib=_non_negative("memory_mib", memory_mib),
    )


def million_gpu_cluster(model: str = "GB300") -> Topology:
    """The 1,000,080-GPU reference fleet (13,890 NVL72 racks, 250,020 nodes)."""
    return nvl72_cluster(model=model, **MILLION_GPU_SHAPE)


def superpod_cluster(
    spine_groups: int = 1,
    units_per_group: int = 4,
    nodes_per_unit: int = 32,
    model: str = "H100",
) -> Topology:
    """DGX H100/B200 SuperPOD: spine group > scalable unit (32 nodes) > 8-GPU node."""
    spine_groups = _positive("spine_groups", spine_groups)
    units_per_group = _positive("units_per_group", units_per_group)
    nodes_per_unit = _positive("nodes_per_unit", nodes_per_unit)
    if model not in _SUPERPOD_MODELS:
        raise InputError("model", model, f"must be one of {', '.join(_SUPERPOD_MODELS)}")
    cpu_milli, memory_mib = (224_000, 2048 * 1024) if model == "H100" else (224_000, 4096 * 1024)
    return build_regular(
        levels=("group", "su"),
        children_per_level=[[spine_groups], [units_per_group] * spine_groups],
        nodes_per_leaf=np.full(spine_groups * units_per_group, nodes_per_unit, dtype=np.int64),
        prefixes=("g", "su", "n"),
        gpus_per_node=8,
        gpu_model=_SUPERPOD_MODELS[model],
        cpu_milli=_non_negative("cpu_milli", cpu_milli),
        memory_mib=_non_negative("memory_mib", memory_mib),
    )


def fat_tree_cluster(
    k: int = 8,
    gpus_per_node: int = 8,
    model: GpuModel = H100,
    cpu_milli: int = 128_000,
    memory_mib: int = 1024 * 1024,
) -> Topology:
    """A k-ary fat tree: k pods > k/2 edge switches per pod > k/2 hosts per edge switch."""
    k = _positive("k", k)
    if k % 2:
        raise InputError("k", k, "must be even (k/2 edge switches and hosts per switch)")
    half = k // 2
    return build_regular(
        levels=("pod", "edge"),
        children_per_level=[[k], [half] * k],
        nodes_per_leaf=np.full(k * half, half, dtype=np.int64),
        prefixes=("p", "e", "h"),
        gpus_per_node=_positive("gpus_per_node", gpus_per_node, MAX_GPUS_PER_NODE),
        gpu_model=model,
        cpu_milli=_non_negative("cpu_milli", cpu_milli),
        memory_mib=_non_negative("memory_mib", memory_mib),
    )
