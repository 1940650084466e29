"""Tests of the YAML/JSON cluster description loader and the openb node list loader."""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from toposched.cluster.errors import InputError
from toposched.cluster.loaders import load_openb_nodes, load_topology, topology_from_dict
from toposched.cluster.topology import Topology

DATA = Path(__file__).parent / "data"
SMALL_YAML = DATA / "small_cluster.yaml"
OPENB_NODES = (
    Path(__file__).resolve().parents[2]
    / "shared"
    / "traces"
    / "openb"
    / "openb_node_list_gpu_node.csv"
)


def check_small_cluster(top: Topology) -> None:
    """The expected result of tests/data/small_cluster.yaml.

    File order a1(z1,r1) b1(z2,r3) a2(z1,r2) c1(z2,r3) a3(z1,r1). Prefixes rank by first
    appearance: z1=0, z1/r1=1, z2=2, z2/r3=3, z1/r2=4, so the sort keys are a1 (0,1), b1 (2,3),
    a2 (0,4), c1 (2,3), a3 (0,1) and depth-first order is a1, a3, a2, b1, c1.
    """
    assert top.levels == ("zone", "rack")
    assert list(top.node_names) == ["a1", "a3", "a2", "b1", "c1"]
    assert top.domain_starts[1].tolist() == [0, 3, 5]  # z1 = a1 a3 a2, z2 = b1 c1
    assert top.domain_starts[2].tolist() == [0, 2, 3, 5]  # r1 = a1 a3, r2 = a2, r3 = b1 c1
    assert list(top.domain_names[1]) == ["z1", "z2"]
    assert list(top.domain_names[2]) == ["r1", "r2", "r3"]
    assert top.domain_parent[2].tolist() == [0, 0, 1]
    # Per-node columns follow their node through the re-ordering.
    assert top.gpu_count.tolist() == [8, 2, 8, 4, 0]
    # Declared models first (A100=0, T4=1), then "" for the CPU-only node.
    assert [(m.name, m.memory_gib) for m in top.gpu_models] == [
        ("A100", 80.0),
        ("T4", 16.0),
        ("", 0.0),
    ]
    assert top.gpu_model.tolist() == [0, 0, 0, 1, 2]
    # defaults cpu 64 cores = 64,000m; b1 "32000m"; c1 16 cores.
    assert top.cpu_milli.tolist() == [64_000, 64_000, 64_000, 32_000, 16_000]
    # defaults 512Gi = 524,288 MiB; b1 256Gi = 262,144; c1 65,536 MiB as given.
    assert top.memory_mib.tolist() == [524_288, 524_288, 524_288, 262_144, 65_536]
    assert (top.n_nodes, top.n_gpus) == (5, 22)
    assert top.node_path(top.node_index("b1")) == {"zone": "z2", "rack": "r3"}


def test_yaml_file_is_reordered_depth_first() -> None:
    check_small_cluster(load_topology(SMALL_YAML))


def test_json_file_gives_the_same_cluster(tmp_path: Path) -> None:
    path = tmp_path / "small.json"
    path.write_text(json.dumps(yaml.safe_load(SMALL_YAML.read_text())))
    check_small_cluster(load_topology(path))


def test_dict_gives_the_same_cluster() -> None:
    check_small_cluster(topology_from_dict(yaml.safe_load(SMALL_YAML.read_text())))


def test_no_levels_is_one_flat_domain() -> None:
    top = topology_from_dict(
        {"nodes": [{"name": "x", "gpus": 1, "gpu_model": "T4"}, {"name": "y", "gpus": 3,
                                                                "gpu_model": "T4"}]}
    )  # fmt: skip
    assert top.levels == ()
    assert top.domain_starts[0].tolist() == [0, 2]
    assert list(top.node_names) == ["x", "y"]
    assert top.n_gpus == 4


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("cpu", 64, 64_000),
        ("cpu", 0.5, 500),  # half a core
        ("cpu", "500m", 500),
        ("cpu", "2", 2_000),
        ("memory", 1024, 1024),  # plain MiB
        ("memory", "512Gi", 512 * 1024),
        ("memory", "2Ti", 2 * 1024 * 1024),
        ("memory", "1024Ki", 1),
        ("memory", "100Ki", 1),  # 0.098 MiB rounds up
        ("memory", "1G", 954),  # 10^9 / 2^20 = 953.67 MiB, rounded up
        ("memory", "3M", 3),  # 3 x 10^6 / 2^20 = 2.86 MiB, rounded up
    ],
)
def test_cpu_and_memory_quantities(field: str, value: Any, expected: int) -> None:
    top = topology_from_dict({"nodes": [{"name": "x", "gpus": 1, "gpu_model": "T4", field: value}]})
    column = top.cpu_milli if field == "cpu" else top.memory_mib
    assert column.tolist() == [expected]


