"""Owed and delivered GPU-hours of each team (`toposched.policy.owed`), kept by the service as
its clock runs, over the fair-share window.

At each turn of the loop, after the cycle, `OwedBook.advance` counts the time since the last
turn at the rates held during it (per budgeted team: allocated GPUs running, allocated GPUs
asked for, budget in GPUs) and takes the rates from now on: O(teams) per turn. The GPUs asked
for are kept per team as jobs are submitted (`asked`) and end (`ended`), never summed over the
jobs but once, at the first turn after a start.

Across restarts the hours live in the store's meta table: "owed_hours:TEAM" holds a team's
hours but the last (rewritten when an hour is added after them or leaves the window, about
once an hour per active team) and "owed_last" every team's last hour (written when an hour is
added, when the rates changed and a second passed since it was last written, or a minute
passed while some team's hours grow). A restart takes them back and goes on from its second
turn (or the first read of the figures, if earlier): time the service was down, and its first
turn, count neither as owed nor as delivered, and a hard kill loses
at most the last second before it after a change, the last minute in a steady state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import compress
from operator import attrgetter
from typing import TYPE_CHECKING

import numpy as np

from toposched.cluster.units import HOUR
from toposched.policy.owed import OwedFigures, OwedMeter
from toposched.scheduler.jobs import Job
from toposched.service.records import LIVE_STATES

if TYPE_CHECKING:
    from toposched.service.core import ServiceCore

__all__ = ["LAST_KEY", "PAST_KEY", "SAVE_EVERY_S", "OwedBook", "window_hours"]

PAST_KEY = "owed_hours:"
"""With the team's path: the team's hours before its last, in the window."""
LAST_KEY = "owed_last"
"""Every team's last hour."""
SAVE_EVERY_S = 60.0
"""The last hours are written at least this often (service clock seconds) while they change."""
CHANGE_SAVED_WITHIN_S = 1.0
"""After a change of a team's rates the last hours are written at the first turn at least this
long (service clock seconds) after they were last written: under load every turn changes some
rate, and the row would otherwise be rewritten every few milliseconds."""
_SPEC, _ACCOUNT, _NAME = attrgetter("spec"), attrgetter("account"), attrgetter("name")
_MIN_RUNTIME, _GPUS = attrgetter("min_runtime"), attrgetter("gpus")
"""Fields of many jobs and specs, read in C (`OwedBook._add_many`)."""


