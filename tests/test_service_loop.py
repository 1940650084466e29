"""The loop: commands applied and committed in batches, one cycle per batch, decisions
stored before the backend sees them, backend reports applied; and recovery from the store."""

from __future__ import annotations

import functools
import gc
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from service_helpers import Clock, budgets, job, running_loop, settle, small_cluster, state_of

from toposched.backends.dry_run import DryRunBackend
from toposched.backends.local_node import local_cluster
from toposched.cluster.errors import InputError
from toposched.scheduler.collection import IDLE_COLLECTION_AFTER
from toposched.service import commands
from toposched.service.commands import Submission
from toposched.service.core import ServiceCore
from toposched.service.documents import body_hash, split_job
from toposched.service.errors import Conflict, NeverFits
from toposched.service.loop import Loop
from toposched.service.recovery import starter
from toposched.service.store import Store


def submit(loop: Loop, document: dict[str, Any], key: str | None = None) -> tuple[str, bool]:
    fields, run = split_job(document)
    submission = Submission(fields, run, key, body_hash(document))

    def apply(core: ServiceCore, now: float) -> tuple[str, bool]:
        record, created = commands.submit(core, submission, now)
        return record.job_id, created

    return loop.call(apply)


def test_a_submission_runs_and_finishes_after_its_runtime(tmp_path: Path) -> None:
    clock = Clock()
    backend = DryRunBackend()
    with running_loop(tmp_path / "s.db", clock, backend) as loop:
        submit(loop, job("a", expected_runtime="10m", run={"command": ["sleep", "1"]}))
        settle(loop)
        assert state_of(loop, "a") == "running"
        launch = backend.launch("a")
        assert launch is not None and launch.attempt == 1
        assert launch.run is not None and launch.run.command == ("sleep", "1")
        assert len(launch.pods[0].gpus) == 4
        clock.now += 601
        settle(loop)
        assert state_of(loop, "a") == "finished"
        assert loop.call(lambda core, now: core.record("a").reason) == "finished"
    kinds = [e.kind for e in Store(str(tmp_path / "s.db")).events_after(0)]
    assert kinds == ["submitted", "bound", "started", "finished"]


def test_every_decision_is_stored_and_marked_sent(tmp_path: Path) -> None:
    clock = Clock()
    with running_loop(tmp_path / "s.db", clock) as loop:
        submit(loop, job("a"))
        settle(loop)
        settle(loop)
    store = Store(str(tmp_path / "s.db"))
    assert store.unsent_decisions() == []
    kinds = store._db.execute("SELECT job, attempt, kind FROM decisions").fetchall()
    assert kinds == [("a", 1, "start")]


def test_a_turn_commits_its_commands_reports_and_decisions_at_once(tmp_path: Path) -> None:
    """One commit per turn: when a submission is answered its decision is committed too, and
    the backend had nothing of it before that commit."""
    clock = Clock()
    backend = DryRunBackend()
    with running_loop(tmp_path / "s.db", clock, backend) as loop:
        settle(loop)
        assert loop.core is not None
        statements: list[str] = []
        launched_at_commit: list[bool] = []

        def note(sql: str) -> None:
            statements.append(sql)
            if sql == "COMMIT":
                launched_at_commit.append(backend.launch("a") is not None)

        assert isinstance(loop.core.store, Store)
        loop.core.store._db.set_trace_callback(note)
        submit(loop, job("a"))
        reader = Store(str(tmp_path / "s.db"))
        kinds = [e.kind for e in reader.events_after(0)]
        assert kinds[:2] == ["submitted", "bound"]
        assert [d.kind for d in reader.unsent_decisions()] == ["start"]
        # The submission's turn: from the BEGIN before its job's row to the next COMMIT (an
        # empty tick's turn may commit first).
        inserted = next(i for i, sql in enumerate(statements) if sql.startswith("INSERT INTO jobs"))
        begin = max(i for i, sql in enumerate(statements[:inserted]) if sql.startswith("BEGIN"))
        commit = statements.index("COMMIT", inserted)
        turn = statements[begin : commit + 1]
        assert turn.count("COMMIT") == 1
        assert any(sql.startswith("INSERT INTO decisions") for sql in turn)
        assert launched_at_commit[statements[: commit + 1].count("COMMIT") - 1] is False
        settle(loop)  # the next turn stores the `started` report and marks the start sent
        assert backend.launch("a") is not None
    assert Store(str(tmp_path / "s.db")).unsent_decisions() == []


