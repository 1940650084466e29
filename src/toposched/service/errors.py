"""Errors the service answers with; each maps to one HTTP status and error code."""

from __future__ import annotations

from typing import Any

from toposched.cluster.errors import InputError, ToposchedError


class NeverFits(InputError):
    """A valid job this cluster can never run (422 `never_fits`)."""


class NotFound(ToposchedError):
    """No such job, node or pod (404)."""

    def __init__(self, what: str, name: Any) -> None:
        self.field = what
        self.value = name
        super().__init__(f"{what} {name!r} not found")


class Conflict(ToposchedError):
    """The request contradicts the current state (409): a finished job, a reused key."""

    def __init__(self, field: str, value: Any, rule: str) -> None:
        self.field = field
        self.value = value
        self.rule = rule
        super().__init__(f"{field}: {value!r}: {rule}")


class Forbidden(ToposchedError):
    """The token may not do this (403)."""
