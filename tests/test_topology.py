"""Tests of the Topology model: domain ranges, lookups, generated names and their errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from toposched.cluster.builders import fat_tree_cluster, nvl72_cluster
from toposched.cluster.errors import InputError
from toposched.cluster.loaders import topology_from_dict
from toposched.cluster.topology import GeneratedNames, GpuModel, Topology, build_regular

# Two zones, three racks, five nodes, listed in depth-first order already:
#   z0: r0 = [a, b], r1 = [c]      z1: r2 = [d, e]
SMALL: dict[str, Any] = {
    "levels": ["zone", "rack"],
    "gpu_models": {"H100": 80},
    "nodes": [
        {"name": "a", "gpus": 8, "gpu_model": "H100", "labels": {"zone": "z0", "rack": "r0"}},
        {"name": "b", "gpus": 8, "gpu_model": "H100", "labels": {"zone": "z0", "rack": "r0"}},
        {"name": "c", "gpus": 4, "gpu_model": "T4", "labels": {"zone": "z0", "rack": "r1"}},
        {"name": "d", "gpus": 2, "gpu_model": "T4", "labels": {"zone": "z1", "rack": "r2"}},
        {"name": "e", "gpus": 0, "labels": {"zone": "z1", "rack": "r2"}},
    ],
}


@pytest.fixture
def small() -> Topology:
    return topology_from_dict(SMALL)


def test_sizes(small: Topology) -> None:
    # 8 + 8 + 4 + 2 + 0 = 22 GPUs on 5 nodes; widest node has 8.
    assert (small.n_nodes, small.n_gpus, small.max_gpus_per_node) == (5, 22, 8)
    assert small.domain_levels == ("cluster", "zone", "rack")
    assert [small.n_domains(level) for level in range(3)] == [1, 2, 3]


@pytest.mark.parametrize(
    ("level", "domain", "node_range", "name"),
    [
        (0, 0, (0, 5), "cluster"),
        (1, 0, (0, 3), "z0"),  # a, b, c
        (1, 1, (3, 5), "z1"),  # d, e
        (2, 0, (0, 2), "r0"),  # a, b
        (2, 1, (2, 3), "r1"),  # c
        (2, 2, (3, 5), "r2"),  # d, e
    ],
)
def test_domain_ranges_and_names(
    small: Topology, level: int, domain: int, node_range: tuple[int, int], name: str
) -> None:
    assert small.domain_range(level, domain) == node_range
    assert small.domain_name(level, domain) == name
    lo, hi = node_range
    # node_domain is the inverse of the ranges: exactly the nodes of the range map to `domain`.
    assert np.flatnonzero(small.node_domain[level] == domain).tolist() == list(range(lo, hi))


def test_domain_sizes_and_parents(small: Topology) -> None:
    assert small.domain_sizes(1).tolist() == [3, 2]
    assert small.domain_sizes(2).tolist() == [2, 1, 2]
    # r0 and r1 are in z0 (index 0), r2 in z1 (index 1); zones hang off the root.
    assert small.domain_parent[2].tolist() == [0, 0, 1]
    assert small.domain_parent[1].tolist() == [0, 0]


@pytest.mark.parametrize(
    ("node", "path"),
    [
        (0, {"zone": "z0", "rack": "r0"}),
        (2, {"zone": "z0", "rack": "r1"}),
        (4, {"zone": "z1", "rack": "r2"}),
    ],
)
def test_node_path(small: Topology, node: int, path: dict[str, str]) -> None:
    assert small.node_path(node) == path


def test_lookups(small: Topology) -> None:
    assert small.level_index("cluster") == 0
    assert small.level_index("rack") == 2
    assert small.node_index("d") == 3
    # The catalogue lists declared models first, then models met on nodes, then "" (no GPU).
    assert [m.name for m in small.gpu_models] == ["H100", "T4", ""]
    assert small.model_index("T4") == 1
    assert small.gpu_models[0] == GpuModel("H100", 80.0)


@pytest.mark.parametrize(
    ("call", "field", "value", "rule_part"),
    [
        (lambda t: t.level_index("row"), "level", "row", "unknown level"),
        (lambda t: t.level_index("row", "segment"), "segment", "row", "levels are zone, rack"),
        (lambda t: t.node_index("zz"), "node", "zz", "no node of that name"),
        (lambda t: t.model_index("B200"), "gpu_models", "B200", "has H100, T4"),
    ],
)
def test_lookup_errors_name_field_value_rule(
    small: Topology, call: Any, field: str, value: str, rule_part: str
) -> None:
    with pytest.raises(InputError) as caught:
        call(small)
    assert (caught.value.field, caught.value.value) == (field, value)
    assert rule_part in caught.value.rule
    assert field in str(caught.value) and rule_part in str(caught.value)


def test_domain_starts_must_cover_all_nodes() -> None:
    # Two nodes, but the rack level's boundaries stop at 1.
    with pytest.raises(InputError) as caught:
        Topology(
            levels=("rack",),
            domain_starts=[np.array([0, 2]), np.array([0, 1])],
            domain_parent=[np.array([-1]), np.array([0])],
            domain_names=[["cluster"], ["r0"]],
            node_names=["a", "b"],
            gpu_count=np.array([1, 1], dtype=np.int8),
            gpu_model=np.zeros(2, dtype=np.int16),
            cpu_milli=np.zeros(2, dtype=np.int64),
            memory_mib=np.zeros(2, dtype=np.int64),
            gpu_models=(GpuModel("X"),),
        )
    assert (caught.value.field, caught.value.value) == ("domain_starts", 1)
    assert "n_nodes=2" in caught.value.rule


def test_nbytes_counts_every_array() -> None:
    # k=4 fat tree: 16 nodes, 4 pods, 8 edges.
    #   per node: gpu_count 1 B + gpu_model 2 B + cpu 8 B + memory 8 B = 19 B x 16 = 304
    #   domain_starts (int64): (2 + 5 + 9) x 8 = 128; domain_parent: (1 + 4 + 8) x 8 = 104
    #   node_domain (int32): 3 levels x 16 x 4 = 192             total 304 + 128 + 104 + 192 = 728
    assert fat_tree_cluster(k=4).nbytes() == 728


def test_generated_names() -> None:
    # nvl72 with 2 blocks of 2 racks of 3 nodes: names are parent-name-prefixed local indices.
    top = nvl72_cluster(blocks_per_zone=2, racks_per_block=2, nodes_per_rack=3)
    names = top.node_names
    assert isinstance(names, GeneratedNames)
    assert len(names) == 12
    assert names[0] == "z0-b0-r0-n0"
    assert names[4] == "z0-b0-r1-n1"  # node 4 = rack 1, local index 1
    assert names[-1] == "z0-b1-r1-n2"
    assert names[np.int64(7)] == "z0-b1-r0-n1"
    assert names[3:6] == ["z0-b0-r1-n0", "z0-b0-r1-n1", "z0-b0-r1-n2"]
    assert list(names)[9] == "z0-b1-r1-n0"
    assert list(top.domain_names[3]) == ["z0-b0-r0", "z0-b0-r1", "z0-b1-r0", "z0-b1-r1"]
    assert top.node_index("z0-b1-r0-n2") == 8
    with pytest.raises(IndexError):
        names[12]
    with pytest.raises(IndexError):
        names[-13]


def test_generated_names_pad_to_width() -> None:
    names = GeneratedNames("r", np.array([0, 12]), None, None, width=3)
    assert (names[0], names[11], len(names)) == ("r000", "r011", 12)


@pytest.mark.parametrize(
    ("levels", "children", "prefixes"),
    [
        (("pod",), [[2], [2, 2]], ("p", "h")),  # child counts for two levels, one level named
        (("pod", "edge"), [[2], [1, 1]], ("p", "h")),  # one prefix short
    ],
)
def test_build_regular_rejects_mismatched_shapes(
    levels: tuple[str, ...], children: list[list[int]], prefixes: tuple[str, ...]
) -> None:
    with pytest.raises(InputError) as caught:
        build_regular(levels, children, [2, 2], prefixes, 8, GpuModel("X"), 1000, 1024)
    assert caught.value.field == "levels"
    assert caught.value.value == list(levels)


def test_build_regular_uneven_leaves() -> None:
    # One pod with edges of 3 and 1 hosts: starts [0, 3, 4], node names restart per edge.
    top = build_regular(
        ("pod", "edge"), [[1], [2]], [3, 1], ("p", "e", "h"), 2, GpuModel("X"), 1, 1
    )
    assert top.domain_starts[2].tolist() == [0, 3, 4]
    assert top.domain_starts[1].tolist() == [0, 4]
    assert list(top.node_names) == ["p0-e0-h0", "p0-e0-h1", "p0-e0-h2", "p0-e1-h0"]
    assert top.n_gpus == 8
