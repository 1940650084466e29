"""The rules of a job's values, without the job model: what each field accepts and the words
of its error.

The job model's validators (`toposched.jobs.spec`, `resources`, `topology_spec`) call these
functions, and so does the light pass that refuses a bad job file before the model loads
(`toposched.cli.jobcheck`): one rule, one message, whichever finds it. A check returns the value
as the model stores it, or raises InputError with the rule; its field is the checked value's
own ("" for the field itself), which the caller places. This module imports nothing heavier
than the units' parsers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from toposched.cluster.errors import InputError
from toposched.cluster.limits import (
    MAX_CPU_MILLI,
    MAX_GPUS_PER_POD,
    MAX_MEMORY_MIB,
    MAX_NAME_LENGTH,
    MAX_PODS_PER_JOB,
    MAX_PRIORITY,
)
from toposched.cluster.units import (
    MILLI_PER_GPU,
    NODE_LEVEL,
    parse_cpu_milli,
    parse_duration,
    parse_memory_mib,
)

__all__ = [
    "DEFAULT_ACCOUNT",
    "NOTHING_ASKED",
    "Group",
    "SHAPE_REQUIRED",
    "SliceLike",
    "account_path",
    "asks_for_something",
    "check_levels",
    "check_models_present",
    "check_slice_sizes",
    "clock_time",
    "cpu_millicores",
    "gpu_model_names",
    "gpu_share",
    "integer",
    "job_name",
    "memory_mib",
    "one_shared_gpu_when_fractional",
    "optional_duration",
    "optional_level",
    "optional_name",
    "pod_count",
    "positive_duration",
    "priority",
    "check_min_pods",
    "min_pods",
    "set_name",
    "slice_level",
    "slice_list",
    "strict_bool",
    "whole_gpus",
]


def _broken(value: Any, rule: str) -> InputError:
    return InputError("", value, rule)


# --- shared shapes of checks ------------------------------------------------------------------


def integer(
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
        raise _broken(value, rule)
    if minimum is not None and value < minimum:
        raise _broken(value, rule)
    if limit is not None and value > limit[0]:
        raise _broken(value, limit[1])
    return value


def optional_name(value: Any, rule: str) -> str | None:
    """`value` if it is a non-blank string, None for None."""
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise _broken(value, rule)
    return value


def pod_count(value: Any) -> int:
    """A number of pods: an integer from 1 to the limit of pods in one job."""
    return integer(
        value,
        "must be an integer >= 1",
        minimum=1,
        limit=(
            MAX_PODS_PER_JOB,
            f"must be at most {MAX_PODS_PER_JOB:,}, the limit of pods in one job (docs/limits.md)",
        ),
    )


# --- the job ----------------------------------------------------------------------------------

DEFAULT_ACCOUNT = "default"
"""The account of a job that names none (JobSpec's default)."""

_NAME = re.compile(r"[A-Za-z0-9._/-]+")
_ACCOUNT_PART = re.compile(r"[A-Za-z0-9._-]+")

NOTHING_ASKED = (
    "a pod must ask for something: gpus (whole GPUs, e.g. gpus: 8) or gpu_milli "
    "(a share of one GPU), or cpu or memory for a CPU-only pod; gpus: null is no GPUs"
)

SHAPE_REQUIRED = (
    "is required (or pod_sets: a list of sets, each with its own pods and resources_per_pod)"
)
"""The rule for a job that gives neither its one shape (pods, resources_per_pod) nor sets."""

SERVER_SET_FIELDS = ("submit_time",)
"""Job fields a job submitted to the service leaves to the server."""
SERVER_SET = "is set by the server; leave it out"
RUN_FIELD = "run"
"""The section of a job submitted to the service that tells its backend what to run."""


def job_name(value: Any) -> str:
    if not isinstance(value, str) or len(value) > MAX_NAME_LENGTH or not _NAME.fullmatch(value):
        raise _broken(
            value, f"must be 1 to {MAX_NAME_LENGTH} characters from letters, digits and . _ / -"
        )
    return value


_SET_NAME = re.compile(r"[A-Za-z0-9._-]+")


def set_name(value: Any) -> str:
    """The name of one of a job's pod sets (no slash: it is not a path)."""
    if not isinstance(value, str) or len(value) > MAX_NAME_LENGTH or not _SET_NAME.fullmatch(value):
        raise _broken(
            value, f"must be 1 to {MAX_NAME_LENGTH} characters from letters, digits and . _ -"
        )
    return value


def min_pods(value: Any) -> int | None:
    """A pod set's `min_pods`: None (every pod, not elastic) or a number of pods."""
    if value is None:
        return None
    return pod_count(value)


def check_min_pods(least: int | None, pods: int, slices: Sequence[SliceLike]) -> None:
    """An elastic set's `min_pods` is at most its `pods` and a whole number of its outermost
    slices (the placement takes whole slices)."""
    if least is None:
        return
    if least > pods:
        raise InputError("min_pods", least, f"must be at most the set's pods ({pods})")
    if slices and least % slices[0].pods:
        raise InputError(
            "min_pods",
            least,
            f"must be a multiple of the set's outermost slice, {slices[0].pods} pods per "
            f"{slices[0].level} (topology.slices[0]): an elastic set grows by whole slices",
        )


def account_path(value: Any) -> str:
    if (
        not isinstance(value, str)
        or len(value) > MAX_NAME_LENGTH
        or not all(_ACCOUNT_PART.fullmatch(part) for part in value.split("/"))
    ):
        raise _broken(
            value,
            "must be a slash-separated path of non-empty names from letters, digits "
            f"and . _ - (e.g. research/pretraining/team-a), at most {MAX_NAME_LENGTH} "
            "characters in all",
        )
    return value


def priority(value: Any) -> int:
    checked = integer(value, "must be an integer (higher runs first within an account)")
    if not -MAX_PRIORITY <= checked <= MAX_PRIORITY:
        raise _broken(value, f"must be from -{MAX_PRIORITY:,} to {MAX_PRIORITY:,}")
    return checked


def strict_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _broken(value, "must be true or false")
    return value


def optional_duration(value: Any) -> float | None:
    """Seconds (`parse_duration`), or None."""
    return None if value is None else parse_duration(value)


def positive_duration(value: Any) -> float | None:
    """Seconds > 0, or None."""
    if value is None:
        return None
    seconds = parse_duration(value)
    if seconds <= 0:
        raise _broken(value, "must be a duration > 0 (e.g. 90s, 30m, 4h, 3d, 1h30m), or omitted")
    return seconds


def clock_time(value: Any) -> float | None:
    """Seconds on the scheduler's clock, or None."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        raise _broken(value, "must be a number of seconds >= 0, or omitted")
    return float(value)


def asks_for_something(gpu_milli_total: int, cpu: int, memory: int) -> None:
    """A pod's checked resources ask for some GPU, CPU or memory."""
    if gpu_milli_total == 0 and cpu == 0 and memory == 0:
        raise InputError("", None, NOTHING_ASKED)


# --- what one pod needs -----------------------------------------------------------------------


def one_shared_gpu_when_fractional(data: Mapping[Any, Any]) -> Mapping[Any, Any]:
    """The resources as written, `gpus` filled in when absent or null: one shared GPU when a
    fraction is given, else none (a CPU-only pod). The fields' own checks judge the values."""
    if data.get("gpus") is not None:
        return data
    share = data.get("gpu_milli")
    fractional = (
        isinstance(share, int) and not isinstance(share, bool) and 0 < share < MILLI_PER_GPU
    )
    return {**data, "gpus": 1 if fractional else 0}


def whole_gpus(value: Any) -> int:
    return integer(
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


def gpu_share(value: Any, gpus: int | None) -> int:
    """A share of one GPU in thousandths; `gpus` is the pod's checked `gpus` (None when that
    was refused)."""
    rule = (
        "must be an integer from 1 to 999: the share of one GPU in thousandths "
        "(1000 means whole GPUs)"
    )
    share = integer(value, rule)
    if not 0 < share <= MILLI_PER_GPU:
        raise _broken(value, rule)
    if share < MILLI_PER_GPU and gpus is not None and gpus != 1:
        raise _broken(
            value,
            f"a fraction of a GPU is a share of one GPU, so gpus must be 1 or omitted "
            f"(gpus is {gpus})",
        )
    return share


def cpu_millicores(value: Any) -> int:
    milli = parse_cpu_milli(value)
    if milli > MAX_CPU_MILLI:
        raise _broken(value, f"must be at most {MAX_CPU_MILLI // 1000:,} cores per pod")
    return milli


def memory_mib(value: Any) -> int:
    mib = parse_memory_mib(value)
    if mib > MAX_MEMORY_MIB:
        raise _broken(value, "must be at most 1Ei (1024Pi) per pod")
    return mib


def gpu_model_names(value: Any) -> tuple[str, ...] | None:
    """Allowed GPU models, duplicates dropped in first-listed order; None for any model."""
    rule = "must be a non-empty list of GPU model names (e.g. [GB300, H100]), or omitted for any"
    if value is None:
        return None
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list | tuple) or not names:
        raise _broken(value, rule)
    for name in names:
        if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_LENGTH:
            raise _broken(value, f"{rule}; names of at most {MAX_NAME_LENGTH} characters")
    return tuple(dict.fromkeys(names))


def check_models_present(
    gpu_models: Sequence[str] | None, gpus: int, cluster_models: Sequence[str]
) -> None:
    """A pod that names GPU models asks for at least one the cluster has (given its model
    catalogue); field `resources_per_pod.gpu_models`."""
    if gpu_models is None or gpus <= 0:
        return
    if not any(name in cluster_models for name in gpu_models):
        raise InputError(
            "resources_per_pod.gpu_models",
            list(gpu_models),
            "no GPU of these models in this cluster; it has "
            + ", ".join(name for name in cluster_models if name),
        )


# --- where the gang may land ------------------------------------------------------------------


class SliceLike(Protocol):
    """A slice as the checks read it: `pods` consecutive pods within one domain at `level`."""

    @property
    def level(self) -> str: ...

    @property
    def pods(self) -> int: ...


class Group(NamedTuple):
    """A checked slice outside the job model."""

    level: str
    pods: int


def optional_level(value: Any) -> str | None:
    """`topology.required` or `preferred`: a level name, or None."""
    return optional_name(value, "must be a topology level name such as zone, or omitted")


def slice_level(value: Any) -> str:
    name = optional_name(value, "must be a topology level name such as rack")
    if name is None:
        raise _broken(value, "must be a topology level name such as rack")
    return name


def slice_list(value: Any) -> list[Any] | tuple[Any, ...]:
    """`topology.slices` before its slices are read: a list (empty for None)."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise _broken(value, "must be a list of {level, pods} slices, outermost first")
    return value


def check_slice_sizes(slices: Sequence[SliceLike], pods: int | None, field_prefix: str) -> None:
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


def check_levels(
    required: str | None,
    preferred: str | None,
    slices: Sequence[SliceLike],
    levels: Sequence[str],
    pods: int,
) -> None:
    """A job's topology against a cluster whose level names are `levels`, outermost first.

    `node` is valid below the last of `levels` for `required`, `preferred` and `slices`
    (a node slice: each group of its pods on one node). Raises InputError naming the first
    offending field (`topology.required`, ...).
    """
    cluster_levels = tuple(level for level in levels if level != NODE_LEVEL)
    all_levels = (*cluster_levels, NODE_LEVEL)
    depth = {level: index for index, level in enumerate(all_levels)}
    valid = f"valid levels are {_listing(all_levels)} (outermost first)"

    def inner_to(level: str) -> str:
        return f"levels inner to {level} are {_listing(all_levels[depth[level] + 1 :])}"

    if required is not None and required not in depth:
        raise InputError("topology.required", required, f"unknown level; {valid}")
    if preferred is not None:
        if preferred not in depth:
            raise InputError("topology.preferred", preferred, f"unknown level; {valid}")
        if required is not None and depth[preferred] < depth[required]:
            raise InputError(
                "topology.preferred",
                preferred,
                f"must be the required level ({required}) or inner to it; "
                f"levels outermost first are {_listing(all_levels)}",
            )
    for index, group in enumerate(slices):
        field = f"topology.slices[{index}].level"
        if group.level not in depth:
            raise InputError(field, group.level, f"unknown level; {valid}")
        if required is not None and depth[group.level] <= depth[required]:
            raise InputError(
                field,
                group.level,
                f"must be strictly inner to the required level ({required}); {inner_to(required)}",
            )
        if index > 0:
            outer = slices[index - 1].level
            if depth[group.level] <= depth[outer]:
                raise InputError(
                    field,
                    group.level,
                    f"slices go outermost first, each strictly inner to the one before "
                    f"({outer}); {inner_to(outer)}",
                )
    check_slice_sizes(slices, pods, "topology.")


def _listing(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "none"
