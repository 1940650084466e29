"""Named tasks run side by side in forked worker processes: the runs of a comparison
(`sim/compare.py`), one per core. The parent hands the tasks out in the order given, each to the
first free worker, shows the progress they report, and collects what each returned or raised.

Workers are forked, so a task may be any callable (a closure over a workload and a scheduler
factory): only its name travels to the worker, and its result or exception back, pickled.

Ctrl-C or SIGTERM stops everything without a traceback: a worker turns the first of them into a
KeyboardInterrupt in its task (a simulation then stops and raises `SimulationInterrupted` with
what it simulated, sent back like any result) and ignores the rest; the parent counts the
signals it gets rather than raising them, stops the workers still busy with SIGTERM, collects
what they send within `STOP_SECONDS`, and reports the tasks as interrupted. A worker whose
parent is gone stops at its next progress report.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import pickle
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, Generic, TypeVar

from toposched.cluster.errors import ToposchedError
from toposched.sim.progress import ProgressBoard, ProgressReading, ProgressSink

__all__ = [
    "STOP_SECONDS",
    "Outcomes",
    "Task",
    "WorkerLost",
    "can_fork",
    "run_in_workers",
    "worker_count",
]

T = TypeVar("T")

Task = Callable[[ProgressSink], T]
"""A task: given where to send its progress readings, returns its result."""

STOP_SECONDS = 30.0
"""How long interrupted workers get to send what they have before they are killed."""
_POLL_SECONDS = 0.1
"""How often the parent looks at the signals it received while it waits for the workers."""

_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


class WorkerLost(ToposchedError):
    """A worker process ended (killed, out of memory) before it answered for its task."""


@dataclass
class Outcomes(Generic[T]):
    """What the tasks gave, each by name in the order the tasks were given."""

    finished: dict[str, T] = field(default_factory=dict)
    """The results of the tasks that returned."""
    raised: dict[str, BaseException] = field(default_factory=dict)
    """The exceptions of the tasks that raised (a stopped simulation's `SimulationInterrupted`
    among them), and `WorkerLost` for those whose worker ended before answering."""
    interrupted: bool = False
    """Whether Ctrl-C or SIGTERM stopped the tasks (this process's or a worker's)."""

    def ordered(self, names: Sequence[str]) -> Outcomes[T]:
        return Outcomes(
            {name: self.finished[name] for name in names if name in self.finished},
            {name: self.raised[name] for name in names if name in self.raised},
            self.interrupted,
        )


def can_fork() -> bool:
    """Whether this platform starts processes by forking, which the workers need."""
    return "fork" in multiprocessing.get_all_start_methods()


def worker_count(asked: int | None, tasks: int) -> int:
    """How many workers run `tasks` tasks: `asked`, else one per core this process may use, at
    most one per task; 1 (the tasks run in this process) where processes cannot be forked."""
    if asked is None:
        affinity = getattr(os, "sched_getaffinity", None)
        asked = len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)
    if not can_fork():
        return 1
    return max(1, min(asked, tasks))


def run_in_workers(
    tasks: Mapping[str, Task[T]], workers: int, board: ProgressBoard | None = None
) -> Outcomes[T]:
    """Run `tasks` on `workers` forked processes, handed out in their order; `board`, when
    given, shows the progress they report. A task that raises stops the handing out and the
    tasks still running (as Ctrl-C would); see the module for Ctrl-C and SIGTERM."""
    names = list(tasks)
    outcomes: Outcomes[T] = Outcomes()
    with _Signals() as signals:
        pool = _Pool(tasks, outcomes, board, signals)
        try:
            pool.start(max(1, min(workers, len(names))))
            if board is None:
                pool.serve(deque(names))
            else:
                # The board draws from a thread of its own: started after the forks, so that
                # no worker inherits a lock that thread held.
                with board:
                    pool.serve(deque(names))
        finally:
            pool.stop()
        outcomes.interrupted = outcomes.interrupted or signals.count > 0
    return outcomes.ordered(names)


class _Signals:
    """SIGINT and SIGTERM counted, not raised, while the workers run: the loop reading them
    looks at the count between messages (a signal may reach any thread of this process, and
    only the main thread's own waits end when one arrives). Outside the main thread, where
    handlers cannot be set, the signals keep theirs."""

    def __init__(self) -> None:
        self.count = 0
        self.previous: dict[signal.Signals, Any] = {}

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for signum in _SIGNALS:
                if signal.getsignal(signum) != signal.SIG_IGN:
                    self.previous[signum] = signal.signal(signum, self._counted)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    def _counted(self, signum: int, frame: object) -> None:
        self.count += 1


@dataclass
class _Worker:
    process: BaseProcess
    conn: Connection
    task: str | None = None
    """The task it runs; None: none (yet, or any more)."""
    stopping: bool = False
    """Told to stop."""


class _Pool:
    """The worker processes, and what they sent."""

    def __init__(
        self,
        tasks: Mapping[str, Task[T]],
        outcomes: Outcomes[T],
        board: ProgressBoard | None,
        signals: _Signals,
    ) -> None:
        self.tasks = tasks
        self.outcomes: Outcomes[Any] = outcomes
        self.board = board
        self.signals = signals
        self.workers: list[_Worker] = []
        self.handing_out = True

    def start(self, count: int) -> None:
        context = multiprocessing.get_context("fork")
        # Whatever the parent buffered is written once, not once more by each worker.
        sys.stdout.flush()
        sys.stderr.flush()
        # A worker ignores what its parent ignores (SIGINT, in a job a shell ran in the
        # background), but SIGTERM, which is how the parent itself stops it.
        ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
        catch = _SIGNALS - {signal.SIGINT} if ignored else _SIGNALS
        parent_ends: list[Connection] = []
        # Everything built so far (modules, the workload) out of the workers' garbage
        # collections, which would otherwise scan it again and again (and copy the pages they
        # touch): about half the collector's time in the demo's toposched run.
        gc.freeze()
        # Held back until the worker has its own handlers (it is forked with this mask).
        with _signals_blocked(), _unfrozen_after():
            for _ in range(count):
                parent_end, child_end = context.Pipe()
                parent_ends.append(parent_end)
                process = context.Process(
                    target=_serve,
                    args=(child_end, list(parent_ends), self.tasks, catch),
                    daemon=True,
                )
                process.start()
                child_end.close()
                self.workers.append(_Worker(process, parent_end))

    def serve(self, names: deque[str]) -> None:
        """Hand out the tasks and collect the answers until every worker is idle, or until
        SIGINT or SIGTERM."""
        for worker in self.workers:
            self._give(worker, names)
        while not self.signals.count and (busy := self._busy()):
            ready = wait([worker.conn for worker in busy], timeout=_POLL_SECONDS)
            for worker in busy:
                if worker.conn in ready:
                    self._take(worker)
                    if worker.task is None:
                        self._give(worker, names)

    def stop(self) -> None:
        """Interrupt the workers still busy, collect what they send within `STOP_SECONDS` (or
        until SIGINT or SIGTERM comes again), and end every worker."""
        self._halt()
        for worker in self.workers:
            if worker.task is None and not worker.stopping:
                self._give(worker, deque())
        seen = self.signals.count
        deadline = time.monotonic() + STOP_SECONDS
        try:
            while self.signals.count == seen and (busy := self._busy()):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                ready = wait([worker.conn for worker in busy], timeout=min(left, _POLL_SECONDS))
                for worker in busy:
                    if worker.conn in ready:
                        self._take(worker)
        finally:
            for worker in self.workers:
                worker.conn.close()
                worker.process.join(timeout=1.0)
                if worker.process.is_alive():
                    worker.process.kill()
                    worker.process.join()

    def _busy(self) -> list[_Worker]:
        return [worker for worker in self.workers if worker.task is not None]

    def _give(self, worker: _Worker, names: deque[str]) -> None:
        """The next task to `worker`, or, when there is none or no more are handed out, the
        word to stop."""
        name = names.popleft() if names and self.handing_out else None
        with suppress(OSError):  # a worker already gone is seen as such when read
            worker.conn.send_bytes(pickle.dumps(name))
        worker.task = name
        worker.stopping = name is None

    def _take(self, worker: _Worker) -> None:
        """Read one message of `worker`: a progress reading, or its task's end."""
        outcomes = self.outcomes
        try:
            kind, name, payload = pickle.loads(worker.conn.recv_bytes())
        except (EOFError, OSError):
            if worker.task is not None:
                worker.process.join(timeout=1.0)
                if self.handing_out:
                    outcomes.raised[worker.task] = WorkerLost(
                        f"the worker process running {worker.task} ended (exit code "
                        f"{worker.process.exitcode}) before it answered"
                    )
                    self._halt()
            worker.task = None
            return
        if kind == "progress":
            if self.board is not None:
                self.board.show(payload)
            return
        worker.task = None
        if kind == "finished":
            outcomes.finished[name] = payload
            return
        outcomes.raised[name] = payload
        if isinstance(payload, KeyboardInterrupt) and self.handing_out:
            outcomes.interrupted = True  # a signal to the worker, not this process's `_halt`
        self._halt()

    def _halt(self) -> None:
        """Hand out nothing more, and interrupt the busy workers."""
        if not self.handing_out:
            return
        self.handing_out = False
        for worker in self._busy():
            with suppress(ProcessLookupError):
                os.kill(_pid(worker), signal.SIGTERM)


def _pid(worker: _Worker) -> int:
    pid = worker.process.pid
    assert pid is not None  # started
    return pid


@contextmanager
def _unfrozen_after() -> Iterator[None]:
    """This process's objects back in its garbage collector's sight once the forks are done."""
    try:
        yield
    finally:
        gc.unfreeze()


@contextmanager
def _signals_blocked() -> Iterator[None]:
    """SIGINT and SIGTERM held back from this thread (delivered at the end)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


# --- in the worker -------------------------------------------------------------------------------
def _serve(
    conn: Connection,
    inherited: list[Connection],
    tasks: Mapping[str, Task[Any]],
    catch: frozenset[signal.Signals],
) -> None:
    """A worker's life: run the tasks it is given until told to stop. `catch`: the signals
    that stop its task (those the parent did not ignore)."""
    # The parent's ends: closed here, so that the parent's exit closes the pipe for this worker.
    for parent_end in inherited:
        parent_end.close()
    for signum in _SIGNALS:
        signal.signal(signum, _interrupt_once if signum in catch else signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
    try:
        while (name := pickle.loads(conn.recv_bytes())) is not None:
            _run(conn, name, tasks[name])
    except (KeyboardInterrupt, EOFError, OSError):
        pass  # stopped between tasks, or the parent is gone
    finally:
        conn.close()


def _run(conn: Connection, name: str, task: Task[Any]) -> None:
    """Run one task and send its result or exception."""

    def report(reading: ProgressReading) -> None:
        _send(conn, pickle.dumps(("progress", name, reading)))

    try:
        data = pickle.dumps(("finished", name, task(report)), protocol=pickle.HIGHEST_PROTOCOL)
    except BaseException as error:
        data = pickle.dumps(("raised", name, _sendable(error, name)), pickle.HIGHEST_PROTOCOL)
    _send(conn, data)


def _send(conn: Connection, data: bytes) -> None:
    with _signals_blocked():
        conn.send_bytes(data)


def _interrupt_once(signum: int, frame: object) -> None:
    """The first SIGINT or SIGTERM stops the task; later ones would only cut short its report."""
    for other in _SIGNALS:
        signal.signal(other, signal.SIG_IGN)
    raise KeyboardInterrupt


def _sendable(error: BaseException, name: str) -> BaseException:
    """`error` as the parent can rebuild it: itself, with the worker's traceback as a note when
    it is not one toposched raises on purpose; else an error of the same message. (A stop, a
    KeyboardInterrupt, is sent as it is: one that carries a result rebuilds itself from it.)"""
    if isinstance(error, KeyboardInterrupt):
        return error
    if not isinstance(error, ToposchedError):
        trace = "".join(traceback.format_exception(error))
        error.add_note(f"in the worker process running {name}:\n{trace}")
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        if isinstance(error, ToposchedError):
            return ToposchedError(str(error))
        return RuntimeError(f"{type(error).__name__} in the worker running {name}: {error}")
    return error
