"""Errors raised for bad input: each names the field, the value and the rule it broke."""

from __future__ import annotations

from numbers import Integral
from typing import Any


class ToposchedError(Exception):
    """Base class of every error toposched raises on purpose."""


class InputError(ToposchedError, ValueError):
    """Bad input: `field` had `value`, which breaks `rule`. Nothing was changed."""

    def __init__(self, field: str, value: Any, rule: str) -> None:
        self.field = field
        self.value = value
        self.rule = rule
        super().__init__(f"{field}: {value!r} is invalid: {rule}")


def checked_seed(seed: Any, field: str = "seed") -> int:
    """`seed` if it is a whole number >= 0 (what numpy's generators accept), else an
    InputError naming `field`."""
    if isinstance(seed, bool) or not isinstance(seed, Integral) or seed < 0:
        raise InputError(field, seed, "must be a whole number >= 0")
    return int(seed)
