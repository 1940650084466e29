"""Where a job's gang may land: one domain at a required level, the fewest domains at a
preferred one, and slices (groups of consecutive pods that share a domain)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

from pydantic import field_validator, model_validator

from toposched.cluster.errors import InputError
from toposched.jobs import rules
from toposched.jobs.input_model import InputModel, parsed, pod_count, rule_error
from toposched.jobs.rules import check_slice_sizes

__all__ = ["Slice", "TopologySpec", "check_slice_sizes"]

"""The innermost level, below every cluster level: all pods of a group on one node."""


class Slice(InputModel):
    """Every `pods` consecutive pods of the gang lie within one domain at `level`."""

    level: str
    pods: int

    @field_validator("level", mode="before")
    @classmethod
    def _level_name(cls, value: Any) -> str:
        return parsed(rules.slice_level, value)

    @field_validator("pods", mode="before")
    @classmethod
    def _group_size(cls, value: Any) -> int:
        return pod_count(value)

    def to_dict(self) -> dict[str, Any]:
        return {"level": self.level, "pods": self.pods}


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
        return parsed(rules.optional_level, value)

    @field_validator("slices", mode="before")
    @classmethod
    def _slice_list(cls, value: Any) -> Any:
        return parsed(rules.slice_list, value)

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
        rules.check_levels(self.required, self.preferred, self.slices, levels, pods)

    def to_dict(self) -> dict[str, Any]:
        written: dict[str, Any] = {}
        if self.required is not None:
            written["required"] = self.required
        if self.preferred is not None:
            written["preferred"] = self.preferred
        if self.slices:
            written["slices"] = [group.to_dict() for group in self.slices]
        return written
