"""The validated job: a gang of pods, what each pod needs, where the gang may land, and its
scheduling contract (account, priority, protected runtime).

Values are checked within the limits of `toposched.cluster.limits`; job files are read by
`toposched.jobs.files` (`load_jobs` here for one file).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Self

from pydantic import Field, field_validator, model_validator

from toposched.cluster.errors import InputError
from toposched.cluster.units import format_duration, parse_duration
from toposched.jobs import rules
from toposched.jobs.input_model import InputModel, parsed, pod_count, rule_error
from toposched.jobs.resources import Resources
from toposched.jobs.topology_spec import TopologySpec, check_slice_sizes

__all__ = ["JobSpec", "load_jobs"]


class JobSpec(InputModel):
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
        parsed(
            lambda pod: rules.asks_for_something(pod.gpu_milli_total, pod.cpu, pod.memory), value
        )
        return value

    @field_validator("submit_time", mode="before")
    @classmethod
    def _clock_time(cls, value: Any) -> float | None:
        return parsed(rules.clock_time, value)

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
