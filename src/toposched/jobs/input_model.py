"""The base of the job model's classes: frozen, closed to unknown fields, failing with
`InputError` (field, value, rule) instead of pydantic's errors; and the field checks they share.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

from toposched.cluster.errors import InputError, join_fields, unknown_field_rule
from toposched.jobs import rules

__all__ = ["InputModel", "parsed", "pod_count", "rule_error"]

T = typing.TypeVar("T")


# --- turning validation failures into InputError --------------------------------------------


def rule_error(rule: str, field: str = "", value: Any = None) -> PydanticCustomError:
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
        missing_rules: Mapping[str, str] = getattr(root, "missing_rules", {})
        value, rule = None, missing_rules.get(field, _PLAIN_RULES[kind])
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


def parsed(parser: Callable[[Any], T], value: Any) -> T:
    """`parser(value)`, its InputError turned into a failure that pydantic locates: the rule
    functions of `toposched.jobs.rules` become field validators this way."""
    try:
        return parser(value)
    except InputError as error:
        raise rule_error(error.rule) from None


class InputModel(BaseModel):
    """Frozen, closed to unknown fields, and failing with InputError instead of pydantic errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    missing_rules: ClassVar[Mapping[str, str]] = {}
    """The rule for a required field left out, by its dotted name, where "is required" alone
    would not say enough."""

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


def pod_count(value: Any) -> int:
    """A number of pods: an integer from 1 to the limit of pods in one job."""
    return parsed(rules.pod_count, value)
