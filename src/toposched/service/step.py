"""What the loop does after each batch of commands: collect the backend's reports (stored
before they change the scheduler), apply them, run one cycle for everything that changed, store
its decisions and only then hand them to the backend."""

from __future__ import annotations

import logging

from toposched.backends.protocol import Report, ReportKind
from toposched.scheduler.core import CycleResult
from toposched.scheduler.decisions import Bind, Evict
from toposched.scheduler.jobs import JobState
from toposched.service.core import ServiceCore
from toposched.service.store import StoredReport

log = logging.getLogger("toposched.service")


def step(core: ServiceCore, now: float, tick: bool) -> CycleResult | None:
    """Poll, apply reports and cycle when anything changed (or on a tick); send decisions."""
    reports = [*core.take_refused(now), *_poll(core, now)]
    stored: list[StoredReport] = []
    if reports:
        with core.store.transaction():
            core.flush_sent()
            stored = core.store.add_reports(reports)
    result = None
    if stored or core.dirty or tick or core.sent:
        with core.store.transaction():
            core.flush_sent()
            apply_reports(core, stored, now)
            if core.dirty or tick:
                result = core.scheduler.cycle(now)
                core.dirty = False
                record_decisions(core, result, now)
    core.send_outbox()
    return result


def _poll(core: ServiceCore, now: float) -> list[Report]:
    """The backend's reports; a backend that fails to answer is asked again at the next turn."""
    try:
        return list(core.backend.poll(now))
    except Exception:  # any backend error: the service keeps serving
        log.exception("the backend's poll failed; trying again at the next turn")
        return []


def apply_reports(core: ServiceCore, stored: list[StoredReport], now: float) -> None:
    """Apply stored reports to the scheduler; reports of an earlier run of a job are dropped."""
    for item in stored:
        apply_report(core, item, now)
    core.store.mark_applied([item.report_id for item in stored])


def apply_report(core: ServiceCore, item: StoredReport, now: float) -> None:
    """The scheduler is told at `now`: its clock never goes back, and a report may be dated
    before a command of this batch or before a restart (a run that ended while the service
    was down). The event keeps the report's own time."""
    report = item.report
    record = core.records.get(report.job_id)
    if record is None or record.state is not JobState.RUNNING or record.attempt != report.attempt:
        return
    job = core.scheduler.jobs[report.job_id]
    time = report.time
    kind = report.kind
    if kind is ReportKind.STARTED:
        core.event(time, "started", record)
        return
    if kind is ReportKind.CHECKPOINTED:
        core.scheduler.report_checkpoint(report.job_id, time)
        return
    if kind is ReportKind.FINISHED:
        core.scheduler.finish(report.job_id, now)
        event = "finished"
    elif kind is ReportKind.EVICTED:
        core.scheduler.evicted(report.job_id, now)
        event = "evicted"
    else:
        # A run that failed on its own is not retried: a command that fails would fail again.
        core.scheduler.fail(report.job_id, now, requeue=False)
        event = "failed"
    core.sync(record, job)
    core.event(time, event, record, detail=report.detail)
    if record.pending:
        core.event(time, "requeued", record)
    core.dirty = True


def record_decisions(core: ServiceCore, result: CycleResult, now: float) -> None:
    for decision in result.decisions:
        if isinstance(decision, Bind):
            record = core.records[decision.job_id]
            record.attempt += 1
            core.sync(record, core.scheduler.jobs[decision.job_id])
            core.queue_start(record)
            core.event(
                now,
                "bound",
                record,
                nodes=core.allocation_nodes(decision.allocation),
                attempt=record.attempt,
                unallocated=decision.unallocated,
            )
        elif isinstance(decision, Evict):
            record = core.records[decision.job_id]
            core.queue_stop(record, record.attempt, decision.grace_s, evicted=True)
            core.event(
                now,
                "evicting",
                record,
                preemptor=decision.preemptor,
                grace_s=decision.grace_s,
                rule=decision.rule,
            )
