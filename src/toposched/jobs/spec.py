"""The validated job model: a gang of pods, what each pod needs, and where the gang may land.

Values are checked within the limits of `toposched.cluster.limits`; job files are read by
`toposched.jobs.files` (`load_jobs` here for one file).
"""

from __future__ import annotations

import math
import os
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from toposched.cluster.errors import InputError, join_fields, unknown_field_rule
from toposched.cluster.limits import (
    MAX_CPU_MILLI,
    MAX_GPUS_PER_POD,
    MAX_MEMORY_MIB,
    MAX_NAME_LENGTH,
    MAX_PODS_PER_JOB,
    MAX_PRIORITY,
)
from toposched.cluster.units import (
    format_cpu_milli,
    format_duration,
    format_memory_mib,
    parse_cpu_milli,
    parse_duration,
    parse_memory_mib,
)

__all__ = [
    "NODE_LEVEL",
    "JobSpec",
    "Resources",
    "Slice",
    "TopologySpec",
    "format_cpu_milli",
    "format_duration",
    "format_memory_mib",
    "load_jobs",
    "parse_cpu_milli",
    "parse_duration",
    "parse_memory_mib",
]

NODE_LEVEL = "node"
"""The innermost level, below every cluster level: all pods of a group on one node."""

MILLI_PER_GPU = 1000
_NAME = re.compile(r"[A-Za-z0-9._/-]+")
_ACCOUNT_PART = re.compile(r"[A-Za-z0-9._-]+")


# --- turning validation failures into InputError --------------------------------------------


def _rule_error(rule: str, field: str = "", value: Any = None) -> PydanticCustomError:
    """A validation failure carrying our plain-words rule.

    `field` (dotted, relative to the model raising it) and `value` are for checks that span
    fields, whose failure pydantic would otherwise locate at the model rather than the field.
    """
    # The rule travels in the context, not the template, so braces in values are never formatted.
    return PydanticCustomError(
        "toposched_rule", "{rule}", {"rule": rule, "field": field, "value": value}
    )


def _first_model_in(annotation: Any) -> type[BaseModel] | None:
    """The model class inside a field annotation such as `Resources` or `tuple[Slice, ...]`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for argument in typing.get_args(annotation):
        found = _first_model_in(argument)
        if found is not None:
            return found
    return None


def _model_at(root: type[BaseModel], path: Sequence[str | int]) -> type[BaseModel] | None:
    """The model class that validates the mapping found at `path` below `root`."""
    model: type[BaseModel] | None = root
    for part in path:
        if model is None:
            return None
        if isinstance(part, int):  # an index into a tuple of models keeps the element's model
            continue
        field = model.model_fields.get(part)
        model = None if field is None else _first_model_in(field.annotation)
    return model


def _dotted(path: Sequence[str | int]) -> str:
    """("topology", "slices", 0, "pods") -> "topology.slices[0].pods"."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def _field_names(model: type[BaseModel] | None) -> str:
    return ", ".join(model.model_fields) if model is not None else "?"


_PLAIN_RULES: dict[str, str] = {
    "missing": "is required",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
}


def _input_error_from_details(detail: ErrorDetails, root: type[BaseModel]) -> InputError:
    location = [part for part in detail["loc"] if isinstance(part, str | int)]
    context = detail.get("ctx") or {}
    kind = detail["type"]
    value: Any = detail.get("input")
    if kind == "toposched_rule":
        field = join_fields(_dotted(location), context.get("field", ""))
        if context.get("field"):
            value = context.get("value")
        return InputError(field or "job", value, context["rule"])
    field = _dotted(location) or "job"
    if kind in ("extra_forbidden", "invalid_key"):
        # An invalid key is a non-string one (YAML reads `1: x` as an int); its location ends
        # with the key itself.
        field = join_fields(_dotted(location[:-1]), str(location[-1]))
        model = _model_at(root, location[:-1])
        valid = list(model.model_fields) if model is not None else []
        rule = unknown_field_rule(location[-1], valid) if valid else "unknown field"
    elif kind == "missing":
        value, rule = None, _PLAIN_RULES[kind]
    elif kind in ("model_type", "model_attributes_type", "dict_type"):
        model = _model_at(root, location)
        rule = f"must be a mapping with fields {_field_names(model)}"
    else:
        rule = _PLAIN_RULES.get(kind, detail["msg"][:1].lower() + detail["msg"][1:])
    return InputError(field, value, rule)


def _input_error(error: ValidationError, root: type[BaseModel]) -> InputError:
    """One InputError for the first failure; the message also lists the next few."""
    details = error.errors(include_url=False)
    errors = [_input_error_from_details(detail, root) for detail in details]
    return errors[0].with_also(errors[1:])


