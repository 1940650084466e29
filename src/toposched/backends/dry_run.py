"""A backend that runs nothing: each job "runs" for its expected runtime on the service's clock.

It lets the service be run and load-tested on a simulated fleet (a million GPUs, a hundred
thousand running jobs): a start or a stop costs O(log n), and a poll costs O(log n) per report
it returns, never a pass over every running job. A restart resumes every stored run at once
(`resume_many`), each launch built only if someone asks for it.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from toposched.backends.protocol import Launch, Report, ReportKind, RunningJob, Stop
from toposched.cluster.errors import InputError

__all__ = ["DryRunBackend", "ResumedRuns"]


@dataclass(frozen=True, slots=True)
class ResumedRuns:
    """Runs the store says were started, to go on in a new process, as columns (a restart
    resumes a hundred thousand): the i-th run is job `job_ids[i]`'s attempt `attempts[i]`,
    started at `start_times[i]`; `launch_of(job_id)` builds a run's `Launch` when asked (the
    nodes are named only for the few runs anyone looks at)."""

    job_ids: Sequence[str]
    attempts: Sequence[int]
    expected_runtimes: Sequence[float | None]
    start_times: Sequence[float]
    launch_of: Callable[[str], Launch]


@dataclass(slots=True)
class _Run:
    """One running attempt; `token` tells it apart from an earlier run of the same job id.
    `launch` is None for a resumed run until `make_launch` builds it."""

    job_id: str
    attempt: int
    expected_runtime: float | None
    token: int
    launch: Launch | None
    make_launch: Callable[[str], Launch] | None = None
    """Builds the launch of a resumed run from its job id."""
    start_time: float | None = None
    """When it started on the service's clock (see `DryRunBackend`); None until the poll
    that reports it."""
    handed: float | None = None
    """The backend's clock when the launch was handed over, if it has a clock."""

    def the_launch(self) -> Launch:
        if self.launch is None:
            assert self.make_launch is not None
            self.launch = self.make_launch(self.job_id)
            self.make_launch = None
        return self.launch


class DryRunBackend:
    """Records each `Launch` and reports it `STARTED` at the next poll, then `FINISHED` once
    the clock passed its start plus `expected_runtime` (without one, it runs until stopped).

    Starting the attempt that already runs again changes nothing; starting another attempt of
    a running job is refused. A `Stop` takes effect at once: the run is gone and the next poll
    reports it `EVICTED` or `STOPPED`, even when its runtime ran out between the two polls. A
    stop for a run that is not running (already reported finished, or never started) is
    ignored; a stop for a run not yet reported started answers only the stop.

    With a `clock` (the service's, `config.service_clock`) a run starts when its launch is
    handed over, as a real backend's would, and its `STARTED` report, sent at the next poll,
    carries that time; without one it starts at the time of that poll.
    """

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock
        self._runs: dict[str, _Run] = {}
        self._new: list[_Run] = []
        self._stops: list[tuple[_Run, ReportKind]] = []
        self._ends: list[tuple[float, int, str]] = []
        """Heap of (end time, token, job id); an entry whose run is gone is skipped when popped."""
        self._next_token = 0
        self.launches_total = 0
        """How many launches this backend accepted."""

    def start(self, launch: Launch) -> None:
        run = self._new_run(launch.job_id, launch.attempt, launch.expected_runtime, launch)
        if run is not None:
            if self._clock is not None:
                run.handed = self._clock()
            self._new.append(run)

    def _new_run(
        self,
        job_id: str,
        attempt: int,
        runtime: float | None,
        launch: Launch | None,
        make_launch: Callable[[str], Launch] | None = None,
    ) -> _Run | None:
        """The run of a new attempt, held as running; None if that attempt runs already."""
        current = self._runs.get(job_id)
        if current is not None and current.attempt == attempt:
            return None  # Started already: a decision carried out again after a restart.
        if current is not None:
            raise InputError("job_id", job_id, f"is already running (attempt {current.attempt})")
        if runtime is not None and (math.isnan(runtime) or runtime < 0):
            raise InputError("expected_runtime", runtime, "must be a number >= 0 or None")
        run = _Run(job_id, attempt, runtime, self._next_token, launch, make_launch)
        self._next_token += 1
        self._runs[job_id] = run
        self.launches_total += 1
        return run

    def resume(self, launch: Launch, start_time: float) -> None:
        """Take `launch` as running since `start_time`, without a `STARTED` report: how the
        simulated fleet survives a restart of the service (its store knows what ran)."""
        run = self._new_run(launch.job_id, launch.attempt, launch.expected_runtime, launch)
        if run is not None:
            self._started(run, start_time)

    def resume_many(self, resumed: ResumedRuns) -> None:
        """`resume` each run, in order, with the same result (a run of an attempt that runs
        already is skipped; another attempt of a running job is refused, the runs before it
        kept); the end times ordered once for all of them."""
        runs, ends, token = self._runs, self._ends, self._next_token
        launch_of = resumed.launch_of
        try:
            for job_id, attempt, runtime, start_time in zip(
                resumed.job_ids,
                resumed.attempts,
                resumed.expected_runtimes,
                resumed.start_times,
                strict=True,
            ):
                current = runs.get(job_id)
                if current is not None or (runtime is not None and not runtime >= 0):
                    # Started already (skipped), or refused as `_new_run` refuses it.
                    self._new_run(job_id, attempt, runtime, None)
                    continue
                runs[job_id] = _Run(job_id, attempt, runtime, token, None, launch_of, start_time)
                if runtime is not None:
                    ends.append((start_time + runtime, token, job_id))
                token += 1
        finally:
            self.launches_total += token - self._next_token
            self._next_token = token
            heapq.heapify(ends)

    def stop(self, stop: Stop) -> None:
        run = self._runs.get(stop.job_id)
        if run is None or run.attempt != stop.attempt:
            return
        del self._runs[stop.job_id]
        kind = ReportKind.EVICTED if stop.evicted else ReportKind.STOPPED
        self._stops.append((run, kind))

    def poll(self, now: float) -> Sequence[Report]:
        reports = self._finished_by(now)
        for run, kind in self._stops:
            reports.append(Report(run.job_id, run.attempt, kind, now))
        self._stops.clear()
        for run in self._new:
            if self._runs.get(run.job_id) is run:
                # Never dated after the poll that reports it (a test's clock may differ).
                at = now if run.handed is None else min(run.handed, now)
                reports.append(Report(run.job_id, run.attempt, ReportKind.STARTED, at))
                self._started(run, at)
        self._new.clear()
        reports.extend(self._finished_by(now))
        return reports

    def running(self) -> Sequence[RunningJob]:
        make = RunningJob._make
        return [make((run.job_id, run.attempt)) for run in self._runs.values()]

    def launch(self, job_id: str) -> Launch | None:
        """The launch of `job_id`'s running attempt, if it runs."""
        run = self._runs.get(job_id)
        return None if run is None else run.the_launch()

    def log_path(self, job_id: str, rank: int) -> str | None:
        return None

    def close(self) -> None:
        """Nothing to release: the simulated runs live and die with this object."""

    def _started(self, run: _Run, time: float) -> None:
        run.start_time = time
        if run.expected_runtime is not None:
            heapq.heappush(self._ends, (time + run.expected_runtime, run.token, run.job_id))

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
            reports.append(Report(job_id, run.attempt, ReportKind.FINISHED, end))
        return reports
