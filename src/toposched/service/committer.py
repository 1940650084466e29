"""A writer thread that finishes a turn's transaction, turn after turn, in order.

The loop builds a turn's rows in memory (`Store.deferred`) and hands the transaction over;
while the writer finishes it and waits for the commit's fsync, the loop already works on the
next turn. The loop answers a turn's callers and hands its decisions to the backend only once
its `Commit` is done, so every promise of the store still holds: nothing is acknowledged or
sent before it is durable. Each statement a thread runs gives the interpreter's lock up for
SQLite's work and takes it back, waiting up to the switch interval (5 ms) while another thread
runs Python: the SQLite store runs a turn's few statements (`write_batches`) in the loop's
thread and hands the writer only the COMMIT, so that a commit waits for the lock once, when
its fsync is done, and taking the commit waits for none: `hand` returns once the writer
took it, the loop waiting meanwhile without the interpreter's lock, so that the writer runs its
few lines up to the COMMIT at once instead of waiting up to a switch interval for the loop.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("toposched.service")


@dataclass(frozen=True, slots=True)
class Write:
    """One statement with its parameters, or with many rows of them (`many`)."""

    sql: str
    params: Sequence[Any]
    many: bool = False


@dataclass
class Commit:
    """A turn's transaction handed to the writer: `done` once it committed or failed
    (`error`). A transaction that ran in the loop's thread is done when it ends."""

    writes: list[Write] = field(default_factory=list)
    error: BaseException | None = None
    _done: threading.Event = field(default_factory=threading.Event)

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self) -> None:
        self._done.wait()

    def settle(self, error: BaseException | None = None) -> None:
        self.error = error
        self._done.set()


class Committer:
    """Runs each handed `Commit` with `run` (its writes and the commit, on the store's
    writing connection), then calls `on_done` (e.g. to wake the loop)."""

    def __init__(self, run: Callable[[list[Write]], None], on_done: Callable[[], None]) -> None:
        self._run = run
        self._on_done = on_done
        self._queue: queue.SimpleQueue[Commit | None] = queue.SimpleQueue()
        self._idle = threading.Condition()
        self._waiting = 0
        """Commits handed over and not yet done."""
        self._taken = threading.Lock()
        """Held until the writer took the commit handed over last, which releases it: a lock
        used as a signal, waited for without the interpreter's lock and without the Python
        steps of an `Event`."""
        self._taken.acquire()
        self._thread = threading.Thread(target=self._serve, name="toposched-writer", daemon=True)
        self._thread.start()

    def hand(self, commit: Commit) -> None:
        """Queue `commit` and return once the writer took it (at once when it is idle)."""
        with self._idle:
            self._waiting += 1
        self._queue.put(commit)
        self._taken.acquire()

    def wait_idle(self) -> None:
        """Until every commit handed over is done (the connection is the caller's then)."""
        with self._idle:
            while self._waiting:
                self._idle.wait()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(30)

    def _serve(self) -> None:
        while (commit := self._queue.get()) is not None:
            self._taken.release()
            error: BaseException | None = None
            try:
                self._run(commit.writes)
            except BaseException as failure:  # reported to the loop, which stops
                log.exception("a commit failed")
                error = failure
            commit.writes = []
            commit.settle(error)
            with self._idle:
                self._waiting -= 1
                self._idle.notify_all()
            try:
                self._on_done()
            except Exception:  # a closed loop: nobody waits for the commit
                log.exception("telling the loop of a commit failed")
