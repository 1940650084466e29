"""The dry-run backend: reports on the service's clock, stops, and a simulated fleet's scale."""

from __future__ import annotations

import pytest

from toposched.backends.dry_run import DryRunBackend, ResumedRuns
from toposched.backends.protocol import (
    Backend,
    Launch,
    PodLaunch,
    Report,
    ReportKind,
    RunningJob,
    RunSpec,
    Stop,
)
from toposched.cluster.errors import InputError


def launch(job_id: str, runtime: float | None, attempt: int = 1, pods: int = 1) -> Launch:
    return Launch(
        job_id=job_id,
        attempt=attempt,
        pods=tuple(PodLaunch(rank, f"node-{rank}", (0, 1, 2, 3)) for rank in range(pods)),
        run=RunSpec(("true",)),
        expected_runtime=runtime,
    )


def kinds(reports: list[Report] | tuple[Report, ...]) -> list[tuple[str, ReportKind, float]]:
    return [(r.job_id, r.kind, r.time) for r in reports]


def test_started_at_next_poll_and_finished_once_the_clock_passes_the_runtime() -> None:
    backend: Backend = DryRunBackend()
    backend.start(launch("a", 10.0, pods=2))
    assert backend.running() == [RunningJob("a", 1)]
    assert kinds(list(backend.poll(100.0))) == [("a", ReportKind.STARTED, 100.0)]
    assert list(backend.poll(109.9)) == []
    assert backend.running() == [RunningJob("a", 1)]
    # Reported at the poll after its end, stamped with the end time itself.
    assert kinds(list(backend.poll(125.0))) == [("a", ReportKind.FINISHED, 110.0)]
    assert backend.running() == []
    assert list(backend.poll(200.0)) == []


def test_with_a_clock_a_run_starts_when_handed_over() -> None:
    now = [100.0]
    backend = DryRunBackend(clock=lambda: now[0])
    backend.start(launch("a", 10.0))
    now[0] = 104.0
    # Reported at the next poll, dated at the hand-over; its runtime counts from then.
    assert kinds(list(backend.poll(104.0))) == [("a", ReportKind.STARTED, 100.0)]
    assert kinds(list(backend.poll(111.0))) == [("a", ReportKind.FINISHED, 110.0)]
    # Never dated after the poll that reports it.
    now[0] = 200.0
    backend.start(launch("b", None))
    assert kinds(list(backend.poll(150.0))) == [("b", ReportKind.STARTED, 150.0)]


def test_reports_come_oldest_first_across_jobs() -> None:
    backend = DryRunBackend()
    for job_id, runtime in (("slow", 30.0), ("fast", 5.0), ("mid", 20.0)):
        backend.start(launch(job_id, runtime))
    backend.poll(0.0)
    backend.start(launch("late", 0.0))
    assert kinds(list(backend.poll(25.0))) == [
        ("fast", ReportKind.FINISHED, 5.0),
        ("mid", ReportKind.FINISHED, 20.0),
        ("late", ReportKind.STARTED, 25.0),
        ("late", ReportKind.FINISHED, 25.0),
    ]
    assert [job.job_id for job in backend.running()] == ["slow"]


def test_a_job_without_expected_runtime_runs_until_stopped() -> None:
    backend = DryRunBackend()
    backend.start(launch("forever", None))
    backend.poll(0.0)
    assert list(backend.poll(1e12)) == []
    backend.stop(Stop("forever", 1, grace_s=30.0, evicted=False))
    assert backend.running() == []
    assert kinds(list(backend.poll(1e12 + 1))) == [("forever", ReportKind.STOPPED, 1e12 + 1)]


def test_stop_reports_evicted_or_stopped_and_wins_over_a_runtime_that_ran_out_meanwhile() -> None:
    backend = DryRunBackend()
    backend.start(launch("evictee", 10.0))
    backend.start(launch("cancelled", 100.0))
    backend.poll(0.0)
    backend.stop(Stop("evictee", 1, grace_s=5.0, evicted=True))
    backend.stop(Stop("cancelled", 1, grace_s=5.0, evicted=False))
    assert kinds(list(backend.poll(50.0))) == [
        ("evictee", ReportKind.EVICTED, 50.0),
        ("cancelled", ReportKind.STOPPED, 50.0),
    ]
    assert list(backend.poll(500.0)) == []


def test_stop_of_another_attempt_or_an_unknown_job_changes_nothing() -> None:
    backend = DryRunBackend()
    backend.start(launch("a", 10.0, attempt=2))
    backend.stop(Stop("a", 1, grace_s=0.0, evicted=True))
    backend.stop(Stop("ghost", 1, grace_s=0.0, evicted=True))
    assert kinds(list(backend.poll(0.0))) == [("a", ReportKind.STARTED, 0.0)]
    assert backend.running() == [RunningJob("a", 2)]


