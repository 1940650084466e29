"""What the loop does in each turn's transaction after the batch of commands: store the
backend's reports and apply them, run one cycle for everything that changed and store its
decisions (handed to the backend by the loop once the transaction is committed)."""

from __future__ import annotations

import logging

from toposched.backends.protocol import Report, ReportKind
from toposched.cluster.state import Health
from toposched.scheduler.core import CycleResult
from toposched.scheduler.decisions import Bind, Evict
from toposched.scheduler.jobs import JobState
from toposched.service.core import ServiceCore
from toposched.service.regrow import regrow
from toposched.service.store import StoredReport

log = logging.getLogger("toposched.service")


def poll(core: ServiceCore, now: float) -> list[Report]:
    """The reports for this turn: starts the backend refused, then the backend's own. A backend
    that fails to answer is asked again at the next turn."""
    reports = core.take_refused(now)
    try:
        reports.extend(core.backend.poll(now))
    except Exception:  # any backend error: the service keeps serving
        log.exception("the backend's poll failed; trying again at the next turn")
    return reports


def step(core: ServiceCore, reports: list[Report], now: float, tick: bool) -> CycleResult | None:
    """Inside the turn's transaction: store the reports and apply them, cycle when anything
    changed (or on a tick) and store its decisions, which the loop sends once committed."""
    apply_new_reports(core, reports, now)
    follow_nodes(core, now)
    if not (core.dirty or tick):
        return None
    result = core.scheduler.cycle(now)
    core.dirty = False
    record_decisions(core, result, now)
    return result


def follow_nodes(core: ServiceCore, now: float) -> None:
    """Node health the backend saw change (a Ray node lost or back) becomes the node's health,
    in the caller's transaction; a node back is made healthy only if it was down (an
    operator's drain or cordon stays). Nodes that joined grow the cluster model first."""
    watcher = core.node_watcher
    if watcher is None:
        return
    try:
        changes = watcher.node_changes()
        grown = watcher.grown_model()
    except Exception:  # any backend error: the service keeps serving
        log.exception("the backend's node changes failed; trying again at the next turn")
        return
    if grown is not None:
        regrow(core, grown, now)
    for change in changes:
        node = core.node_index(change.node)
        if change.health is Health.HEALTHY and core.scheduler.state.health[node] != Health.DOWN:
            continue
        log.warning("node %s: %s (%s)", change.node, change.health.name.lower(), change.detail)
        core.set_health(change.node, change.health, now)


def keep_reports(core: ServiceCore, reports: list[Report]) -> None:
    """After a turn that failed and was rolled back: its reports, stored to be applied by the
    next start (`unapplied_reports`), since the backend does not report them again."""
    if reports:
        with core.store.transaction():
            core.store.add_reports(reports)


def apply_new_reports(core: ServiceCore, reports: list[Report], now: float) -> None:
    """Store reports and apply them, in the caller's transaction."""
    if reports:
        core.store.add_applied_reports(reports)
        for report in reports:
            apply_report(core, report, now)


def apply_reports(core: ServiceCore, stored: list[StoredReport], now: float) -> None:
    """Apply reports stored earlier and mark them applied."""
    for item in stored:
        apply_report(core, item.report, now)
    core.store.mark_applied([item.report_id for item in stored])


def apply_report(core: ServiceCore, report: Report, now: float) -> None:
    """The scheduler is told at `now`: its clock never goes back, and a report may be dated
    before a command of this batch or before a restart (a run that ended while the service
    was down). The event keeps the report's own time."""
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
            launch = core.queue_start(record)
            core.event(
                now,
                "bound",
                record,
                nodes=list(dict.fromkeys(pod.node for pod in launch.pods)),
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
                lost_gpu_seconds=decision.lost_gpu_seconds,
            )
