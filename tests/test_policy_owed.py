"""Owed and delivered GPU-hours (`toposched.policy.owed`): hours cut at their boundaries, what
is owed in an hour, and the meter a running service keeps over its window."""

from __future__ import annotations

import numpy as np
import pytest

from toposched.cluster.errors import InputError
from toposched.cluster.units import HOUR
from toposched.policy.owed import HourTally, OwedFigures, OwedMeter, hour_spans, owed_gpu_seconds


@pytest.mark.parametrize(
    ("origin", "begin", "end", "spans"),
    [
        (0.0, 0.0, 0.0, []),
        (0.0, 600.0, 1200.0, [(0, 600.0)]),
        (0.0, 3000.0, 4200.0, [(0, 600.0), (1, 600.0)]),
        (0.0, 1800.0, 9000.0, [(0, 1800.0), (1, 3600.0), (2, 1800.0)]),
        (100.0, 0.0, 200.0, [(-1, 100.0), (0, 100.0)]),
    ],
)
def test_hour_spans_cut_at_every_hour(
    origin: float, begin: float, end: float, spans: list[tuple[int, float]]
) -> None:
    assert list(hour_spans(origin, begin, end)) == spans


def test_owed_is_the_smaller_of_entitlement_and_demand() -> None:
    assert owed_gpu_seconds(4.0 * HOUR, 10.0 * HOUR) == 4.0 * HOUR
    assert owed_gpu_seconds(4.0 * HOUR, 1.5 * HOUR) == 1.5 * HOUR
    hours = owed_gpu_seconds(2.0, np.array([0.0, 1.0, 3.0]))
    assert hours.tolist() == [0.0, 1.0, 2.0]


def test_an_hour_owes_its_whole_entitlement_even_before_it_ends() -> None:
    tally = HourTally(hour=0, delivered=1800.0 * 2, demand=1800.0 * 6, entitled=4.0 * HOUR)
    # half an hour at 6 GPUs asked, 2 running, budget 4: owed min(4 h, 3 h) = 3 GPU-h
    assert tally.figures() == OwedFigures(3.0 * HOUR, 1.0 * HOUR, 1.0 * HOUR)
    assert OwedFigures(3.0, 1.0, 1.0).owed_met == pytest.approx(1 / 3)
    assert OwedFigures().owed_met is None


def test_a_meter_counts_hours_at_the_rates_held() -> None:
    meter = OwedMeter(window_hours=3)
    meter.restart(0.0)
    meter.set_rates("a", delivered=8.0, demand=20.0, budget=4.8)
    meter.set_rates("b", delivered=0.0, demand=4.0, budget=4.8)
    assert meter.counting
    assert meter.advance(0.0) == set()
    assert meter.advance(2 * HOUR) == {"a", "b"}  # hour 1 came after hour 0
    meter.set_rates("a", delivered=12.0, demand=12.0, budget=4.8)
    meter.set_rates("b", delivered=4.0, demand=4.0, budget=4.8)
    meter.advance(2.5 * HOUR)
    a, b = meter.figures("a", 2.5 * HOUR), meter.figures("b", 2.5 * HOUR)
    # a: 4.8 owed in each of hours 0 and 1 (asked 20), 4.8 in hour 2 (asked 6 so far)
    assert a.owed == pytest.approx(14.4 * HOUR)
    assert a.delivered == pytest.approx((8 + 8 + 6) * HOUR)
    assert a.delivered_within_owed == pytest.approx(14.4 * HOUR)
    # b: asked 4 for two hours with nothing running, then ran 2 GPU-h in hour 2
    assert (b.owed, b.delivered, b.delivered_within_owed) == (10 * HOUR, 2 * HOUR, 2 * HOUR)
    assert meter.figures("nobody", 2.5 * HOUR) == OwedFigures()


def test_hours_leave_the_window_and_come_back_from_what_was_kept() -> None:
    meter = OwedMeter(window_hours=2)
    meter.restart(0.0)
    meter.set_rates("a", delivered=1.0, demand=1.0, budget=2.0)
    meter.advance(1.5 * HOUR)
    assert meter.figures("a", 1.5 * HOUR).delivered == 1.5 * HOUR
    assert meter.advance(2.5 * HOUR) == {"a"}  # hour 2 began, hour 0 left the window
    assert meter.figures("a", 2.5 * HOUR).delivered == 1.5 * HOUR
    past, last = {"a": meter.past_hours("a")}, meter.last_hours()
    assert past == {"a": [[1, HOUR, HOUR, 2 * HOUR]]}
    assert last == {"a": [2, HOUR / 2, HOUR / 2, 2 * HOUR]}
    again = OwedMeter(window_hours=2)
    again.load(past, last, 2.75 * HOUR)
    assert again.figures("a", 2.75 * HOUR) == meter.figures("a", 2.5 * HOUR)
    # after a restart the rates come from the new start: the pause counts neither way
    again.set_rates("a", delivered=1.0, demand=1.0, budget=2.0)
    again.advance(3.0 * HOUR)
    assert again.figures("a", 3.0 * HOUR).delivered == 0.75 * HOUR


def test_a_team_at_rest_grows_no_hours() -> None:
    meter = OwedMeter(window_hours=2)
    meter.restart(0.0)
    meter.set_rates("a", delivered=0.0, demand=0.0, budget=2.0)
    assert not meter.counting
    assert meter.advance(5 * HOUR) == set()
    assert meter.hours == {} and meter.last_hours() == {}


def test_a_window_is_whole_hours() -> None:
    for bad in (0, 1.5, True):
        with pytest.raises(InputError, match="window_hours"):
            OwedMeter(window_hours=bad)  # type: ignore[arg-type]
