"""A workload: a cluster, a budget tree, timed jobs with their actual runtimes, node failures."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toposched.cluster import builders
from toposched.cluster.builders import BuilderShape
from toposched.cluster.errors import InputError, join_fields
from toposched.cluster.limits import MAX_NODES
from toposched.cluster.loaders import (
    CheckedCluster,
    check_description,
    read_cluster,
    read_openb_nodes,
)
from toposched.cluster.units import HOUR, MILLI_PER_GPU

if TYPE_CHECKING:
    from toposched.cluster.topology import Topology
    from toposched.jobs.spec import JobSpec

# The job model (pydantic) is imported where it is used, and a cluster is checked before it is
# built (numpy), so that the workload file's reader refuses a bad file without them.

__all__ = [
    "CLUSTER_BUILDERS",
    "DEFAULT_BUDGET",
    "DEFAULT_CHECKPOINT_INTERVAL",
    "NodeFailure",
    "SpecFactory",
    "Workload",
    "WorkloadJob",
    "build_cluster",
    "check_cluster",
    "oversized_jobs",
]

DEFAULT_CHECKPOINT_INTERVAL = HOUR
"""Seconds between checkpoints of a resumable job unless the workload or the job says."""
DEFAULT_BUDGET: dict[str, Any] = {"accounts": {"default": {"share": 100}}}
"""One account holding the whole cluster: what a workload without a budget tree runs under."""

CLUSTER_BUILDERS: dict[str, str] = {
    "nvl72": "nvl72_shape",
    "million": "million_gpu_shape",
    "superpod": "superpod_shape",
    "fat_tree": "fat_tree_shape",
}
"""Builders a workload's `cluster.builder` may name (the functions in
`toposched.cluster.builders` that check their arguments); the other keys are their arguments."""

_INLINE_CLUSTER_KEYS = frozenset({"levels", "nodes", "defaults", "gpu_models"})


@dataclass(frozen=True, slots=True)
class WorkloadJob:
    """One job of a workload: its spec, when it arrives and how long it really runs."""

    spec: JobSpec
    submit_time: float
    """Seconds on the simulated clock."""
    runtime: float
    """Seconds of work the job actually needs (its spec's expected_runtime is only a claim)."""
    job_class: str = "job"
    """A label for metrics, e.g. debug, training, eval, unallocated."""
    cancel_after: float | None = None
    """Seconds after submission at which the job is withdrawn if it has not started."""
    checkpoint_interval: float | None = None
    """Seconds between checkpoints when resumable; None: the workload's default."""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def gpus(self) -> float:
        """GPUs the gang holds while running; shared pods count their fraction."""
        return self.spec.total_gpu_milli / MILLI_PER_GPU


@dataclass(frozen=True, slots=True)
class NodeFailure:
    """Nodes that go down at `time` and come back `repair_after` seconds later (None: never)."""

    time: float
    nodes: tuple[int, ...]
    repair_after: float | None = None


@dataclass
class Workload:
    """Everything a simulation replays: the cluster, the budgets, the jobs and the failures.

    `cluster` is the description the topology was built from (see `build_cluster`), kept so the
    workload can be written back to a file. `jobs` are in submission order.
    """

    name: str
    topology: Topology
    cluster: dict[str, Any]
    budget: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_BUDGET))
    jobs: list[WorkloadJob] = field(default_factory=list)
    failures: list[NodeFailure] = field(default_factory=list)
    horizon: float | None = None
    """Seconds to simulate; None runs until every event has happened."""
    checkpoint_interval: float = DEFAULT_CHECKPOINT_INTERVAL
    description: str = ""
    notes: dict[str, Any] = field(default_factory=dict)
    """Facts about how the workload was made (generator parameters), copied into summaries."""

    def __post_init__(self) -> None:
        self.jobs.sort(key=lambda job: job.submit_time)
        self.failures.sort(key=lambda failure: failure.time)

    @property
    def capacity_gpus(self) -> int:
        return self.topology.n_gpus

    def checkpoint_interval_of(self, job: WorkloadJob) -> float:
        return (
            job.checkpoint_interval
            if job.checkpoint_interval is not None
            else self.checkpoint_interval
        )


def build_cluster(description: Mapping[str, Any], base_dir: Path | None = None) -> Topology:
    """The topology a workload's `cluster` section describes.

    One of: `{builder: NAME, ...arguments}` with NAME in CLUSTER_BUILDERS; `{file: PATH}` (a
    YAML/JSON cluster or an openb-style node CSV, relative to `base_dir`); `{openb: PATH}` (an
    openb node list); or an inline description with `levels`, `nodes`, `defaults`, `gpu_models`.
    Errors name the field as `cluster.<key>`.
    """
    return check_cluster(description, base_dir).topology()