def test_the_next_turn_is_built_while_a_commit_runs_and_answered_after_it(
    tmp_path: Path,
) -> None:
    """The writer commits a turn while the loop builds the next; neither is answered before
    the blocked commit is done."""
    with running_loop(tmp_path / "s.db", Clock()) as loop:
        settle(loop)
        assert loop.core is not None and isinstance(loop.core.store, Store)
        in_commit, gate = threading.Event(), threading.Event()

        def hold(sql: str) -> None:
            if sql == "COMMIT" and threading.current_thread().name == "toposched-writer":
                in_commit.set()
                gate.wait(10)

        loop.core.store._db.set_trace_callback(hold)
        assert in_commit.wait(10)  # some turn's commit is held
        applied = threading.Event()

        def command(core: ServiceCore, now: float) -> str:
            applied.set()
            core.store.add_event(now, "marked", None, None)
            return "done"

        answer = loop.submit(command)
        assert applied.wait(10)  # built meanwhile
        time.sleep(0.2)
        assert not answer.done()
        gate.set()
        assert answer.result(10) == "done"
        loop.core.store._db.set_trace_callback(None)
    kinds = [e.kind for e in Store(str(tmp_path / "s.db")).events_after(0)]
    assert "marked" in kinds


def test_a_loop_that_keeps_up_hands_a_turns_decisions_over_before_the_next_cycle(
    tmp_path: Path,
) -> None:
    """With nothing queued, the cycle after a turn's waits for that turn's commit and hands
    its decisions to the backend first: no cycle runs while a bound job's start is held back
    by its commit."""
    backend = DryRunBackend()
    with running_loop(tmp_path / "s.db", Clock(), backend) as loop:
        settle(loop)
        core = loop.core
        assert core is not None and isinstance(core.store, Store)
        gate = threading.Event()
        seen: list[tuple[bool, bool]] = []
        cycle = core.scheduler.cycle

        def observed_cycle(now: float) -> Any:
            job_a = core.scheduler.jobs.get("a")
            seen.append(
                (job_a is not None and job_a.state.name == "RUNNING", bool(backend.launch("a")))
            )
            return cycle(now)

        def hold(sql: str) -> None:
            if sql == "COMMIT" and threading.current_thread().name == "toposched-writer":
                gate.wait(10)

        core.scheduler.cycle = observed_cycle  # type: ignore[method-assign]
        core.store._db.set_trace_callback(hold)
        answer = loop.submit(functools.partial(_submit_command, document=job("a")))
        time.sleep(0.3)  # ticks come every 0.05 s: the loop would cycle meanwhile
        assert not answer.done()
        gate.set()
        assert answer.result(10) == ("a", True)
        settle(loop)
        core.store._db.set_trace_callback(None)
    after_a = [launched for running, launched in seen if running]
    assert after_a and all(after_a)


def _submit_command(core: ServiceCore, now: float, document: dict[str, Any]) -> tuple[str, bool]:
    fields, run = split_job(document)
    record, created = commands.submit(core, Submission(fields, run, None, "h"), now)
    return record.job_id, created


def test_refused_submissions_change_nothing(tmp_path: Path) -> None:
    clock = Clock()
    with running_loop(tmp_path / "s.db", clock) as loop:
        with pytest.raises(InputError, match="pods"):
            submit(loop, job("bad", pods=0))
        with pytest.raises(NeverFits, match="more than the cluster has"):
            submit(loop, job("huge", pods=5))
        with pytest.raises(NeverFits, match="the largest rack has 8"):
            submit(loop, job("wide", pods=3, topology={"required": "rack"}))
        with pytest.raises(NeverFits, match="no such account"):
            submit(loop, job("who", account="nobody"))
        with pytest.raises(NeverFits, match="not a leaf"):
            submit(loop, job("parent", account="research"))
        with pytest.raises(NeverFits, match="no node has that many GPUs"):
            submit(loop, job("fat", gpus=8))
        with pytest.raises(NeverFits, match="no GPU of these models"):
            submit(loop, job("model", resources_per_pod={"gpus": 1, "gpu_models": ["B200"]}))
        submit(loop, job("ok"))
        with pytest.raises(Conflict, match="exists"):
            submit(loop, job("ok"))
    assert [r.job_id for r in Store(str(tmp_path / "s.db")).jobs()] == ["ok"]


def test_an_idempotency_key_answers_the_first_job_again(tmp_path: Path) -> None:
    with running_loop(tmp_path / "s.db", Clock()) as loop:
        assert submit(loop, job("a"), key="k") == ("a", True)
        assert submit(loop, job("a"), key="k") == ("a", False)
        with pytest.raises(Conflict, match="another body"):
            submit(loop, job("a", gpus=2), key="k")


