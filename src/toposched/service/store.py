"""The durable store: SQLite in WAL mode, one writer (the service's loop), grouped commits.

Every accepted submission, decision and backend report is written inside a transaction that
is committed before the loop answers anyone or tells the backend anything. One transaction
holds a whole turn of the loop (the commands it drained, the backend's reports, the cycle's
decisions), so one fsync covers many submissions. The loop's turns are `deferred`: their rows
are held in memory while the turn is built, written as one statement per table and kind
(`write_batches`) when it ends, and committed (the fsync) by a writer thread
(`committer.Committer`) while the loop builds the next turn; and
the log's checkpoints run in a thread of their own (`checkpoints`), off the commits' path.
`synchronous=FULL`: a commit acknowledged to a client survives a power loss, not only a crash
of the process (docs/operations.md).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from toposched.backends.protocol import Report, ReportKind
from toposched.cluster.errors import InputError
from toposched.service.checkpoints import Checkpointer
from toposched.service.committer import Commit, Committer, Write
from toposched.service.records import JobRecord
from toposched.service.sqlite_schema import MIGRATIONS
from toposched.service.store_rows import (
    data_text,
    job_values,
    jobs_from_rows,
    report_values,
    run_values,
)
from toposched.service.write_batches import batched

JOB_COLUMNS = (
    "id, account, priority, state, spec, submit_time, start_time, end_time, attempt, "
    "preemptions, idempotency_key, body_hash, allocation, unallocated, reason"
)
RUN_COLUMNS = (
    "state",
    "start_time",
    "end_time",
    "attempt",
    "preemptions",
    "allocation",
    "unallocated",
    "reason",
)
"""The columns a job's runs change (`update_job`); the others are written once at submit, but
for `priority` and `spec`, which a priority change rewrites."""
EVENT_INSERT = "INSERT INTO events (time, kind, job, account, data) VALUES (?, ?, ?, ?, ?)"
_JOB_INSERT = (
    f"INSERT INTO jobs ({JOB_COLUMNS}) VALUES ({', '.join('?' * len(JOB_COLUMNS.split(',')))})"
)
_JOB_UPDATES = {
    priority: "UPDATE jobs SET "
    + ", ".join(
        f"{name} = ?" for name in (*RUN_COLUMNS, *(("priority", "spec") if priority else ()))
    )
    + " WHERE id = ?"
    for priority in (False, True)
}
"""`update_job`'s statement, without and with the priority and spec."""
_EVENT_COLUMNS = "id, time, kind, job, account, data"


@dataclass(frozen=True)
class StoredDecision:
    """A decision as stored: `kind` is "start" or "stop", `payload` the Launch/Stop as JSON."""

    decision_id: int
    job_id: str
    attempt: int
    kind: str
    payload: dict[str, Any]


@dataclass(frozen=True)
class StoredReport:
    report_id: int
    report: Report


@dataclass(frozen=True)
class StoredEvent:
    event_id: int
    time: float
    kind: str
    job: str | None
    account: str | None
    data: dict[str, Any]

    def document(self) -> dict[str, Any]:
        return {
            "id": self.event_id,
            "time": self.time,
            "kind": self.kind,
            "job": self.job,
            **self.data,
        }


