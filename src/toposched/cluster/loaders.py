"""Load heterogeneous clusters from a YAML/JSON description or from the openb node list.

Errors read `FILE:LINE: field.path: 'value' is invalid: rule` for files and
`cluster.field.path: ...` for descriptions given as data; unknown fields are errors, with the
valid name they are closest to. The limits checked are those of `toposched.cluster.limits`.
"""

from __future__ import annotations

import csv
import io
import math
import re
from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toposched.cluster.documents import parse_documents, read_text
from toposched.cluster.errors import InputError, did_you_mean, join_fields, unknown_field_rule
from toposched.cluster.limits import (
    MAX_CPU_MILLI,
    MAX_GPUS_PER_NODE,
    MAX_MEMORY_MIB,
    MAX_NAME_LENGTH,
    MAX_NODES,
)
from toposched.cluster.units import NODE_LEVEL, ROOT_LEVEL, parse_cpu_milli, parse_memory_mib

if TYPE_CHECKING:
    from toposched.cluster.topology import Topology

# numpy (with toposched.cluster.topology) loads in `CheckedCluster.topology`, once every field
# has been checked: a file that fails validation is refused before it loads. Until then the
# per-node columns are stdlib arrays, and GPU models a name -> memory GiB mapping.

__all__ = [
    "CLUSTER_FIELDS",
    "NODE_FIELDS",
    "CheckedCluster",
    "check_description",
    "load_openb_nodes",
    "load_topology",
    "read_cluster",
    "read_openb_nodes",
    "topology_from_dict",
    "topology_from_nodes",
]

CLUSTER_FIELDS = ("levels", "gpu_models", "defaults", "nodes")
NODE_FIELDS = ("name", "labels", "gpus", "gpu_model", "cpu", "memory")
"""A node's fields; a node may also give its labels at top level, one field per level."""

# Names: a letter or digit, then letters, digits and . _ : / -, at most MAX_NAME_LENGTH in all.
_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9._:/-]{{0,{MAX_NAME_LENGTH - 1}}}")
_NAME_RULE = (
    f"must be a non-empty plain name: at most {MAX_NAME_LENGTH} letters, digits and . _ : / -, "
    "starting with a letter or digit"
)
# openb CSV columns for the node fields they fill.
_CSV_COLUMNS = {
    "name": "sn",
    "gpus": "gpu",
    "gpu_model": "model",
    "cpu": "cpu_milli",
    "memory": "memory_mib",
}
# "nodes[3].labels.rack": the node's index, its field and the rest of the path.
_NODE_AT = re.compile(r"(?P<prefix>.*?)\[(?P<index>\d+)\](?:\.(?P<key>[^.\[]+))?(?P<rest>.*)")


def _count(field: str, value: Any, rule: str = "must be an integer >= 0") -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(field, value, rule)
    if not math.isfinite(value) or value != int(value) or value < 0:
        raise InputError(field, value, rule)
    return int(value)


def _check_levels(levels: Any, field: str) -> tuple[str, ...]:
    if not isinstance(levels, list | tuple):
        raise InputError(field, levels, "must be a list of level names, outermost first")
    for i, level in enumerate(levels):
        if not isinstance(level, str) or not _NAME.fullmatch(level):
            raise InputError(f"{field}[{i}]", level, _NAME_RULE)
        if level in (ROOT_LEVEL, NODE_LEVEL) or levels.count(level) > 1:
            raise InputError(f"{field}[{i}]", level, "must be unique and not 'cluster' or 'node'")
    return tuple(levels)


def _check_models(gpu_models: Any, field: str) -> dict[str, float]:
    if not isinstance(gpu_models, Mapping):
        raise InputError(field, gpu_models, "must map model name -> memory GiB")
    models: dict[str, float] = {}
    for name, memory in gpu_models.items():
        if not isinstance(name, str) or not name or len(name) > MAX_NAME_LENGTH:
            raise InputError(
                f"{field}.{name}",
                name,
                f"a GPU model name must be 1 to {MAX_NAME_LENGTH} characters",
            )
        if isinstance(memory, bool) or not isinstance(memory, int | float):
            raise InputError(f"{field}.{name}", memory, "must be the GiB of one GPU, a number")
        if not math.isfinite(memory) or memory < 0:
            raise InputError(f"{field}.{name}", memory, "must be the GiB of one GPU, >= 0")
        models[name] = float(memory)
    return models


