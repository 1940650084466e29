"""The SQLite store's schema, as numbered migrations (`Store` applies those its file lacks;
`PostgresStore` keeps the same tables in its own dialect)."""

from __future__ import annotations

MIGRATIONS: tuple[str, ...] = (
    # 1: the first schema.
    """
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE jobs (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        account TEXT NOT NULL,
        priority INTEGER NOT NULL,
        state TEXT NOT NULL,
        spec TEXT NOT NULL,
        submit_time REAL NOT NULL,
        start_time REAL,
        end_time REAL,
        attempt INTEGER NOT NULL DEFAULT 0,
        preemptions INTEGER NOT NULL DEFAULT 0,
        idempotency_key TEXT UNIQUE,
        body_hash TEXT,
        allocation TEXT,
        unallocated INTEGER NOT NULL DEFAULT 0,
        reason TEXT NOT NULL DEFAULT ''
    );
    CREATE INDEX jobs_by_state ON jobs (state);
    CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        time REAL NOT NULL,
        kind TEXT NOT NULL,
        job TEXT,
        account TEXT,
        data TEXT NOT NULL
    );
    CREATE TABLE decisions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        kind TEXT NOT NULL,
        payload TEXT NOT NULL,
        sent INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX decisions_unsent ON decisions (sent) WHERE sent = 0;
    CREATE TABLE reports (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        job TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        kind TEXT NOT NULL,
        time REAL NOT NULL,
        detail TEXT NOT NULL,
        applied INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE node_health (name TEXT PRIMARY KEY, health TEXT NOT NULL);
    """,
)
"""Numbered migrations: migration i (from 1) takes the schema from version i-1 to i."""