# --- field checks shared by the models -------------------------------------------------------


def _integer(
    value: Any,
    rule: str,
    minimum: int | None = None,
    limit: tuple[int, str] | None = None,
) -> int:
    """`value` as an int, accepting 4.0 but not 4.5, "4" or True; `limit` is the largest
    value allowed and the rule for larger ones."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _rule_error(rule)
    if minimum is not None and value < minimum:
        raise _rule_error(rule)
    if limit is not None and value > limit[0]:
        raise _rule_error(limit[1])
    return value


def _optional_name(value: Any, rule: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _rule_error(rule)
    return value


def _parsed(parser: Callable[[Any], Any], value: Any) -> Any:
    """`parser(value)`, its InputError turned into a failure that pydantic locates."""
    try:
        return parser(value)
    except InputError as error:
        raise _rule_error(error.rule) from None


class _InputModel(BaseModel):
    """Frozen, closed to unknown fields, and failing with InputError instead of pydantic errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, **fields: Any) -> None:
        try:
            super().__init__(**fields)
        except ValidationError as error:
            raise _input_error(error, type(self)) from None

    # Tells pydantic this __init__ only validates, like BaseModel's, so nested models are built
    # without calling it and their failures reach the outermost model with full field paths.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """Validate a mapping as written by a user (YAML/JSON); raises InputError."""
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            raise _input_error(error, cls) from None


# --- the models -------------------------------------------------------------------------------

_PODS_LIMIT = (
    MAX_PODS_PER_JOB,
    f"must be at most {MAX_PODS_PER_JOB:,}, the limit of pods in one job (docs/limits.md)",
)


class Resources(_InputModel):
    """What one pod needs on its node.

    Stored normalised: a whole-GPU or CPU-only pod has `gpu_milli == 1000` (each of its `gpus`
    is a whole GPU); a fractional pod has `gpus == 1` and `gpu_milli < 1000` (its share of one
    shared GPU). CPU-only pods have `gpus == 0`.

    Every constructor reads values as a user writes them, so a number given for `cpu` is cores
    (`cpu=64` stores 64000) while the stored `cpu` is millicores: rebuild from `to_dict()`, not
    from `model_dump()`, or write millicores as a string (`cpu="64000m"`).
    """

    gpus: int = 0
    gpu_milli: int = MILLI_PER_GPU
    cpu: int = 0
    """Millicores."""
    memory: int = 0
    """MiB."""
    gpu_models: tuple[str, ...] | None = None
    """Allowed GPU models; None means any model."""

    @model_validator(mode="before")
    @classmethod
    def _one_shared_gpu_when_fractional(cls, data: Any) -> Any:
        # A fraction with no `gpus` means one shared GPU; no fraction and no `gpus`, a CPU-only
        # pod. Only the default is filled in here: the fields' own checks judge the values.
        if isinstance(data, Mapping) and data.get("gpus") is None:
            share = data.get("gpu_milli")
            fractional = (
                isinstance(share, int) and not isinstance(share, bool) and 0 < share < MILLI_PER_GPU
            )
            return {**data, "gpus": 1 if fractional else 0}
        return data

    @field_validator("gpus", mode="before")
    @classmethod
    def _whole_gpus(cls, value: Any) -> int:
        return _integer(
            value,
            "must be an integer >= 0 (whole GPUs on one node); "
            "for a fraction of one GPU give gpu_milli, e.g. gpu_milli: 500",
            minimum=0,
            limit=(
                MAX_GPUS_PER_POD,
                f"must be at most {MAX_GPUS_PER_POD}: a pod runs on one node, and a node has "
                f"at most {MAX_GPUS_PER_POD} GPUs",
            ),
        )

    @field_validator("gpu_milli", mode="before")
    @classmethod
    def _gpu_share(cls, value: Any, info: ValidationInfo) -> int:
        rule = (
            "must be an integer from 1 to 999: the share of one GPU in thousandths "
            "(1000 means whole GPUs)"
        )
        share = _integer(value, rule)
        if not 0 < share <= MILLI_PER_GPU:
            raise _rule_error(rule)
        gpus = info.data.get("gpus")
        if share < MILLI_PER_GPU and gpus is not None and gpus != 1:
            raise _rule_error(
                f"a fraction of a GPU is a share of one GPU, so gpus must be 1 or omitted "
                f"(gpus is {gpus})"
            )
        return share

    @field_validator("cpu", mode="before")
    @classmethod
    def _cpu_millicores(cls, value: Any) -> int:
        milli: int = _parsed(parse_cpu_milli, value)
        if milli > MAX_CPU_MILLI:
            raise _rule_error(f"must be at most {MAX_CPU_MILLI // 1000:,} cores per pod")
        return milli

    @field_validator("memory", mode="before")
    @classmethod
    def _memory_mib(cls, value: Any) -> int:
        mib: int = _parsed(parse_memory_mib, value)
        if mib > MAX_MEMORY_MIB:
            raise _rule_error("must be at most 1Ei (1024Pi) per pod")
        return mib

    @field_validator("gpu_models", mode="before")
    @classmethod
    def _model_names(cls, value: Any) -> tuple[str, ...] | None:
        rule = (
            "must be a non-empty list of GPU model names (e.g. [GB300, H100]), or omitted for any"
        )
        if value is None:
            return None
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list | tuple) or not names:
            raise _rule_error(rule)
        for name in names:
            if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_LENGTH:
                raise _rule_error(f"{rule}; names of at most {MAX_NAME_LENGTH} characters")
        return tuple(dict.fromkeys(names))  # duplicates dropped, first-listed order kept

    @property
    def is_fractional(self) -> bool:
        """True when the pod takes a share of one GPU rather than whole GPUs."""
        return self.gpu_milli < MILLI_PER_GPU

    @property
    def gpu_milli_total(self) -> int:
        """GPU demand in milli-GPU: 4 whole GPUs -> 4000, half a GPU -> 500, no GPU -> 0."""
        return self.gpus * self.gpu_milli

    def to_dict(self) -> dict[str, Any]:
        """The user's spelling of these resources; `Resources.from_dict` reads it back equal."""
        written: dict[str, Any] = {"gpus": self.gpus}
        if self.is_fractional:
            written["gpu_milli"] = self.gpu_milli
        written["cpu"] = self.cpu // 1000 if self.cpu % 1000 == 0 else format_cpu_milli(self.cpu)
        written["memory"] = format_memory_mib(self.memory)
        if self.gpu_models is not None:
            written["gpu_models"] = list(self.gpu_models)
        return written


