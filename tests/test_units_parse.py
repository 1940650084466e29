"""The quantity parsers' direct paths for plain numbers give exactly what exact arithmetic gives."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toposched.cluster.errors import InputError
from toposched.cluster.units import parse_duration


def exact_seconds(value: int | float | str) -> Fraction:
    """A plain number's value as written: a float as its shortest repr (0.1 is one tenth)."""
    return Fraction(repr(value)) if isinstance(value, float) else Fraction(value)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_float_seconds_are_read_as_written(value: float) -> None:
    if math.isfinite(value) and value >= 0:
        assert parse_duration(value) == float(exact_seconds(value))
    else:
        with pytest.raises(InputError, match="duration >= 0"):
            parse_duration(value)


@given(st.integers(min_value=-(2**60), max_value=2**80))
def test_int_seconds_round_as_exact_arithmetic_does(value: int) -> None:
    if value >= 0:
        assert parse_duration(value) == float(exact_seconds(value))
    else:
        with pytest.raises(InputError, match="duration >= 0"):
            parse_duration(value)


@given(
    st.from_regex(r"\A\s?[0-9٠-٩]{1,40}(\.[0-9]{1,40})?\s?\Z"),
)
def test_decimal_strings_round_as_exact_arithmetic_does(text: str) -> None:
    assert parse_duration(text) == float(exact_seconds(text.strip()))


def test_negative_zero_reads_as_zero() -> None:
    seconds = parse_duration(-0.0)
    assert seconds == 0.0
    assert math.copysign(1.0, seconds) == 1.0


@pytest.mark.parametrize("written", [True, "1e5", "inf", "1_000", "3.", ".5", "-1", "0x10", ""])
def test_what_only_looks_numeric_is_refused(written: object) -> None:
    with pytest.raises(InputError, match="duration >= 0"):
        parse_duration(written, field="min_runtime")
