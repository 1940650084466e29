"""The simulator's events: their kinds, the runs they belong to, and the queue that orders them."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Sequence
from enum import IntEnum
from typing import Any, NamedTuple

from toposched.sim.records import JobRecord

__all__ = ["Event", "EventKind", "EventQueue", "Handler", "Run"]


class EventKind(IntEnum):
    """Event kinds; at equal times they are handled in this order (then in push order).

    Completions come first so that work ending at the instant a node fails is not lost, and
    samples last so that they see the cycle that followed the instant's events. CHECKPOINT is a
    preemptible resumable run saving its work, reported to the scheduler before the instant's
    cycle; CYCLE marks a cycle postponed by a minimum cycle interval.
    """

    COMPLETION = 0
    GRACE_END = 1
    REPAIR = 2
    FAILURE = 3
    CANCEL = 4
    SUBMISSION = 5
    PROTECTION_END = 6
    CHECKPOINT = 7
    CYCLE = 8
    SAMPLE = 9


class Event(NamedTuple):
    """An event in the heap; the sequence makes the heap order total and replayable."""

    time: float
    kind: int
    sequence: int
    payload: Any
    """What the handler of `kind` takes: a job or failure index, a job name, a `Run`, nodes."""


class Run(NamedTuple):
    """One run of a job: events of a run that has since ended are ignored."""

    record: JobRecord
    """The job's record in the simulated backend (its name: `record.job.name`), held here so
    that the run's events find it without a lookup by name."""
    attempt: int


_SAMPLE = int(EventKind.SAMPLE)

Handler = Callable[[Any, float], bool]
"""An event kind's handler: takes the event's payload and the time, returns whether the event
changed the scheduler's world."""


class EventQueue:
    """Events in the order they are handled: by time, then kind, then push order.

    Events pushed at once (`push_many`: a workload's submissions and failures, known before the
    run) wait in a list sorted once, the others in a heap; the next event is the earlier of the
    two heads. A frontier month queues 108,311 submissions and failures at its start, while
    its heap holds about ten thousand other events in the first days: each pop and push of
    the heap compares a few entries fewer. Entries are plain tuples laid out as `Event` (a
    named tuple costs a call to make, once per event pushed); `pop` hands them out as
    `Event`s, and `handle_at` takes an instant's events without making any.
    """

    def __init__(self) -> None:
        self.heap: list[tuple[float, int, int, Any]] = []
        self.known: list[tuple[float, int, int, Any]] = []
        """The events pushed at once and not yet taken, latest first (the next one last)."""
        self.sequence = 0
        self.live = 0
        """Events other than samples still queued: the run ends when none are left."""

    def __bool__(self) -> bool:
        return bool(self.heap) or bool(self.known)

    def next_time(self) -> float:
        """The time of the next event; the queue must not be empty."""
        heap, known = self.heap, self.known
        if not known:
            return heap[0][0]
        if not heap:
            return known[-1][0]
        return min(heap[0][0], known[-1][0])

    def push(self, when: float, kind: EventKind, payload: Any) -> None:
        self.sequence += 1
        code = int(kind)
        heapq.heappush(self.heap, (when, code, self.sequence, payload))
        if code != _SAMPLE:
            self.live += 1

    def push_many(self, kind: EventKind, timed: Iterable[tuple[float, Any]]) -> None:
        """`push` of each (time, payload) of `timed` as an event of `kind`, in order (their
        sequence numbers follow that order), kept sorted apart from the heap."""
        code = int(kind)
        first = self.sequence + 1
        added = [
            (when, code, sequence, payload)
            for sequence, (when, payload) in enumerate(timed, start=first)
        ]
        self.sequence += len(added)
        if code != _SAMPLE:
            self.live += len(added)
        # Sequence numbers differ: the payloads are never compared.
        self.known.extend(added)
        self.known.sort(reverse=True)

    def _take(self) -> tuple[float, int, int, Any]:
        """The next entry, taken from the heap or from the events pushed at once."""
        heap, known = self.heap, self.known
        if known and (not heap or known[-1] < heap[0]):
            return known.pop()
        return heapq.heappop(heap)

    def pop(self) -> Event:
        event = Event._make(self._take())
        if event.kind != _SAMPLE:
            self.live -= 1
        return event

    def handle_at(self, now: float, handlers: Sequence[Handler | None]) -> tuple[bool, bool]:
        """Take the events at `now` in order, each given to the handler of its kind (indexed
        by kind; samples have none): events a handler pushes at `now` are taken in their turn.
        Returns whether any handler returned true, and whether a sample was among them."""
        heap, known = self.heap, self.known
        heappop = heapq.heappop
        changed = sample = False
        while True:
            # The earlier of the two heads, if it is at `now` (no event is queued before it).
            if known and (not heap or known[-1] < heap[0]):
                if known[-1][0] != now:
                    break
                _, kind, _, payload = known.pop()
            elif heap and heap[0][0] == now:
                _, kind, _, payload = heappop(heap)
            else:
                break
            if kind == _SAMPLE:
                sample = True
                continue
            handler = handlers[kind]
            assert handler is not None
            self.live -= 1
            if handler(payload, now):
                changed = True
        return changed, sample
