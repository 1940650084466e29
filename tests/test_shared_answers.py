"""A cycle leaves a run of the queue once every job left in it would be answered alike, those
jobs reading their key's shared answer (`toposched.scheduler.tally`): the decisions are the
recorded ones, and every pending job is told, after every cycle, what a plain walk tells it;
even with the walk leaving runs at any queue length."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from decision_log import RUNS, line, path_of, record
from test_failed_first import two_racks_with_a_failed_gang
from test_flood_reasons import Told, note_told, plain_walk, write_flood
from test_preemption_scenarios import bound, spec

from toposched.cluster.state import ClusterState
from toposched.policy.budget import BudgetTree
from toposched.policy.fairshare import PendingQueue
from toposched.policy.queue_entry import QueueEntry
from toposched.policy.usage import UsageTracker
from toposched.scheduler import tally, walker
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.scheduler.jobs import JobState
from toposched.sim.engine import simulate
from toposched.workloads.ai2 import ai2_like
from toposched.workloads.files import load_workload
from toposched.workloads.model import Workload


def told_after_each_cycle(
    workload: Workload, plain: bool
) -> tuple[list[list[Told]], list[CycleResult]]:
    """What each pending job was told after each cycle of a run of `workload` with every
    cycle a full one, and the cycles' results; `plain`: every job's whole turn, in queue
    order."""
    told: list[list[Told]] = []
    results: list[CycleResult] = []

    def build(state: ClusterState, tree: BudgetTree) -> Scheduler:
        scheduler = Scheduler(state, tree, incremental=False)
        if plain:
            plain_walk(scheduler)
        note_told(scheduler, told, results)
        return scheduler

    simulate(workload, build)
    return told, results


def decided(results: list[CycleResult]) -> list[str]:
    return [line(result.now, decision) for result in results for decision in result.decisions]


def compare(workload: Callable[[], Workload]) -> list[CycleResult]:
    """Assert that every pending job is told what a plain walk tells it, after every cycle;
    the cycles' results."""
    plain, plain_results = told_after_each_cycle(workload(), plain=True)
    shared, results = told_after_each_cycle(workload(), plain=False)
    assert decided(results) == decided(plain_results)
    assert len(shared) == len(plain) > 10
    for number, (want, got) in enumerate(zip(plain, shared, strict=True), start=1):
        assert got == want, f"cycle {number}: a pending job was told otherwise"
    return results


def test_a_long_flood_is_told_the_same_by_shared_answers(tmp_path: Path) -> None:
    path = write_flood(tmp_path / "flood.jsonl", jobs=1500, seed=5)

    results = compare(lambda: load_workload(path))

    assert sum(result.shared for result in results) > 10_000
    assert all(result.shared == 0 for result in results if result.considered < 256)


def test_runs_left_at_any_length_tell_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(walker, "SHORT_QUEUE", 0)
    monkeypatch.setattr(tally, "LOOK_EVERY", 1)

    results = compare(lambda: ai2_like(seed=1, days=0.5, gpus=256))

    assert sum(result.shared for result in results) > 0


@pytest.mark.parametrize("name", ["ai2-seed1", "ai2-seed3", "frontier-seed1"])
def test_runs_left_at_any_length_decide_as_recorded(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (run,) = [run for run in RUNS if run.name == name]
    monkeypatch.setattr(walker, "SHORT_QUEUE", 0)
    monkeypatch.setattr(tally, "LOOK_EVERY", 1)

    actual = record(run)

    expected = path_of(run).read_text().splitlines()
    assert actual == expected


def test_runs_of_the_queue_are_its_order() -> None:
    tree = BudgetTree.from_dict({"accounts": {"a": 60, "b": 40}})
    queue = PendingQueue(tree, UsageTracker())
    for number in range(700):
        account = "ab"[number % 3 == 0]
        queue.add(QueueEntry(f"j{number}", account, number % 4, float(number % 50)))

    runs = [[entry.job_id for entry in run] for run in queue.runs(0.0)]
    ordered = [entry.job_id for entry in queue.ordered(0.0)]

    assert [job_id for run in runs for job_id in run] == ordered
    assert len(runs) == 2 and len(ordered) == 700

    # Read a run part way, change the queue behind and ahead of the place: the rest is read
    # as it is when reached.
    run = next(queue.runs(0.0))
    first = [next(run).job_id for _ in range(300)]
    queue.remove(first[0])
    ahead = [entry.job_id for entry in queue.ordered(0.0) if entry.job_id not in first]
    queue.remove(ahead[-1])
    rest = [entry.job_id for entry in run]
    assert ahead[-1] not in rest and rest[0] not in first
    assert set(first).isdisjoint(rest)


def test_a_cycle_with_gangs_put_first_walks_every_job() -> None:
    # The gang a node failure interrupted heads the cycle: the queue is then one run of
    # every account's jobs, which the walk may not leave; the next cycle reads it by account.
    schedulers = [two_racks_with_a_failed_gang("team-a", 2, incremental=False) for _ in range(2)]
    plain_walk(schedulers[0])
    for sched in schedulers:
        for number in range(600):
            account = ("team-b", "team-c")[number % 2]
            sched.submit(spec(f"wait{number}", account, gpus=(4, 2, 1)[number % 3]), 100)

    for now in (100.0, 101.0):
        plain, shared = (sched.cycle(now) for sched in schedulers)

        assert bound(shared) == bound(plain)
        assert (shared.shared == 0) if now == 100.0 else (shared.shared > 300), shared.shared
        told = [
            [
                (job.job_id, job.reason, job.reason_code, job.refusal)
                for job in sched.jobs.values()
                if job.state is JobState.PENDING
            ]
            for sched in schedulers
        ]
        assert told[1] == told[0]
