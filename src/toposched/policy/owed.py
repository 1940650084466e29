"""GPU-hours owed to each team and delivered to it, hour by hour: whether budgets were honoured.

In each hour a team is *owed* the smaller of its entitlement (its budget in GPUs for the whole
hour) and the GPU-hours its allocated jobs asked for (pending or running); it is *delivered*
the GPU-hours its allocated jobs ran, and *delivered within owed* the smaller of the two. A team
that asks for little is owed little; delivery above what was owed (borrowing idle GPUs) does
not make up for another hour. Unallocated work (min runtime 0, or no budget) is neither owed
nor delivered. An hour not yet over counts as it stands, against the whole hour's entitlement.

The simulator's report and the service both count this way: `hour_spans` cuts time into the
hours, `owed_gpu_seconds` is the definition, and `OwedMeter` keeps the hours of a sliding window
for a running service.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, overload

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.errors import InputError
from toposched.cluster.units import HOUR

__all__ = [
    "HourTally",
    "OwedFigures",
    "OwedMeter",
    "hour_spans",
    "owed_gpu_seconds",
]


def hour_spans(origin: float, begin: float, end: float) -> Iterator[tuple[int, float]]:
    """[begin, end) cut at the hours counted from `origin`: (hour index, seconds within it)."""
    hour = int((begin - origin) // HOUR)
    while begin < end:
        stop = min(origin + (hour + 1) * HOUR, end)
        yield hour, stop - begin
        begin = stop
        hour += 1


@overload
def owed_gpu_seconds(entitled: float, demand: float) -> float: ...


@overload
def owed_gpu_seconds(
    entitled: float | NDArray[np.float64], demand: NDArray[np.float64]
) -> NDArray[np.float64]: ...


def owed_gpu_seconds(entitled: Any, demand: Any) -> Any:
    """GPU-seconds a team is owed in an hour (elementwise over arrays of hours): the smaller of
    its entitlement and its demand, both in GPU-seconds."""
    owed = np.minimum(entitled, demand)
    return owed if isinstance(owed, np.ndarray) else float(owed)


@dataclass(frozen=True, slots=True)
class OwedFigures:
    """Owed and delivered GPU-seconds of one team (or a sum of teams) over some hours."""

    owed: float = 0.0
    delivered: float = 0.0
    delivered_within_owed: float = 0.0

    @property
    def owed_met(self) -> float | None:
        """Share of the owed GPU-hours delivered (0 to 1); None when nothing was owed."""
        return self.delivered_within_owed / self.owed if self.owed > 0 else None

    def __add__(self, other: OwedFigures) -> OwedFigures:
        return OwedFigures(
            self.owed + other.owed,
            self.delivered + other.delivered,
            self.delivered_within_owed + other.delivered_within_owed,
        )


@dataclass(slots=True)
class HourTally:
    """One team's hour: GPU-seconds delivered and demanded so far, and its entitlement."""

    hour: int
    delivered: float = 0.0
    demand: float = 0.0
    entitled: float = 0.0
    """GPU-seconds of budget for the whole hour, at the budget last in force in it."""

    def figures(self) -> OwedFigures:
        owed = owed_gpu_seconds(self.entitled, self.demand)
        return OwedFigures(owed, self.delivered, min(self.delivered, owed))

    def to_list(self) -> list[float]:
        return [self.hour, self.delivered, self.demand, self.entitled]

    @classmethod
    def from_list(cls, values: Iterable[float]) -> HourTally:
        hour, delivered, demand, entitled = values
        return cls(int(hour), float(delivered), float(demand), float(entitled))


@dataclass(slots=True)
class _Rates:
    delivered: float = 0.0
    """GPUs the team's allocated jobs hold."""
    demand: float = 0.0
    """GPUs the team's allocated jobs ask for, pending or running."""
    budget: float = 0.0
    """The team's budget in GPUs."""