class Slice(_InputModel):
    """Every `pods` consecutive pods of the gang lie within one domain at `level`."""

    level: str
    pods: int

    @field_validator("level", mode="before")
    @classmethod
    def _level_name(cls, value: Any) -> str:
        name = _optional_name(value, "must be a topology level name such as rack")
        if name is None:
            raise _rule_error("must be a topology level name such as rack")
        return name

    @field_validator("pods", mode="before")
    @classmethod
    def _group_size(cls, value: Any) -> int:
        return _integer(value, "must be an integer >= 1", minimum=1, limit=_PODS_LIMIT)

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "pods": self.pods}


def _check_slice_sizes(slices: Sequence[Slice], pods: int | None, field_prefix: str) -> None:
    """Each slice's pods divides the next outer slice's pods, the outermost the job's `pods`."""
    for index, group in enumerate(slices):
        field = f"{field_prefix}slices[{index}].pods"
        if index == 0:
            if pods is not None and pods % group.pods:
                raise InputError(field, group.pods, f"must divide the job's pods ({pods})")
            continue
        outer = slices[index - 1]
        if outer.pods % group.pods:
            raise InputError(
                field,
                group.pods,
                f"must divide the pods of the enclosing slice slices[{index - 1}] "
                f"({outer.pods} pods per {outer.level})",
            )


