"""Checkpoints of the SQLite store's write-ahead log, run by a thread of their own.

By default SQLite copies the log back into the database file in the commit that takes it past
1,000 pages: with the service's commits (about 18 pages each) one commit in 55 also writes and
fsyncs the database file, 2-30 ms on the benchmark's machine, and the turns behind it wait.
Once its writer thread serves, the store turns that off on its writing connection
(`wal_autocheckpoint=0`) and a `Checkpointer` runs PASSIVE checkpoints on a connection of its
own, every `every` commits. A passive checkpoint takes no writer lock: it copies pages while the
writer goes on committing.

The log starts over only when a write begins after a checkpoint copied all of it. Under steady
commits the thread seldom catches up, so once the log holds `restart_frames` frames the
writer checkpoints once itself, after a commit, on its own connection: it copies the few
frames the thread has not, and the next transaction starts the log over.

Durability does not change: each commit is durable in the log (`synchronous=FULL`) before the
service answers anyone; a checkpoint moves committed pages into the database file, with the
same fsyncs as SQLite's own.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger("toposched.service")

CHECKPOINT_EVERY = 25
"""Commits between two checkpoints of the thread (about 450 pages of the service's turns)."""
RESTART_FRAMES = 16_000
"""Frames in the log (4 KiB pages: 64 MiB) past which the writer checkpoints once itself, so
that the log starts over."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """What `PRAGMA wal_checkpoint` says: whether it could not run (another was running), the
    frames in the log and the frames copied into the database file."""

    busy: bool
    frames: int
    copied: int


def checkpoint(db: sqlite3.Connection) -> Checkpoint:
    """A PASSIVE checkpoint on `db`: it copies what it can without waiting for a lock."""
    busy, frames, copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return Checkpoint(bool(busy), int(frames), int(copied))


class Checkpointer:
    """Runs checkpoints in its own thread, on the connection `connect` opens there, every
    `every` commits the writer reports (`committed`)."""

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        every: int = CHECKPOINT_EVERY,
        restart_frames: int = RESTART_FRAMES,
    ) -> None:
        self._connect = connect
        self._every = every
        self._restart_frames = restart_frames
        self._commits = 0
        self._due = threading.Event()
        self._stopping = False
        self._restart_due = False
        """Set by the thread when the log is long: the writer checkpoints after its next
        commit."""
        self.last: Checkpoint | None = None
        """The thread's last checkpoint (for tests and diagnostics)."""
        self._thread = threading.Thread(
            target=self._serve, name="toposched-checkpoints", daemon=True
        )
        self._thread.start()

    def committed(self, db: sqlite3.Connection) -> None:
        """After each commit, on the writing connection `db` and in its thread."""
        if self._restart_due:
            done = checkpoint(db)
            self._restart_due = done.busy or done.copied < done.frames
        self._commits += 1
        if self._commits >= self._every:
            self._commits = 0
            if self._thread.is_alive():
                self._due.set()
            else:  # it could not open the store: the writer checkpoints, as SQLite would
                checkpoint(db)

    def close(self) -> None:
        self._stopping = True
        self._due.set()
        self._thread.join(30)

    def _serve(self) -> None:
        try:
            db = self._connect()
        except Exception:  # the writer's commits stay durable; only the log grows
            log.exception("the checkpoint thread could not open the store")
            return
        try:
            while True:
                self._due.wait()
                self._due.clear()
                if self._stopping:
                    return
                try:
                    done = checkpoint(db)
                except sqlite3.Error:  # tried again after the next commits
                    log.exception("a checkpoint of the store's log failed")
                    continue
                if done.frames >= self._restart_frames:
                    self._restart_due = True
                self.last = done
        finally:
            db.close()