def test_concurrent_submissions_are_grouped_into_few_commits(tmp_path: Path) -> None:
    clock = Clock()
    with running_loop(tmp_path / "s.db", clock) as loop:
        assert loop.core is not None
        commits: list[int] = []
        assert isinstance(loop.core.store, Store)
        loop.core.store._db.set_trace_callback(
            lambda sql: commits.append(1) if sql == "COMMIT" else None
        )
        documents = [job(f"j{i}", gpus=1, account="prod") for i in range(200)]

        def one(core: ServiceCore, now: float, document: dict[str, Any]) -> str:
            fields, run = split_job(document)
            record, _ = commands.submit(core, Submission(fields, run, None, "h"), now)
            return record.job_id

        futures = [loop.submit(functools.partial(one, document=d)) for d in documents]
        assert sorted(f.result(30) for f in futures) == sorted(d["name"] for d in documents)
        settle(loop)
    assert len(Store(str(tmp_path / "s.db")).jobs()) == 200
    assert len(commits) < 50


def test_cancel_stops_a_running_job_and_frees_its_gpus(tmp_path: Path) -> None:
    clock = Clock()
    backend = DryRunBackend()
    with running_loop(tmp_path / "s.db", clock, backend) as loop:
        for name in ("a", "b", "c", "d", "e"):
            submit(loop, job(name))
        settle(loop)
        assert state_of(loop, "e") == "pending"
        loop.call(lambda core, now: commands.cancel(core, "a", now))
        settle(loop)
        assert backend.launch("a") is None
        assert state_of(loop, "e") == "running"
        with pytest.raises(Conflict, match="already cancelled"):
            loop.call(lambda core, now: commands.cancel(core, "a", now))


def test_a_node_going_down_requeues_its_resumable_gang(tmp_path: Path) -> None:
    clock = Clock()
    with running_loop(tmp_path / "s.db", clock) as loop:
        submit(loop, job("r", resumable=True))
        settle(loop)
        node = loop.call(lambda core, now: core.record("r").allocation.nodes[0])  # type: ignore[union-attr]
        name = f"n{node}"
        loop.call(lambda core, now: commands.node_action(core, name, "down", now))
        settle(loop)
        assert state_of(loop, "r") == "running"
        nodes = loop.call(lambda core, now: core.allocation_nodes(core.record("r").allocation))
        assert name not in nodes
        assert loop.call(lambda core, now: core.record("r").attempt) == 2


def test_priority_changes_are_stored(tmp_path: Path) -> None:
    with running_loop(tmp_path / "s.db", Clock()) as loop:
        submit(loop, job("a", gpus=4, pods=4))
        submit(loop, job("b"))
        loop.call(lambda core, now: commands.set_priority(core, "b", 5, now))
    assert Store(str(tmp_path / "s.db")).jobs()[1].priority == 5


def test_recovery_keeps_pending_order_submit_times_and_running_allocations(
    tmp_path: Path,
) -> None:
    clock = Clock()
    path = tmp_path / "s.db"
    with running_loop(path, clock) as loop:
        submit(loop, job("big", pods=4, expected_runtime="1h"))
        settle(loop)
        clock.now += 5
        submit(loop, job("p1"))
        clock.now += 5
        submit(loop, job("p2"))
        settle(loop)
        before = loop.call(lambda core, now: core.scheduler.queue_rows(now))
    clock.now += 100
    backend = DryRunBackend()
    with running_loop(path, clock, backend) as loop:
        assert state_of(loop, "big") == "running"
        assert backend.launch("big") is not None
        after = loop.call(lambda core, now: core.scheduler.queue_rows(now))
        assert [r.job for r in after] == [r.job for r in before] == ["p1", "p2"]
        times = loop.call(
            lambda core, now: [core.scheduler.jobs[j].submit_time for j in ("p1", "p2")]
        )
        assert times[1] - times[0] == 5
        free = loop.call(lambda core, now: core.scheduler.state.total_free_gpus)
        assert free == 0


