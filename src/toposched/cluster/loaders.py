"""Load heterogeneous clusters from a YAML/JSON description or from the openb node list."""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from toposched.cluster.errors import InputError
from toposched.cluster.topology import (
    MAX_GPUS_PER_NODE,
    NODE_LEVEL,
    ROOT_LEVEL,
    GpuModel,
    Topology,
)
from toposched.cluster.units import parse_cpu_milli, parse_memory_mib

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")


def _count(field: str, value: Any, rule: str = "must be an integer >= 0") -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(field, value, rule)
    if not math.isfinite(value) or value != int(value) or value < 0:
        raise InputError(field, value, rule)
    return int(value)


def topology_from_nodes(
    levels: Sequence[str],
    nodes: Sequence[Mapping[str, Any]],
    gpu_models: Mapping[str, float] | None = None,
    source: str = "nodes",
) -> Topology:
    """Build a topology from node records; nodes are re-ordered depth-first by their labels.

    Each record has `name`, `gpus`, `gpu_model`, `cpu`, `memory` and a label per level
    (under `labels` or at top level). Domains keep the order in which they first appear.
    Domain names must be unique within a level.
    """
    levels = tuple(levels)
    for i, level in enumerate(levels):
        if not isinstance(level, str) or not _NAME.match(level):
            raise InputError(f"{source}.levels[{i}]", level, "must be a plain name")
        if level in (ROOT_LEVEL, NODE_LEVEL) or levels.count(level) > 1:
            raise InputError(
                f"{source}.levels[{i}]", level, "must be unique and not 'cluster' or 'node'"
            )
    models: dict[str, GpuModel] = {
        name: GpuModel(name, float(mem)) for name, mem in (gpu_models or {}).items()
    }
    names: list[str] = []
    seen: dict[str, int] = {}
    paths: list[tuple[str, ...]] = []
    gpus = np.zeros(len(nodes), dtype=np.int8)
    cpu = np.zeros(len(nodes), dtype=np.int64)
    memory = np.zeros(len(nodes), dtype=np.int64)
    model_names: list[str] = []
    for i, record in enumerate(nodes):
        where = f"{source}[{i}]"
        if not isinstance(record, Mapping):
            raise InputError(where, record, "must be a mapping with name, gpus, labels")
        name = record.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise InputError(f"{where}.name", name, "must be a non-empty plain name")
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
                f"unknown level; levels are {', '.join(levels) or '(none)'}",
            )
        path = []
        for level in levels:
            label = labels.get(level)
            if label is None or str(label) == "":
                raise InputError(
                    f"{where}.labels.{level}", label, "every node needs a label for every level"
                )
            path.append(str(label))
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
        cpu[i] = parse_cpu_milli(record.get("cpu", 0), f"{where}.cpu")
        memory[i] = parse_memory_mib(record.get("memory", 0), f"{where}.memory")
        model_names.append(model)
        if model not in models:
            models[model] = GpuModel(model)
    return _assemble(levels, names, paths, gpus, cpu, memory, model_names, models, source)


def _assemble(
    levels: tuple[str, ...],
    names: list[str],
    paths: list[tuple[str, ...]],
    gpus: np.ndarray,
    cpu: np.ndarray,
    memory: np.ndarray,
    model_names: list[str],
    models: dict[str, GpuModel],
    source: str,
) -> Topology:
    # Depth-first order = sort by the first-appearance rank of each path prefix.
    rank: dict[tuple[str, ...], int] = {}
    owner: list[dict[str, tuple[str, ...]]] = [{} for _ in levels]
    for path in paths:
        for depth in range(1, len(path) + 1):
            prefix = path[:depth]
            if prefix not in rank:
                label = prefix[-1]
                other = owner[depth - 1].get(label)
                if other is not None and other != prefix:
                    raise InputError(
                        f"{source}.labels.{levels[depth - 1]}",
                        label,
                        "domain names must be unique within a level "
                        f"(found under {'/'.join(other[:-1])} and {'/'.join(prefix[:-1])})",
                    )
                owner[depth - 1][label] = prefix
                rank[prefix] = len(rank)
    keys = [tuple(rank[path[:d]] for d in range(1, len(path) + 1)) for path in paths]
    order = sorted(range(len(paths)), key=lambda i: (keys[i], i))
    catalogue = tuple(models.values())
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
    return Topology(
        levels=levels,
        domain_starts=starts,
        domain_parent=parents,
        domain_names=domain_names,
        node_names=[names[i] for i in order],
        gpu_count=gpus[take] if len(take) else gpus,
        gpu_model=np.array([model_index[model_names[i]] for i in order], dtype=np.int16),
        cpu_milli=cpu[take] if len(take) else cpu,
        memory_mib=memory[take] if len(take) else memory,
        gpu_models=catalogue,
    )