class OwedMeter:
    """Each team's hours within a sliding window of `window_hours` hours (the one in progress
    included), counted from `origin` (0: whole UTC hours of the epoch).

    Rates are piecewise constant: `advance(now)` integrates the rates held since the last call
    into the hours, then `set_rates` gives the rates from `now` on. A call costs O(teams), or
    more only for the hours it crosses. Like the usage tracker it has no clock of its own, and
    `now` must not go backwards.
    """

    def __init__(self, window_hours: int, origin: float = 0.0) -> None:
        if isinstance(window_hours, bool) or not isinstance(window_hours, int) or window_hours < 1:
            raise InputError("window_hours", window_hours, "must be a whole number of hours >= 1")
        self.window_hours = window_hours
        self.origin = origin
        self.since: float | None = None
        self.hours: dict[str, deque[HourTally]] = {}
        self._rates: dict[str, _Rates] = {}

    def set_rates(self, team: str, delivered: float, demand: float, budget: float) -> bool:
        """The team's rates from the last `advance` on; whether they changed."""
        rates = self._rates.get(team)
        if rates is None:
            rates = self._rates[team] = _Rates()
        changed = (rates.delivered, rates.demand, rates.budget) != (delivered, demand, budget)
        rates.delivered, rates.demand, rates.budget = delivered, demand, budget
        return changed

    @property
    def counting(self) -> bool:
        """Whether any team's hours grow: it has allocated jobs running or asking."""
        return any(rates.delivered or rates.demand for rates in self._rates.values())

    def advance(self, now: float) -> set[str]:
        """Count the rates held since the last call up to `now`; the teams whose past hours
        changed (an hour was added after them, or one left the window)."""
        begin, self.since = self.since, now
        if begin is None or now <= begin:
            return set()
        reshaped = set()
        for team, rates in self._rates.items():
            if rates.delivered == 0.0 and rates.demand == 0.0:
                continue
            hours = self.hours.get(team)
            if hours is None:
                hours = self.hours[team] = deque()
            for hour, seconds in hour_spans(self.origin, begin, now):
                if not hours or hours[-1].hour != hour:
                    if hours:
                        reshaped.add(team)
                    hours.append(HourTally(hour))
                tally = hours[-1]
                tally.delivered += rates.delivered * seconds
                tally.demand += rates.demand * seconds
                tally.entitled = rates.budget * HOUR
        return reshaped | self._drop_old(now)

    def restart(self, now: float) -> None:
        """Go on from `now` after a pause (a restart): the pause counts neither way."""
        self.since = now

    def figures(self, team: str, now: float) -> OwedFigures:
        """The team's owed and delivered GPU-seconds over the window at `now`."""
        first = self._first_hour(now)
        total = OwedFigures()
        for tally in self.hours.get(team, ()):
            if tally.hour >= first:
                total += tally.figures()
        return total

    def _first_hour(self, now: float) -> int:
        return int((now - self.origin) // HOUR) - self.window_hours + 1

    def _drop_old(self, now: float) -> set[str]:
        """Drop the hours that left the window; the teams that lost some."""
        first = self._first_hour(now)
        dropped = set()
        for team in list(self.hours):
            hours = self.hours[team]
            while hours and hours[0].hour < first:
                hours.popleft()
                dropped.add(team)
            if not hours:
                del self.hours[team]
        return dropped

    # --- kept across restarts ----------------------------------------------------------------
    def past_hours(self, team: str) -> list[list[float]]:
        """The team's hours but the last, as lists (they change only when `advance` says)."""
        hours = self.hours.get(team, ())
        return [tally.to_list() for tally in list(hours)[:-1]]

    def last_hours(self) -> dict[str, list[float]]:
        """Every team's last hour, as a list (it changes at each `advance`)."""
        return {team: hours[-1].to_list() for team, hours in self.hours.items() if hours}

    def load(
        self, past: dict[str, list[list[float]]], last: dict[str, list[float]], now: float
    ) -> None:
        """Take back the hours of `past_hours` (by team) and `last_hours`, going on from
        `now`."""
        self.hours = {}
        for team in sorted(set(past) | set(last)):
            tallies = [HourTally.from_list(values) for values in past.get(team, [])]
            if team in last:
                tallies.append(HourTally.from_list(last[team]))
            self.hours[team] = deque(tallies)
        self._drop_old(now)
        self.restart(now)
