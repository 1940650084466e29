"""The validated job: a gang of pods, what each pod needs, where the gang may land, and its
scheduling contract (account, priority, protected runtime).

Values are checked within the limits of `toposched.cluster.limits`; job files are read by
`toposched.jobs.files` (`load_jobs` here for one file).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Self

from pydantic import Field, field_validator, model_validator

from toposched.cluster.errors import InputError
from toposched.cluster.limits import MAX_PODS_PER_JOB
from toposched.cluster.units import format_duration, parse_duration
from toposched.jobs import rules
from toposched.jobs.input_model import InputModel, parsed, pod_count, rule_error
from toposched.jobs.pod_set import PodSet, check_pod_sets
from toposched.jobs.resources import Resources, asking_for_something
from toposched.jobs.topology_spec import TopologySpec, check_slice_sizes

__all__ = ["JobSpec", "load_jobs"]


class JobSpec(InputModel):
    """A gang of `pods` identical pods, placed all-or-nothing, and its scheduling contract.

    A job of several roles lists them in `pod_sets` (each a gang with its own resources and
    topology) instead of `pods` and `resources_per_pod`, the one-set shorthand; its `topology`
    then holds the sets together (required, preferred; no slices). For such a job `pods` is
    the pods of every set together and `resources_per_pod` the first set's: what a reader of
    one shape sees (`has_one_shape` says whether every set shares it).
    """

    missing_rules: ClassVar[Mapping[str, str]] = {
        field: rules.SHAPE_REQUIRED for field in ("pods", "resources_per_pod")
    }

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
    pod_sets: tuple[PodSet, ...] | None = None
    """The job's roles, placed together all-or-nothing; None for the one-set shorthand."""
    submit_time: float | None = None
    """Seconds on the scheduler's clock; None until the job is submitted."""

    @model_validator(mode="before")
    @classmethod
    def _pod_sets_or_one_set(cls, data: Any) -> Any:
        # With pod_sets, `pods` and `resources_per_pod` are filled from the sets; the sets'
        # own checks (the pod_sets field) judge the values.
        if not isinstance(data, Mapping) or data.get("pod_sets") is None:
            return data
        for field in ("pods", "resources_per_pod"):
            if field in data:
                raise rule_error(
                    "a job gives either pod_sets or the one-set shorthand pods and "
                    "resources_per_pod, not both",
                    field,
                    data[field],
                )
        return {**data, **_one_shape_view(data["pod_sets"])}

    @field_validator("name", mode="before")
    @classmethod
    def _job_name(cls, value: Any) -> str:
        return parsed(rules.job_name, value)

    @field_validator("account", mode="before")
    @classmethod
    def _account_path(cls, value: Any) -> str:
        return parsed(rules.account_path, value)

    @field_validator("priority", mode="before")
    @classmethod
    def _integer_priority(cls, value: Any) -> int:
        return parsed(rules.priority, value)

    @field_validator("min_runtime", mode="before")
    @classmethod
    def _protected_seconds(cls, value: Any) -> float:
        return parsed(parse_duration, value)

    @field_validator("resumable", mode="before")
    @classmethod
    def _strict_bool(cls, value: Any) -> bool:
        return parsed(rules.strict_bool, value)

    @field_validator("expected_runtime", mode="before")
    @classmethod
    def _positive_seconds(cls, value: Any) -> float | None:
        return parsed(rules.positive_duration, value)

    @field_validator("grace_period", mode="before")
    @classmethod
    def _grace_seconds(cls, value: Any) -> float | None:
        return parsed(rules.optional_duration, value)

    @field_validator("pods", mode="before")
    @classmethod
    def _gang_size(cls, value: Any) -> int:
        return pod_count(value)

    @field_validator("resources_per_pod")
    @classmethod
    def _asks_for_something(cls, value: Resources) -> Resources:
        return asking_for_something(value)

    @field_validator("pod_sets", mode="before")
    @classmethod
    def _set_list(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, list | tuple):
            raise rule_error(
                "must be a list of pod sets, each {name, pods, resources_per_pod, topology}"
            )
        return value

    @field_validator("submit_time", mode="before")
    @classmethod
    def _clock_time(cls, value: Any) -> float | None:
        return parsed(rules.clock_time, value)

    @model_validator(mode="after")
    def _sets_hold_together(self) -> Self:
        if self.pod_sets is not None:
            try:
                check_pod_sets(self.pod_sets, self.topology)
            except InputError as error:
                raise rule_error(error.rule, error.field, error.value) from None
        return self

    @model_validator(mode="after")
    def _outermost_slice_divides_pods(self) -> Self:
        try:
            check_slice_sizes(self.topology.slices, self.pods, "topology.")
        except InputError as error:
            raise rule_error(error.rule, error.field, error.value) from None
        return self

    @property
    def total_gpus(self) -> int:
        """Whole GPUs the gang holds; fractional pods hold none whole (see `total_gpu_milli`)."""
        if self.pod_sets is not None:
            return sum(pod_set.total_gpus for pod_set in self.pod_sets)
        if self.resources_per_pod.is_fractional:
            return 0
        return self.pods * self.resources_per_pod.gpus

    @property
    def total_gpu_milli(self) -> int:
        """GPU demand of the whole gang in milli-GPU, fractional shares included."""
        if self.pod_sets is not None:
            return sum(pod_set.total_gpu_milli for pod_set in self.pod_sets)
        return self.pods * self.resources_per_pod.gpu_milli_total

    @property
    def has_one_shape(self) -> bool:
        """Whether every pod of the job asks for the same resources (always, for the one-set
        shorthand)."""
        if self.pod_sets is None:
            return True
        return all(s.resources_per_pod == self.resources_per_pod for s in self.pod_sets)

    def validate_topology(self, levels: Sequence[str]) -> None:
        """`topology.validate_levels` for this job's pods on a cluster with `levels`, and each
        pod set's (errors name `pod_sets[i].topology...`)."""
        self.topology.validate_levels(levels, self.pods)
        for index, pod_set in enumerate(self.pod_sets or ()):
            pod_set.validate_levels(levels, f"pod_sets[{index}]")

    def renamed(self, name: Any, submit_time: Any) -> JobSpec:
        """This job under another name and submit time, each checked by its field's rule; the
        other fields, checked when this spec was made, are shared, not validated again (a
        third of `model_copy(update=...)`'s cost, a small part of `from_dict`'s: the service
        takes many jobs of one shape). Made the way pydantic's own copy is made: no extra
        fields, no private attributes."""
        try:
            checked_name = rules.job_name(name)
        except InputError as error:
            raise InputError("name", name, error.rule) from None
        try:
            checked_time = rules.clock_time(submit_time)
        except InputError as error:
            raise InputError("submit_time", submit_time, error.rule) from None
        return self.with_name_and_time(checked_name, checked_time)

    def with_name_and_time(self, name: str, submit_time: float | None) -> JobSpec:
        """This job under a name and submit time already checked by their fields' rules (a
        stored document's, or `renamed`'s), the other fields shared: made the way pydantic's
        own copy is made, with no extra fields and no private attributes."""
        return self.copier()(name, submit_time)

    def copier(self) -> Callable[[str, float | None], JobSpec]:
        """`with_name_and_time` of this spec, for many copies (a restart makes a hundred
        thousand from a few dozen stored documents): what the copies share is worked out once,
        their set fields one set among them (a frozen model's is never changed)."""
        fields = self.__dict__
        fields_set = self.model_fields_set | {"name", "submit_time"}
        new, set_slot = JobSpec.__new__, object.__setattr__

        def copy(name: str, submit_time: float | None) -> JobSpec:
            made = new(JobSpec)
            set_slot(made, "__dict__", {**fields, "name": name, "submit_time": submit_time})
            set_slot(made, "__pydantic_fields_set__", fields_set)
            set_slot(made, "__pydantic_extra__", None)
            set_slot(made, "__pydantic_private__", None)
            return made

        return copy

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
        if self.pod_sets is not None:
            written["pod_sets"] = [pod_set.to_dict() for pod_set in self.pod_sets]
        else:
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


def _one_shape_view(written: Any) -> dict[str, Any]:
    """`pods` and `resources_per_pod` of a job written with `pod_sets`: the pods of every set
    and the first set's resources; a stand-in where the sets are not valid, whose own checks
    then fail."""
    stand_in: dict[str, Any] = {"pods": 1, "resources_per_pod": {"gpus": 1}}
    if not isinstance(written, list | tuple) or not written:
        return stand_in
    try:
        sets = [PodSet.from_dict(entry) for entry in written]
    except InputError:
        return stand_in
    pods = sum(pod_set.pods for pod_set in sets)
    if pods > MAX_PODS_PER_JOB:
        return stand_in  # `check_pod_sets` names the limit
    return {"pods": pods, "resources_per_pod": sets[0].resources_per_pod}


def load_jobs(path: str | os.PathLike[str]) -> list[JobSpec]:
    """Every job in a YAML/JSON file holding one job, a list of jobs, a `jobs:` list, or
    several YAML documents. Errors name the file, the line and, in a list, the job as
    `jobs[i]`; a file with no job is an error, and so is a job name used twice.
    (`toposched.jobs.files` reads several files, and keeps where each job was.)"""
    from toposched.jobs.files import load_job_files

    return load_job_files([path])
