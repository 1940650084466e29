"""The loop: one thread owns the scheduler, the store's writes and the backend.

API calls become commands on a queue and wait on a future. Each turn the loop drains every
queued command and polls the backend, then in ONE transaction (one fsync for the turn) applies
the commands, stores and applies the backend's reports, runs one cycle for the whole batch and
stores its decisions (see `step`). The store commits the turn's writes in its writer thread
(`Store.deferred`) while the loop goes on with the next turn: it applies that turn's commands
meanwhile and, when nothing more is queued, waits for the commit before the turn's cycle (the
fsync is shorter than a cycle: the decisions reach the backend a cycle sooner). Only after a
turn's commit are its waiters answered and its decisions handed to the backend, and reads wait
for every commit before they are answered, so nobody sees what a crash could still undo. A
tick every `tick_s` seconds cycles even when nothing arrived, for min-runtime expiries and
reservations coming due.

Callers in an asyncio event loop (the HTTP server) wait on asyncio futures, which the loop
settles in one call per event loop and turn (`_Waiters`), not one thread hand-off per answer.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from toposched.cluster.errors import ToposchedError
from toposched.scheduler.collection import TurnCollector
from toposched.scheduler.core import CycleResult
from toposched.scheduler.warm_up import load_compiled_loops
from toposched.service.committer import Commit
from toposched.service.config import service_clock
from toposched.service.core import Command, ServiceCore
from toposched.service.step import keep_reports, poll, step

T = TypeVar("T")
Clock = Callable[[], float]
log = logging.getLogger("toposched.service")
_MAX_BATCH = 10_000
_COMMITS_IN_FLIGHT = 1
"""Turns whose commit may still be running when the loop starts the next one. With one,
the loop builds a turn while the one before commits, then waits for that commit: commands
gather meanwhile, so turns stay about as large as a commit is long (each turn costs a cycle
and a commit however few commands it has)."""

Outcome = tuple[bool, Any]
"""A command's answer: (True, its result) or (False, the exception it raised)."""


@dataclass
class _Command:
    apply: Callable[[ServiceCore, float], Any]
    future: Future[Any] | asyncio.Future[Any]
    writes: bool
    queued: float = field(default_factory=time.monotonic)
    event_loop: asyncio.AbstractEventLoop | None = None
    """The event loop of an asyncio `future`, which only that loop's thread may settle."""


@dataclass
class _Turn:
    """A turn whose commit was handed to the store's writer: answered once it is done."""

    commit: Commit
    batch: list[_Command]
    answers: list[Outcome]
    outbox: list[tuple[int, Command]]
    committing: float


def _settle(future: Future[Any] | asyncio.Future[Any], outcome: Outcome) -> None:
    if future.done():  # an asyncio caller that went away (its request was cancelled)
        return
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


def _settle_all(answers: list[tuple[asyncio.Future[Any], Outcome]]) -> None:
    for future, outcome in answers:
        _settle(future, outcome)


class _Waiters:
    """Answers of one turn: thread-safe futures at once, asyncio ones gathered per event loop
    and settled there by one `call_soon_threadsafe` each."""

    def __init__(self) -> None:
        self._by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Outcome]]]
        self._by_loop = {}

    def add(self, command: _Command, outcome: Outcome) -> None:
        if command.event_loop is None:
            _settle(command.future, outcome)
            return
        assert isinstance(command.future, asyncio.Future)
        self._by_loop.setdefault(command.event_loop, []).append((command.future, outcome))

    def send(self) -> None:
        for event_loop, answers in self._by_loop.items():
            try:
                event_loop.call_soon_threadsafe(_settle_all, answers)
            except RuntimeError:  # that event loop closed: nobody waits for these answers
                log.warning("%d answers for a closed event loop were dropped", len(answers))
        self._by_loop = {}


class LoopObserver(Protocol):
    """Told, in the loop's thread, how long commits and cycles take (e.g. for metrics)."""

    def committed(self, seconds: float) -> None: ...

    def cycled(
        self, core: ServiceCore, result: CycleResult, seconds: float, waits: list[float]
    ) -> None:
        """A cycle took `seconds`; `waits`: how long each change it answers waited for it."""