class TopologySpec(_InputModel):
    """Where the gang may land: one domain at `required`, fewest at `preferred`, `slices` within.

    Level names are checked against a cluster by `validate_levels`; on its own the spec checks
    only what holds for every cluster.
    """

    required: str | None = None
    preferred: str | None = None
    slices: tuple[Slice, ...] = ()

    @field_validator("required", "preferred", mode="before")
    @classmethod
    def _level_name(cls, value: Any) -> str | None:
        return _optional_name(value, "must be a topology level name such as zone, or omitted")

    @field_validator("slices", mode="before")
    @classmethod
    def _slice_list(cls, value: Any) -> Any:
        if value is None:
            return ()
        if not isinstance(value, list | tuple):
            raise _rule_error("must be a list of {level, pods} slices, outermost first")
        return value

    @model_validator(mode="after")
    def _slice_sizes_nest(self) -> Self:
        try:
            _check_slice_sizes(self.slices, None, "")
        except InputError as error:
            raise _rule_error(error.rule, error.field, error.value) from None
        return self

    def validate_levels(self, levels: Sequence[str], pods: int) -> None:
        """Check this spec against a cluster whose level names are `levels`, outermost first.

        `node` is valid below the last of `levels` for `required`, `preferred` and `slices`
        (a node slice: each group of its pods on one node). Raises
        InputError naming the first offending field.
        """
        cluster_levels = tuple(level for level in levels if level != NODE_LEVEL)
        all_levels = (*cluster_levels, NODE_LEVEL)
        depth = {level: index for index, level in enumerate(all_levels)}

        def listing(names: Sequence[str]) -> str:
            return ", ".join(names) if names else "none"

        def inner_to(level: str) -> str:
            inner = all_levels[depth[level] + 1 :]
            return f"levels inner to {level} are {listing(inner)}"

        if self.required is not None and self.required not in depth:
            raise InputError(
                "topology.required",
                self.required,
                f"unknown level; valid levels are {listing(all_levels)} (outermost first)",
            )
        if self.preferred is not None:
            if self.preferred not in depth:
                raise InputError(
                    "topology.preferred",
                    self.preferred,
                    f"unknown level; valid levels are {listing(all_levels)} (outermost first)",
                )
            if self.required is not None and depth[self.preferred] < depth[self.required]:
                raise InputError(
                    "topology.preferred",
                    self.preferred,
                    f"must be the required level ({self.required}) or inner to it; "
                    f"levels outermost first are {listing(all_levels)}",
                )
        for index, group in enumerate(self.slices):
            field = f"topology.slices[{index}].level"
            if group.level not in depth:
                raise InputError(
                    field,
                    group.level,
                    f"unknown level; valid levels are {listing(all_levels)} (outermost first)",
                )
            if self.required is not None and depth[group.level] <= depth[self.required]:
                raise InputError(
                    field,
                    group.level,
                    f"must be strictly inner to the required level ({self.required}); "
                    f"{inner_to(self.required)}",
                )
            if index > 0:
                outer = self.slices[index - 1].level
                if depth[group.level] <= depth[outer]:
                    raise InputError(
                        field,
                        group.level,
                        f"slices go outermost first, each strictly inner to the one before "
                        f"({outer}); {inner_to(outer)}",
                    )
        _check_slice_sizes(self.slices, pods, "topology.")

    def to_dict(self) -> dict[str, Any]:
        written: dict[str, Any] = {}
        if self.required is not None:
            written["required"] = self.required
        if self.preferred is not None:
            written["preferred"] = self.preferred
        if self.slices:
            written["slices"] = [group.to_dict() for group in self.slices]
        return written


