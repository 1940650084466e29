"""The store suite run against both stores, SQLite (a file) and PostgreSQL (a real server on
loopback, from `tests/postgres_server.py`): the same schema version and migrations, the same
transactions, savepoints and rows read back; then `toposched serve --store postgresql://...`
killed with SIGKILL and started again, as with SQLite."""

from __future__ import annotations

import itertools
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import psycopg
import pytest

from tests.postgres_server import postgres_url
from tests.service_helpers import Server, job
from toposched.backends.protocol import Report, ReportKind
from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation
from toposched.scheduler.jobs import JobState
from toposched.service import postgres_store, sqlite_schema
from toposched.service.postgres_store import PostgresStore, redacted
from toposched.service.records import JobRecord
from toposched.service.store_protocol import StateStore, open_store

__all__ = ["postgres_url"]  # the fixture, used by the tests below
Opener = Callable[[], StateStore]
_schemas = itertools.count()


def in_schema(url: str, schema: str) -> str:
    """`url` with every session's search path set to `schema` (one fresh store per test)."""
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    return f"{url}?options={quote(f'-c search_path={schema}')}"


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where a fresh store lives: a SQLite file, or a new schema on the PostgreSQL server."""
    if request.param == "sqlite":
        return str(tmp_path / "state.db")
    return in_schema(request.getfixturevalue("postgres_url"), f"suite_{next(_schemas)}")


@pytest.fixture
def opened(location: str) -> Iterator[Opener]:
    """Opens the store at `location` (again after a close); closes what is left open."""
    stores: list[StateStore] = []

    def opener() -> StateStore:
        stores.append(open_store(location))
        return stores[-1]

    yield opener
    for each in stores:
        try:
            each.close()
        except Exception:  # already closed by the test
            pass


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


def test_both_stores_have_the_same_schema_version() -> None:
    assert len(postgres_store.MIGRATIONS) == len(sqlite_schema.MIGRATIONS)


def test_an_empty_store_is_migrated_and_reopened_as_is(opened: Opener) -> None:
    first = opened()
    assert first.schema_version() == len(sqlite_schema.MIGRATIONS)
    with first.transaction():
        first.set_meta("cluster", "abc")
    first.close()
    again = opened()
    assert again.schema_version() == len(sqlite_schema.MIGRATIONS)
    assert again.meta("cluster") == "abc"


def test_a_store_from_a_newer_version_is_refused(location: str, opened: Opener) -> None:
    opened().close()
    if location.startswith("postgresql://"):
        with psycopg.connect(location, autocommit=True) as raw:
            raw.execute("UPDATE schema_version SET version = 99")
    else:
        with sqlite3.connect(location) as db:
            db.execute("UPDATE schema_version SET version = 99")
    with pytest.raises(InputError, match="newer than this toposched"):
        opened()


def test_jobs_read_back_equal_in_submission_order(opened: Opener) -> None:
    db = opened()
    allocation = Allocation.of([0, 1], [[0, 1], [2, 3]], cpu_milli=500, memory_mib=64)
    running = record(
        "b",
        state=JobState.RUNNING,
        start_time=11.5,
        attempt=2,
        allocation=allocation,
        idempotency_key='["team", "k1"]',
        body_hash="h",
        unallocated=True,
        reason="running",
    )
    with db.transaction():
        db.insert_job(record("a", priority=-3))
        db.insert_job(running)
    running.preemptions = 1
    with db.transaction():
        db.update_job(running)
    db.close()
    back = opened().jobs()
    assert [r.job_id for r in back] == ["a", "b"]
    assert back[0].seq < back[1].seq
    assert back[0] == record("a", priority=-3, seq=back[0].seq)
    got = back[1]
    assert got.allocation is not None
    np.testing.assert_array_equal(got.allocation.gpus, allocation.gpus)
    np.testing.assert_array_equal(got.allocation.nodes, allocation.nodes)
    assert (got.state, got.attempt, got.preemptions, got.idempotency_key, got.unallocated) == (
        JobState.RUNNING,
        2,
        1,
        '["team", "k1"]',
        True,
    )
    assert (got.start_time, got.reason, got.spec) == (11.5, "running", running.spec)


def test_a_failed_transaction_leaves_nothing(opened: Opener) -> None:
    db = opened()
    with pytest.raises(RuntimeError), db.transaction():
        db.insert_job(record("a"))
        db.add_event(1.0, "submitted", "a", "research/team-a")
        raise RuntimeError("boom")
    assert db.jobs() == []
    assert db.events_after(0) == []


def test_a_savepoint_undoes_one_command_of_a_batch(opened: Opener) -> None:
    db = opened()
    with db.transaction():
        with db.savepoint():
            db.insert_job(record("a"))
        with pytest.raises(InputError), db.savepoint():
            db.insert_job(record("b"))
            raise InputError("x", 1, "refused")
        with db.savepoint():
            db.insert_job(record("c"))
    assert [r.job_id for r in db.jobs()] == ["a", "c"]


def test_a_batch_is_seen_by_other_connections_only_once_committed(opened: Opener) -> None:
    db = opened()
    seen_inside: list[int] = []
    with db.transaction():
        for i in range(300):
            db.insert_job(record(f"j{i}"))
            db.add_event(1.0, "submitted", f"j{i}", "research/team-a", n=i)
        # events_after reads on its own connection, from another thread.
        reader = threading.Thread(target=lambda: seen_inside.append(len(db.events_after(0))))
        reader.start()
        reader.join(10)
    assert seen_inside == [0]
    events = db.events_after(0, 1000)
    assert len(events) == 300 and len(db.jobs()) == 300
    assert [e.data["n"] for e in events] == list(range(300))
    assert events[0].document() == {
        "id": events[0].event_id,
        "time": 1.0,
        "kind": "submitted",
        "job": "j0",
        "n": 0,
    }
    assert [e.event_id for e in db.events_after(events[-3].event_id)] == [
        events[-2].event_id,
        events[-1].event_id,
    ]
    assert [e.kind for e in db.job_events("j7")] == ["submitted"]


def test_decisions_and_reports_keep_their_marks(opened: Opener) -> None:
    db = opened()
    with db.transaction():
        first = db.add_decision("a", 1, "start", {})
        db.add_decision("a", 1, "stop", {"grace_s": 5.0, "evicted": True})
        stored = db.add_reports([Report("a", 1, ReportKind.FINISHED, 12.5, "done")])
    with db.transaction():
        db.mark_sent([first])
        db.mark_applied([stored[0].report_id])
        db.mark_sent([])
        db.mark_applied([])
    unsent = db.unsent_decisions()
    assert [(d.job_id, d.attempt, d.kind, d.payload) for d in unsent] == [
        ("a", 1, "stop", {"grace_s": 5.0, "evicted": True})
    ]
    assert db.unapplied_reports() == []
    with db.transaction():
        db.add_reports([Report("b", 2, ReportKind.EVICTED, 13.0)])
    assert [s.report for s in db.unapplied_reports()] == [Report("b", 2, ReportKind.EVICTED, 13.0)]


def test_meta_and_node_health_round_trip(opened: Opener) -> None:
    db = opened()
    with db.transaction():
        db.set_meta("budget_tree", {"accounts": {"a": {"share": 100}}})
        db.set_meta("budget_tree", {"accounts": {"b": {"share": 100}}})
        db.set_node_health("n1", "draining")
        db.set_node_health("n1", "down")
        db.set_node_health("n2", "cordoned")
    assert db.meta("budget_tree") == {"accounts": {"b": {"share": 100}}}
    assert db.meta("missing") is None
    assert db.node_health() == {"n1": "down", "n2": "cordoned"}


# --- PostgreSQL only ---------------------------------------------------------------------------


def test_a_second_server_on_the_same_postgresql_store_is_refused(postgres_url: str) -> None:
    url = in_schema(postgres_url, "locked")
    first = PostgresStore(url)
    with pytest.raises(InputError, match="in use by another toposched serve"):
        PostgresStore(url)
    first.close()
    PostgresStore(url).close()


def test_an_unreachable_postgresql_server_is_a_clear_error_without_the_password(
    postgres_url: str,
) -> None:
    port = postgres_url.rsplit(":", 1)[1].split("/")[0]
    url = f"postgresql://someone:s3cret@127.0.0.1:{int(port) + 1}/db?connect_timeout=2"
    with pytest.raises(InputError, match="cannot connect") as caught:
        open_store(url)
    assert "s3cret" not in str(caught.value)
    assert redacted(url) == f"postgresql://someone@127.0.0.1:{int(port) + 1}/db?connect_timeout=2"


def jobs_by_id(server: Server) -> dict[str, dict[str, Any]]:
    with server.client() as client:
        listed = client.get("/v1/jobs", params={"limit": 1000}).json()["jobs"]
    return {j["id"]: j for j in listed}


def test_serve_on_postgresql_recovers_after_sigkill(postgres_url: str, tmp_path: Path) -> None:
    url = in_schema(postgres_url, "serve")
    args = ("--cluster", "cluster.yaml", "--budgets", "budgets.yaml", "--store", url)
    server = Server(tmp_path, *args, "--log-level", "warning").start()
    try:
        with server.client() as client:
            for i in range(3):
                answer = client.post("/v1/jobs", json=job(f"run{i}", expected_runtime="2h"))
                assert answer.status_code == 201, answer.text
            quick = client.post("/v1/jobs", json=job("quick", expected_runtime=0.3))
            assert quick.status_code == 201
            assert client.post("/v1/jobs", json=job("wait", pods=2)).status_code == 201
            again = client.post(
                "/v1/jobs", json=job("wait", pods=2), headers={"Idempotency-Key": "w"}
            )
            assert again.status_code == 409  # the name is taken; nothing new stored
        deadline = time.monotonic() + 20
        while jobs_by_id(server)["quick"]["state"] != "finished":
            assert time.monotonic() < deadline, jobs_by_id(server)["quick"]
            time.sleep(0.1)
        before = jobs_by_id(server)
        server.kill()
        server.start()
        after = jobs_by_id(server)
        assert set(after) == set(before) == {"run0", "run1", "run2", "quick", "wait"}
        for name, was in before.items():
            now = after[name]
            assert (now["state"], now["nodes"], now["submit_time"]) == (
                was["state"],
                was["nodes"],
                was["submit_time"],
            ), name
        assert after["wait"]["state"] == "pending"
    finally:
        server.stop()
