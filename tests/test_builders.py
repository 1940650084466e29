"""Tests of the cluster builders: NVL72 fleets, the 1M-GPU fleet, DGX SuperPODs, fat trees."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from toposched.cluster.builders import (
    MILLION_GPU_SHAPE,
    fat_tree_cluster,
    million_gpu_cluster,
    nvl72_cluster,
    superpod_cluster,
)
from toposched.cluster.errors import InputError
from toposched.cluster.topology import Topology


def assert_contiguous_tree(top: Topology) -> None:
    """Every level's ranges tile [0, n_nodes) and nest inside their parent's range."""
    n = top.n_nodes
    for level, starts in enumerate(top.domain_starts):
        assert starts[0] == 0 and starts[-1] == n
        assert (np.diff(starts) > 0).all(), f"empty or reversed domain at level {level}"
        assert len(top.domain_names[level]) == top.n_domains(level)
        assert (
            top.node_domain[level].tolist()
            == np.repeat(np.arange(top.n_domains(level)), np.diff(starts)).tolist()
        )
        if level == 0:
            continue
        parent = top.domain_parent[level]
        parent_starts = top.domain_starts[level - 1]
        assert (parent_starts[parent] <= starts[:-1]).all()
        assert (starts[1:] <= parent_starts[parent + 1]).all()
        # Parents are visited in order (depth-first), never revisited.
        assert (np.diff(parent) >= 0).all()


@pytest.mark.parametrize(
    ("build", "levels", "domains", "nodes", "gpus"),
    [
        # Defaults: 1 zone x 1 block x 8 racks x 18 nodes = 144 nodes x 4 GPUs = 576.
        (nvl72_cluster, ("zone", "block", "rack"), [1, 1, 1, 8], 144, 576),
        # 2 zones x 3 blocks x 4 racks = 24 racks x 18 = 432 nodes x 4 = 1,728 GPUs.
        (
            lambda: nvl72_cluster(zones=2, blocks_per_zone=3, racks_per_block=4),
            ("zone", "block", "rack"),
            [1, 2, 6, 24],
            432,
            1728,
        ),
        # Capacity 2 x 2 x 2 = 8 racks, only 5 built: blocks [2, 2, 1], zones [2 blocks, 1 block].
        # 5 racks x 2 nodes = 10 nodes x 4 GPUs = 40.
        (
            lambda: nvl72_cluster(
                zones=2, blocks_per_zone=2, racks_per_block=2, nodes_per_rack=2, total_racks=5
            ),
            ("zone", "block", "rack"),
            [1, 2, 3, 5],
            10,
            40,
        ),
        # 7 of 1 x 4 x 2 = 8 racks: blocks [2, 2, 2, 1] in one zone; 7 x 18 = 126 nodes.
        (
            lambda: nvl72_cluster(blocks_per_zone=4, racks_per_block=2, total_racks=7),
            ("zone", "block", "rack"),
            [1, 1, 4, 7],
            126,
            504,
        ),
        # total_racks equal to capacity is the full shape.
        (
            lambda: nvl72_cluster(zones=2, racks_per_block=3, total_racks=6),
            ("zone", "block", "rack"),
            [1, 2, 2, 6],
            108,
            432,
        ),
        # 2 x 15 x 463 = 13,890 racks x 18 = 250,020 nodes x 4 = 1,000,080 GPUs.
        (million_gpu_cluster, ("zone", "block", "rack"), [1, 2, 30, 13_890], 250_020, 1_000_080),
        # SuperPOD defaults: 1 group x 4 SUs x 32 nodes = 128 nodes x 8 GPUs = 1,024.
        (superpod_cluster, ("group", "su"), [1, 1, 4], 128, 1024),
        # 2 groups x 3 SUs x 20 nodes = 120 nodes x 8 = 960.
        (
            lambda: superpod_cluster(spine_groups=2, units_per_group=3, nodes_per_unit=20),
            ("group", "su"),
            [1, 2, 6],
            120,
            960,
        ),
        # Fat tree k=4: 4 pods x 2 edges x 2 hosts = 16 hosts (k^3/4) x 8 GPUs = 128.
        (lambda: fat_tree_cluster(k=4), ("pod", "edge"), [1, 4, 8], 16, 128),
        # k=8: 8 pods x 4 edges x 4 hosts = 128 hosts x 2 GPUs = 256.
        (lambda: fat_tree_cluster(k=8, gpus_per_node=2), ("pod", "edge"), [1, 8, 32], 128, 256),
        # k=2: 2 pods x 1 edge x 1 host.
        (lambda: fat_tree_cluster(k=2), ("pod", "edge"), [1, 2, 2], 2, 16),
    ],
)
def test_shapes(
    build: Callable[[], Topology],
    levels: tuple[str, ...],
    domains: list[int],
    nodes: int,
    gpus: int,
) -> None:
    top = build()
    assert top.levels == levels
    assert [top.n_domains(level) for level in range(len(levels) + 1)] == domains
    assert (top.n_nodes, top.n_gpus) == (nodes, gpus)
    assert_contiguous_tree(top)


def test_million_gpu_shape_constant() -> None:
    # 2 x 15 x 463 = 13,890 racks; each NVL72 rack holds 72 GPUs: 13,890 x 72 = 1,000,080.
    racks = MILLION_GPU_SHAPE["zones"] * MILLION_GPU_SHAPE["blocks_per_zone"]
    racks *= MILLION_GPU_SHAPE["racks_per_block"]
    assert racks * 72 == 1_000_080


def test_uneven_total_racks_sizes() -> None:
    # 5 racks of 2 nodes in blocks of 2 racks: blocks hold 4, 4, 2 nodes; zones 8 and 2 nodes.
    top = nvl72_cluster(
        zones=2, blocks_per_zone=2, racks_per_block=2, nodes_per_rack=2, total_racks=5
    )
    assert top.domain_sizes(1).tolist() == [8, 2]
    assert top.domain_sizes(2).tolist() == [4, 4, 2]
    assert top.domain_sizes(3).tolist() == [2, 2, 2, 2, 2]
    assert top.domain_parent[3].tolist() == [0, 0, 1, 1, 2]
    assert top.domain_parent[2].tolist() == [0, 0, 1]
    assert list(top.domain_names[2]) == ["z0-b0", "z0-b1", "z1-b0"]
    assert list(top.domain_names[3])[-1] == "z1-b0-r0"
    assert top.node_names[9] == "z1-b0-r0-n1"


@pytest.mark.parametrize(
    ("build", "node", "name", "path"),
    [
        (
            lambda: nvl72_cluster(zones=2, blocks_per_zone=2, racks_per_block=2, nodes_per_rack=2),
            # Node 13 = 13 // 2 = rack 6 (zone 1, block 1, rack 0), local node 1.
            13,
            "z1-b1-r0-n1",
            {"zone": "z1", "block": "z1-b1", "rack": "z1-b1-r0"},
        ),
        (
            million_gpu_cluster,
            # Last node: zone 1, block 14, rack 462, tray 17.
            250_019,
            "z1-b14-r462-n17",
            {"zone": "z1", "block": "z1-b14", "rack": "z1-b14-r462"},
        ),
        (
            # Node 70 = SU 70 // 32 = 2 (group 1 holds SUs 2, 3 as its su0, su1), local 70 - 64 = 6.
            lambda: superpod_cluster(spine_groups=2, units_per_group=2),
            70,
            "g1-su0-n6",
            {"group": "g1", "su": "g1-su0"},
        ),
        (
            # Host 11 of k=4 = edge 5 (pod 2, its edge 1), local host 1.
            lambda: fat_tree_cluster(k=4),
            11,
            "p2-e1-h1",
            {"pod": "p2", "edge": "p2-e1"},
        ),
    ],
)
def test_names(build: Callable[[], Topology], node: int, name: str, path: dict[str, str]) -> None:
    top = build()
    assert top.node_names[node] == name
    assert top.node_path(node) == path
    assert top.node_index(name) == node


@pytest.mark.parametrize(
    ("build", "model", "memory_gib", "gpus_per_node", "cpu_milli", "memory_mib"),
    [
        (nvl72_cluster, "GB300", 288.0, 4, 144_000, 960 * 1024),
        (lambda: nvl72_cluster(model="GB200", cpu_milli=72_000, memory_mib=512), "GB200", 186.0,
         4, 72_000, 512),
        (lambda: nvl72_cluster(gpus_per_node=2), "GB300", 288.0, 2, 144_000, 960 * 1024),
        (superpod_cluster, "H100", 80.0, 8, 224_000, 2048 * 1024),
        (lambda: superpod_cluster(model="B200"), "B200", 180.0, 8, 224_000, 4096 * 1024),
        (lambda: fat_tree_cluster(k=4), "H100", 80.0, 8, 128_000, 1024 * 1024),
    ],
)  # fmt: skip
def test_node_resources(
    build: Callable[[], Topology],
    model: str,
    memory_gib: float,
    gpus_per_node: int,
    cpu_milli: int,
    memory_mib: int,
) -> None:
    top = build()
    assert [(m.name, m.memory_gib) for m in top.gpu_models] == [(model, memory_gib)]
    assert set(top.gpu_count.tolist()) == {gpus_per_node}
    assert set(top.gpu_model.tolist()) == {0}
    assert set(top.cpu_milli.tolist()) == {cpu_milli}
    assert set(top.memory_mib.tolist()) == {memory_mib}


@pytest.mark.parametrize(
    ("build", "kwargs", "field", "value", "rule_part"),
    [
        (nvl72_cluster, {"zones": 0}, "zones", 0, ">= 1"),
        (nvl72_cluster, {"blocks_per_zone": -1}, "blocks_per_zone", -1, ">= 1"),
        (nvl72_cluster, {"racks_per_block": 1.5}, "racks_per_block", 1.5, "integer"),
        (nvl72_cluster, {"nodes_per_rack": True}, "nodes_per_rack", True, "integer"),
        (nvl72_cluster, {"gpus_per_node": "4"}, "gpus_per_node", "4", "integer"),
        (nvl72_cluster, {"model": "H100"}, "model", "H100", "GB300, GB200"),
        (nvl72_cluster, {"total_racks": 0}, "total_racks", 0, ">= 1"),
        # Capacity 1 x 1 x 8 = 8 racks.
        (nvl72_cluster, {"total_racks": 9}, "total_racks", 9, "= 8"),
        (million_gpu_cluster, {"model": "B200"}, "model", "B200", "GB300, GB200"),
        (superpod_cluster, {"spine_groups": 0}, "spine_groups", 0, ">= 1"),
        (superpod_cluster, {"units_per_group": 2.0}, "units_per_group", 2.0, "integer"),
        (superpod_cluster, {"nodes_per_unit": -32}, "nodes_per_unit", -32, ">= 1"),
        (superpod_cluster, {"model": "GB300"}, "model", "GB300", "H100, B200"),
        (fat_tree_cluster, {"k": 3}, "k", 3, "even"),
        (fat_tree_cluster, {"k": 0}, "k", 0, ">= 1"),
        (fat_tree_cluster, {"gpus_per_node": 0}, "gpus_per_node", 0, ">= 1"),
    ],
)
def test_bad_arguments(
    build: Callable[..., Topology], kwargs: dict[str, Any], field: str, value: Any, rule_part: str
) -> None:
    with pytest.raises(InputError) as caught:
        build(**kwargs)
    error = caught.value
    assert error.field == field
    assert error.value == value and type(error.value) is type(value)
    assert rule_part in error.rule
    assert str(error).startswith(f"{field}: {value!r} is invalid: ")


@pytest.mark.parametrize(
    ("build", "kwargs"),
    [
        (nvl72_cluster, {"gpus_per_node": 200}),
        (fat_tree_cluster, {"k": 4, "gpus_per_node": 128}),
    ],
)
def test_too_many_gpus_per_node_is_input_error(
    build: Callable[..., Topology], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(InputError) as caught:
        build(**kwargs)
    assert caught.value.field == "gpus_per_node"


@pytest.mark.parametrize(
    ("build", "kwargs", "field"),
    [
        (nvl72_cluster, {"cpu_milli": -1}, "cpu_milli"),
        (nvl72_cluster, {"memory_mib": -1024}, "memory_mib"),
        (fat_tree_cluster, {"cpu_milli": -1}, "cpu_milli"),
    ],
)
def test_negative_node_capacity_is_input_error(
    build: Callable[..., Topology], kwargs: dict[str, Any], field: str
) -> None:
    with pytest.raises(InputError) as caught:
        build(**kwargs)
    assert caught.value.field == field