class JobSpec(_InputModel):
    """A gang of `pods` identical pods, placed all-or-nothing, and its scheduling contract."""

    name: str
    account: str = "default"
    """Budget path from the root, e.g. research/pretraining/team-a."""
    priority: int = 0
    """Orders jobs within one account; higher first."""
    min_runtime: float = 3600.0
    """Seconds the job runs protected from preemption once started."""
    resumable: bool = False
    """Whether the job can continue from a checkpoint after preemption."""
    expected_runtime: float | None = None
    """Seconds the user expects the job to run, if they said."""
    grace_period: float | None = None
    """Seconds the job gets to exit (e.g. save a checkpoint) when evicted; None: the cluster's
    default. The scheduler caps it by cluster policy."""
    pods: int
    resources_per_pod: Resources
    topology: TopologySpec = Field(default_factory=TopologySpec)
    submit_time: float | None = None
    """Seconds on the scheduler's clock; None until the job is submitted."""

    @field_validator("name", mode="before")
    @classmethod
    def _job_name(cls, value: Any) -> str:
        if not isinstance(value, str) or len(value) > MAX_NAME_LENGTH or not _NAME.fullmatch(value):
            raise _rule_error(
                f"must be 1 to {MAX_NAME_LENGTH} characters from letters, digits and . _ / -"
            )
        return value

    @field_validator("account", mode="before")
    @classmethod
    def _account_path(cls, value: Any) -> str:
        if (
            not isinstance(value, str)
            or len(value) > MAX_NAME_LENGTH
            or not all(_ACCOUNT_PART.fullmatch(part) for part in value.split("/"))
        ):
            raise _rule_error(
                "must be a slash-separated path of non-empty names from letters, digits "
                f"and . _ - (e.g. research/pretraining/team-a), at most {MAX_NAME_LENGTH} "
                "characters in all"
            )
        return value

    @field_validator("priority", mode="before")
    @classmethod
    def _integer_priority(cls, value: Any) -> int:
        priority = _integer(value, "must be an integer (higher runs first within an account)")
        if not -MAX_PRIORITY <= priority <= MAX_PRIORITY:
            raise _rule_error(f"must be from -{MAX_PRIORITY:,} to {MAX_PRIORITY:,}")
        return priority

    @field_validator("min_runtime", mode="before")
    @classmethod
    def _protected_seconds(cls, value: Any) -> float:
        seconds: float = _parsed(parse_duration, value)
        return seconds

    @field_validator("resumable", mode="before")
    @classmethod
    def _strict_bool(cls, value: Any) -> bool:
        if not isinstance(value, bool):
            raise _rule_error("must be true or false")
        return value

    @field_validator("expected_runtime", mode="before")
    @classmethod
    def _positive_seconds(cls, value: Any) -> float | None:
        if value is None:
            return None
        seconds: float = _parsed(parse_duration, value)
        if seconds <= 0:
            raise _rule_error("must be a duration > 0 (e.g. 90s, 30m, 4h, 3d, 1h30m), or omitted")
        return seconds

    @field_validator("grace_period", mode="before")
    @classmethod
    def _grace_seconds(cls, value: Any) -> float | None:
        if value is None:
            return None
        seconds: float = _parsed(parse_duration, value)
        return seconds

    @field_validator("pods", mode="before")
    @classmethod
    def _gang_size(cls, value: Any) -> int:
        return _integer(value, "must be an integer >= 1", minimum=1, limit=_PODS_LIMIT)

    @field_validator("resources_per_pod")
    @classmethod
    def _asks_for_something(cls, value: Resources) -> Resources:
        if value.gpu_milli_total == 0 and value.cpu == 0 and value.memory == 0:
            raise _rule_error(
                "a pod must ask for something: gpus (whole GPUs, e.g. gpus: 8) or gpu_milli "
                "(a share of one GPU), or cpu or memory for a CPU-only pod; gpus: null is no GPUs"
            )
        return value

    @field_validator("submit_time", mode="before")
    @classmethod
    def _clock_time(cls, value: Any) -> float | None:
        if value is None:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value < 0
        ):
            raise _rule_error("must be a number of seconds >= 0, or omitted")
        return float(value)

    @model_validator(mode="after")
    def _outermost_slice_divides_pods(self) -> Self:
        try:
            _check_slice_sizes(self.topology.slices, self.pods, "topology.")
        except InputError as error:
            raise _rule_error(error.rule, error.field, error.value) from None
        return self

    @property
    def total_gpus(self) -> int:
        """Whole GPUs the gang holds; fractional pods hold none whole (see `total_gpu_milli`)."""
        if self.resources_per_pod.is_fractional:
            return 0
        return self.pods * self.resources_per_pod.gpus

    @property
    def total_gpu_milli(self) -> int:
        """GPU demand of the whole gang in milli-GPU, fractional shares included."""
        return self.pods * self.resources_per_pod.gpu_milli_total

    def validate_topology(self, levels: Sequence[str]) -> None:
        """`topology.validate_levels` for this job's pods on a cluster with `levels`."""
        self.topology.validate_levels(levels, self.pods)

    def to_dict(self) -> dict[str, Any]:
        """The user's spelling of this job; `JobSpec.from_dict` reads it back equal."""
        written: dict[str, Any] = {
            "name": self.name,
            "account": self.account,
            "priority": self.priority,
            "min_runtime": format_duration(self.min_runtime),
            "resumable": self.resumable,
        }
        if self.expected_runtime is not None:
            written["expected_runtime"] = format_duration(self.expected_runtime)
        if self.grace_period is not None:
            written["grace_period"] = format_duration(self.grace_period)
        written["pods"] = self.pods
        written["resources_per_pod"] = self.resources_per_pod.to_dict()
        topology = self.topology.to_dict()
        if topology:
            written["topology"] = topology
        if self.submit_time is not None:
            written["submit_time"] = self.submit_time
        return written

    @classmethod
    def from_yaml(cls, text_or_path: str | os.PathLike[str]) -> JobSpec:
        """One job from YAML/JSON text, or from a file when given a path ending .yaml/.yml/.json."""
        from toposched.jobs.files import one_job  # jobfiles builds on this module

        return one_job(text_or_path)


def load_jobs(path: str | os.PathLike[str]) -> list[JobSpec]:
    """Every job in a YAML/JSON file holding one job, a list of jobs, a `jobs:` list, or
    several YAML documents. Errors name the file, the line and, in a list, the job as
    `jobs[i]`; a file with no job is an error, and so is a job name used twice.
    (`toposched.jobs.files` reads several files, and keeps where each job was.)"""
    from toposched.jobs.files import load_job_files

    return load_job_files([path])