def test_a_stop_before_the_start_was_reported_answers_only_the_stop() -> None:
    backend = DryRunBackend()
    backend.start(launch("a", 10.0))
    backend.stop(Stop("a", 1, grace_s=0.0, evicted=True))
    assert kinds(list(backend.poll(3.0))) == [("a", ReportKind.EVICTED, 3.0)]


def test_a_requeued_job_runs_again_and_the_old_end_time_does_not_finish_it() -> None:
    backend = DryRunBackend()
    backend.start(launch("a", 10.0, attempt=1))
    backend.poll(0.0)
    backend.stop(Stop("a", 1, grace_s=0.0, evicted=True))
    backend.poll(1.0)
    backend.start(launch("a", 100.0, attempt=2))
    assert kinds(list(backend.poll(2.0))) == [("a", ReportKind.STARTED, 2.0)]
    assert list(backend.poll(50.0)) == []
    assert [(r.attempt, r.kind, r.time) for r in backend.poll(200.0)] == [
        (2, ReportKind.FINISHED, 102.0)
    ]
    assert backend.launches_total == 2


def test_resume_takes_a_run_as_started_without_a_report() -> None:
    backend = DryRunBackend()
    backend.resume(launch("a", 60.0), start_time=100.0)
    assert list(backend.poll(120.0)) == []
    assert backend.running() == [RunningJob("a", 1)]
    assert kinds(list(backend.poll(200.0))) == [("a", ReportKind.FINISHED, 160.0)]


def test_resuming_many_at_once_equals_resuming_one_by_one() -> None:
    built: list[str] = []

    def lazily(job_id: str) -> Launch:
        built.append(job_id)
        return launch(job_id, runtimes[job_id])

    runtimes = {"a": 60.0, "bb": 5.0, "ccc": None, "dddd": 30.0}
    names = list(runtimes)
    starts = [100.0 + len(job_id) for job_id in names]
    one_by_one, at_once = DryRunBackend(), DryRunBackend()
    for job_id, start in zip(names, starts, strict=True):
        one_by_one.resume(launch(job_id, runtimes[job_id]), start)
    runs = ResumedRuns(names, [1] * 4, list(runtimes.values()), starts, lazily)
    at_once.resume_many(runs)
    at_once.resume_many(runs)  # the same attempts again: they run already, nothing changes
    assert built == []  # no launch is built until someone asks for one
    assert at_once.running() == one_by_one.running()
    assert at_once.launch("bb") == one_by_one.launch("bb") and built == ["bb"]
    for now in (100.0, 110.0, 140.0, 1000.0):
        assert kinds(list(at_once.poll(now))) == kinds(list(one_by_one.poll(now)))
    assert at_once.running() == [RunningJob("ccc", 1)]
    with pytest.raises(InputError, match="already running"):
        at_once.resume_many(ResumedRuns(["ccc"], [2], [None], [0.0], lazily))
    with pytest.raises(InputError, match="expected_runtime"):
        at_once.resume_many(ResumedRuns(["e"], [1], [float("nan")], [0.0], lazily))
    assert at_once.running() == [RunningJob("ccc", 1)]


def test_start_refuses_another_attempt_of_a_running_job_and_a_negative_runtime() -> None:
    backend = DryRunBackend()
    backend.start(launch("a", 10.0))
    with pytest.raises(InputError, match="already running"):
        backend.start(launch("a", 10.0, attempt=2))
    backend.start(launch("a", 10.0))  # The same attempt again: already under way.
    assert kinds(list(backend.poll(0.0))) == [("a", ReportKind.STARTED, 0.0)]
    with pytest.raises(InputError, match="expected_runtime"):
        backend.start(launch("b", -1.0))
    assert backend.running() == [RunningJob("a", 1)]
    assert backend.launch("a") == launch("a", 10.0)
    assert backend.log_path("a", 0) is None


def test_a_simulated_fleet_of_100000_running_jobs_reports_ends_in_time_order() -> None:
    # 1,000,080 GPUs as 100,000 jobs of ~10 GPUs; each poll finishes a few and starts a few.
    fleet = [launch(f"j{index}", 1000.0 + index % 997) for index in range(100_000)]
    arrivals = [launch(f"new{step}", 5000.0) for step in range(1, 10_001)]
    backend = DryRunBackend()
    for job in fleet:
        backend.start(job)
    assert len(backend.poll(0.0)) == 100_000
    finished = 0
    for step, job in enumerate(arrivals, start=1):
        reports = backend.poll(step * 0.05)
        finished += sum(r.kind is ReportKind.FINISHED for r in reports)
        backend.start(job)
    assert finished == 0
    assert len(backend.running()) == 110_000
    # Past every end time of the first wave: exactly those 100,000 finish, in time order.
    reports = list(backend.poll(2000.0))
    assert len(reports) == 100_000 + 1
    assert reports[-1].kind is ReportKind.STARTED
    times = [r.time for r in reports[:-1]]
    assert times == sorted(times) and min(times) == 1000.0
    assert len(backend.running()) == 10_000
