"""Reading a workload file: its document, the rules of its own fields, then its failures and
jobs against its cluster.

Shared by the workload model's reader (`toposched.workloads.files`, with the job model) and the
light pass before it (`toposched.cli.workloadcheck`, with the job rules alone): the caller gives
how a job's spec is checked (`JobRules`) and what the cluster holds (`ClusterFacts`), and both
readers check the same things in the same order, so a bad file gets the same error from either:

1. the top-level fields (each known, format, name, description, notes; a cluster given);
2. the budget tree and the settings;
3. each failure's own fields (time, nodes as names or indices, repair_after);
4. each job's own fields (submit, runtime, class, ...), its spec, its name used once and its
   account a leaf of the budget;
5. the cluster;
6. each failure's nodes in the cluster, and each job against it (levels, GPU models).

Light: no job model, no cluster arrays (numpy), no compiled loops.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Protocol, TypeVar

from toposched.cluster.builders import BuilderShape
from toposched.cluster.documents import field_path, parse_documents, read_text
from toposched.cluster.errors import InputError, join_fields, unknown_field_rule
from toposched.cluster.loaders import CheckedCluster
from toposched.cluster.units import parse_duration
from toposched.policy.budget import BudgetTree
from toposched.workloads.model import DEFAULT_BUDGET, DEFAULT_CHECKPOINT_INTERVAL, NodeFailure
from toposched.workloads.paths import JSONL_SUFFIXES

if TYPE_CHECKING:
    from toposched.cluster.topology import Topology

__all__ = [
    "FORMAT",
    "ClusterFacts",
    "JobDraft",
    "JobRules",
    "Lines",
    "WorkloadDocument",
    "WorkloadParts",
    "check_against_cluster",
    "cluster_facts",
    "read_document",
    "read_workload_text",
    "read_own_fields",
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


# --- the document -------------------------------------------------------------------------------


class Lines:
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


class WorkloadDocument(NamedTuple):
    """A workload file parsed: its data, where each value was written, the folder a cluster
    file is looked for in, and the name of a workload that gives none (the file's stem)."""

    data: Any
    lines: Lines
    base_dir: Path
    default_name: str


def read_workload_text(path: Path) -> str:
    """The text of a workload file, read within the limits of `toposched.cluster.limits`."""
    return read_text(path, "workload file")


def read_document(path: Path, text: str | None = None) -> WorkloadDocument:
    """Read and parse a workload file (.yaml/.yml/.json, or .jsonl/.ndjson with one job per
    line) within the limits of `toposched.cluster.limits`; `text` is its text when read
    already (`read_workload_text`)."""
    source = str(path)
    if text is None:
        text = read_workload_text(path)
    suffix = path.suffix.lower()
    if suffix in JSONL_SUFFIXES:
        data, lines = _parse_jsonl(text, source)
    else:
        data, lines = _parse_document(text, source, json_text=suffix == ".json")
    return WorkloadDocument(data, lines, path.parent, path.stem)


def _parse_document(text: str, file: str, json_text: bool) -> tuple[Any, Lines]:
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
    return document.data, Lines(file, document.line)


def _parse_jsonl(text: str, file: str) -> tuple[dict[str, Any], Lines]:
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

    return {**header, "jobs": jobs}, Lines(file, line_of)


def _parse_json(raw: str, file: str, number: int) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as error:
        rule = f"is not valid JSON: {error.msg} (column {error.colno})"
        raise InputError("text", raw, rule, file=file, line=number) from None
    except (ValueError, RecursionError):  # too many digits, or nested too deeply
        raise InputError("text", raw, "cannot be read as JSON", file=file, line=number) from None


# --- what the caller brings ---------------------------------------------------------------------

T = TypeVar("T")


class JobRules(Protocol[T]):
    """How a job's spec is checked: by the job model, or by the light pass's rules."""

    def read(self, fields: dict[str, Any]) -> T | None:
        """The spec's fields as written -> the checked job, or InputError (its field relative
        to the job); None for a job these rules leave to the model."""
        ...

    def name(self, job: T) -> str: ...

    def account(self, job: T) -> str: ...

    def check_against(self, job: T, cluster: ClusterFacts) -> None:
        """Refuse a job the cluster cannot hold as written (a level or only GPU models it
        lacks), InputError with the field relative to the job."""
        ...


class ClusterFacts(NamedTuple):
    """What the checks against a cluster read of it."""

    levels: tuple[str, ...]
    """Its level names, outermost first."""
    gpu_models: tuple[str, ...]
    """Its GPU model catalogue's names."""
    n_nodes: int
    has_node: Callable[[str], bool]
    topology: Topology | None = None
    """The cluster built, when it was (the model's reader builds it)."""


def cluster_facts(cluster: Topology | CheckedCluster | BuilderShape) -> ClusterFacts:
    """The facts of a cluster built, or of a cluster checked without building it."""
    if isinstance(cluster, BuilderShape):
        return ClusterFacts(
            cluster.levels, cluster.gpu_model_names, cluster.n_nodes, cluster.has_node
        )
    if isinstance(cluster, CheckedCluster):
        names = frozenset(cluster.names)
        return ClusterFacts(
            cluster.levels, cluster.gpu_model_names, len(cluster.names), names.__contains__
        )
    topology = cluster

    def has_node(name: str) -> bool:
        try:
            topology.node_index(name)
        except InputError:
            return False
        return True

    return ClusterFacts(
        tuple(topology.levels),
        tuple(model.name for model in topology.gpu_models),
        topology.n_nodes,
        has_node,
        topology,
    )


# --- the workload's own fields ------------------------------------------------------------------


class FailureDraft(NamedTuple):
    """A failure with its own fields checked; its nodes as written (names or indices)."""

    time: float
    nodes: list[int | str]
    repair_after: float | None


@dataclass(frozen=True)
class JobDraft(Generic[T]):
    """A job with its own fields checked, and its spec as `JobRules.read` returned it."""

    spec: T
    submit_time: float
    runtime: float
    job_class: str
    cancel_after: float | None
    checkpoint_interval: float | None


@dataclass(frozen=True)
class WorkloadParts(Generic[T]):
    """Every field of a workload file checked but those that need its cluster."""

    name: str
    description: str
    cluster: Mapping[str, Any]
    budget: Any
    horizon: float | None
    checkpoint_interval: float
    failures: list[FailureDraft]
    jobs: list[JobDraft[T]]
    notes: dict[str, Any]


def read_own_fields(document: WorkloadDocument, rules: JobRules[T]) -> WorkloadParts[T] | None:
    """Steps 1 to 4 of the module's order; None when `rules` leave a job to the model (what
    follows it is not checked)."""
    data, lines = document.data, document.lines
    _mapping(lines, (), "", data, TOP_LEVEL_KEYS)
    if "format" in data and data["format"] != FORMAT:
        raise lines.error(("format",), "format", data["format"], f"must be {FORMAT}")
    for key in ("name", "description"):
        if key in data and not isinstance(data[key], str):
            raise lines.error((key,), key, data[key], "must be a string")
    notes = data.get("notes") or {}
    if not isinstance(notes, Mapping):
        raise lines.error(("notes",), "notes", notes, "must be a mapping")
    if "cluster" not in data:
        raise lines.error((), "cluster", None, "is required: {builder: ...}, {file: ...} or inline")
    budget = data.get("budget", DEFAULT_BUDGET)
    try:
        tree = BudgetTree.from_dict(budget)
    except InputError as error:
        raise lines.located(("budget",), "budget", error) from None
    settings = data.get("settings") or {}
    _mapping(lines, ("settings",), "settings", settings, SETTINGS_KEYS)
    horizon = _optional_seconds(lines, ("settings",), "settings", settings, "horizon")
    checkpoint = _optional_seconds(
        lines, ("settings",), "settings", settings, "checkpoint_interval"
    )
    failures = [
        _failure(entry, index, lines)
        for index, entry in enumerate(_listed(data, "failures", "failures", lines))
    ]
    jobs: list[JobDraft[T]] = []
    names: dict[str, int] = {}
    for index, entry in enumerate(_listed(data, "jobs", "jobs", lines)):
        job = _job(entry, index, lines, rules)
        if job is None:
            return None
        _check_name_and_account(rules, job.spec, index, names, tree, lines)
        jobs.append(job)
    return WorkloadParts(
        name=data.get("name", document.default_name),
        description=data.get("description", ""),
        cluster=data["cluster"],
        budget=budget,
        horizon=horizon,
        checkpoint_interval=DEFAULT_CHECKPOINT_INTERVAL if checkpoint is None else checkpoint,
        failures=failures,
        jobs=jobs,
        notes=dict(notes),
    )


def _mapping(lines: Lines, path: Path_, field: str, value: Any, keys: tuple[str, ...]) -> None:
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


def _seconds(lines: Lines, path: Path_, field: str, value: Any, positive: bool = False) -> float:
    try:
        seconds = parse_duration(value, field)
    except InputError as error:
        raise lines.error(path, field, value, error.rule) from None
    if positive and seconds <= 0:
        raise lines.error(path, field, value, "must be a duration > 0 (e.g. 90s, 4h, 1h30m)")
    return seconds


def _optional_seconds(
    lines: Lines, path: Path_, field: str, entry: Mapping[str, Any], key: str
) -> float | None:
    """The duration > 0 at `entry[key]`, None when absent or null."""
    value = entry.get(key)
    if value is None:
        return None
    return _seconds(lines, (*path, key), f"{field}.{key}", value, positive=True)


def _listed(data: Mapping[str, Any], key: str, what: str, lines: Lines) -> list[Any]:
    value = data.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise lines.error((key,), key, value, f"must be a list of {what}")
    return value


def _failure(entry: Any, index: int, lines: Lines) -> FailureDraft:
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
    for position, node in enumerate(nodes):
        if isinstance(node, bool) or not isinstance(node, int | str):
            where = f"{field}.nodes[{position}]"
            raise lines.error((*path, "nodes"), where, node, "must be a node name or index")
    repair_after = _optional_seconds(lines, path, field, entry, "repair_after")
    return FailureDraft(time, list(nodes), repair_after)


def _job(entry: Any, index: int, lines: Lines, rules: JobRules[T]) -> JobDraft[T] | None:
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
    cancel_after = _optional_seconds(lines, path, field, entry, "cancel_after")
    checkpoint = _optional_seconds(lines, path, field, entry, "checkpoint_interval")
    spec_fields = {key: value for key, value in entry.items() if key not in JOB_KEYS}
    spec_fields.setdefault("name", f"job-{index}")
    try:
        spec = rules.read(spec_fields)
    except InputError as error:
        raise lines.located(path, field, error) from None
    if spec is None:
        return None
    return JobDraft(spec, submit, runtime, job_class, cancel_after, checkpoint)


def _check_name_and_account(
    rules: JobRules[T],
    spec: T,
    index: int,
    names: dict[str, int],
    tree: BudgetTree,
    lines: Lines,
) -> None:
    path: Path_ = ("jobs", index)
    field = f"jobs[{index}]"
    name = rules.name(spec)
    if name in names:
        raise lines.error(
            (*path, "name"),
            f"{field}.name",
            name,
            f"duplicate job name (also jobs[{names[name]}])",
        )
    names[name] = index
    account = rules.account(spec)
    try:
        tree.require(account, "account")
        if not tree.is_leaf(account):
            raise InputError("account", account, "jobs charge to a leaf account (a team)")
    except InputError as error:
        raise lines.located(path, field, error) from None


# --- against the cluster ------------------------------------------------------------------------


def check_against_cluster(
    parts: WorkloadParts[T], lines: Lines, cluster: ClusterFacts, rules: JobRules[T]
) -> list[NodeFailure]:
    """Step 6 of the module's order: the failures' nodes in `cluster` (each as its index, a
    name's index from `node_index`) and each job against it."""
    failures = [
        _failure_nodes(failure, index, lines, cluster)
        for index, failure in enumerate(parts.failures)
    ]
    for index, job in enumerate(parts.jobs):
        try:
            rules.check_against(job.spec, cluster)
        except InputError as error:
            raise lines.located(("jobs", index), f"jobs[{index}]", error) from None
    return failures


def _failure_nodes(
    failure: FailureDraft, index: int, lines: Lines, cluster: ClusterFacts
) -> NodeFailure:
    path: Path_ = ("failures", index, "nodes")
    indices: list[int] = []
    for position, node in enumerate(failure.nodes):
        where = f"failures[{index}].nodes[{position}]"
        if isinstance(node, int):
            if not 0 <= node < cluster.n_nodes:
                raise lines.error(path, where, node, f"must be 0..{cluster.n_nodes - 1}")
            indices.append(node)
        elif not cluster.has_node(node):
            raise lines.error(path, where, node, "no node of that name in the cluster")
        elif cluster.topology is not None:
            indices.append(cluster.topology.node_index(node))
    return NodeFailure(failure.time, tuple(indices), failure.repair_after)