def _cached(parse: Callable[[object, str], int], limit: int) -> Callable[[Any, str], int]:
    """`parse`, its result capped at `limit + 1` (so that it fits int64 and the limit check
    finds it), remembered for each hashable value: cluster files repeat a few values (often
    from `defaults`) on every node."""
    cache: dict[tuple[type, Any], int] = {}

    def parsed(value: Any, field: str) -> int:
        if not isinstance(value, str | int | float):
            return min(parse(value, field), limit + 1)
        key = (type(value), value)  # True == 1, but True is no quantity
        result = cache.get(key)
        if result is None:
            result = cache[key] = min(parse(value, field), limit + 1)
        return result

    return parsed


@dataclass(frozen=True)
class CheckedCluster:
    """A cluster description with every field checked, its nodes in depth-first `order`;
    `topology()` builds the Topology's arrays (and loads numpy), which cannot fail."""

    levels: tuple[str, ...]
    names: list[str]
    paths: list[tuple[str, ...]]
    gpus: array[int]
    cpu: array[int]
    memory: array[int]
    model_names: list[str]
    models: dict[str, float]
    order: list[int]

    @property
    def gpu_model_names(self) -> tuple[str, ...]:
        """The GPU model catalogue's names, in the topology's order."""
        return tuple(self.models)

    def topology(self) -> Topology:
        return _assemble(self)


def topology_from_nodes(
    levels: Sequence[str],
    nodes: Sequence[Mapping[str, Any]],
    gpu_models: Mapping[str, float] | None = None,
    source: str = "nodes",
) -> Topology:
    """Build a topology from node records; nodes are re-ordered depth-first by their labels.

    Each record has `name`, `gpus`, `gpu_model`, `cpu`, `memory` and a label per level
    (under `labels` or at top level). Domains keep the order in which they first appear.
    Domain names must be unique within a level. Errors name `source[i].field`.
    """
    checked_levels = _check_levels(levels, join_fields(source, "levels"))
    models = _check_models(gpu_models or {}, join_fields(source, "gpu_models"))
    return _checked(checked_levels, nodes, models, source).topology()


def _checked(
    levels: tuple[str, ...],
    nodes: Sequence[Mapping[str, Any]],
    models: dict[str, float],
    source: str,
) -> CheckedCluster:
    if len(nodes) > MAX_NODES:
        raise InputError(source, f"{len(nodes):,} nodes", f"must be at most {MAX_NODES:,} nodes")
    _check_node_fields(levels, nodes, source)
    names: list[str] = []
    seen: dict[str, int] = {}
    paths: list[tuple[str, ...]] = []
    gpus = array("b", bytes(len(nodes)))  # numpy's int8 and int64, as the topology holds them
    cpu = array("q", bytes(8 * len(nodes)))
    memory = array("q", bytes(8 * len(nodes)))
    model_names: list[str] = []
    cpu_of = _cached(parse_cpu_milli, MAX_CPU_MILLI)
    memory_of = _cached(parse_memory_mib, MAX_MEMORY_MIB)
    for i, record in enumerate(nodes):
        where = f"{source}[{i}]"
        if not isinstance(record, Mapping):
            raise InputError(where, record, "must be a mapping with name, gpus, labels")
        name = record.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InputError(f"{where}.name", name, _NAME_RULE)
        if name in seen:
            raise InputError(
                f"{where}.name", name, f"duplicate node name (also {source}[{seen[name]}])"
            )
        seen[name] = i
        labels = record.get("labels", record)
        if not isinstance(labels, Mapping):
            raise InputError(f"{where}.labels", labels, "must be a mapping of level -> domain")
        unknown = [key for key in record.get("labels", {}) if key not in levels]
        if unknown:
            raise InputError(
                f"{where}.labels.{unknown[0]}",
                unknown[0],
                f"unknown level{did_you_mean(unknown[0], levels)}; "
                f"levels are {', '.join(levels) or '(none)'}",
            )
        path = []
        for level in levels:
            label = labels.get(level)
            if not isinstance(label, str):
                # A number names a domain as its digits do (rack: 7); nothing else is a name.
                label = str(label) if type(label) is int else ""
            if not label:
                raise InputError(
                    f"{where}.labels.{level}",
                    labels.get(level),
                    "every node needs a label for every level: a domain name such as r1",
                )
            path.append(label)
        gpu_count = _count(f"{where}.gpus", record.get("gpus", 0))
        if gpu_count > MAX_GPUS_PER_NODE:
            raise InputError(
                f"{where}.gpus", gpu_count, f"must be <= {MAX_GPUS_PER_NODE} GPUs per node"
            )
        model = record.get("gpu_model", "" if gpu_count == 0 else None)
        if not isinstance(model, str) or (gpu_count and not model):
            raise InputError(f"{where}.gpu_model", model, "a node with GPUs needs a GPU model name")
        names.append(name)
        paths.append(tuple(path))
        gpus[i] = gpu_count
        cpu[i] = cpu_of(record.get("cpu", 0), f"{where}.cpu")
        memory[i] = memory_of(record.get("memory", 0), f"{where}.memory")
        model_names.append(model)
        if model not in models:
            if len(model) > MAX_NAME_LENGTH:
                raise InputError(
                    f"{where}.gpu_model", model, f"must be at most {MAX_NAME_LENGTH} characters"
                )
            models[model] = 0.0
    _check_quantity(cpu, MAX_CPU_MILLI, nodes, source, "cpu", f"{MAX_CPU_MILLI // 1000:,} cores")
    _check_quantity(memory, MAX_MEMORY_MIB, nodes, source, "memory", "1Ei (1024Pi)")
    order = _depth_first_order(levels, paths, source)
    return CheckedCluster(levels, names, paths, gpus, cpu, memory, model_names, models, order)


