"""Errors raised for bad input: each names the field, the value and the rule it broke.

Every message has one form, `FILE:LINE: field.path: 'value' is invalid: rule`, where the file
and line appear when the input came from a file, and values longer than `SHOWN_CHARS` are cut
but paths (a value given as a `PurePath`), which are shown whole: the file is what a user needs.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Iterator, Mapping
from numbers import Integral
from pathlib import PurePath
from typing import Any

__all__ = [
    "SHOWN_CHARS",
    "InputError",
    "ToposchedError",
    "checked_number",
    "checked_seed",
    "did_you_mean",
    "shown",
    "unknown_field_rule",
]

SHOWN_CHARS = 80
"""Values (and user-written keys in field paths) are shown cut to about this many characters."""

# Errors after the first are appended to the message, up to this many, so that one submission
# shows the user most of what to fix.
_MAX_ALSO = 4


class ToposchedError(Exception):
    """Base class of every error toposched raises on purpose."""


class InputError(ToposchedError, ValueError):
    """Bad input: `field` had `value`, which breaks `rule`. Nothing was changed.

    `file` and `line` (from 1) say where the value was written, when it came from a file;
    `also` holds further failures found in the same input, listed after the first in the message.
    """

    def __init__(
        self,
        field: str,
        value: Any,
        rule: str,
        *,
        file: str | None = None,
        line: int | None = None,
        also: tuple[InputError, ...] = (),
        more: int = 0,
    ) -> None:
        self.field = field
        self.value = value
        self.rule = rule
        self.file = file
        self.line = line
        self.also = also
        self.more = more
        super().__init__(self._message())

    @property
    def location(self) -> str:
        """`FILE:LINE`, `FILE` or "" (input that did not come from a file)."""
        if self.file is None:
            return ""
        return self.file if self.line is None else f"{self.file}:{self.line}"

    def _message(self) -> str:
        text = f"{_cut(self.field)}: {shown(self.value)} is invalid: {self.rule}"
        if self.location:
            text = f"{self.location}: {text}"
        others = [other._seen_from(self.file) for other in self.also]
        if self.more:
            others.append(f"and {self.more} more")
        return f"{text}; also {'; '.join(others)}" if others else text

    def _seen_from(self, file: str | None) -> str:
        """The message, its location as `line N` when it is in `file` (where the first is)."""
        if file is None or self.file != file or self.also or self.more:
            return str(self)
        where = "" if self.line is None else f"line {self.line}: "
        return f"{where}{_cut(self.field)}: {shown(self.value)} is invalid: {self.rule}"

    def at(self, file: str, line: int | None = None) -> InputError:
        """This error, and those listed after it, located in `file` (this one at `line`)."""
        return InputError(
            self.field,
            self.value,
            self.rule,
            file=file,
            line=line,
            also=tuple(other.at(file, other.line) for other in self.also),
            more=self.more,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt from its attributes (the default would call __init__ with the message alone),
        # so that an error raised in a worker process reaches the parent intact.
        attributes = (self.field, self.value, self.rule, self.file, self.line, self.also)
        return (_rebuilt, (*attributes, self.more, self.args))

    def with_also(self, others: Iterable[InputError]) -> InputError:
        """This error with `others` (further failures of the same input) listed after it."""
        listed = list(others)
        kept = tuple(listed[:_MAX_ALSO])
        return InputError(
            self.field,
            self.value,
            self.rule,
            file=self.file,
            line=self.line,
            also=kept,
            more=len(listed) - len(kept),
        )


def _rebuilt(
    field: str,
    value: Any,
    rule: str,
    file: str | None,
    line: int | None,
    also: tuple[InputError, ...],
    more: int,
    args: tuple[Any, ...],
) -> InputError:
    error = InputError(field, value, rule, file=file, line=line, also=also, more=more)
    error.args = args
    return error


def join_fields(prefix: str, suffix: str) -> str:
    """("jobs[2]", "pods") -> "jobs[2].pods"; ("nodes", "[0].gpus") -> "nodes[0].gpus"."""
    if not prefix or not suffix:
        return prefix or suffix
    return prefix + suffix if suffix.startswith("[") else f"{prefix}.{suffix}"


def did_you_mean(name: object, valid: Iterable[str]) -> str:
    """ " (did you mean 'gpus'?)" when `name` is close to one of `valid`, else ""."""
    if not isinstance(name, str) or len(name) > SHOWN_CHARS:
        return ""
    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def unknown_field_rule(name: object, valid: Iterable[str]) -> str:
    """The rule for an unknown field `name`: a close valid name if there is one, and the list."""
    names = list(valid)
    return f"unknown field{did_you_mean(name, names)}; valid fields are {', '.join(names)}"


def checked_seed(seed: Any, field: str = "seed") -> int:
    """`seed` if it is a whole number >= 0 (what numpy's generators accept), else an
    InputError naming `field`."""
    if isinstance(seed, bool) or not isinstance(seed, Integral) or seed < 0:
        raise InputError(field, seed, "must be a whole number >= 0")
    return int(seed)


def checked_number(
    value: Any, field: str, rule: str = "must be a finite number >= 0", above: bool = False
) -> float:
    """`value` if it is a finite number >= 0 (> 0 with `above`), else an InputError naming
    `field` with `rule`."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
        or (above and value == 0)
    ):
        raise InputError(field, value, rule)
    return float(value)


# --- showing values ---------------------------------------------------------------------------


def shown(value: Any, limit: int = SHOWN_CHARS) -> str:
    """`repr(value)`, cut to about `limit` characters; a path whole, quoted as text.

    Only as much of the value is read as is shown, so a value of millions of characters, or a
    structure that repeats itself through YAML aliases, costs no more than a short one.
    """
    if isinstance(value, PurePath):
        return repr(str(value))
    text = ""
    for piece in _repr_pieces(value, depth=0):
        text += piece
        if len(text) > limit:
            cut = text[: limit - 3] + "..."
            if isinstance(value, str):
                cut += f" ({len(value):,} characters)"
            return cut
    return text


def _cut(text: str, limit: int = 2 * SHOWN_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _repr_pieces(value: Any, depth: int) -> Iterator[str]:
    """The pieces of `repr(value)`, in order; containers are walked lazily."""
    if depth > 16:
        yield "..."
    elif isinstance(value, str | bytes):
        yield repr(value[: SHOWN_CHARS + 1])
    elif isinstance(value, Mapping):
        yield "{"
        for index, (key, item) in enumerate(value.items()):
            yield ", " if index else ""
            yield from _repr_pieces(key, depth + 1)
            yield ": "
            yield from _repr_pieces(item, depth + 1)
        yield "}"
    elif isinstance(value, list | tuple):
        opening, closing = ("[", "]") if isinstance(value, list) else ("(", ")")
        yield opening
        for index, item in enumerate(value):
            yield ", " if index else ""
            yield from _repr_pieces(item, depth + 1)
        yield "," if len(value) == 1 and isinstance(value, tuple) else ""
        yield closing
    else:
        try:
            yield repr(value)
        except ValueError:  # an integer of more digits than Python converts to text
            yield f"<an integer of about {int(value.bit_length() * 0.30103):,} digits>"
