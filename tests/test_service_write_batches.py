"""The writer's few statements per commit (`write_batches`) and its log checkpoints in a thread
of their own (`checkpoints`): the same rows as the writes one by one, on real SQLite."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

from toposched.backends.protocol import Report, ReportKind
from toposched.scheduler.jobs import JobState
from toposched.service.checkpoints import Checkpointer, checkpoint
from toposched.service.committer import Write
from toposched.service.records import JobRecord
from toposched.service.store import Store
from toposched.service.write_batches import MAX_PARAMETERS, batched

_TABLES = ("jobs", "events", "decisions", "reports", "meta", "node_health", "sqlite_sequence")


def record(name: str) -> JobRecord:
    return JobRecord(
        job_id=name,
        account="research/team-a",
        priority=0,
        state=JobState.PENDING,
        spec={"name": name, "pods": 1},
        submit_time=10.0,
    )


def a_turn(store: Store, jobs: int) -> None:
    """Writes like a busy turn's: submissions, their starts (a row updated twice), decisions
    marked sent, reports, events, an owed-book row written twice, a node's health."""
    records = [record(f"j{i}") for i in range(jobs)]
    for made in records:
        store.insert_job(made)
        store.add_event(1.0, "submitted", made.job_id, made.account, state="pending")
    decisions = []
    for index, made in enumerate(records):
        made.state, made.start_time, made.attempt = JobState.RUNNING, 2.0, 1
        made.reason = "started" if index % 2 else "running"
        store.update_job(made)
        made.reason = f"running {index}"
        store.update_job(made)
        decisions.append(store.add_decision(made.job_id, 1, "start", {}))
    store.mark_sent(decisions[::2])
    store.set_meta("owed", [1.0])
    store.add_applied_reports(
        [Report(made.job_id, 1, ReportKind.STARTED, 3.0, "") for made in records[:5]]
    )
    records[0].priority = 7
    store.update_job(records[0], priority=True)
    store.set_meta("owed", [2.0])
    store.set_node_health("node-1", "drained")


def rows_of(path: Path) -> dict[str, list[tuple[object, ...]]]:
    with sqlite3.connect(path) as db:
        return {
            table: db.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall() for table in _TABLES
        }


def test_a_deferred_turn_leaves_the_rows_of_its_writes_run_one_by_one(tmp_path: Path) -> None:
    one_by_one = Store(str(tmp_path / "one.db"))
    with one_by_one.transaction():
        a_turn(one_by_one, 80)  # more job rows than one statement takes
    one_by_one.close()
    grouped = Store(str(tmp_path / "grouped.db"))
    statements: list[str] = []
    grouped._db.set_trace_callback(statements.append)
    with grouped.deferred(lambda: None) as commit:
        a_turn(grouped, 80)
    commit.wait()
    assert commit.error is None
    grouped.close()
    assert rows_of(tmp_path / "grouped.db") == rows_of(tmp_path / "one.db")
    assert rows_of(tmp_path / "one.db")["jobs"][0][3] == 7  # the priority written last
    # The writer's transaction: 80 jobs of 16 columns take two inserts, the 160 updates of
    # their runs one, the priority change one; every other table's writes one each.
    written = statements[statements.index("BEGIN IMMEDIATE") :]
    assert len(written) == 12, written


def test_updates_of_one_row_keep_the_last_one_and_unknown_statements_stay_as_they_came() -> None:
    update = "UPDATE decisions SET sent = ? WHERE id = ?"
    writes = [Write(update, (1, 5)), Write(update, (0, 6)), Write(update, (2, 5))]
    [joined] = batched(writes)
    assert joined.params == [2, 5, 0, 6]
    assert "FROM (VALUES (?, ?), (?, ?)) AS v WHERE decisions.id = v.column2" in joined.sql
    pragma = [Write("PRAGMA user_version = 3", ()), *writes]
    assert batched(pragma) == pragma
    added = "UPDATE jobs SET attempt = attempt + ? WHERE id = ?"
    assert batched([Write(added, (1, "a")), Write(added, (1, "a"))]) == [
        Write(added, [(1, "a"), (1, "a")], many=True)
    ]
    assert batched([Write(update, [], many=True)]) == []
    assert batched([Write(pragma[0].sql, [], many=True)]) == [Write(pragma[0].sql, [], True)]


def test_an_insert_of_many_rows_is_split_under_the_parameter_limit() -> None:
    insert = "INSERT INTO reports (job, attempt) VALUES (?, ?)"
    rows = [(f"j{i}", i) for i in range(MAX_PARAMETERS)]
    statements = batched([Write(insert, rows, many=True)])
    assert [len(s.params) for s in statements] == [998, 998, 2]
    assert all(len(s.params) == s.sql.count("?") for s in statements)


def test_the_checkpoint_thread_copies_the_log_and_the_writer_starts_it_over(
    tmp_path: Path,
) -> None:
    path = tmp_path / "c.db"
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("CREATE TABLE t (x BLOB)")
    # Stores other tests left open may run checkpoint threads of their own.
    others = {t for t in threading.enumerate() if t.name == "toposched-checkpoints"}
    checkpoints = Checkpointer(
        lambda: sqlite3.connect(path, check_same_thread=False), every=5, restart_frames=50
    )
    for _ in range(5):
        db.execute("INSERT INTO t VALUES (randomblob(40000))")
        checkpoints.committed(db)
    deadline = time.monotonic() + 10
    while checkpoints.last is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert checkpoints.last is not None and checkpoints.last.copied >= 25
    assert checkpoints.last.frames >= 50  # long: the writer checkpoints after its next commit
    db.execute("INSERT INTO t VALUES (1)")
    checkpoints.committed(db)
    db.execute("INSERT INTO t VALUES (2)")  # the log started over
    assert checkpoint(db).frames <= 3
    checkpoints.close()
    assert {t for t in threading.enumerate() if t.name == "toposched-checkpoints"} <= others
    db.close()


def test_a_serving_store_checkpoints_its_log_into_the_database_file(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = Store(str(path))
    before = os.path.getsize(path)
    for turn in range(60):
        with store.deferred(lambda: None) as commit:
            store.insert_job(record(f"t{turn}"))
            store.add_event(1.0, "submitted", f"t{turn}", "research/team-a", data="x" * 3000)
    commit.wait()
    deadline = time.monotonic() + 10
    while os.path.getsize(path) < before + 100_000 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert os.path.getsize(path) >= before + 100_000  # the store still open
    store.close()
    assert len(rows_of(path)["jobs"]) == 60


def test_without_its_thread_the_writer_checkpoints_itself(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("CREATE TABLE t (x BLOB)")

    def no_store() -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    checkpoints = Checkpointer(no_store, every=3)
    checkpoints.close()
    for _ in range(3):
        db.execute("INSERT INTO t VALUES (randomblob(40000))")
        checkpoints.committed(db)
    db.execute("INSERT INTO t VALUES (1)")  # the log, copied whole, started over
    assert checkpoint(db).frames <= 3
    db.close()
