"""The SQLite store: migrations from empty, rows read back equal, grouped commits."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import numpy as np
import pytest

from toposched.backends.protocol import Report, ReportKind
from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation
from toposched.scheduler.jobs import JobState
from toposched.service.records import (
    JobRecord,
    allocation_from_json,
    allocation_to_json,
    allocations_from_json,
)
from toposched.service.sqlite_schema import MIGRATIONS
from toposched.service.store import JOBS_READ_AT_ONCE, Store


def record(name: str, **fields: object) -> JobRecord:
    values: dict[str, object] = {
        "job_id": name,
        "account": "research/team-a",
        "priority": 0,
        "state": JobState.PENDING,
        "spec": {"name": name, "pods": 1, "run": {"command": ["true"]}},
        "submit_time": 10.0,
    }
    values.update(fields)
    return JobRecord(**values)  # type: ignore[arg-type]


def test_an_empty_file_is_migrated_to_the_latest_schema(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "sub" / "s.db"))
    assert store.schema_version() == len(MIGRATIONS)
    mode = store._db.execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"
    store.close()
    # Opening again migrates nothing and keeps the version.
    assert Store(str(tmp_path / "sub" / "s.db")).schema_version() == len(MIGRATIONS)


def test_a_store_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    Store(str(path)).close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE schema_version SET version = 99")
    with pytest.raises(InputError, match="newer than this toposched"):
        Store(str(path))


def test_a_file_that_is_not_sqlite_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"not a database at all" * 100)
    with pytest.raises(InputError, match="cannot be opened as SQLite"):
        Store(str(path))


def test_jobs_read_back_equal_in_submission_order(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    allocation = Allocation.of([0, 1], [[0, 1], [2, 3]], cpu_milli=500, memory_mib=64)
    running = record(
        "b",
        state=JobState.RUNNING,
        start_time=11.0,
        attempt=2,
        allocation=allocation,
        idempotency_key="k1",
        body_hash="h",
    )
    with store.transaction():
        store.insert_job(record("a"))
        store.insert_job(running)
    running.preemptions = 1
    with store.transaction():
        store.update_job(running)
    store.close()
    back = Store(str(tmp_path / "s.db")).jobs()
    assert [r.job_id for r in back] == ["a", "b"]
    assert back[0] == record("a", seq=back[0].seq)
    got = back[1]
    assert got.allocation is not None
    np.testing.assert_array_equal(got.allocation.gpus, allocation.gpus)
    np.testing.assert_array_equal(got.allocation.nodes, allocation.nodes)
    assert (got.allocation.cpu_milli, got.allocation.memory_mib) == (500, 64)
    assert (got.state, got.attempt, got.preemptions, got.idempotency_key) == (
        JobState.RUNNING,
        2,
        1,
        "k1",
    )


def test_more_jobs_than_one_read_come_back_whole_and_in_order(tmp_path: Path) -> None:
    """Jobs are read `JOBS_READ_AT_ONCE` at a time: across the reads, every record and
    allocation (of one, two or three pods, interleaved with pending jobs) comes back."""
    store = Store(str(tmp_path / "s.db"))
    written = []
    for index in range(JOBS_READ_AT_ONCE + 5):
        pods = index % 4
        allocation = (
            Allocation.of(
                np.arange(index, index + pods), np.full((pods, 2), index % 7), cpu_milli=index
            )
            if pods
            else None
        )
        state = JobState.RUNNING if pods else JobState.PENDING
        written.append(
            record(
                f"j{index}",
                state=state,
                start_time=float(index) if pods else None,
                attempt=1 if pods else 0,
                allocation=allocation,
                submit_time=index / 3,
            )
        )
    with store.transaction():
        for job in written:
            store.insert_job(job)
    store.close()
    back = Store(str(tmp_path / "s.db")).jobs()
    assert [r.job_id for r in back] == [r.job_id for r in written]
    for got, job in zip(back, written, strict=True):
        assert (got.state, got.start_time, got.submit_time) == (
            job.state,
            job.start_time,
            job.submit_time,
        )
        assert got.spec == job.spec
        if job.allocation is None:
            assert got.allocation is None
            continue
        assert got.allocation is not None
        np.testing.assert_array_equal(got.allocation.nodes, job.allocation.nodes)
        np.testing.assert_array_equal(got.allocation.gpus, job.allocation.gpus)
        assert got.allocation.cpu_milli == job.allocation.cpu_milli


def test_a_failed_transaction_leaves_nothing(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    with pytest.raises(RuntimeError), store.transaction():
        store.insert_job(record("a"))
        raise RuntimeError("boom")
    assert store.jobs() == []


def test_a_savepoint_undoes_one_command_of_a_batch(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    with store.transaction():
        with store.savepoint():
            store.insert_job(record("a"))
        with pytest.raises(InputError), store.savepoint():
            store.insert_job(record("b"))
            raise InputError("x", 1, "refused")
    assert [r.job_id for r in store.jobs()] == ["a"]


def test_grouped_commit_writes_a_batch_with_one_commit(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    commits: list[str] = []
    store._db.set_trace_callback(lambda sql: commits.append(sql) if sql == "COMMIT" else None)
    with store.transaction():
        for i in range(500):
            store.insert_job(record(f"j{i}"))
            store.add_event(1.0, "submitted", f"j{i}", "research/team-a")
    assert commits == ["COMMIT"]
    assert len(store.jobs()) == 500
    assert [e.event_id for e in store.events_after(0, 3)] == [1, 2, 3]


def test_a_deferred_transaction_is_committed_by_the_writer_after_it_ends(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "s.db")
    store = Store(path)
    with store.transaction():
        store.insert_job(record("before"))  # SQLite's own id: 1
    woken = threading.Event()
    with store.deferred(woken.set) as commit:
        store.insert_job(made := record("a"))
        decision = store.add_decision("a", 1, "start", {})
        store.add_event(1.0, "submitted", "a", "research/team-a")
        # Held in memory: another connection sees none of it yet.
        with sqlite3.connect(path) as other:
            assert other.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 1
    commit.wait()
    assert commit.error is None and woken.wait(5)
    # Ids given by the store go on from SQLite's, and SQLite's go on after them.
    assert (made.seq, decision) == (2, 1)
    with store.transaction():
        store.insert_job(after := record("after"))
    assert after.seq == 3
    assert [r.job_id for r in store.jobs()] == ["before", "a", "after"]
    assert [(d.job_id, d.decision_id) for d in store.unsent_decisions()] == [("a", 1)]
    assert [e.kind for e in store.events_after(0)] == ["submitted"]
    store.close()


def test_a_deferred_savepoint_drops_its_held_writes(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    with store.deferred(lambda: None) as commit:
        with store.savepoint():
            store.insert_job(record("a"))
        with pytest.raises(InputError), store.savepoint():
            store.insert_job(record("b"))
            store.add_event(1.0, "submitted", "b", "research/team-a")
            raise InputError("x", 1, "refused")
    commit.wait()
    assert [r.job_id for r in store.jobs()] == ["a"]
    assert store.events_after(0) == []
    store.close()


def test_a_read_in_a_deferred_transaction_writes_what_was_held(tmp_path: Path) -> None:
    """The transaction goes on as an ordinary one: the read sees its own writes, a savepoint
    open across the read still undoes its part, and the commit is done when it ends."""
    store = Store(str(tmp_path / "s.db"))
    with store.deferred(lambda: None) as commit:
        store.insert_job(record("a"))
        with pytest.raises(InputError), store.savepoint():
            store.insert_job(record("b"))
            assert [r.job_id for r in store.jobs()] == ["a", "b"]
            raise InputError("x", 1, "refused")
        store.insert_job(record("c"))
    assert commit.done() and commit.error is None
    assert [r.job_id for r in store.jobs()] == ["a", "c"]
    store.close()


def test_a_failed_deferred_transaction_leaves_nothing(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    with pytest.raises(RuntimeError), store.deferred(lambda: None):
        store.insert_job(record("a"))
        raise RuntimeError("boom")
    assert store.jobs() == []
    store.close()


def test_decisions_and_reports_keep_their_marks(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    with store.transaction():
        first = store.add_decision("a", 1, "start", {})
        store.add_decision("a", 1, "stop", {"grace_s": 5.0, "evicted": True})
        stored = store.add_reports([Report("a", 1, ReportKind.FINISHED, 12.5, "done")])
    with store.transaction():
        store.mark_sent([first])
        store.mark_applied([stored[0].report_id])
    unsent = store.unsent_decisions()
    assert [(d.kind, d.payload) for d in unsent] == [("stop", {"grace_s": 5.0, "evicted": True})]
    assert store.unapplied_reports() == []
    with store.transaction():
        store.add_reports([Report("b", 2, ReportKind.EVICTED, 13.0)])
    assert [s.report for s in store.unapplied_reports()] == [
        Report("b", 2, ReportKind.EVICTED, 13.0)
    ]


def test_meta_and_node_health_round_trip(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    with store.transaction():
        store.set_meta("budget_tree", {"accounts": {"a": {"share": 100}}})
        store.set_node_health("n1", "draining")
        store.set_node_health("n1", "down")
    assert store.meta("budget_tree") == {"accounts": {"a": {"share": 100}}}
    assert store.meta("missing") is None
    assert store.node_health() == {"n1": "down"}


def test_online_backup_is_a_usable_store(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "s.db"))
    with store.transaction():
        store.insert_job(record("a"))
    store.backup(str(tmp_path / "copy.db"))
    assert [r.job_id for r in Store(str(tmp_path / "copy.db")).jobs()] == ["a"]


def test_allocations_read_in_bulk_equal_those_read_one_by_one() -> None:
    allocations = [
        Allocation.of([0, 1], [[0, 1], [2, 3]], cpu_milli=500, memory_mib=64),
        Allocation.of([7], [[3]], gpu_milli=250),
        Allocation.of([2, 2, 3], np.zeros((3, 0), dtype=np.int64), cpu_milli=1500),
        Allocation.of([123456789012], [[0, 1, 2, 3]], memory_mib=2**40),
        Allocation.of([5, 9], [[1, 2], [0, 3]]),
    ]
    texts = [allocation_to_json(allocation) for allocation in allocations]
    assert None not in texts
    # Pods of several widths; of one width; CPU-only; and a text of another form (a fraction),
    # which sends the batch to the one-by-one reading.
    other = texts[0].replace('"memory_mib": 64', '"memory_mib": 64.5')  # type: ignore[union-attr]
    for batch in (texts, [texts[0], texts[4]] * 3, [texts[2]] * 2, [*texts, other]):
        read = allocations_from_json(batch)  # type: ignore[arg-type]
        assert len(read) == len(batch)
        for got, text in zip(read, batch, strict=True):
            expected = allocation_from_json(text)
            assert expected is not None
            assert got.nodes.tolist() == expected.nodes.tolist()
            assert got.gpus.shape == expected.gpus.shape
            assert got.gpus.tolist() == expected.gpus.tolist()
            assert (got.gpu_milli, got.cpu_milli, got.memory_mib) == (
                expected.gpu_milli,
                expected.cpu_milli,
                expected.memory_mib,
            )


def test_an_allocation_is_written_as_json_writes_its_fields() -> None:
    """The text written directly is the one `json.dumps` gives (which older stores hold)."""
    allocations = [
        Allocation.of([0, 1], [[0, 1], [2, 3]], cpu_milli=500, memory_mib=64),
        Allocation.of([7], [[3]], gpu_milli=250),
        Allocation.of([2, 2, 3], np.zeros((3, 0), dtype=np.int64), cpu_milli=1500),
        Allocation.of([123456789012], [[0, 1, 2, 3]], memory_mib=2**40),
    ]
    for allocation in allocations:
        fields = {
            "nodes": allocation.nodes.tolist(),
            "gpus": allocation.gpus.tolist(),
            "gpu_milli": allocation.gpu_milli,
            "cpu_milli": allocation.cpu_milli,
            "memory_mib": allocation.memory_mib,
        }
        assert allocation_to_json(allocation) == json.dumps(fields)