def _check_node_fields(
    levels: tuple[str, ...], nodes: Sequence[Mapping[str, Any]], source: str
) -> None:
    """Every field of every node is a node field or a level's label; one pass over all keys."""
    allowed = {*NODE_FIELDS, *levels}
    written: set[Any] = set()
    written.update(*(record for record in nodes if isinstance(record, Mapping)))
    if written <= allowed:
        return
    for i, record in enumerate(nodes):
        for key in record if isinstance(record, Mapping) else ():
            if key not in allowed:
                raise InputError(
                    f"{source}[{i}].{key}",
                    record[key],
                    unknown_field_rule(key, [*NODE_FIELDS, *levels]),
                )


def _check_quantity(
    column: array[int], limit: int, nodes: Sequence[Any], source: str, field: str, shown: str
) -> None:
    if column and max(column) > limit:
        i = next(i for i, value in enumerate(column) if value > limit)
        raise InputError(
            f"{source}[{i}].{field}", nodes[i].get(field), f"must be at most {shown} per node"
        )


def _depth_first_order(
    levels: tuple[str, ...], paths: list[tuple[str, ...]], source: str
) -> list[int]:
    """The nodes' indices in depth-first order; domain names are checked on the way."""
    # Depth-first order = sort by the first-appearance rank of each path prefix.
    rank: dict[tuple[str, ...], int] = {}
    owner: list[dict[str, tuple[str, ...]]] = [{} for _ in levels]
    for i, path in enumerate(paths):
        for depth in range(1, len(path) + 1):
            prefix = path[:depth]
            if prefix not in rank:
                label = prefix[-1]
                if len(label) > MAX_NAME_LENGTH:
                    raise InputError(
                        f"{source}[{i}].labels.{levels[depth - 1]}",
                        label,
                        f"must be at most {MAX_NAME_LENGTH} characters",
                    )
                other = owner[depth - 1].get(label)
                if other is not None and other != prefix:
                    raise InputError(
                        f"{source}[{i}].labels.{levels[depth - 1]}",
                        label,
                        "domain names must be unique within a level "
                        f"(found under {'/'.join(other[:-1])} and {'/'.join(prefix[:-1])})",
                    )
                owner[depth - 1][label] = prefix
                rank[prefix] = len(rank)
    keys = [tuple(rank[path[:d]] for d in range(1, len(path) + 1)) for path in paths]
    return sorted(range(len(paths)), key=lambda i: (keys[i], i))