class OwedBook:
    """The service's `OwedMeter` and the GPUs each team's allocated live jobs ask for."""

    def __init__(self) -> None:
        self.meter: OwedMeter | None = None
        """None until the second turn after a start (or the first read of the figures), which
        takes the stored hours back."""
        self._asked: dict[str, tuple[str, float]] = {}
        """Live allocated jobs: job id -> (team, GPUs asked for)."""
        self._demand: dict[str, float] = {}
        self._teams: tuple[str, ...] = ()
        self._tree_version = -1
        self._saved = -math.inf
        self._changed = False
        """Some team's rates changed since the last hours were written."""
        self._first_turn_done = False
        """The first turn after a start passed (the book starts at the second)."""

    # --- jobs coming and going ------------------------------------------------------------------
    def asked(self, core: ServiceCore, job: Job) -> None:
        """`job` was submitted: an allocated job adds what it asks for to its team's demand
        (before the book starts it is not counting yet: its start counts every live job)."""
        if self.meter is None:
            return
        spec, scheduler = job.spec, core.scheduler
        if scheduler.contract.is_unallocated(spec.min_runtime, spec.account, scheduler.tree):
            return
        job_id, gpus = spec.name, job.gpus
        if gpus <= 0 or job_id in self._asked:
            return
        self._asked[job_id] = (spec.account, gpus)
        self._demand[spec.account] = self._demand.get(spec.account, 0.0) + gpus

    def ended(self, job_id: str) -> None:
        """The job ended (finished, failed, cancelled): its team asks for less."""
        entry = self._asked.pop(job_id, None)
        if entry is None:
            return
        team, gpus = entry
        left = self._demand[team] - gpus
        # Sums of fractional GPUs drift by 1e-12: a team that asks for nothing asks for 0.
        if left > 1e-9:
            self._demand[team] = left
        else:
            del self._demand[team]

    def _add_many(self, core: ServiceCore, jobs: Sequence[Job]) -> None:
        """`asked` for each of a restart's many jobs, in order, with the same result: whether
        work is unallocated is asked once per team and min runtime, the jobs' fields are read
        as columns, and each team's demand is summed in job order (`np.add.at`), as one job
        after another adds to it."""
        scheduler, asked = core.scheduler, self._asked
        specs = list(map(_SPEC, jobs))
        teams = list(map(_ACCOUNT, specs))
        kinds = list(zip(teams, map(_MIN_RUNTIME, specs), strict=True))
        unallocated = {
            kind: scheduler.contract.is_unallocated(kind[1], kind[0], scheduler.tree)
            for kind in dict.fromkeys(kinds)
        }
        gpus: list[float] = list(map(_GPUS, jobs))
        ids = list(map(_NAME, specs))
        counted = [
            not unallocated[kind] and job_gpus > 0
            for kind, job_gpus in zip(kinds, gpus, strict=True)
        ]
        if asked:
            counted = [
                count and job_id not in asked for count, job_id in zip(counted, ids, strict=True)
            ]
        teams, gpus = list(compress(teams, counted)), list(compress(gpus, counted))
        asked.update(zip(compress(ids, counted), zip(teams, gpus, strict=True), strict=True))
        if not teams:
            return
        names = list(dict.fromkeys(teams))
        sums = np.array([self._demand.get(team, 0.0) for team in names], dtype=np.float64)
        code = {team: index for index, team in enumerate(names)}
        np.add.at(sums, np.fromiter(map(code.__getitem__, teams), np.int64, len(teams)), gpus)
        self._demand.update(zip(names, sums.tolist(), strict=True))

    # --- the clock ------------------------------------------------------------------------------
    def advance(self, core: ServiceCore, now: float) -> None:
        """Count the time since the last turn, take the rates from `now` on and store what
        changed, in the turn's transaction. The first turn after a start leaves the book
        alone: its first pass over every live job (0.15-0.2 s at 100,000 running jobs) then
        holds up the second turn, not the first decisions after a restart."""
        if self.meter is None and not self._first_turn_done:
            self._first_turn_done = True
            return
        meter = self._started(core, now)
        reshaped = meter.advance(now)
        changed = False
        scheduler = core.scheduler
        for team in self._budgeted(core):
            changed |= meter.set_rates(
                team,
                # The service does not charge unallocated work: usage counts allocated runs.
                delivered=scheduler.usage.running(team),
                demand=self._demand.get(team, 0.0),
                budget=scheduler.budget_gpus(team),
            )
        for team in sorted(reshaped):
            core.store.set_meta(PAST_KEY + team, meter.past_hours(team))
        self._changed |= changed
        since = now - self._saved
        due = since >= SAVE_EVERY_S and meter.counting
        if reshaped or due or (self._changed and since >= CHANGE_SAVED_WITHIN_S):
            core.store.set_meta(LAST_KEY, meter.last_hours())
            self._saved = now
            self._changed = False

    def _started(self, core: ServiceCore, now: float) -> OwedMeter:
        """The meter; made at the first call after a start from the stored hours, with the
        demand of every live job."""
        if self.meter is not None:
            return self.meter
        meter = OwedMeter(window_hours=window_hours(core))
        last: dict[str, list[float]] = core.store.meta(LAST_KEY) or {}
        past = {team: core.store.meta(PAST_KEY + team) or [] for team in last}
        meter.load(past, last, now)
        self.meter = meter
        self._saved = now
        # Whether a job is unallocated depends on its team and min runtime only: asked once
        # per pair, not once per live job (100,000 of them at a large restart).
        live = [record.job_id for record in core.records.values() if record.state in LIVE_STATES]
        self._add_many(core, [job for job in map(core.scheduler.jobs.get, live) if job is not None])
        return meter

    def _budgeted(self, core: ServiceCore) -> tuple[str, ...]:
        """The budgeted leaf accounts; teams that left them stop accruing."""
        tree = core.scheduler.tree
        if tree.version != self._tree_version:
            teams = tuple(leaf for leaf in tree.leaves() if tree.has_budget(leaf))
            assert self.meter is not None
            for gone in set(self._teams) - set(teams):
                self.meter.set_rates(gone, delivered=0.0, demand=0.0, budget=0.0)
            self._teams, self._tree_version = teams, tree.version
        return self._teams

    # --- reading --------------------------------------------------------------------------------
    def figures(self, core: ServiceCore, account: str, now: float) -> OwedFigures:
        """Owed and delivered GPU-seconds over the window of the account's budgeted teams (the
        account itself if it is one), as counted at the last turn."""
        meter = self._started(core, now)
        total = OwedFigures()
        for team in self._budgeted(core):
            if team == account or team.startswith(account + "/"):
                total += meter.figures(team, now)
        return total


def window_hours(core: ServiceCore) -> int:
    """Hours of the window owed GPU-hours are counted over: the fair-share window's."""
    return max(1, math.ceil(core.scheduler.usage.window / HOUR - 1e-9))
