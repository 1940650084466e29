"""What the service needs of a durable store, whichever database holds it: the SQLite `Store`
(the default, a file) and the `PostgresStore` (`--store postgresql://...`) both satisfy it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from toposched.backends.protocol import Report
from toposched.service.committer import Commit
from toposched.service.records import JobRecord
from toposched.service.store import Store, StoredDecision, StoredEvent, StoredReport

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


class StateStore(Protocol):
    """Writes come from the loop's thread, inside `transaction()`; `events_after` may be called
    from any thread. `path` names the store in messages (never with a password)."""

    path: str

    def close(self) -> None: ...

    def schema_version(self) -> int: ...

    def transaction(self) -> AbstractContextManager[None]:
        """One transaction; nested calls join the outer one. Rolled back on any exception."""
        ...

    def deferred(self, wake: Callable[[], None]) -> AbstractContextManager[Commit]:
        """A transaction the store may commit after it ends, while the caller goes on: the
        `Commit` says when it is durable; `wake` is called after each such commit."""
        ...

    def savepoint(self) -> AbstractContextManager[None]:
        """Inside a transaction: undo this part alone if it raises."""
        ...

    def meta(self, key: str) -> Any: ...

    def set_meta(self, key: str, value: Any) -> None: ...

    def insert_job(self, record: JobRecord) -> None:
        """Store a new job and set its `seq` (submission order)."""
        ...

    def update_job(self, record: JobRecord, priority: bool = False) -> None:
        """Write the columns a job's runs change (`RUN_COLUMNS`); with `priority` also its
        priority and spec document."""
        ...

    def jobs(self) -> list[JobRecord]:
        """Every job, in submission order."""
        ...

    def add_event(
        self, time: float, kind: str, job: str | None, account: str | None, **data: Any
    ) -> None:
        """Events of a transaction may be written together when it commits, in order."""
        ...

    def events_after(self, after: int, limit: int = 500) -> list[StoredEvent]: ...

    def job_events(self, job_id: str) -> list[StoredEvent]: ...

    def add_decision(
        self, job_id: str, attempt: int, kind: str, payload: dict[str, Any]
    ) -> int: ...

    def mark_sent(self, decision_ids: Sequence[int]) -> None: ...

    def unsent_decisions(self) -> list[StoredDecision]: ...

    def add_reports(self, reports: Sequence[Report]) -> list[StoredReport]:
        """Store reports to apply later (`mark_applied`)."""
        ...

    def add_applied_reports(self, reports: Sequence[Report]) -> None:
        """Store reports that are applied in the same transaction."""
        ...

    def mark_applied(self, report_ids: Sequence[int]) -> None: ...

    def unapplied_reports(self) -> list[StoredReport]: ...

    def set_node_health(self, name: str, health: str) -> None: ...

    def node_health(self) -> dict[str, str]: ...


def open_store(location: str) -> StateStore:
    """The store at `location`: a PostgreSQL URL, or else the path of a SQLite file."""
    if location.startswith(POSTGRES_SCHEMES):
        from toposched.service.postgres_store import PostgresStore

        return PostgresStore(location)
    return Store(location)