class Loop:
    """Runs `start_core` (recovery) first in its own thread, then serves commands."""

    def __init__(
        self,
        start_core: Callable[[float], ServiceCore],
        clock: Clock = service_clock,
        tick_s: float = 1.0,
        on_failure: Callable[[], None] | None = None,
    ) -> None:
        self._start_core = start_core
        self._on_failure = on_failure
        self.clock = clock
        self.tick_s = tick_s
        self._queue: queue.SimpleQueue[_Command | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="toposched-loop", daemon=True)
        self._stopping = threading.Event()
        self.ready = threading.Event()
        self.failed: BaseException | None = None
        self.core: ServiceCore | None = None
        self.cycles = 0
        self.observer: LoopObserver | None = None
        self._committing: deque[_Turn] = deque()
        """Turns whose commit is not yet answered, oldest first."""
        self.collector = TurnCollector()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stopping.set()
        self._queue.put(None)
        self._thread.join(timeout)

    def submit(self, apply: Callable[[ServiceCore, float], T], writes: bool = True) -> Future[T]:
        """Queue `apply(core, now)` for the loop; its future resolves after the commit."""
        future: Future[T] = Future()
        if self.failed is not None:
            future.set_exception(RuntimeError("the service loop stopped"))
            return future
        self._queue.put(_Command(apply, future, writes))
        return future

    def submit_async(
        self, apply: Callable[[ServiceCore, float], T], writes: bool = True
    ) -> asyncio.Future[T]:
        """`submit` for a caller in a running asyncio event loop: the future is settled in
        that event loop after the commit."""
        event_loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = event_loop.create_future()
        if self.failed is not None:
            future.set_exception(RuntimeError("the service loop stopped"))
            return future
        self._queue.put(_Command(apply, future, writes, event_loop=event_loop))
        return future

    def call(self, apply: Callable[[ServiceCore, float], T], timeout: float = 30.0) -> T:
        """`submit` and wait (for callers outside an event loop, e.g. tests)."""
        return self.submit(apply).result(timeout)

    # --- the thread ------------------------------------------------------------------------
    def _run(self) -> None:
        self.collector.start()
        try:
            self.core = self._recover()
            self.ready.set()
            self._serve(self.core)
        except BaseException as error:  # the loop must report why it stopped, whatever it was
            self.failed = error
            log.exception("the service loop stopped")
            self._fail_waiting(error)
            if self._on_failure is not None:
                self._on_failure()
        finally:
            self.collector.stop()
            if self.core is not None:
                self.core.backend.close()

    def _recover(self) -> ServiceCore:
        """`start_core`, with automatic collection off (`collection`): recovery builds
        objects by the hundred thousand and frees none, so every collection meanwhile would be
        a wasted pass over all of them. What it built is then frozen out of the collector's
        sight (`gc.freeze`): no later pass scans it. The compiled loops are loaded before the
        service says it is ready (`load_compiled_loops`), so that its first decision does
        not load them."""
        core = self._start_core(self.clock())
        load_compiled_loops()
        self.collector.freeze()
        return core

    def _serve(self, core: ServiceCore) -> None:
        next_tick = time.monotonic()
        while not self._stopping.is_set():
            # Between turns, before the loop would wait: the young objects' pass.
            self.collector.between_turns(idle=self._queue.empty())
            batch = self._drain(max(0.0, next_tick - time.monotonic()))
            self._answer_committed(core, keep=_COMMITS_IN_FLIGHT)
            now = self.clock()
            tick = time.monotonic() >= next_tick
            if tick:
                next_tick = time.monotonic() + self.tick_s
            if batch and not any(command.writes for command in batch):
                # Reads only: answered at once, after every commit handed over is done.
                self._answer_committed(core, keep=0)
                self._answer(batch, [self._apply_one(core, command, now) for command in batch])
                batch = []
            if not (batch or tick):  # woken by a commit
                continue
            started = time.monotonic()
            result = self._turn(core, batch, now, tick)
            if result is not None:
                self.cycles += 1
                if self.observer is not None:
                    ended = time.monotonic()
                    waits = [ended - command.queued for command in batch if command.writes]
                    self.observer.cycled(core, result, ended - started, waits)
        self._answer_committed(core, keep=0)

    def _turn(
        self, core: ServiceCore, batch: list[_Command], now: float, tick: bool
    ) -> CycleResult | None:
        """One transaction for the batch's commands (each in a savepoint, so that one refused
        command changes nothing and the others still commit), the backend's reports and the
        cycle's decisions; once it is committed, the answers, then the decisions to the
        backend (`_answer_committed`)."""
        reports = poll(core, now)
        try:
            with core.store.deferred(self._wake) as commit:
                core.flush_sent()
                answers = []
                for command in batch:
                    answers.append(self._apply_one(core, command, now))
                    self._answer_done(core)
                self._answer_before_the_cycle(core)
                result = step(core, reports, now, tick)
                self._answer_done(core)
                core.owed.advance(core, now)
                committing = time.monotonic()
        except BaseException as error:
            # Nothing of the turn was committed: no answer is a success.
            stopped = (False, RuntimeError(f"the service loop stopped: {error}"))
            self._answer(batch, [stopped] * len(batch))
            keep_reports(core, reports)
            raise
        self._committing.append(_Turn(commit, batch, answers, core.take_outbox(), committing))
        self._answer_done(core)
        return result

    def _answer_before_the_cycle(self, core: ServiceCore) -> None:
        """When nothing is queued (the loop keeps up), wait for the previous turn's commit and
        answer it before this turn's cycle rather than after it: its decisions reach the
        backend a cycle sooner, and the writer, with the interpreter's lock free, takes it
        back at once after its fsync. With commands queued the loop goes on (its cycle
        overlaps the fsync) and answers that commit at the next check."""
        if self._committing and self._queue.empty():
            self._answer_committed(core, keep=0)
        else:
            self._answer_done(core)

    def _wake(self) -> None:
        """In the store's writer: a commit is done; the loop answers it at once."""
        self._queue.put(None)

    def _answer_done(self, core: ServiceCore) -> None:
        """Answer the turns whose commit is done, also in the middle of the next turn: their
        decisions go to the backend as soon as they are durable. (The backend is the loop's
        alone; the decisions handed over are marked sent by the next transaction.)"""
        turns = self._committing
        if turns and turns[0].commit.done():
            self._answer_committed(core, keep=len(turns))

    def _answer_committed(self, core: ServiceCore, keep: int) -> None:
        """Answer the turns whose commit is done, oldest first, waiting for the oldest while
        more than `keep` are left, and hand their decisions to the backend. A failed commit
        stops the loop: none of the turns after it is answered as a success."""
        turns = self._committing
        while turns and (len(turns) > keep or turns[0].commit.done()):
            turn = turns[0]
            turn.commit.wait()
            if turn.commit.error is not None:
                stopped = (False, RuntimeError(f"the service loop stopped: {turn.commit.error}"))
                while turns:
                    failed = turns.popleft()
                    self._answer(failed.batch, [stopped] * len(failed.batch))
                raise turn.commit.error
            turns.popleft()
            if self.observer is not None and turn.batch:
                self.observer.committed(time.monotonic() - turn.committing)
            self._answer(turn.batch, turn.answers)
            core.send_outbox(turn.outbox)

    @staticmethod
    def _answer(batch: list[_Command], answers: list[Outcome]) -> None:
        waiters = _Waiters()
        for command, outcome in zip(batch, answers, strict=True):
            waiters.add(command, outcome)
        waiters.send()

    def _drain(self, wait_s: float) -> list[_Command]:
        batch: list[_Command] = []
        try:
            first = self._queue.get(timeout=wait_s) if wait_s > 0 else self._queue.get_nowait()
        except queue.Empty:
            return batch
        if first is not None:
            batch.append(first)
        while len(batch) < _MAX_BATCH:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                batch.append(item)
        return batch

    @staticmethod
    def _apply_one(core: ServiceCore, command: _Command, now: float) -> Outcome:
        try:
            if not command.writes:
                return True, command.apply(core, now)
            with core.store.savepoint():
                return True, command.apply(core, now)
        except ToposchedError as error:
            return False, error
        except Exception as error:  # a bug: report it to the caller, keep serving the others
            log.exception("command failed")
            return False, error

    def _fail_waiting(self, error: BaseException) -> None:
        """After the loop stopped: turns handed to the writer are answered as their commit
        went (their decisions are carried out by the next start), queued commands fail."""
        stopped = (False, RuntimeError(f"the service loop stopped: {error}"))
        while self._committing:
            turn = self._committing.popleft()
            turn.commit.wait()
            answers = turn.answers if turn.commit.error is None else [stopped] * len(turn.batch)
            self._answer(turn.batch, answers)
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                self._answer([item], [(False, RuntimeError(f"the service loop stopped: {error}"))])