def _assemble(cluster: CheckedCluster) -> Topology:
    import numpy as np

    from toposched.cluster.topology import GpuModel, Topology

    levels, order, models = cluster.levels, cluster.order, cluster.models
    paths, names, model_names = cluster.paths, cluster.names, cluster.model_names
    catalogue = tuple(GpuModel(name, memory_gib) for name, memory_gib in models.items())
    model_index = {m.name: j for j, m in enumerate(catalogue)}
    sorted_paths = [paths[i] for i in order]
    starts = [np.array([0, len(order)], dtype=np.int64)]
    parents = [np.array([-1], dtype=np.int64)]
    domain_names: list[Sequence[str]] = [[ROOT_LEVEL]]
    previous_index: dict[tuple[str, ...], int] = {(): 0}
    for depth in range(1, len(levels) + 1):
        boundaries: list[int] = []
        level_parents: list[int] = []
        level_names: list[str] = []
        index: dict[tuple[str, ...], int] = {}
        for position, path in enumerate(sorted_paths):
            prefix = path[:depth]
            if prefix not in index:
                index[prefix] = len(level_names)
                boundaries.append(position)
                level_parents.append(previous_index[prefix[:-1]])
                level_names.append(prefix[-1])
        boundaries.append(len(sorted_paths))
        starts.append(np.array(boundaries, dtype=np.int64))
        parents.append(np.array(level_parents, dtype=np.int64))
        domain_names.append(level_names)
        previous_index = index
    take = np.array(order, dtype=np.int64)
    gpu_column = np.frombuffer(cluster.gpus, dtype=np.int8)
    cpu_column = np.frombuffer(cluster.cpu, dtype=np.int64)
    memory_column = np.frombuffer(cluster.memory, dtype=np.int64)
    return Topology(
        levels=levels,
        domain_starts=starts,
        domain_parent=parents,
        domain_names=domain_names,
        node_names=[names[i] for i in order],
        gpu_count=gpu_column[take] if len(take) else gpu_column.copy(),
        gpu_model=np.array([model_index[model_names[i]] for i in order], dtype=np.int16),
        cpu_milli=cpu_column[take] if len(take) else cpu_column.copy(),
        memory_mib=memory_column[take] if len(take) else memory_column.copy(),
        gpu_models=catalogue,
    )


def topology_from_dict(description: Mapping[str, Any], source: str = "cluster") -> Topology:
    """A cluster description: `levels`, optional `gpu_models` {name: memory_gib}, `nodes`.

    `defaults` (optional) supplies fields every node shares, e.g. gpus, gpu_model, cpu, memory.
    Errors name `source.field.path` (`source` "" for a file's own fields).
    """
    return check_description(description, source).topology()


def check_description(description: Mapping[str, Any], source: str = "cluster") -> CheckedCluster:
    """Check a cluster description as `topology_from_dict` does, with its errors, without
    building the topology: its levels, node names, labels, GPU models and limits, before numpy
    loads."""
    if not isinstance(description, Mapping):
        raise InputError(
            source or "cluster", description, "must be a mapping with levels and nodes"
        )
    for key in description:
        if key not in CLUSTER_FIELDS:
            raise InputError(
                join_fields(source, str(key)), key, unknown_field_rule(key, CLUSTER_FIELDS)
            )
    levels = _check_levels(description.get("levels", []), join_fields(source, "levels"))
    nodes = description.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise InputError(join_fields(source, "nodes"), nodes, "must be a non-empty list of nodes")
    defaults = description.get("defaults", {}) or {}
    if not isinstance(defaults, Mapping):
        raise InputError(
            join_fields(source, "defaults"), defaults, "must be a mapping of node fields"
        )
    shared = [field for field in NODE_FIELDS if field != "name"]
    for key in defaults:
        if key not in shared and key not in levels:
            raise InputError(
                join_fields(source, f"defaults.{key}"),
                defaults[key],
                unknown_field_rule(key, [*shared, *levels]),
            )
    models = _check_models(description.get("gpu_models") or {}, join_fields(source, "gpu_models"))
    merged = [{**defaults, **node} if isinstance(node, Mapping) else node for node in nodes]
    nodes_field = join_fields(source, "nodes")
    try:
        return _checked(levels, merged, models, nodes_field)
    except InputError as error:
        defaults_field = join_fields(source, "defaults")
        raise _from_defaults(error, nodes_field, nodes, defaults, defaults_field) from None


