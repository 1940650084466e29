"""The rows of the stores' tables as values and back, shared by the SQLite and PostgreSQL
stores."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from toposched.backends.protocol import Report
from toposched.scheduler.jobs import JobState
from toposched.service.records import JobRecord, allocation_to_json, allocations_from_json

_SMALL_DATA_KEPT = 1024
_small_texts: dict[tuple[tuple[str, str], ...], str] = {}


def data_text(data: dict[str, Any]) -> str:
    """An event's data as JSON. Most events carry only names (a job's state): their few
    distinct texts are made once (a service stores several events per submission)."""
    if not all(type(value) is str for value in data.values()):
        return json.dumps(data)
    key = tuple(data.items())
    text = _small_texts.get(key)
    if text is None:
        if len(_small_texts) >= _SMALL_DATA_KEPT:
            _small_texts.clear()
        text = _small_texts[key] = json.dumps(data)
    return text


def job_values(record: JobRecord) -> tuple[Any, ...]:
    """A record as the values of JOB_COLUMNS, in order (shared by both stores)."""
    return (
        record.job_id,
        record.account,
        record.priority,
        str(record.state),
        json.dumps(record.spec) if record.spec_text is None else record.spec_text,
        record.submit_time,
        record.start_time,
        record.end_time,
        record.attempt,
        record.preemptions,
        record.idempotency_key,
        record.body_hash,
        allocation_to_json(record.allocation),
        int(record.unallocated),
        record.reason,
    )


def run_values(record: JobRecord, priority: bool = False) -> tuple[Any, ...]:
    """A record as the values of RUN_COLUMNS (then priority and spec if `priority`)."""
    values = (
        str(record.state),
        record.start_time,
        record.end_time,
        record.attempt,
        record.preemptions,
        allocation_to_json(record.allocation),
        int(record.unallocated),
        record.reason,
    )
    return (*values, record.priority, json.dumps(record.spec)) if priority else values


def report_values(report: Report) -> tuple[Any, ...]:
    """A report as the values of the reports table's job, attempt, kind, time, detail."""
    return (report.job_id, report.attempt, str(report.kind), report.time, report.detail)


def jobs_from_rows(rows: Sequence[Sequence[Any]]) -> list[JobRecord]:
    """Records from rows of `seq, JOB_COLUMNS` (shared by both stores). A restart reads a
    hundred thousand: their documents are kept as text, parsed when read (`JobRecord.spec`),
    and their allocations' nodes and GPUs gathered into one array each, which every
    allocation views a part of."""
    allocations = iter(allocations_from_json([row[13] for row in rows if row[13] is not None]))
    states = {str(state): state for state in JobState}
    # Positional: the record's fields are the row's columns, in order (seq last).
    return [
        JobRecord(
            row[1],
            row[2],
            row[3],
            states[row[4]],
            None,
            row[6],
            row[7],
            row[8],
            row[9],
            row[10],
            row[11],
            row[12],
            None if row[13] is None else next(allocations),
            bool(row[14]),
            row[15],
            row[0],
            row[5],
        )
        for row in rows
    ]
