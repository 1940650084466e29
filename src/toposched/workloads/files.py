"""Workload files (YAML, JSON, JSONL): read with errors naming file, line and field; write back.

A workload file holds one mapping:

    format: toposched-workload/1          # optional
    name: my-lab
    description: one line
    cluster: {builder: superpod, spine_groups: 1, units_per_group: 4}
    budget: {accounts: {research: {share: 70, children: {...}}, ops: 30}}
    settings: {horizon: 3d, checkpoint_interval: 1h}
    failures:
      - {time: 2h, nodes: [g0-su1-n3], repair_after: 4h}
    jobs:
      - {name: a, submit: 0, runtime: 20m, class: debug, account: research/nlp,
         pods: 1, resources_per_pod: {gpus: 1}, min_runtime: 10m}

A JSONL file has the same content split by line: the first line is the mapping without `jobs`,
and every further line is one job. Durations are seconds or strings such as 90s, 4h, 1h30m, 3d.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from toposched.cluster.errors import InputError
from toposched.cluster.topology import Topology
from toposched.cluster.units import format_duration, parse_duration
from toposched.placement.jobspec import JobSpec
from toposched.policy.budget import BudgetTree
from toposched.workloads.model import (
    DEFAULT_BUDGET,
    DEFAULT_CHECKPOINT_INTERVAL,
    NodeFailure,
    Workload,
    WorkloadJob,
    build_cluster,
)

__all__ = ["FORMAT", "load_workload", "save_workload", "workload_to_dict"]

FORMAT = "toposched-workload/1"
TOP_LEVEL_KEYS = (
    "format",
    "name",
    "description",
    "cluster",
    "budget",
    "settings",
    "failures",
    "jobs",
    "notes",
)
SETTINGS_KEYS = ("horizon", "checkpoint_interval")
FAILURE_KEYS = ("time", "nodes", "repair_after")
JOB_KEYS = ("submit", "runtime", "class", "cancel_after", "checkpoint_interval")
"""Job fields of the workload; every other field of a job entry belongs to its JobSpec."""
_JSONL_SUFFIXES = (".jsonl", ".ndjson")

Path_ = tuple[str | int, ...]


# --- reading -----------------------------------------------------------------------------------


class _Lines:
    """Line numbers (from 1) of every value in a parsed document, by its path of keys."""

    def __init__(self, source: str, default: int = 1) -> None:
        self.source = source
        self.default = default
        self.at: dict[Path_, int] = {}

    def line(self, path: Path_) -> int:
        """The line of the value at `path`, or of its nearest enclosing value."""
        while path:
            if path in self.at:
                return self.at[path]
            path = path[:-1]
        return self.at.get((), self.default)

    def error(self, path: Path_, field: str, value: Any, rule: str) -> InputError:
        return InputError(f"{self.source}:{self.line(path)}: {field}", value, rule)

    def located(self, path: Path_, prefix: str, error: InputError) -> InputError:
        """`error`, whose field is relative to the value at `path`, located at its line."""
        relative = error.field
        field = f"{prefix}.{relative}" if prefix and relative else prefix or relative
        where = f"{self.source}:{self.line(path + _field_path(relative))}: {field}"
        located = InputError(where, error.value, error.rule)
        message = str(error)
        if message.startswith(relative):
            # Keep the whole message, which may list further failures after the first.
            located.args = (where + message[len(relative) :],)
        return located


def _field_path(field: str) -> Path_:
    """ "resources_per_pod.gpus" -> ("resources_per_pod", "gpus"); "slices[0].pods" too."""
    parts: list[str | int] = []
    for piece in field.replace("]", "").split("."):
        name, *indices = piece.split("[")
        if name:
            parts.append(name)
        parts.extend(int(index) for index in indices if index.isdigit())
    return tuple(parts)


def _record_lines(node: yaml.Node, path: Path_, lines: _Lines) -> None:
    lines.at[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else str(key.value)
            lines.at[(*path, name)] = key.start_mark.line + 1
            _record_lines(value, (*path, name), lines)
            lines.at[(*path, name)] = key.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _record_lines(item, (*path, index), lines)


def _parse_yaml(text: str, source: str) -> tuple[Any, _Lines]:
    lines = _Lines(source)
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is None:
                raise InputError(f"{source}:1", "", "empty file; expected a workload mapping")
            _record_lines(node, (), lines)
            data = loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(error, "problem", None) or "cannot be parsed"
        raise InputError(
            f"{source}:{line}", text.splitlines()[line - 1 : line], f"is not valid YAML: {problem}"
        ) from None
    return data, lines


def _parse_jsonl(text: str, source: str) -> tuple[dict[str, Any], _Lines]:
    lines = _Lines(source)
    header: dict[str, Any] | None = None
    jobs: list[Any] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as error:
            raise InputError(
                f"{source}:{number}", raw[:80], f"is not valid JSON: {error.msg}"
            ) from None
        if header is None:
            if not isinstance(value, dict):
                raise InputError(
                    f"{source}:{number}", raw[:80], "the first line must be the workload header"
                )
            if "jobs" in value:
                raise InputError(
                    f"{source}:{number}: jobs",
                    "...",
                    "in JSONL the jobs follow the header, one per line",
                )
            header = value
            for key in value:
                lines.at[(key,)] = number
            lines.at[()] = number
            continue
        lines.at[("jobs", len(jobs))] = number
        jobs.append(value)
    if header is None:
        raise InputError(f"{source}:1", "", "empty file; expected a header line and job lines")
    return {**header, "jobs": jobs}, lines


def _seconds(lines: _Lines, path: Path_, field: str, value: Any, positive: bool = False) -> float:
    try:
        seconds = parse_duration(value, field)
    except InputError as error:
        raise lines.error(path, field, value, error.rule) from None
    if positive and seconds <= 0:
        raise lines.error(path, field, value, "must be a duration > 0 (e.g. 90s, 4h, 1h30m)")
    return seconds


def _mapping(lines: _Lines, path: Path_, field: str, value: Any, keys: tuple[str, ...]) -> None:
    if not isinstance(value, Mapping):
        raise lines.error(path, field, value, f"must be a mapping with {', '.join(keys)}")
    for key in value:
        if key not in keys:
            raise lines.error(
                (*path, key),
                f"{field}.{key}",
                key,
                f"unknown field; valid fields are {', '.join(keys)}",
            )


def load_workload(path: str | os.PathLike[str]) -> Workload:
    """Read a workload file (.yaml/.yml/.json, or .jsonl/.ndjson with one job per line).

    Every error is an InputError whose field reads `FILE:LINE: FIELD`, e.g.
    `w.yaml:14: jobs[2].resources_per_pod.gpus`.
    """
    file_path = Path(path)
    source = str(file_path)
    try:
        text = file_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("workload", source, "no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError("workload", source, f"cannot be read: {error}") from None
    if file_path.suffix.lower() in _JSONL_SUFFIXES:
        data, lines = _parse_jsonl(text, source)
    else:
        data, lines = _parse_yaml(text, source)
    return _workload(data, lines, file_path.parent, file_path.stem)


def _workload(data: Any, lines: _Lines, base_dir: Path, default_name: str) -> Workload:
    _mapping(lines, (), "workload", data, TOP_LEVEL_KEYS)
    if "format" in data and data["format"] != FORMAT:
        raise lines.error(("format",), "format", data["format"], f"must be {FORMAT}")
    for key in ("name", "description"):
        if key in data and not isinstance(data[key], str):
            raise lines.error((key,), key, data[key], "must be a string")
    if "cluster" not in data:
        raise lines.error((), "cluster", None, "is required: {builder: ...}, {file: ...} or inline")
    cluster = data["cluster"]
    try:
        topology = build_cluster(cluster, base_dir)
    except InputError as error:
        raise lines.located((), "", error) from None
    budget = data.get("budget", DEFAULT_BUDGET)
    try:
        tree = BudgetTree.from_dict(budget)
    except InputError as error:
        raise lines.located(("budget",), "budget", error) from None
    settings = data.get("settings") or {}
    _mapping(lines, ("settings",), "settings", settings, SETTINGS_KEYS)
    horizon = None
    if settings.get("horizon") is not None:
        horizon = _seconds(
            lines, ("settings", "horizon"), "settings.horizon", settings["horizon"], True
        )
    checkpoint = DEFAULT_CHECKPOINT_INTERVAL
    if settings.get("checkpoint_interval") is not None:
        checkpoint = _seconds(
            lines,
            ("settings", "checkpoint_interval"),
            "settings.checkpoint_interval",
            settings["checkpoint_interval"],
            True,
        )
    failures = list(_failures(data.get("failures") or [], lines, topology))
    jobs_data = data.get("jobs")
    if jobs_data is None:
        jobs_data = []
    if not isinstance(jobs_data, list):
        raise lines.error(("jobs",), "jobs", jobs_data, "must be a list of jobs")
    jobs = list(_jobs(jobs_data, lines, topology, tree))
    notes = data.get("notes") or {}
    if not isinstance(notes, Mapping):
        raise lines.error(("notes",), "notes", notes, "must be a mapping")
    return Workload(
        name=data.get("name", default_name),
        topology=topology,
        cluster=dict(cluster),
        budget=budget,
        jobs=jobs,
        failures=failures,
        horizon=horizon,
        checkpoint_interval=checkpoint,
        description=data.get("description", ""),
        notes=dict(notes),
    )


def _failures(entries: Any, lines: _Lines, topology: Topology) -> Iterator[NodeFailure]:
    if not isinstance(entries, list):
        raise lines.error(("failures",), "failures", entries, "must be a list of failures")
    for index, entry in enumerate(entries):
        path: Path_ = ("failures", index)
        field = f"failures[{index}]"
        _mapping(lines, path, field, entry, FAILURE_KEYS)
        for key in ("time", "nodes"):
            if key not in entry:
                raise lines.error(path, f"{field}.{key}", None, "is required")
        time = _seconds(lines, (*path, "time"), f"{field}.time", entry["time"])
        nodes = entry["nodes"]
        if not isinstance(nodes, list) or not nodes:
            raise lines.error(
                (*path, "nodes"), f"{field}.nodes", nodes, "must be a non-empty list of nodes"
            )
        indices: list[int] = []
        for position, node in enumerate(nodes):
            where = f"{field}.nodes[{position}]"
            if isinstance(node, bool) or not isinstance(node, int | str):
                raise lines.error((*path, "nodes"), where, node, "must be a node name or index")
            if isinstance(node, int):
                if not 0 <= node < topology.n_nodes:
                    raise lines.error(
                        (*path, "nodes"), where, node, f"must be 0..{topology.n_nodes - 1}"
                    )
                indices.append(node)
            else:
                try:
                    indices.append(topology.node_index(node))
                except InputError as error:
                    raise lines.error((*path, "nodes"), where, node, error.rule) from None
        repair = entry.get("repair_after")
        repair_after = (
            None
            if repair is None
            else _seconds(lines, (*path, "repair_after"), f"{field}.repair_after", repair, True)
        )
        yield NodeFailure(time, tuple(indices), repair_after)


def _jobs(
    entries: list[Any], lines: _Lines, topology: Topology, tree: BudgetTree
) -> Iterator[WorkloadJob]:
    names: dict[str, int] = {}
    models = {model.name for model in topology.gpu_models}
    for index, entry in enumerate(entries):
        path: Path_ = ("jobs", index)
        field = f"jobs[{index}]"
        if not isinstance(entry, Mapping):
            raise lines.error(path, field, entry, "must be a mapping: a job")
        if "submit_time" in entry:
            raise lines.error(
                (*path, "submit_time"),
                f"{field}.submit_time",
                entry["submit_time"],
                "write the arrival time as `submit`",
            )
        for key in ("submit", "runtime"):
            if key not in entry:
                raise lines.error(path, f"{field}.{key}", None, "is required")
        submit = _seconds(lines, (*path, "submit"), f"{field}.submit", entry["submit"])
        runtime = _seconds(lines, (*path, "runtime"), f"{field}.runtime", entry["runtime"], True)
        job_class = entry.get("class", "job")
        if not isinstance(job_class, str) or not job_class:
            raise lines.error((*path, "class"), f"{field}.class", job_class, "must be a name")
        optional: dict[str, float | None] = {}
        for key in ("cancel_after", "checkpoint_interval"):
            value = entry.get(key)
            optional[key] = (
                None
                if value is None
                else _seconds(lines, (*path, key), f"{field}.{key}", value, True)
            )
        spec_fields = {key: value for key, value in entry.items() if key not in JOB_KEYS}
        spec_fields.setdefault("name", f"job-{index}")
        try:
            spec = JobSpec.from_dict(spec_fields)
            spec.validate_topology(topology.levels)
        except InputError as error:
            raise lines.located(path, field, error) from None
        if spec.name in names:
            raise lines.error(
                (*path, "name"),
                f"{field}.name",
                spec.name,
                f"duplicate job name (also jobs[{names[spec.name]}])",
            )
        names[spec.name] = index
        try:
            tree.require(spec.account, "account")
            if not tree.is_leaf(spec.account):
                raise InputError("account", spec.account, "jobs charge to a leaf account (a team)")
        except InputError as error:
            raise lines.located(path, field, error) from None
        wanted = spec.resources_per_pod.gpu_models
        if wanted is not None and spec.resources_per_pod.gpus and not models & set(wanted):
            raise lines.error(
                (*path, "resources_per_pod", "gpu_models"),
                f"{field}.resources_per_pod.gpu_models",
                list(wanted),
                "no GPU of these models in this cluster; it has "
                + ", ".join(sorted(name for name in models if name)),
            )
        yield WorkloadJob(
            spec=spec,
            submit_time=submit,
            runtime=runtime,
            job_class=job_class,
            cancel_after=optional["cancel_after"],
            checkpoint_interval=optional["checkpoint_interval"],
        )


# --- writing -----------------------------------------------------------------------------------


def _duration(seconds: float) -> str | float:
    """Whole seconds as a duration string ("1h30m"); fractions stay numbers (exact in YAML)."""
    return format_duration(seconds) if float(seconds).is_integer() else seconds


def _job_entry(job: WorkloadJob) -> dict[str, Any]:
    spec = job.spec.to_dict()
    entry: dict[str, Any] = {"name": spec.pop("name"), "submit": job.submit_time}
    entry["runtime"] = _duration(job.runtime)
    entry["class"] = job.job_class
    if job.cancel_after is not None:
        entry["cancel_after"] = _duration(job.cancel_after)
    if job.checkpoint_interval is not None:
        entry["checkpoint_interval"] = _duration(job.checkpoint_interval)
    entry.update(spec)
    return entry


def workload_to_dict(workload: Workload, with_jobs: bool = True) -> dict[str, Any]:
    """The workload as a file would hold it; `load_workload` reads it back equal."""
    data: dict[str, Any] = {"format": FORMAT, "name": workload.name}
    if workload.description:
        data["description"] = workload.description
    data["cluster"] = workload.cluster
    data["budget"] = workload.budget
    settings: dict[str, Any] = {}
    if workload.horizon is not None:
        settings["horizon"] = _duration(workload.horizon)
    if workload.checkpoint_interval != DEFAULT_CHECKPOINT_INTERVAL:
        settings["checkpoint_interval"] = _duration(workload.checkpoint_interval)
    if settings:
        data["settings"] = settings
    if workload.notes:
        data["notes"] = workload.notes
    if workload.failures:
        data["failures"] = [
            {
                "time": failure.time,
                "nodes": [str(workload.topology.node_names[node]) for node in failure.nodes],
                **(
                    {"repair_after": _duration(failure.repair_after)}
                    if failure.repair_after is not None
                    else {}
                ),
            }
            for failure in workload.failures
        ]
    if with_jobs:
        data["jobs"] = [_job_entry(job) for job in workload.jobs]
    return data


def save_workload(workload: Workload, path: str | os.PathLike[str]) -> Path:
    """Write a workload file: JSONL for .jsonl/.ndjson (best for many jobs), else YAML/JSON."""
    file_path = Path(path)
    suffix = file_path.suffix.lower()
    file_path.parent.mkdir(parents=True, exist_ok=True)
    with file_path.open("w", encoding="utf-8") as handle:
        if suffix in _JSONL_SUFFIXES:
            handle.write(json.dumps(workload_to_dict(workload, with_jobs=False)) + "\n")
            for job in workload.jobs:
                handle.write(json.dumps(_job_entry(job)) + "\n")
        elif suffix == ".json":
            json.dump(workload_to_dict(workload), handle, indent=1)
            handle.write("\n")
        else:
            yaml.safe_dump(
                workload_to_dict(workload), handle, sort_keys=False, default_flow_style=None
            )
    return file_path