def valid() -> dict[str, Any]:
    """Two racks of two nodes; each bad-input case below breaks one thing."""
    return {
        "levels": ["zone", "rack"],
        "nodes": [
            {"name": "a", "gpus": 8, "gpu_model": "H100", "labels": {"zone": "z", "rack": "r0"}},
            {"name": "b", "gpus": 8, "gpu_model": "H100", "labels": {"zone": "z", "rack": "r0"}},
            {"name": "c", "gpus": 4, "gpu_model": "T4", "labels": {"zone": "z", "rack": "r1"}},
            {"name": "d", "gpus": 2, "gpu_model": "T4", "labels": {"zone": "z", "rack": "r1"}},
        ],
    }


def node(i: int, **changes: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation of `valid()` that updates node i's fields (None deletes a field)."""

    def mutate(description: dict[str, Any]) -> None:
        for key, value in changes.items():
            if value is None:
                description["nodes"][i].pop(key)
            else:
                description["nodes"][i][key] = value

    return mutate


def top(**changes: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(description: dict[str, Any]) -> None:
        description.update(changes)

    return mutate


BAD_INPUTS = [
    # Unknown level names in labels.
    (
        node(1, labels={"zone": "z", "rack": "r0", "row": "x"}),
        "cluster.nodes[1].labels.row",
        "row",
        "unknown level; levels are zone, rack",
    ),
    (
        node(0, labels={"zone": "z", "Rack": "r0"}),
        "cluster.nodes[0].labels.Rack",
        "Rack",
        "unknown",
    ),
    # A node missing a level label (or with an empty one).
    (
        node(2, labels={"zone": "z"}),
        "cluster.nodes[2].labels.rack",
        None,
        "every node needs a label for every level",
    ),
    (node(3, labels={"zone": "", "rack": "r1"}), "cluster.nodes[3].labels.zone", "", "every node"),
    # Duplicate node names: the second occurrence is named, with the first.
    (
        node(2, name="a"),
        "cluster.nodes[2].name",
        "a",
        "duplicate node name (also cluster.nodes[0])",
    ),
    (node(1, name=""), "cluster.nodes[1].name", "", "non-empty plain name"),
    (node(1, name="-x"), "cluster.nodes[1].name", "-x", "plain name"),
    (node(1, name=None), "cluster.nodes[1].name", None, "plain name"),
    # Negative or non-integer GPU counts.
    (node(0, gpus=-1), "cluster.nodes[0].gpus", -1, "must be an integer >= 0"),
    (node(0, gpus=2.5), "cluster.nodes[0].gpus", 2.5, "must be an integer >= 0"),
    (node(0, gpus="8"), "cluster.nodes[0].gpus", "8", "must be an integer >= 0"),
    (node(0, gpus=True), "cluster.nodes[0].gpus", True, "must be an integer >= 0"),
    (node(0, gpus=[8]), "cluster.nodes[0].gpus", [8], "must be an integer >= 0"),
    (node(0, gpus=65), "cluster.nodes[0].gpus", 65, "<= 64"),
    # GPUs without a model.
    (node(3, gpu_model=None), "cluster.nodes[3].gpu_model", None, "needs a GPU model name"),
    (node(3, gpu_model=""), "cluster.nodes[3].gpu_model", "", "needs a GPU model name"),
    # CPU and memory.
    (node(0, cpu=-1), "cluster.nodes[0].cpu", -1, "cores >= 0"),
    (node(0, cpu="lots"), "cluster.nodes[0].cpu", "lots", "cores"),
    (node(0, cpu="-5m"), "cluster.nodes[0].cpu", "-5m", "cores"),
    (node(0, cpu="2.5m"), "cluster.nodes[0].cpu", "2.5m", "cores"),
    (node(0, cpu=float("inf")), "cluster.nodes[0].cpu", float("inf"), "cores"),
    (node(0, memory=-1), "cluster.nodes[0].memory", -1, "512Gi"),
    (node(0, memory="12Xi"), "cluster.nodes[0].memory", "12Xi", "512Gi"),
    (node(0, memory="-4Gi"), "cluster.nodes[0].memory", "-4Gi", "512Gi"),
    (node(0, memory="1.2.3Gi"), "cluster.nodes[0].memory", "1.2.3Gi", "512Gi"),
    (node(0, memory=float("inf")), "cluster.nodes[0].memory", float("inf"), "512Gi"),
    # Records and labels of the wrong type.
    (top(nodes=["a"]), "cluster.nodes[0]", "a", "must be a mapping"),
    (node(0, labels=["z", "r0"]), "cluster.nodes[0].labels", ["z", "r0"], "mapping"),
    # The description itself.
    (top(levels=["zone", "node"]), "cluster.levels[1]", "node", "not 'cluster' or 'node'"),
    (top(levels=["rack", "rack"]), "cluster.levels[0]", "rack", "must be unique"),
    (top(levels=["zone", "my rack"]), "cluster.levels[1]", "my rack", "plain name"),
    (top(levels="zone"), "cluster.levels", "zone", "must be a list of level names"),
    (top(nodes=[]), "cluster.nodes", [], "non-empty list of nodes"),
    (top(racks=4), "cluster.racks", "racks", "unknown field"),
    (top(defaults=[1]), "cluster.defaults", [1], "mapping of node fields"),
    (top(gpu_models=["H100"]), "cluster.gpu_models", ["H100"], "model name -> memory GiB"),
    # A rack name reused under two zones: domain names are unique within a level.
    (
        node(3, labels={"zone": "y", "rack": "r0"}),
        "cluster.nodes[3].labels.rack",
        "r0",
        "domain names must be unique within a level (found under z and y)",
    ),
]


@pytest.mark.parametrize(("mutate", "field", "value", "rule_part"), BAD_INPUTS)
def test_bad_description(
    mutate: Callable[[dict[str, Any]], None], field: str, value: Any, rule_part: str
) -> None:
    description = valid()
    mutate(description)
    with pytest.raises(InputError) as caught:
        topology_from_dict(description)
    error = caught.value
    assert (error.field, error.value) == (field, value)
    assert rule_part in error.rule
    assert str(error) == f"{field}: {value!r} is invalid: {error.rule}"


def test_description_must_be_a_mapping() -> None:
    with pytest.raises(InputError) as caught:
        topology_from_dict(["levels"])  # type: ignore[arg-type]
    assert (caught.value.field, caught.value.value) == ("cluster", ["levels"])


def test_valid_base_description_loads() -> None:
    # The mutations above start from a valid description: 8 + 8 + 4 + 2 = 22 GPUs.
    assert topology_from_dict(valid()).n_gpus == 22


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (node(0, gpus=float("nan")), "cluster.nodes[0].gpus"),
        (node(0, gpus=float("inf")), "cluster.nodes[0].gpus"),
    ],
)
def test_non_finite_gpu_counts_are_input_errors(
    mutate: Callable[[dict[str, Any]], None], field: str
) -> None:
    description = valid()
    mutate(description)
    with pytest.raises(InputError) as caught:
        topology_from_dict(description)
    assert caught.value.field == field


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    description = copy.deepcopy(valid())
    description["nodes"][1]["gpus"] = -2
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(description))
    with pytest.raises(InputError) as caught:
        load_topology(path)
    error = caught.value
    assert (error.file, error.field, error.value) == (str(path), "nodes[1].gpus", -2)
    # yaml.safe_dump writes `levels:` (3 lines) first, then each node's fields in order.
    line = path.read_text().splitlines().index("  gpus: -2") + 1
    assert error.line == line
    assert str(error).startswith(f"{path}:{line}: nodes[1].gpus: -2 is invalid: ")