class Rows(Protocol):
    """What a store's cursor gives back."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def fetchmany(self, size: int) -> list[Any]: ...


JOBS_READ_AT_ONCE = 4096
"""Rows of jobs turned into records at a time (`SqlStore.jobs`). A restart reads a hundred
thousand: read at once, their rows and the texts of their allocations (parsed in bulk,
`allocations_from_json`) would take some 100 MB of memory new to the process, each of its
pages faulted in by the system (on the benchmark's store, 0.2 s of CPU), where the few
megabytes of one chunk are used again by the next."""


class SqlStore:
    """What the SQLite and PostgreSQL stores say alike: the rows of jobs, events, decisions,
    reports, node health and meta. The statements are written once, with `?` placeholders;
    each store runs them through its own connection (`_run`, `_run_many`, `_inserted_id`,
    `_read`). Schema, migrations and transactions stay with each store: there the two
    databases differ."""

    _depth: int
    """Open transactions (nested calls join the outer one)."""
    _events: list[tuple[Any, ...]]
    """Events of the open transaction, written with one statement before it commits."""
    _reader_lock: threading.Lock

    # --- what each store provides ----------------------------------------------------------
    def _run(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        """Run one statement on the writing connection."""
        raise NotImplementedError

    def _run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run one statement once per row of parameters."""
        raise NotImplementedError

    def _inserted_id(self, sql: str, params: Sequence[Any], column: str) -> int:
        """Run an INSERT and return the `column` it generated for the new row."""
        raise NotImplementedError

    def _read(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """Run a query on the reading connection (any thread may call it)."""
        raise NotImplementedError

    def _flush(self) -> None:
        """Write the events held for the open transaction."""
        if self._events:
            self._run_many(EVENT_INSERT, self._events)
            self._events.clear()

    # --- meta ------------------------------------------------------------------------------
    def meta(self, key: str) -> Any:
        row = self._run("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def set_meta(self, key: str, value: Any) -> None:
        self._run(
            "INSERT INTO meta VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, json.dumps(value)),
        )

    # --- jobs ------------------------------------------------------------------------------
    def insert_job(self, record: JobRecord) -> None:
        record.seq = self._inserted_id(_JOB_INSERT, job_values(record), "seq")
        record.spec = record.spec  # its text dropped: later writes dump the spec as it is then

    def update_job(self, record: JobRecord, priority: bool = False) -> None:
        """Write the RUN_COLUMNS of a record (and its priority and spec if `priority`)."""
        self._run(_JOB_UPDATES[priority], (*run_values(record, priority), record.job_id))

    def jobs(self) -> list[JobRecord]:
        """Every job, in submission order."""
        self._flush()
        rows = self._run(f"SELECT seq, {JOB_COLUMNS} FROM jobs ORDER BY seq")
        records: list[JobRecord] = []
        while chunk := rows.fetchmany(JOBS_READ_AT_ONCE):
            records.extend(jobs_from_rows(chunk))
        return records

    # --- events ----------------------------------------------------------------------------
    def add_event(
        self, time: float, kind: str, job: str | None, account: str | None, **data: Any
    ) -> None:
        """Inside a transaction the event is held and written with the others of the
        transaction, in order, before it commits."""
        values = (time, kind, job, account, data_text(data))
        if self._depth:
            self._events.append(values)
        else:
            self._run(EVENT_INSERT, values)

    def events_after(self, after: int, limit: int = 500) -> list[StoredEvent]:
        sql = f"SELECT {_EVENT_COLUMNS} FROM events WHERE id > ? ORDER BY id LIMIT ?"
        with self._reader_lock:
            rows = self._read(sql, (after, limit))
        return [StoredEvent(r[0], r[1], r[2], r[3], r[4], json.loads(r[5])) for r in rows]

    def job_events(self, job_id: str) -> list[StoredEvent]:
        self._flush()
        sql = f"SELECT {_EVENT_COLUMNS} FROM events WHERE job = ? ORDER BY id"
        rows = self._run(sql, (job_id,)).fetchall()
        return [StoredEvent(r[0], r[1], r[2], r[3], r[4], json.loads(r[5])) for r in rows]

    # --- decisions -------------------------------------------------------------------------
    def add_decision(self, job_id: str, attempt: int, kind: str, payload: dict[str, Any]) -> int:
        return self._inserted_id(
            "INSERT INTO decisions (job, attempt, kind, payload) VALUES (?, ?, ?, ?)",
            (job_id, attempt, kind, json.dumps(payload) if payload else "{}"),
            "id",
        )

    def mark_sent(self, decision_ids: Sequence[int]) -> None:
        self._run_many("UPDATE decisions SET sent = 1 WHERE id = ?", [(i,) for i in decision_ids])

    def unsent_decisions(self) -> list[StoredDecision]:
        rows = self._run(
            "SELECT id, job, attempt, kind, payload FROM decisions WHERE sent = 0 ORDER BY id"
        ).fetchall()
        return [StoredDecision(r[0], r[1], r[2], r[3], json.loads(r[4])) for r in rows]

    # --- backend reports -------------------------------------------------------------------
    def add_applied_reports(self, reports: Sequence[Report]) -> None:
        """Store reports that are applied in the same transaction."""
        self._run_many(
            "INSERT INTO reports (job, attempt, kind, time, detail, applied) "
            "VALUES (?, ?, ?, ?, ?, 1)",
            [report_values(report) for report in reports],
        )

    def add_reports(self, reports: Sequence[Report]) -> list[StoredReport]:
        sql = "INSERT INTO reports (job, attempt, kind, time, detail) VALUES (?, ?, ?, ?, ?)"
        return [
            StoredReport(self._inserted_id(sql, report_values(report), "id"), report)
            for report in reports
        ]

    def mark_applied(self, report_ids: Sequence[int]) -> None:
        self._run_many("UPDATE reports SET applied = 1 WHERE id = ?", [(i,) for i in report_ids])

    def unapplied_reports(self) -> list[StoredReport]:
        rows = self._run(
            "SELECT id, job, attempt, kind, time, detail FROM reports WHERE applied = 0 ORDER BY id"
        ).fetchall()
        return [StoredReport(r[0], Report(r[1], r[2], ReportKind(r[3]), r[4], r[5])) for r in rows]

    # --- nodes -----------------------------------------------------------------------------
    def set_node_health(self, name: str, health: str) -> None:
        self._run(
            "INSERT INTO node_health VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET health = excluded.health",
            (name, health),
        )

    def node_health(self) -> dict[str, str]:
        rows = self._run("SELECT name, health FROM node_health").fetchall()
        return {str(name): str(health) for name, health in rows}


class Store(SqlStore):
    """The service's SQLite database. Writes come from one thread; `events_after` may be called
    from any thread (it has its own connection)."""

    def __init__(self, path: str) -> None:
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = self._connect(path)
        self._depth = 0
        self._events: list[tuple[Any, ...]] = []
        """Events of the open transaction, written with one statement before it commits (and
        before any read)."""
        self._committer: Committer | None = None
        self._checkpointer: Checkpointer | None = None
        """Checkpoints of the log off the writer's commits, once the writer thread serves."""
        self._held: list[Write] | None = None
        """The writes of the open `deferred` transaction, while they are held in memory."""
        self._marks: list[int] = []
        """Where each open savepoint of a `deferred` transaction began in `_held`."""
        self._last_ids: dict[str, int] = {}
        """Per table, the last row id given: a `deferred` transaction gives its rows' ids
        itself (AUTOINCREMENT takes them and goes on after them)."""
        self._migrate()
        self._reader = self._connect(path) if path != ":memory:" else self._db
        self._reader_lock = threading.Lock()

    @staticmethod
    def _connect(path: str) -> sqlite3.Connection:
        try:
            # A commit's multi-row statements (`write_batches`) differ by their count of rows:
            # more prepared statements are kept than the default 128.
            db = sqlite3.connect(
                path, isolation_level=None, check_same_thread=False, cached_statements=512
            )
            db.execute("PRAGMA journal_mode=WAL")
        except sqlite3.DatabaseError as error:
            raise InputError("store", path, f"cannot be opened as SQLite: {error}") from None
        db.execute("PRAGMA synchronous=FULL")
        db.execute("PRAGMA busy_timeout=5000")
        return db

    def close(self) -> None:
        if self._committer is not None:
            self._committer.wait_idle()
            self._committer.close()
        if self._checkpointer is not None:
            self._checkpointer.close()
        self._db.close()
        if self._reader is not self._db:
            self._reader.close()

    # --- schema ----------------------------------------------------------------------------
    def schema_version(self) -> int:
        row = self._run("SELECT version FROM schema_version").fetchone()
        return int(row[0])

    def _migrate(self) -> None:
        self._db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
        if self._db.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == 0:
            self._db.execute("INSERT INTO schema_version VALUES (0)")
        version = self.schema_version()
        if version > len(MIGRATIONS):
            raise InputError(
                "store",
                self.path,
                f"has schema version {version}, newer than this toposched "
                f"({len(MIGRATIONS)}); upgrade toposched",
            )
        for number in range(version + 1, len(MIGRATIONS) + 1):
            self._db.execute("BEGIN IMMEDIATE")
            for statement in MIGRATIONS[number - 1].split(";"):
                if statement.strip():
                    self._db.execute(statement)
            self._db.execute("UPDATE schema_version SET version = ?", (number,))
            self._db.execute("COMMIT")

    # --- transactions ----------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One transaction; nested calls join the outer one. Rolled back on any exception."""
        if self._depth:
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1
            return
        self._wait_for_writer()
        self._db.execute("BEGIN IMMEDIATE")
        self._depth = 1
        try:
            yield
            self._flush()
        except BaseException:
            self._events.clear()
            self._db.execute("ROLLBACK")
            raise
        else:
            self._commit()
        finally:
            self._depth = 0

    @contextmanager
    def deferred(self, wake: Callable[[], None]) -> Iterator[Commit]:
        """A transaction whose writes are held in memory and, once it ends, run and committed
        by a writer thread while the caller goes on; `wake` is called after each such commit.
        The `Commit` it yields is done when the writes are durable. A read inside it (rare:
        a query of the store's own rows) waits for the writer, writes what is held and goes
        on as an ordinary transaction, committed when it ends. Not nested in another."""
        assert self._depth == 0, "a deferred transaction is never nested"
        if self.path == ":memory:":  # one connection, shared with readers: no writer thread
            with self.transaction():
                yield (commit := Commit())
            commit.settle()
            return
        committer = self._committer or self._start_writer(wake)
        commit = Commit()
        self._held, self._depth = commit.writes, 1
        try:
            yield commit
            self._flush()
        except BaseException:
            self._events.clear()
            if self._held is None:  # it became an ordinary transaction
                self._db.execute("ROLLBACK")
            raise
        else:
            if self._held is None:
                self._commit()
                commit.settle()
            else:
                committer.wait_idle()  # the last turn's COMMIT: the connection is free again
                self._run_writes(commit.writes)
                commit.writes = []
                committer.hand(commit)
        finally:
            self._held, self._depth = None, 0
            self._marks.clear()

    def _start_writer(self, wake: Callable[[], None]) -> Committer:
        """The writer thread, and checkpoints in a thread of their own (`checkpoints`) instead
        of in the commit that takes the log past SQLite's mark."""
        self._db.execute("PRAGMA wal_autocheckpoint=0")
        self._checkpointer = Checkpointer(lambda: self._connect(self.path))
        self._committer = Committer(self._commit_held, wake)
        return self._committer

    def _commit(self) -> None:
        self._db.execute("COMMIT")
        if self._checkpointer is not None:
            self._checkpointer.committed(self._db)

    def _run_writes(self, writes: list[Write]) -> None:
        """In the loop's thread: a turn's writes in one transaction, in few statements
        (`write_batches`), left open for the writer's COMMIT (`_commit_held`). Run here, each
        statement gives the interpreter's lock up for its step and takes it back at once; run
        by the writer while the loop builds the next turn, each waited up to the interpreter's
        switch interval (5 ms) to take it back, a dozen times per turn."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            for write in batched(writes):
                if write.many:
                    db.executemany(write.sql, write.params)
                else:
                    db.execute(write.sql, write.params)
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _commit_held(self, writes: list[Write]) -> None:
        """In the writer's thread: the COMMIT of the transaction `_run_writes` left open (its
        fsync), while the loop goes on; `writes` were run already."""
        assert not writes
        try:
            self._commit()
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    def _wait_for_writer(self) -> None:
        """Before the caller uses the writing connection: the commits handed over are done."""
        if self._committer is not None:
            self._committer.wait_idle()

    def _write_held(self) -> None:
        """A read inside a `deferred` transaction: the held writes are run now, with the
        savepoints open among them, and the transaction goes on as an ordinary one."""
        held, self._held = self._held, None
        assert held is not None
        self._wait_for_writer()
        self._db.execute("BEGIN IMMEDIATE")
        marks = sorted(self._marks)
        for index, write in enumerate(held):
            while marks and marks[0] == index:
                self._db.execute("SAVEPOINT command")
                marks.pop(0)
            self._run_now(write)
        for _ in marks:
            self._db.execute("SAVEPOINT command")
        held.clear()

    def _run_now(self, write: Write) -> None:
        if write.many:
            self._db.executemany(write.sql, write.params)
        else:
            self._db.execute(write.sql, write.params)

    @contextmanager
    def savepoint(self) -> Iterator[None]:
        """Inside a transaction: undo this part alone if it raises (one command of a batch)."""
        held = self._held
        if held is not None:
            yield from self._held_savepoint(held)
            return
        self._db.execute("SAVEPOINT command")
        mark = len(self._events)
        try:
            yield
        except BaseException:
            del self._events[mark:]
            self._db.execute("ROLLBACK TO command")
            self._db.execute("RELEASE command")
            raise
        self._db.execute("RELEASE command")

    def _held_savepoint(self, held: list[Write]) -> Iterator[None]:
        """`savepoint` in a `deferred` transaction: undone by dropping the writes held since
        it began (or in SQL, if a read made the transaction an ordinary one meanwhile)."""
        mark, events = len(held), len(self._events)
        self._marks.append(mark)
        try:
            yield
        except BaseException:
            del self._events[events:]
            if self._held is held:
                del held[mark:]
            else:
                self._db.execute("ROLLBACK TO command")
                self._db.execute("RELEASE command")
            raise
        else:
            if self._held is not held:
                self._db.execute("RELEASE command")
        finally:
            self._marks.pop()

    # --- the connection primitives of `SqlStore` -------------------------------------------
    def _run(self, sql: str, params: Sequence[Any] = ()) -> Rows:
        if self._held is not None:
            if not sql.startswith("SELECT"):
                self._held.append(Write(sql, params))
                return _NO_ROWS
            self._write_held()
        elif self._depth == 0:
            self._wait_for_writer()
        return self._db.execute(sql, params)

    def _run_many(self, sql: str, rows: Sequence[Sequence[Any]]) -> None:
        if self._held is not None:
            self._held.append(Write(sql, list(rows), many=True))
            return
        if self._depth == 0:
            self._wait_for_writer()
        self._db.executemany(sql, rows)

    def _inserted_id(self, sql: str, params: Sequence[Any], column: str) -> int:
        table = sql.split(None, 3)[2]
        if self._held is not None:
            row_id = self._last_id(table, column) + 1
            self._last_ids[table] = row_id
            with_id = sql.replace(" (", f" ({column}, ", 1).replace("VALUES (", "VALUES (?, ", 1)
            self._held.append(Write(with_id, (row_id, *params)))
            return row_id
        if self._depth == 0:
            self._wait_for_writer()
        row_id = int(self._db.execute(sql, params).lastrowid or 0)
        if table in self._last_ids:
            self._last_ids[table] = max(self._last_ids[table], row_id)
        return row_id

    def _last_id(self, table: str, column: str) -> int:
        """The last id given in `table`: SQLite's AUTOINCREMENT counter, read once."""
        last = self._last_ids.get(table)
        if last is None:
            self._wait_for_writer()
            row = self._db.execute(
                "SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)
            ).fetchone()
            top = self._db.execute(f"SELECT MAX({column}) FROM {table}").fetchone()
            last = self._last_ids[table] = max(int(row[0]) if row else 0, int(top[0] or 0))
        return last

    def _read(self, sql: str, params: Sequence[Any]) -> list[Any]:
        return self._reader.execute(sql, params).fetchall()

    # --- backup ----------------------------------------------------------------------------
    def backup(self, path: str) -> None:
        """A consistent copy of the live database (SQLite's online backup)."""
        self._wait_for_writer()
        target = sqlite3.connect(path)
        try:
            self._db.backup(target)
        finally:
            target.close()


class _NoRows:
    """What a write held for later gives back: no rows."""

    def fetchone(self) -> Any:
        return None

    def fetchall(self) -> list[Any]:
        return []

    def fetchmany(self, size: int) -> list[Any]:
        return []


_NO_ROWS = _NoRows()
