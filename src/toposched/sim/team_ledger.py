"""Per team and per hour: GPU-seconds delivered, demanded, and short of the budget by cause."""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from toposched.policy.owed import hour_spans

__all__ = ["SHORTFALL_CAUSES", "TeamLedger"]

SHORTFALL_CAUSES = (
    "jobs_larger_than_budget",
    "jobs_past_budget",
    "job_within_budget",
    "demand_within_hour",
)
"""Why owed GPU-hours were not delivered (`fairness.shortfall_gpu_hours_by_cause`), in the order
reported: every waiting job of the team larger than its whole budget; every one larger than the
part of the budget it left unused; one that fitted that part (it waited for other teams'
borrowed work to be reclaimed, for room in the topology or behind the queue); and the hourly
cap alone (demand above the budget in part of the hour, below it in the rest)."""


class _Shortfall(NamedTuple):
    """A team short of its budget now: why (one of `SHORTFALL_CAUSES`) and by how many GPUs."""

    cause: str
    gpus: float


class TeamLedger:
    """Per team and per hour: allocated GPU-seconds delivered and GPU-seconds demanded (what is
    owed follows from them, `toposched.policy.owed`), and, when budgets are given, the
    GPU-seconds the team was short of min(budget, demand) by cause.

    Rates are piecewise constant between events; `change` and `waiting` integrate the old rates
    up to `now` into hour buckets before applying the change.
    """

    def __init__(
        self, teams: Sequence[str], start: float = 0.0, budgets: Sequence[float] | None = None
    ) -> None:
        self.teams = list(teams)
        self.index = {team: i for i, team in enumerate(self.teams)}
        self.start = start
        self.budgets = list(budgets) if budgets is not None else None
        self.delivered_rate = [0.0] * len(self.teams)
        self.demand_rate = [0.0] * len(self.teams)
        self.since = [start] * len(self.teams)
        self.delivered: list[list[float]] = [[] for _ in self.teams]
        self.demand: list[list[float]] = [[] for _ in self.teams]
        # GPUs of each waiting allocated job, counted by size: the smallest decides the cause.
        self.waiting_sizes: list[dict[float, int]] = [{} for _ in self.teams]
        self.short: list[dict[str, list[float]]] = [{} for _ in self.teams]

    def change(self, team: str, now: float, delivered: float = 0.0, demand: float = 0.0) -> None:
        """The team's running allocated GPUs change by `delivered`, its demand by `demand`."""
        index = self.index.get(team)
        if index is None:
            return
        self._flush(index, now)
        self.delivered_rate[index] += delivered
        self.demand_rate[index] += demand

    def waiting(self, team: str, now: float, gpus: float, added: bool) -> None:
        """An allocated job of `gpus` GPUs starts (`added`) or stops waiting to run."""
        index = self.index.get(team)
        if index is None:
            return
        self._flush(index, now)
        sizes = self.waiting_sizes[index]
        count = sizes.get(gpus, 0) + (1 if added else -1)
        if count > 0:
            sizes[gpus] = count
        else:
            sizes.pop(gpus, None)

    def close(self, now: float) -> None:
        for index in range(len(self.teams)):
            self._flush(index, now)

    def _cause(self, index: int) -> _Shortfall | None:
        """The team's shortfall now, or None when not short."""
        if self.budgets is None or not self.waiting_sizes[index]:
            return None
        budget = self.budgets[index]
        delivered = self.delivered_rate[index]
        # Sums of float GPU counts drift by 1e-12: a team at its budget is not short.
        short = min(budget, self.demand_rate[index]) - delivered
        if short <= 1e-6:
            return None
        smallest = min(self.waiting_sizes[index])
        if smallest > budget + 1e-9:
            return _Shortfall("jobs_larger_than_budget", short)
        if smallest > budget - delivered + 1e-9:
            return _Shortfall("jobs_past_budget", short)
        return _Shortfall("job_within_budget", short)

    def _flush(self, index: int, now: float) -> None:
        begin = self.since[index]
        if now <= begin:
            return
        self.since[index] = now
        delivered_rate = self.delivered_rate[index]
        demand_rate = self.demand_rate[index]
        if delivered_rate == 0.0 and demand_rate == 0.0:
            return
        cause = self._cause(index)
        short: list[float] = [] if cause is None else self.short[index].setdefault(cause.cause, [])
        short_rate = 0.0 if cause is None else cause.gpus
        delivered, demand = self.delivered[index], self.demand[index]
        for hour, seconds in hour_spans(self.start, begin, now):
            while len(delivered) <= hour:
                delivered.append(0.0)
                demand.append(0.0)
            delivered[hour] += delivered_rate * seconds
            demand[hour] += demand_rate * seconds
            if short_rate:
                while len(short) <= hour:
                    short.append(0.0)
                short[hour] += short_rate * seconds

    def hours(self, team: str, count: int) -> tuple[np.ndarray, np.ndarray]:
        """(delivered, demanded) GPU-seconds of each of the first `count` hours."""
        index = self.index[team]
        return _first_hours(self.delivered[index], count), _first_hours(self.demand[index], count)

    def short_hours(self, team: str, count: int) -> dict[str, np.ndarray]:
        """GPU-seconds of each of the first `count` hours during which the team ran less than
        min(budget, demand), by cause (causes that never held are left out)."""
        return {
            cause: _first_hours(values, count)
            for cause, values in self.short[self.index[team]].items()
        }


def _first_hours(values: Sequence[float], count: int) -> np.ndarray:
    """The first `count` hour buckets of `values`, zeros where nothing was recorded."""
    array = np.zeros(count)
    known = min(count, len(values))
    array[:known] = values[:known]
    return array
