"""The store's writer thread: commits run in order, each handed over only once the writer took
it, so that the loop's hand-over never leaves the writer waiting for the interpreter's lock."""

from __future__ import annotations

import threading

from toposched.service.committer import Commit, Committer, Write


def test_a_commit_is_handed_over_once_the_writer_took_it_and_runs_in_order() -> None:
    gate = threading.Event()
    ran: list[str] = []
    done = threading.Semaphore(0)

    def run(writes: list[Write]) -> None:
        ran.append(writes[0].sql)
        gate.wait(10)

    committer = Committer(run, done.release)
    try:
        first, second = Commit([Write("first", ())]), Commit([Write("second", ())])
        committer.hand(first)  # the writer is idle: taken at once
        handed = threading.Event()

        def hand_second() -> None:
            committer.hand(second)
            handed.set()

        threading.Thread(target=hand_second, daemon=True).start()
        # The writer is still in the first commit: the second is not taken yet.
        assert not handed.wait(0.2)
        assert not first.done() and not second.done()
        gate.set()
        assert handed.wait(10)
        assert done.acquire(timeout=10) and done.acquire(timeout=10)
        assert first.done() and second.done()
        assert first.error is None and second.error is None
        assert ran == ["first", "second"]
    finally:
        gate.set()
        committer.close()


def test_a_failed_commit_is_reported_and_the_writer_goes_on() -> None:
    def run(writes: list[Write]) -> None:
        if writes and writes[0].sql == "bad":
            raise RuntimeError("disk full")

    committer = Committer(run, lambda: None)
    try:
        bad, good = Commit([Write("bad", ())]), Commit([Write("good", ())])
        committer.hand(bad)
        committer.hand(good)
        good.wait()
        bad.wait()
        assert isinstance(bad.error, RuntimeError) and good.error is None
    finally:
        committer.close()
