"""One pod set (role) of a job: a named gang of identical pods with its own resources and
topology, placed with the job's other sets all-or-nothing (`placement.job_sets`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

from pydantic import Field, field_validator, model_validator

from toposched.cluster.errors import InputError, join_fields
from toposched.cluster.limits import MAX_PODS_PER_JOB
from toposched.jobs import rules
from toposched.jobs.input_model import InputModel, parsed, pod_count, rule_error
from toposched.jobs.resources import Resources, asking_for_something
from toposched.jobs.topology_spec import TopologySpec, check_slice_sizes

__all__ = ["PodSet", "check_pod_sets"]


class PodSet(InputModel):
    """A role of a job: `pods` identical pods needing `resources_per_pod` each, placed under
    `topology` (required, preferred, slices) inside the domain the job's topology holds."""

    name: str
    pods: int
    resources_per_pod: Resources
    topology: TopologySpec = Field(default_factory=TopologySpec)
    min_pods: int | None = None
    """An elastic set: it starts with at least this many pods and takes as many as fit up to
    `pods` (whole outermost slices); None: it starts with all of its pods."""

    @field_validator("name", mode="before")
    @classmethod
    def _set_name(cls, value: Any) -> str:
        return parsed(rules.set_name, value)

    @field_validator("pods", mode="before")
    @classmethod
    def _set_size(cls, value: Any) -> int:
        return pod_count(value)

    @field_validator("resources_per_pod")
    @classmethod
    def _asks_for_something(cls, value: Resources) -> Resources:
        return asking_for_something(value)

    @field_validator("min_pods", mode="before")
    @classmethod
    def _least_pods(cls, value: Any) -> int | None:
        return parsed(rules.min_pods, value)

    @model_validator(mode="after")
    def _outermost_slice_divides_pods(self) -> Self:
        try:
            check_slice_sizes(self.topology.slices, self.pods, "topology.")
        except InputError as error:
            raise rule_error(
                error.rule.replace("the job's pods", "the set's pods"), error.field, error.value
            ) from None
        return self

    @model_validator(mode="after")
    def _minimum_within_pods(self) -> Self:
        try:
            rules.check_min_pods(self.min_pods, self.pods, self.topology.slices)
        except InputError as error:
            raise rule_error(error.rule, error.field, error.value) from None
        return self

    @property
    def least_pods(self) -> int:
        """The pods the set starts with at least: `min_pods`, or all of them."""
        return self.pods if self.min_pods is None else self.min_pods

    @property
    def total_gpus(self) -> int:
        """Whole GPUs the set holds; fractional pods hold none whole."""
        if self.resources_per_pod.is_fractional:
            return 0
        return self.pods * self.resources_per_pod.gpus

    @property
    def total_gpu_milli(self) -> int:
        return self.pods * self.resources_per_pod.gpu_milli_total

    def validate_levels(self, levels: Sequence[str], prefix: str) -> None:
        """`TopologySpec.validate_levels` for this set's pods; errors name the field under
        `prefix` (e.g. `pod_sets[1]`)."""
        try:
            self.topology.validate_levels(levels, self.pods)
        except InputError as error:
            raise InputError(join_fields(prefix, error.field), error.value, error.rule) from None

    def to_dict(self) -> dict[str, Any]:
        written: dict[str, Any] = {
            "name": self.name,
            "pods": self.pods,
            "resources_per_pod": self.resources_per_pod.to_dict(),
        }
        topology = self.topology.to_dict()
        if topology:
            written["topology"] = topology
        if self.min_pods is not None:
            written["min_pods"] = self.min_pods
        return written


def check_pod_sets(sets: Sequence[PodSet], topology: TopologySpec) -> None:
    """What holds across a job's sets: at least one, names unique, pods within the limit of
    one job, and slices only per set (the job-level topology holds the sets together)."""
    if not sets:
        raise InputError("pod_sets", [], "must list at least one pod set {name, pods, ...}")
    seen: dict[str, int] = {}
    for index, pod_set in enumerate(sets):
        first = seen.setdefault(pod_set.name, index)
        if first != index:
            raise InputError(
                f"pod_sets[{index}].name",
                pod_set.name,
                f"pod_sets[{first}] has this name; pod set names must be unique within a job",
            )
    total = sum(pod_set.pods for pod_set in sets)
    if total > MAX_PODS_PER_JOB:
        raise InputError(
            "pod_sets",
            f"{total:,} pods",
            f"must hold at most {MAX_PODS_PER_JOB:,} pods in all, the limit of pods in one "
            "job (docs/limits.md)",
        )
    if topology.slices:
        raise InputError(
            "topology.slices",
            [group.to_dict() for group in topology.slices],
            "with pod_sets, slices belong to each set's topology (pod_sets[i].topology.slices); "
            "the job's topology holds the sets together with required and preferred",
        )