def check_cluster(
    description: Mapping[str, Any], base_dir: Path | None = None
) -> CheckedCluster | BuilderShape:
    """`build_cluster`'s checks, with its errors, without building the topology (no numpy): a
    cluster file or an inline description checked, a builder's arguments checked."""
    if not isinstance(description, Mapping) or not description:
        raise InputError(
            "cluster", description, "must be a mapping: {builder: ...}, {file: ...} or inline"
        )
    if "builder" in description:
        return _built(description)
    for key in ("file", "openb"):
        if key in description:
            extra = sorted(set(description) - {key}, key=str)
            if extra:
                raise InputError(f"cluster.{extra[0]}", extra[0], f"unknown next to {key}")
            path = Path(str(description[key]))
            if not path.is_absolute() and base_dir is not None:
                path = base_dir / path
            if not path.is_file():
                raise InputError(f"cluster.{key}", path, "file not found")
            if key == "file" or path.suffix.lower() == ".csv":
                return read_cluster(path)  # an openb list is read by its suffix
            return read_openb_nodes(path)
    unknown = sorted(set(description) - _INLINE_CLUSTER_KEYS, key=str)
    if unknown:
        raise InputError(
            f"cluster.{unknown[0]}",
            unknown[0],
            "unknown field; a cluster is {builder: ...}, {file: ...}, {openb: ...} or inline "
            "with levels, nodes, defaults, gpu_models",
        )
    return check_description(description, source="cluster")


def _built(description: Mapping[str, Any]) -> BuilderShape:
    name = description["builder"]
    if not isinstance(name, str) or name not in CLUSTER_BUILDERS:
        raise InputError(
            "cluster.builder", name, f"must be one of {', '.join(sorted(CLUSTER_BUILDERS))}"
        )
    function: Callable[..., BuilderShape] = getattr(builders, CLUSTER_BUILDERS[name])
    arguments = {key: value for key, value in description.items() if key != "builder"}
    accepted = inspect.signature(function).parameters
    for key in arguments:
        if key not in accepted or (key == "model" and name == "fat_tree"):
            usable = [p for p in accepted if not (p == "model" and name == "fat_tree")]
            raise InputError(
                f"cluster.{key}",
                key,
                f"is not an argument of the {name} builder; it takes {', '.join(usable)}",
            )
    model = arguments.get("model")
    if model is not None and not isinstance(model, str):
        raise InputError("cluster.model", model, "must be a GPU model name")
    nodes = _builder_nodes(name, {**_defaults(function), **arguments})
    if nodes > MAX_NODES:
        raise InputError(
            "cluster", f"{nodes:,} nodes", f"must be at most {MAX_NODES:,} nodes (docs/limits.md)"
        )
    try:
        return function(**arguments)
    except InputError as error:
        raise InputError(join_fields("cluster", error.field), error.value, error.rule) from None


def _defaults(function: Callable[..., BuilderShape]) -> dict[str, Any]:
    return {
        name: parameter.default
        for name, parameter in inspect.signature(function).parameters.items()
        if parameter.default is not inspect.Parameter.empty
    }


_BUILDER_COUNTS = {
    "nvl72": ("zones", "blocks_per_zone", "racks_per_block", "nodes_per_rack"),
    "superpod": ("spine_groups", "units_per_group", "nodes_per_unit"),
    "fat_tree": ("k", "k", "k"),
}


def _builder_nodes(name: str, arguments: Mapping[str, Any]) -> int:
    """The nodes a builder would make from these arguments (0 when one is not a count: the
    builder refuses it), so that a size past the limit is refused before memory is taken."""
    keys = _BUILDER_COUNTS.get(name, ())
    if name == "nvl72" and arguments.get("total_racks") is not None:
        keys = ("total_racks", "nodes_per_rack")
    nodes = 1
    for key in keys:
        count = arguments.get(key)
        if isinstance(count, bool) or not isinstance(count, int):
            return 0
        nodes *= max(count, 0)
    return nodes // 4 if name == "fat_tree" else nodes


class SpecFactory:
    """Job specs for generators: each distinct shape is validated once, then copied.

    Copies change only the name, account, priority and contract fields, which generators fill
    with values that are valid by construction; validation per job would dominate generation.
    """

    def __init__(self) -> None:
        self._templates: dict[tuple[Any, ...], JobSpec] = {}

    def make(
        self,
        name: str,
        account: str,
        pods: int,
        resources: Mapping[str, Any],
        *,
        topology: Mapping[str, Any] | None = None,
        min_runtime: float = HOUR,
        resumable: bool = False,
        expected_runtime: float | None = None,
        priority: int = 0,
    ) -> JobSpec:
        key = (pods, _frozen(resources), _frozen(topology or {}))
        template = self._templates.get(key)
        if template is None:
            data: dict[str, Any] = {
                "name": "template",
                "pods": pods,
                "resources_per_pod": dict(resources),
            }
            if topology:
                data["topology"] = dict(topology)
            from toposched.jobs.spec import JobSpec

            template = self._templates[key] = JobSpec.from_dict(data)
        return template.model_copy(
            update={
                "name": name,
                "account": account,
                "priority": priority,
                "min_runtime": float(min_runtime),
                "resumable": resumable,
                "expected_runtime": None if expected_runtime is None else float(expected_runtime),
            }
        )


def _frozen(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((key, _frozen(item)) for key, item in value.items()))
    if isinstance(value, list | tuple):
        return tuple(_frozen(item) for item in value)
    return value


def oversized_jobs(workload: Workload) -> list[WorkloadJob]:
    """Jobs that ask for more GPUs than the whole cluster has: they can never start."""
    capacity = workload.topology.n_gpus
    return [job for job in workload.jobs if job.gpus > capacity]
