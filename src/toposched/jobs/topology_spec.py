"""Where a job's gang may land: one domain at a required level, the fewest domains at a
preferred one, and slices (groups of consecutive pods that share a domain)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

from pydantic import field_validator, model_validator

from toposched.cluster.errors import InputError
from toposched.cluster.units import NODE_LEVEL
from toposched.jobs.input_model import InputModel, optional_name, pod_count, rule_error

__all__ = ["Slice", "TopologySpec", "check_slice_sizes"]

"""The innermost level, below every cluster level: all pods of a group on one node."""


class Slice(InputModel):
    """Every `pods` consecutive pods of the gang lie within one domain at `level`."""

    level: str
    pods: int

    @field_validator("level", mode="before")
    @classmethod
    def _level_name(cls, value: Any) -> str:
        name = optional_name(value, "must be a topology level name such as rack")
        if name is None:
            raise rule_error("must be a topology level name such as rack")
        return name

    @field_validator("pods", mode="before")
    @classmethod
    def _group_size(cls, value: Any) -> int:
        return pod_count(value)

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "pods": self.pods}


def check_slice_sizes(slices: Sequence[Slice], pods: int | None, field_prefix: str) -> None:
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


class TopologySpec(InputModel):
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
        return optional_name(value, "must be a topology level name such as zone, or omitted")

    @field_validator("slices", mode="before")
    @classmethod
    def _slice_list(cls, value: Any) -> Any:
        if value is None:
            return ()
        if not isinstance(value, list | tuple):
            raise rule_error("must be a list of {level, pods} slices, outermost first")
        return value

    @model_validator(mode="after")
    def _slice_sizes_nest(self) -> Self:
        try:
            check_slice_sizes(self.slices, None, "")
        except InputError as error:
            raise rule_error(error.rule, error.field, error.value) from None
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
        check_slice_sizes(self.slices, pods, "topology.")

    def to_dict(self) -> dict[str, Any]:
        written: dict[str, Any] = {}
        if self.required is not None:
            written["required"] = self.required
        if self.preferred is not None:
            written["preferred"] = self.preferred
        if self.slices:
            written["slices"] = [group.to_dict() for group in self.slices]
        return written