def test_recovery_fails_or_requeues_what_the_backend_lost(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "s.db"
    with running_loop(path, clock) as loop:
        submit(loop, job("plain", pods=2))
        submit(loop, job("resumable", pods=2, resumable=True))
        settle(loop)
    with running_loop(path, clock, DryRunBackend(), resume=False) as loop:
        settle(loop)
        assert state_of(loop, "plain") == "failed"
        assert state_of(loop, "resumable") == "running"
        assert loop.call(lambda core, now: core.record("resumable").attempt) == 2


def test_decisions_stored_but_not_sent_are_sent_once_after_a_restart(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / "s.db"
    started = threading.Event()

    class Crashing(DryRunBackend):
        """A backend whose process dies before the first start reaches it."""

        def start(self, launch: Any) -> None:
            started.set()
            raise SystemExit("crash")

    store = Store(str(path))

    loop = Loop(starter(store, small_cluster(), budgets, Crashing()), clock=clock, tick_s=0.05)
    loop.start()
    assert loop.ready.wait(30)
    submit(loop, job("a"))
    assert started.wait(10)
    loop.stop()
    store.close()
    assert [d.kind for d in Store(str(path)).unsent_decisions()] == ["start"]
    backend = DryRunBackend()
    with running_loop(path, clock, backend, resume=False) as loop:
        settle(loop)
        assert state_of(loop, "a") == "running"
        assert backend.launches_total == 1
    assert Store(str(path)).unsent_decisions() == []


def test_a_start_the_backend_refuses_fails_that_job_and_the_loop_goes_on(tmp_path: Path) -> None:
    class Refusing(DryRunBackend):
        """A backend that cannot start one particular job."""

        def start(self, launch: Any) -> None:
            if launch.job_id == "refused":
                raise InputError("run.command", "x", "cannot be started here")
            super().start(launch)

    with running_loop(tmp_path / "s.db", Clock(), Refusing()) as loop:
        submit(loop, job("refused"))
        settle(loop)
        settle(loop)
        assert state_of(loop, "refused") == "failed"
        submit(loop, job("fine"))
        settle(loop)
        assert state_of(loop, "fine") == "running"
    events = Store(str(tmp_path / "s.db")).job_events("refused")
    assert "cannot be started here" in events[-1].data["detail"]


def test_a_store_of_another_cluster_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with running_loop(path, Clock()) as loop:
        submit(loop, job("a"))
    store = Store(str(path))
    loop = Loop(starter(store, local_cluster(8), budgets, DryRunBackend()), clock=Clock())
    loop.start()
    loop.stop()
    assert isinstance(loop.failed, InputError)
    assert "another cluster" in str(loop.failed)
    assert [r.job_id for r in store.jobs()] == ["a"]


class Stop(BaseException):
    """What a command raises to stop the loop in the middle of a turn."""


def test_a_turn_that_fails_commits_nothing_but_keeps_the_backends_reports(
    tmp_path: Path,
) -> None:
    """The failed turn's commands are rolled back and answered with an error, its reports are
    stored unapplied, and a restart applies them."""
    clock = Clock()
    backend = DryRunBackend()
    held, release = threading.Event(), threading.Event()

    def hold(core: ServiceCore, now: float) -> None:
        held.set()
        release.wait(10)

    def fail(core: ServiceCore, now: float) -> None:
        raise Stop()

    with running_loop(tmp_path / "s.db", clock, backend) as loop:
        submit(loop, job("a", expected_runtime="10m"))
        settle(loop)
        assert state_of(loop, "a") == "running"
        holding = loop.submit(hold)
        assert held.wait(10)
        # While the loop is inside a turn: the run ends, and the next turn will fail.
        clock.now += 601
        fields, run = split_job(job("b"))
        lost = loop.submit(
            lambda core, now: commands.submit(core, Submission(fields, run, None, "h"), now)
        )
        failing = loop.submit(fail)
        release.set()
        holding.result(10)
        with pytest.raises(RuntimeError, match="stopped"):
            lost.result(10)
        with pytest.raises(RuntimeError, match="stopped"):
            failing.result(10)
        loop.stop()
        assert isinstance(loop.failed, Stop)
    store = Store(str(tmp_path / "s.db"))
    assert [r.job_id for r in store.jobs()] == ["a"]
    assert [(s.report.job_id, str(s.report.kind)) for s in store.unapplied_reports()] == [
        ("a", "finished")
    ]
    with running_loop(tmp_path / "s.db", clock, DryRunBackend()) as loop:
        assert state_of(loop, "a") == "finished"


def test_a_serving_loop_collects_between_turns_and_freezes_what_lasts(tmp_path: Path) -> None:
    assert gc.isenabled()
    try:
        with running_loop(tmp_path / "s.db", Clock()) as loop:
            submit(loop, job("a"))
            assert not gc.isenabled()  # no collection starts in the middle of a turn
            frozen, passes = gc.get_freeze_count(), loop.collector.passes
            lasting = [[index] for index in range(IDLE_COLLECTION_AFTER)]
            submit(loop, job("b"))
            deadline = time.monotonic() + 10
            while loop.collector.passes == passes:  # the loop's next wait starts with a pass
                assert time.monotonic() < deadline, "the loop did not collect"
                time.sleep(0.01)
            assert gc.get_freeze_count() >= frozen + len(lasting)
        assert gc.isenabled()  # the loop stopped: collection is automatic again
        # Whoever runs the service with collection switched off keeps it off.
        gc.disable()
        with running_loop(tmp_path / "s.db", Clock()) as loop:
            submit(loop, job("c"))
            settle(loop)
            assert not loop.collector.active and loop.collector.passes == 0
        assert not gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()