@pytest.mark.parametrize(
    ("name", "text", "field_is_path", "rule_part"),
    [
        ("broken.yaml", "levels: [zone\nnodes: :", True, "not valid YAML"),
        ("broken.json", '{"levels": [', True, "not valid JSON"),
        ("empty.yaml", "", True, "must be a mapping with levels and nodes"),
        ("list.yml", "- a\n- b\n", True, "must be a mapping with levels and nodes"),
    ],
)
def test_unreadable_files(
    tmp_path: Path, name: str, text: str, field_is_path: bool, rule_part: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        load_topology(path)
    assert (caught.value.file == str(path)) is field_is_path
    assert rule_part in caught.value.rule


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(InputError) as caught:
        load_topology(path)
    assert (caught.value.field, caught.value.value, caught.value.rule) == (
        "cluster file",
        path,
        "file not found",
    )


# --- openb node list ------------------------------------------------------------------------

# From ../shared/traces/README.md: (model, GPUs per node) -> nodes.
OPENB_MIX = {
    ("G2", 8): 549,
    ("T4", 2): 387,
    ("P100", 2): 131,
    ("G3", 8): 39,
    ("V100M16", 4): 28,
    ("V100M16", 1): 19,
    ("V100M16", 8): 8,
    ("V100M32", 8): 21,
    ("V100M32", 4): 9,
    ("T4", 4): 17,
    ("P100", 1): 3,
    ("A10", 1): 2,
}
needs_openb = pytest.mark.skipif(
    not OPENB_NODES.exists(), reason=f"openb node list not found at {OPENB_NODES}"
)


def test_openb_mix_adds_up() -> None:
    # 549 + 387 + 131 + 39 + 28 + 19 + 8 + 21 + 9 + 17 + 3 + 2 = 1,213 nodes;
    # 4,392 + 774 + 262 + 312 + 112 + 19 + 64 + 168 + 36 + 68 + 3 + 2 = 6,212 GPUs.
    assert sum(OPENB_MIX.values()) == 1213
    assert sum(gpus * n for (_, gpus), n in OPENB_MIX.items()) == 6212


@needs_openb
@pytest.mark.parametrize("load", [load_openb_nodes, load_topology])
def test_openb_node_list(load: Callable[[Path], Topology]) -> None:
    top = load(OPENB_NODES)
    assert (top.n_nodes, top.n_gpus) == (1213, 6212)
    assert top.levels == () and top.n_domains(0) == 1
    assert top.gpu_count.min() == 1 and top.max_gpus_per_node == 8
    mix = Counter(
        (top.gpu_models[m].name, int(g)) for m, g in zip(top.gpu_model, top.gpu_count, strict=True)
    )
    assert dict(mix) == OPENB_MIX
    assert sorted(m.name for m in top.gpu_models) == sorted(
        {"G2", "T4", "P100", "G3", "V100M16", "V100M32", "A10"}
    )
    # The first data row: openb-node-0000,64000,262144,2,P100 (no levels, file order kept).
    first = top.node_index("openb-node-0000")
    assert first == 0
    assert (int(top.cpu_milli[0]), int(top.memory_mib[0]), int(top.gpu_count[0])) == (
        64_000,
        262_144,
        2,
    )
    assert top.gpu_models[int(top.gpu_model[0])].name == "P100"


@pytest.mark.parametrize(
    ("text", "line", "field", "value", "rule_part"),
    [
        ("sn,cpu_milli,gpu,model\nx,1,1,T4\n", 1, "columns", ["memory_mib"], "missing"),
        (
            "sn,cpu_milli,memory_mib,gpu,model\nx,1000,1024,2,T4\ny,1000,1024,two,T4\n",
            3,
            "gpu",
            "two",
            "must be an integer",
        ),
    ],
)
def test_openb_bad_rows(
    tmp_path: Path, text: str, line: int, field: str, value: Any, rule_part: str
) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        load_openb_nodes(path)
    error = caught.value
    assert (error.file, error.line, error.field, error.value) == (str(path), line, field, value)
    assert rule_part in error.rule


def test_openb_style_small_file(tmp_path: Path) -> None:
    # Two nodes; the CPU-only one gets no model. 2 + 0 GPUs.
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nx,8000,1024,2,T4\ny,4000,512,0,\n")
    top = load_topology(path)
    assert list(top.node_names) == ["x", "y"]
    assert top.gpu_count.tolist() == [2, 0]
    assert top.cpu_milli.tolist() == [8000, 4000]
    assert top.memory_mib.tolist() == [1024, 512]
    assert [m.name for m in top.gpu_models] == ["T4", ""]
