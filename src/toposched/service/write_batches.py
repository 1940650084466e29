"""A turn's held writes as few statements: the rows of one table's like statements in one.

The store's writer thread runs a turn's writes one statement at a time, and each statement
(each row of an `executemany`) gives the interpreter's lock up while SQLite works and waits to
take it back, up to a switch interval (5 ms) when the loop or the HTTP thread is busy. A turn
of a few submissions held 10-20 statements with 20-40 rows, so a busy moment could hold its
commit for tens of milliseconds. `batched` turns the writes into about one statement per table
and kind: multi-row INSERTs (upserts too), and an UPDATE by id of many rows as one
`UPDATE ... FROM (VALUES ...)`.

Tables are independent (no triggers, no foreign keys, row ids given by the store), so writes to
different tables may run in any order; a table's writes keep theirs, and only writes of the
same statement that follow one another there are joined. Of several updates of one row by the
same statement, the last one's values are what it leaves, as when each ran.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from toposched.service.committer import Write

MAX_PARAMETERS = 999
"""Parameters per statement: SQLite's smallest limit (older builds), well under today's."""
_INSERT = re.compile(
    r"(?P<head>INSERT INTO (?P<table>\w+)(?: \([^)]*\))?) VALUES (?P<row>\([^()]*\))(?P<tail>.*)",
    re.DOTALL,
)
_UPDATE = re.compile(r"UPDATE (?P<table>\w+) SET (?P<assignments>.+) WHERE id = \?", re.DOTALL)
_TABLE = re.compile(r"(?:INSERT INTO|UPDATE|DELETE FROM|REPLACE INTO) (\w+)")


@dataclass(frozen=True, slots=True)
class _Shape:
    """A statement that many rows can share: how to write it for `count` rows."""

    table: str
    insert: re.Match[str] | None
    update: re.Match[str] | None

    @property
    def joinable(self) -> bool:
        return self.insert is not None or self.update is not None

    @property
    def width(self) -> int:
        """Parameters per row."""
        if self.insert is not None:
            return self.insert["row"].count("?")
        assert self.update is not None
        return self.update["assignments"].count("?") + 1

    def sql(self, count: int) -> str:
        if self.insert is not None:
            rows = ", ".join([self.insert["row"]] * count)
            return f"{self.insert['head']} VALUES {rows}{self.insert['tail']}"
        assert self.update is not None
        return _update_sql(self.update["table"], self.update["assignments"], self.width, count)


@cache
def _shape(sql: str) -> _Shape:
    table = _TABLE.match(sql)
    update = _UPDATE.fullmatch(sql)
    if update is not None and not all(
        value.strip() == "?" or "?" not in value
        for value in (part.partition("=")[2] for part in update["assignments"].split(","))
    ):
        update = None  # a parameter inside an expression: run row by row
    return _Shape(table[1] if table else "", _INSERT.fullmatch(sql), update)


@cache
def _update_sql(table: str, assignments: str, width: int, count: int) -> str:
    """`UPDATE table SET a = ?, b = 1 WHERE id = ?` for `count` rows: each `?` of the
    assignments becomes a column of the VALUES rows, the id their last."""
    columns = iter(range(1, width))
    parts = [
        f"{name.strip()} = v.column{next(columns)}" if value.strip() == "?" else part
        for part in assignments.split(",")
        for name, _, value in [part.partition("=")]
    ]
    row = "(" + ", ".join("?" * width) + ")"
    values = ", ".join([row] * count)
    return (
        f"UPDATE {table} SET {', '.join(parts)} FROM (VALUES {values}) AS v "
        f"WHERE {table}.id = v.column{width}"
    )


def batched(writes: Sequence[Write]) -> list[Write]:
    """The same changes as `writes`, run in order, in as few statements as they allow."""
    if not all(_shape(write.sql).table for write in writes):
        return list(writes)  # a statement on no table it names: run as it came
    tables: dict[str, list[tuple[str, list[Sequence[Any]]]]] = {}
    for write in writes:
        rows = list(write.params) if write.many else [write.params]
        runs = tables.setdefault(_shape(write.sql).table, [])
        if runs and runs[-1][0] == write.sql:
            runs[-1][1].extend(rows)
        else:
            runs.append((write.sql, rows))
    return [
        statement
        for runs in tables.values()
        for sql, rows in runs
        for statement in _statements(sql, rows)
    ]


def _statements(sql: str, rows: list[Sequence[Any]]) -> Iterator[Write]:
    shape = _shape(sql)
    if not shape.joinable or len(rows) == 1:
        yield Write(sql, rows[0]) if len(rows) == 1 else Write(sql, rows, many=True)
        return
    if shape.update is not None:
        rows = list({row[-1]: row for row in rows}.values())  # the last update of each row
    per_statement = max(1, MAX_PARAMETERS // shape.width)
    for begin in range(0, len(rows), per_statement):
        part = rows[begin : begin + per_statement]
        yield Write(_joined_sql(sql, len(part)), [value for row in part for value in row])


@cache
def _joined_sql(sql: str, count: int) -> str:
    """The statement of `sql` for `count` rows (the few counts a service sees, made once)."""
    return _shape(sql).sql(count)
