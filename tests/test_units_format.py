"""The duration formatters for readers: rounded spans (waits, runtimes) and measured timings."""

from __future__ import annotations

import pytest

from toposched.cluster.units import DAY, HOUR, MINUTE, WEEK, format_span, format_timing


def test_time_constants_are_seconds() -> None:
    assert (MINUTE, HOUR, DAY, WEEK) == (60.0, 3_600.0, 86_400.0, 604_800.0)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0.0, "0 s"),
        (89.4, "89 s"),
        (90.0, "2 min"),  # a unit from one and a half of it
        (5_399.0, "90 min"),
        (5_400.0, "1.5 h"),
        (3 * DAY, "72.0 h"),  # no days by default
    ],
)
def test_spans_switch_unit_at_one_and_a_half(seconds: float, text: str) -> None:
    assert format_span(seconds) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(119.0, "119 s"), (120.0, "2 min"), (7_199.0, "120 min"), (7_200.0, "2.0 h")],
)
def test_spans_take_the_switch_points_they_are_given(seconds: float, text: str) -> None:
    assert format_span(seconds, minutes_from=2 * MINUTE, hours_from=2 * HOUR) == text


def test_spans_reach_days_only_when_asked() -> None:
    assert format_span(2 * DAY - 1, days_from=2 * DAY) == "48.0 h"
    assert format_span(3 * DAY, days_from=2 * DAY) == "3.0 d"


def test_spans_in_minutes_from_zero() -> None:
    assert format_span(30.0, minutes_from=0, hours_from=HOUR) == "0 min"
    assert format_span(HOUR, minutes_from=0, hours_from=HOUR) == "1.0 h"


@pytest.mark.parametrize(
    ("seconds", "digits", "text"),
    [
        (42e-6, 2, "42.0 us"),
        (4.567e-3, 2, "4.57 ms"),
        (1.234, 2, "1.23 s"),
        (42e-6, 1, "42 us"),
        (0.5, 1, "500.0 ms"),
    ],
)
def test_timings_in_microseconds_milliseconds_or_seconds(
    seconds: float, digits: int, text: str
) -> None:
    assert format_timing(seconds, digits) == text


def test_timings_below_a_millisecond_can_stay_in_milliseconds() -> None:
    assert format_timing(90e-6, microseconds=False) == "0.09 ms"
    assert format_timing(2.5, microseconds=False) == "2.50 s"