def _from_defaults(
    error: InputError, nodes_field: str, nodes: list[Any], defaults: Mapping[str, Any], field: str
) -> InputError:
    """`error` about a node's field that the node took from `defaults`, named as the default."""
    match = _NODE_AT.fullmatch(error.field)
    if match is None or match["prefix"] != nodes_field or match["key"] is None:
        return error
    node = nodes[int(match["index"])]
    key = match["key"]
    if not isinstance(node, Mapping) or key in node or key not in defaults:
        return error
    return InputError(f"{field}.{key}{match['rest']}", error.value, error.rule)


def load_topology(path: str | Path) -> Topology:
    """Load a cluster from a YAML or JSON file, or an openb-style node list CSV."""
    return read_cluster(path).topology()


def read_cluster(path: str | Path) -> CheckedCluster:
    """Read and check a cluster file as `load_topology` does, without building the topology:
    every error in the file is found before numpy loads."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return read_openb_nodes(path)
    text = read_text(path, "cluster file")
    documents = parse_documents(text, str(path), json_text=suffix == ".json")
    if len(documents) != 1:
        raise InputError(
            "cluster",
            f"{len(documents)} documents" if documents else None,
            "must be a mapping with levels and nodes, "
            + ("in one YAML document" if documents else "and the file is empty"),
            file=str(path),
        )
    document = documents[0]
    try:
        return check_description(document.data, source="")
    except InputError as error:
        raise document.locate(error, root="cluster") from None


def load_openb_nodes(path: str | Path) -> Topology:
    """The openb node list (`sn,cpu_milli,memory_mib,gpu,model`): a flat cluster, no levels."""
    return read_openb_nodes(Path(path)).topology()


def read_openb_nodes(path: Path) -> CheckedCluster:
    """Read and check an openb node list as `load_openb_nodes` does, without building it."""
    file = str(path)
    reader = csv.DictReader(io.StringIO(read_text(path, "cluster file"), newline=""))
    records: list[dict[str, Any]] = []
    lines: list[int] = []
    try:
        expected = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
        missing = [column for column in expected if column not in (reader.fieldnames or [])]
        if missing:
            raise InputError(
                "columns",
                missing,
                f"missing; the columns are {','.join(expected)}",
                file=file,
                line=1,
            )
        for row in reader:
            numbers = {
                column: _csv_integer(row, column, file, reader.line_num)
                for column in ("gpu", "cpu_milli", "memory_mib")
            }
            records.append(
                {
                    "name": row["sn"],
                    "gpus": numbers["gpu"],
                    "gpu_model": (row["model"] or "") if numbers["gpu"] else "",
                    "cpu": f"{numbers['cpu_milli']}m",
                    "memory": numbers["memory_mib"],
                }
            )
            lines.append(reader.line_num)
    except csv.Error as error:
        raise InputError(
            "row", "", f"is not valid CSV: {error}", file=file, line=reader.line_num
        ) from None
    try:
        return _checked((), records, {}, "nodes")
    except InputError as error:
        raise _csv_located(error, file, lines) from None


def _csv_integer(row: Mapping[str | None, Any], column: str, file: str, line: int) -> int:
    text = row.get(column)
    if isinstance(text, str) and text.strip().isdigit() and len(text.strip()) <= 19:
        return int(text)
    raise InputError(column, text, "must be an integer >= 0", file=file, line=line)


def _csv_located(error: InputError, file: str, lines: list[int]) -> InputError:
    """An error about `nodes[i].field` as `FILE:LINE: column`."""
    match = _NODE_AT.fullmatch(error.field)
    if match is None or match["prefix"] != "nodes":
        return error.at(file)
    key = match["key"] or "row"
    rule = re.sub(r"nodes\[(\d+)\]", lambda m: f"line {lines[int(m[1])]}", error.rule)
    return InputError(
        _CSV_COLUMNS.get(key, key), error.value, rule, file=file, line=lines[int(match["index"])]
    )