def topology_from_dict(description: Mapping[str, Any], source: str = "cluster") -> Topology:
    """A cluster description: `levels`, optional `gpu_models` {name: memory_gib}, `nodes`.

    `defaults` (optional) supplies fields every node shares, e.g. gpus, gpu_model, cpu, memory.
    """
    if not isinstance(description, Mapping):
        raise InputError(source, description, "must be a mapping with levels and nodes")
    allowed = {"levels", "gpu_models", "nodes", "defaults"}
    for key in description:
        if key not in allowed:
            raise InputError(
                f"{source}.{key}", key, f"unknown field; valid fields are {sorted(allowed)}"
            )
    levels = description.get("levels", [])
    if not isinstance(levels, list):
        raise InputError(
            f"{source}.levels", levels, "must be a list of level names, outermost first"
        )
    nodes = description.get("nodes")
    if not isinstance(nodes, list) or not nodes:
        raise InputError(f"{source}.nodes", nodes, "must be a non-empty list of nodes")
    defaults = description.get("defaults", {}) or {}
    if not isinstance(defaults, Mapping):
        raise InputError(f"{source}.defaults", defaults, "must be a mapping of node fields")
    models = description.get("gpu_models", {}) or {}
    if not isinstance(models, Mapping):
        raise InputError(f"{source}.gpu_models", models, "must map model name -> memory GiB")
    merged = [{**defaults, **node} if isinstance(node, Mapping) else node for node in nodes]
    return topology_from_nodes(levels, merged, models, source=f"{source}.nodes")


def load_topology(path: str | Path) -> Topology:
    """Load a cluster from a YAML or JSON file, or an openb-style node list CSV."""
    path = Path(path)
    if not path.exists():
        raise InputError("cluster file", str(path), "file not found")
    if path.suffix == ".csv":
        return load_openb_nodes(path)
    text = path.read_text()
    try:
        if path.suffix == ".json":
            data = json.loads(text)
        else:
            import yaml

            data = yaml.safe_load(text)
    except (ValueError, Exception) as error:  # yaml.YAMLError and json errors alike
        raise InputError(str(path), path.name, f"not valid YAML/JSON: {error}") from None
    return topology_from_dict(data, source=str(path))


def load_openb_nodes(path: str | Path) -> Topology:
    """The openb node list (`sn,cpu_milli,memory_mib,gpu,model`): a flat cluster, no levels."""
    path = Path(path)
    records: list[dict[str, Any]] = []
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        expected = {"sn", "cpu_milli", "memory_mib", "gpu", "model"}
        missing = expected - set(reader.fieldnames or [])
        if missing:
            raise InputError(f"{path}:1", sorted(missing), "missing columns")
        for line, row in enumerate(reader, start=2):
            where = f"{path}:{line}"
            try:
                gpus = int(row["gpu"])
                records.append(
                    {
                        "name": row["sn"],
                        "gpus": gpus,
                        "gpu_model": row["model"] if gpus else "",
                        "cpu": f"{int(row['cpu_milli'])}m",
                        "memory": int(row["memory_mib"]),
                    }
                )
            except (TypeError, ValueError):
                raise InputError(
                    where, dict(row), "cpu_milli, memory_mib, gpu must be integers"
                ) from None
    return topology_from_nodes((), records, source=str(path))
