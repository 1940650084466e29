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
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from toposched.cluster.documents import field_path, parse_documents, read_text
from toposched.cluster.errors import InputError, join_fields, unknown_field_rule
from toposched.cluster.topology import Topology
from toposched.cluster.units import format_duration, parse_duration
from toposched.jobs.spec import JobSpec
from toposched.policy.budget import BudgetTree
from toposched.workloads.model import (
    DEFAULT_BUDGET,
    DEFAULT_CHECKPOINT_INTERVAL,
    NodeFailure,
    Workload,
    WorkloadJob,
    build_cluster,
)
from toposched.workloads.paths import JSONL_SUFFIXES, WORKLOAD_SUFFIXES, check_workload_path

__all__ = [
    "FORMAT",
    "WORKLOAD_SUFFIXES",
    "check_workload_path",
    "load_workload",
    "save_workload",
    "workload_to_dict",
]

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

Path_ = tuple[str | int, ...]


# --- reading -----------------------------------------------------------------------------------


class _Lines:
    """Where the values of a workload file were written: the file, and the line (from 1) of
    the value at any path of keys (or of its nearest enclosing value)."""

    def __init__(self, file: str, line_of: Callable[[Path_], int | None]) -> None:
        self.file = file
        self.line = line_of

    def error(self, path: Path_, field: str, value: Any, rule: str) -> InputError:
        return InputError(field, value, rule, file=self.file, line=self.line(path))

    def located(self, path: Path_, prefix: str, error: InputError) -> InputError:
        """`error`, whose field is relative to the value at `path`, located at its line. An
        error that already names a file (e.g. a cluster file the workload refers to) is kept."""
        if error.file is not None:
            return error
        return InputError(
            join_fields(prefix, error.field) or "workload",
            error.value,
            error.rule,
            file=self.file,
            line=self.line(path + field_path(error.field)),
            also=tuple(self.located(path, prefix, other) for other in error.also),
            more=error.more,
        )


def _parse_document(text: str, file: str, json_text: bool) -> tuple[Any, _Lines]:
    documents = parse_documents(text, file, json_text=json_text)
    if not documents:
        raise InputError("workload", None, "empty file; expected a workload mapping", file=file)
    if len(documents) > 1:
        raise InputError(
            "workload",
            f"{len(documents)} documents",
            "a workload file holds one document (no '---' sections)",
            file=file,
        )
    document = documents[0]
    return document.data, _Lines(file, document.line)


def _parse_jsonl(text: str, file: str) -> tuple[dict[str, Any], _Lines]:
    at: dict[Path_, int] = {}
    header: dict[str, Any] | None = None
    jobs: list[Any] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        value = _parse_json(raw, file, number)
        if header is None:
            if not isinstance(value, dict):
                raise InputError(
                    "header",
                    raw,
                    "the first line must be the workload header",
                    file=file,
                    line=number,
                )
            if "jobs" in value:
                raise InputError(
                    "jobs",
                    "...",
                    "in JSONL the jobs follow the header, one per line",
                    file=file,
                    line=number,
                )
            header = value
            at.update({(key,): number for key in value})
            at[()] = number
            continue
        at[("jobs", len(jobs))] = number
        jobs.append(value)
    if header is None:
        raise InputError(
            "workload", None, "empty file; expected a header line and job lines", file=file
        )

    def line_of(path: Path_) -> int:
        while path and path not in at:
            path = path[:-1]
        return at.get(path, 1)

    return {**header, "jobs": jobs}, _Lines(file, line_of)


def _parse_json(raw: str, file: str, number: int) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as error:
        rule = f"is not valid JSON: {error.msg} (column {error.colno})"
        raise InputError("text", raw, rule, file=file, line=number) from None
    except (ValueError, RecursionError):  # too many digits, or nested too deeply
        raise InputError("text", raw, "cannot be read as JSON", file=file, line=number) from None


def _seconds(lines: _Lines, path: Path_, field: str, value: Any, positive: bool = False) -> float:
    try:
        seconds = parse_duration(value, field)
    except InputError as error:
        raise lines.error(path, field, value, error.rule) from None
    if positive and seconds <= 0:
        raise lines.error(path, field, value, "must be a duration > 0 (e.g. 90s, 4h, 1h30m)")
    return seconds


def _mapping(lines: _Lines, path: Path_, field: str, value: Any, keys: tuple[str, ...]) -> None:
    """Refuse what is not a mapping of `keys`; `field` is "" for the whole workload."""
    if not isinstance(value, Mapping):
        raise lines.error(
            path, field or "workload", value, f"must be a mapping with {', '.join(keys)}"
        )
    for key in value:
        if key not in keys:
            raise lines.error(
                (*path, key),
                join_fields(field, str(key)),
                value[key],
                unknown_field_rule(key, keys),
            )


def load_workload(path: str | os.PathLike[str]) -> Workload:
    """Read a workload file (.yaml/.yml/.json, or .jsonl/.ndjson with one job per line).

    Files are read within the limits of `toposched.cluster.limits`; every error is an
    InputError with the file and line, e.g. `w.yaml:14: jobs[2].resources_per_pod.gpus: ...`.
    """
    file_path = Path(path)
    source = str(file_path)
    text = read_text(file_path, "workload file")
    suffix = file_path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        data, lines = _parse_jsonl(text, source)
    else:
        data, lines = _parse_document(text, source, json_text=suffix == ".json")
    return _workload(data, lines, file_path.parent, file_path.stem)


def _workload(data: Any, lines: _Lines, base_dir: Path, default_name: str) -> Workload:
    _mapping(lines, (), "", data, TOP_LEVEL_KEYS)
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
            if spec.pod_sets is not None:
                # Refused here as the scheduler would at its submit, with the file's line.
                from toposched.scheduler.jobs import job_sets

                job_sets(spec, topology)
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
        _check_models(spec, models, lines, path, field)
        yield WorkloadJob(
            spec=spec,
            submit_time=submit,
            runtime=runtime,
            job_class=job_class,
            cancel_after=optional["cancel_after"],
            checkpoint_interval=optional["checkpoint_interval"],
        )


def _check_models(spec: JobSpec, models: set[str], lines: _Lines, path: Path_, field: str) -> None:
    """Refuse a job (or a pod set of it) that asks only for GPU models the cluster lacks."""
    where: list[tuple[Path_, str, Any]] = []
    if spec.pod_sets is None:
        where.append(((*path, "resources_per_pod"), field, spec.resources_per_pod))
    else:
        for index, pod_set in enumerate(spec.pod_sets):
            at: Path_ = (*path, "pod_sets", index, "resources_per_pod")
            where.append((at, f"{field}.pod_sets[{index}]", pod_set.resources_per_pod))
    for at, prefix, resources in where:
        wanted = resources.gpu_models
        if wanted is not None and resources.gpus and not models & set(wanted):
            raise lines.error(
                (*at, "gpu_models"),
                f"{prefix}.resources_per_pod.gpu_models",
                list(wanted),
                "no GPU of these models in this cluster; it has "
                + ", ".join(sorted(name for name in models if name)),
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
    """Write a workload file: JSONL for .jsonl/.ndjson (best for many jobs), JSON for .json,
    YAML for .yaml/.yml; see `check_workload_path` for what is refused."""
    file_path = check_workload_path(path)
    suffix = file_path.suffix.lower()
    try:
        with file_path.open("w", encoding="utf-8") as handle:
            if suffix in JSONL_SUFFIXES:
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
    except OSError as error:
        raise InputError(
            "workload file", str(path), f"cannot be written: {error.strerror}"
        ) from None
    return file_path
