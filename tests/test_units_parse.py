"""The quantity parsers' direct paths for plain numbers give exactly what exact arithmetic gives,
and amounts too large for a float are refused by rule."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toposched.cluster.errors import InputError
from toposched.cluster.units import (
    BYTES_PER_MEMORY_UNIT,
    BYTES_PER_MIB,
    parse_cpu_milli,
    parse_duration,
    parse_memory_mib,
)
from toposched.jobs.spec import JobSpec


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


@pytest.mark.parametrize("written", [10**400, "1" * 400, "1" * 400 + "h"])
def test_durations_beyond_a_float_are_refused(written: object) -> None:
    with pytest.raises(InputError, match="at most 1.8e\\+308 seconds") as caught:
        parse_duration(written, field="min_runtime")
    assert caught.value.field == "min_runtime"


def test_a_job_with_an_endless_runtime_names_the_field() -> None:
    job = {"name": "a", "pods": 1, "resources_per_pod": {"gpus": 1}, "min_runtime": 10**400}
    with pytest.raises(InputError) as caught:
        JobSpec.from_dict(job)
    assert caught.value.field == "min_runtime"


@given(st.integers(min_value=0, max_value=2**70), st.sampled_from(sorted(BYTES_PER_MEMORY_UNIT)))
def test_memory_amounts_round_up_to_whole_mib(amount: int, unit: str) -> None:
    assert parse_memory_mib(amount) == amount
    assert parse_memory_mib(str(amount)) == amount
    size = Fraction(amount * BYTES_PER_MEMORY_UNIT[unit])
    assert parse_memory_mib(f"{amount}{unit}") == math.ceil(size / BYTES_PER_MIB)


@given(st.integers(min_value=0, max_value=2**70))
def test_whole_cores_are_thousands_of_millicores(cores: int) -> None:
    assert parse_cpu_milli(cores) == cores * 1000
    assert parse_cpu_milli(f" {cores} ") == cores * 1000
    assert parse_cpu_milli(f"{cores}m") == cores


@pytest.mark.parametrize("written", [True, -1, "-1", "1e3"])
def test_memory_and_cpu_refuse_what_only_looks_numeric(written: object) -> None:
    with pytest.raises(InputError, match="must be a memory size"):
        parse_memory_mib(written)
    with pytest.raises(InputError, match="must be CPU cores"):
        parse_cpu_milli(written)
