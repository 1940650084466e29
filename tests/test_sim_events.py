"""The simulator's event queue: events pushed at once come out as if pushed one by one."""

from __future__ import annotations

import numpy as np
import pytest

from toposched.sim.events import Event, EventKind, EventQueue, Handler


def drain(queue: EventQueue) -> list[Event]:
    events = []
    while queue:
        events.append(queue.pop())
    return events


@pytest.mark.parametrize("seed", range(3))
def test_events_pushed_at_once_come_out_as_pushed_one_by_one(seed: int) -> None:
    rng = np.random.default_rng(seed)
    # Times on a coarse grid, so that many events share an instant and order by kind, then
    # by the order they were pushed in.
    submissions = [(float(t), index) for index, t in enumerate(rng.integers(0, 20, 300))]
    failures = [(float(t), index) for index, t in enumerate(rng.integers(0, 20, 40))]
    one_by_one, at_once = EventQueue(), EventQueue()
    for when, index in submissions:
        one_by_one.push(when, EventKind.SUBMISSION, index)
    for when, index in failures:
        one_by_one.push(when, EventKind.FAILURE, index)
    at_once.push_many(EventKind.SUBMISSION, iter(submissions))
    at_once.push_many(EventKind.FAILURE, failures)
    for queue in (one_by_one, at_once):
        queue.push(0.0, EventKind.SAMPLE, None)
        queue.push(5.0, EventKind.COMPLETION, "late")
    assert at_once.live == one_by_one.live == 341
    assert drain(at_once) == drain(one_by_one)
    assert at_once.live == one_by_one.live == 0


def test_handle_at_hands_each_event_of_the_instant_to_its_kind_in_order() -> None:
    queue = EventQueue()
    queue.push_many(EventKind.SUBMISSION, [(1.0, 0), (1.0, 1), (3.0, 2)])
    queue.push(1.0, EventKind.SAMPLE, None)
    queue.push(1.0, EventKind.CHECKPOINT, "saved")
    seen: list[tuple[EventKind, object]] = []

    def submitted(index: int, now: float) -> bool:
        seen.append((EventKind.SUBMISSION, index))
        if index == 0:
            # Pushed at the same instant by a handler, and of an earlier kind: handled next.
            queue.push(now, EventKind.CANCEL, "withdrawn")
        return True

    def cancelled(name: str, now: float) -> bool:
        seen.append((EventKind.CANCEL, name))
        return False

    def checkpointed(name: str, now: float) -> bool:
        seen.append((EventKind.CHECKPOINT, name))
        return False

    handlers: list[Handler | None] = [None] * len(EventKind)
    handlers[EventKind.SUBMISSION] = submitted
    handlers[EventKind.CANCEL] = cancelled
    handlers[EventKind.CHECKPOINT] = checkpointed
    assert queue.handle_at(0.0, handlers) == (False, False)
    assert queue.handle_at(1.0, handlers) == (True, True)
    assert seen == [
        (EventKind.SUBMISSION, 0),
        (EventKind.CANCEL, "withdrawn"),
        (EventKind.SUBMISSION, 1),
        (EventKind.CHECKPOINT, "saved"),
    ]
    assert queue.live == 1 and queue.next_time() == 3.0
    seen.clear()
    assert queue.handle_at(3.0, handlers) == (True, False)
    assert seen == [(EventKind.SUBMISSION, 2)] and queue.live == 0 and not queue


@pytest.mark.parametrize("seed", range(3))
def test_handle_at_takes_events_in_the_order_pop_does(seed: int) -> None:
    rng = np.random.default_rng(seed)
    submissions = [(float(t), i) for i, t in enumerate(rng.integers(0, 9, 50))]
    failures = [(float(t), i) for i, t in enumerate(rng.integers(0, 9, 20))]
    queues = EventQueue(), EventQueue()
    for queue in queues:
        queue.push_many(EventKind.SUBMISSION, submissions)
        queue.push_many(EventKind.FAILURE, failures)
    later = [
        (float(t), EventKind(int(k)), i) for i, (t, k) in enumerate(rng.integers(0, 9, (60, 2)))
    ]
    for queue in queues:
        for when, kind, payload in later:
            queue.push(when, kind, payload)
    by_pop = [(event.time, event.kind, event.payload) for event in drain(queues[0])]
    by_instant: list[tuple[float, int, object]] = []

    def noting(kind: EventKind) -> Handler:
        def handler(payload: object, now: float) -> bool:
            by_instant.append((now, kind, payload))
            return False

        return handler

    handlers: list[Handler | None] = [noting(kind) for kind in EventKind]
    handlers[EventKind.SAMPLE] = None
    instant = queues[1]
    while instant:
        now = instant.next_time()
        instant.handle_at(now, handlers)
    assert by_instant == [entry for entry in by_pop if entry[1] != EventKind.SAMPLE]
    assert instant.live == 0
