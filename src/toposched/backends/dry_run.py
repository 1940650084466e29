"""A backend that runs nothing: each job "runs" for its expected runtime on the service's clock.

It lets the service be run and load-tested on a simulated fleet (a million GPUs, a hundred
thousand running jobs): a start or a stop costs O(log n), and a poll costs O(log n) per report
it returns, never a pass over every running job.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from toposched.backends.protocol import Launch, Report, ReportKind, RunningJob, Stop
from toposched.cluster.errors import InputError

__all__ = ["DryRunBackend"]


@dataclass(slots=True)
class _Run:
    """One running attempt; `token` tells it apart from an earlier run of the same job id."""

    launch: Launch
    token: int
    start_time: float | None = None
    """The service's clock at the poll that reported it started; None until then."""


class DryRunBackend:
    """Records each `Launch` and reports it `STARTED` at the next poll, then `FINISHED` once
    the clock passed its start plus `expected_runtime` (without one, it runs until stopped).

    Starting the attempt that already runs again changes nothing; starting another attempt of
    a running job is refused. A `Stop` takes effect at once: the run is gone and the next poll
    reports it `EVICTED` or `STOPPED`, even when its runtime ran out between the two polls. A
    stop for a run that is not running (already reported finished, or never started) is
    ignored; a stop for a run not yet reported started answers only the stop.
    """

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}
        self._new: list[_Run] = []
        self._stops: list[tuple[Launch, ReportKind]] = []
        self._ends: list[tuple[float, int, str]] = []
        """Heap of (end time, token, job id); an entry whose run is gone is skipped when popped."""
        self._next_token = 0
        self.launches_total = 0
        """How many launches this backend accepted."""

    def start(self, launch: Launch) -> None:
        current = self._runs.get(launch.job_id)
        if current is not None and current.launch.attempt == launch.attempt:
            return  # Started already: a decision carried out again after a restart.
        if current is not None:
            raise InputError(
                "job_id", launch.job_id, f"is already running (attempt {current.launch.attempt})"
            )
        runtime = launch.expected_runtime
        if runtime is not None and (math.isnan(runtime) or runtime < 0):
            raise InputError("expected_runtime", runtime, "must be a number >= 0 or None")
        run = _Run(launch, self._next_token)
        self._next_token += 1
        self._runs[launch.job_id] = run
        self._new.append(run)
        self.launches_total += 1

    def resume(self, launch: Launch, start_time: float) -> None:
        """Take `launch` as running since `start_time`, without a `STARTED` report: how the
        simulated fleet survives a restart of the service (its store knows what ran)."""
        self.start(launch)
        run = self._new.pop()
        self._started(run, start_time)

    def stop(self, stop: Stop) -> None:
        run = self._runs.get(stop.job_id)
        if run is None or run.launch.attempt != stop.attempt:
            return
        del self._runs[stop.job_id]
        kind = ReportKind.EVICTED if stop.evicted else ReportKind.STOPPED
        self._stops.append((run.launch, kind))

    def poll(self, now: float) -> Sequence[Report]:
        reports = self._finished_by(now)
        for launch, kind in self._stops:
            reports.append(Report(launch.job_id, launch.attempt, kind, now))
        self._stops.clear()
        for run in self._new:
            if self._runs.get(run.launch.job_id) is run:
                reports.append(
                    Report(run.launch.job_id, run.launch.attempt, ReportKind.STARTED, now)
                )
                self._started(run, now)
        self._new.clear()
        reports.extend(self._finished_by(now))
        return reports

    def running(self) -> Sequence[RunningJob]:
        return [RunningJob(run.launch.job_id, run.launch.attempt) for run in self._runs.values()]

    def launch(self, job_id: str) -> Launch | None:
        """The launch of `job_id`'s running attempt, if it runs."""
        run = self._runs.get(job_id)
        return None if run is None else run.launch

    def log_path(self, job_id: str, rank: int) -> str | None:
        return None

    def close(self) -> None:
        """Nothing to release: the simulated runs live and die with this object."""

    def _started(self, run: _Run, time: float) -> None:
        run.start_time = time
        if run.launch.expected_runtime is not None:
            end = time + run.launch.expected_runtime
            heapq.heappush(self._ends, (end, run.token, run.launch.job_id))

    def _finished_by(self, now: float) -> list[Report]:
        """`FINISHED` reports, at their end times, of the runs whose runtime ran out by `now`."""
        reports: list[Report] = []
        ends = self._ends
        while ends and ends[0][0] <= now:
            end, token, job_id = heapq.heappop(ends)
            run = self._runs.get(job_id)
            if run is None or run.token != token:
                continue
            del self._runs[job_id]
            reports.append(Report(job_id, run.launch.attempt, ReportKind.FINISHED, end))
        return reports
