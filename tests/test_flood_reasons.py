"""A flood of jobs submitted at one instant: the walk answers the jobs alike an earlier one
without the rest of their turn, and every pending job is told, after every cycle, exactly what a
plain walk (each job's whole turn, in queue order) tells it, with the same decisions."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from cycle_log import CycleLog, logged_run

from toposched.policy.queue_entry import QueueEntry
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.scheduler.incremental import Walk
from toposched.scheduler.jobs import JobState
from toposched.scheduler.turn import Turn
from toposched.workloads.files import load_workload

Told = tuple[str, str, str, object]
"""A pending job's id, reason, reason code and refusal."""


def write_flood(path: Path, jobs: int, seed: int) -> Path:
    """`jobs` jobs submitted at 0 on 64 GPUs, of two accounts, several sizes, runtimes and
    priorities; some protected once running, so that preemption is refused too."""
    draw = random.Random(seed)
    cluster = {"builder": "superpod", "spine_groups": 1, "units_per_group": 2, "nodes_per_unit": 4}
    header = {"name": "flood", "cluster": cluster, "budget": {"accounts": {"a": 50, "b": 50}}}
    lines = [json.dumps(header)]
    for _ in range(jobs):
        job = {
            "submit": 0,
            "runtime": draw.choice([60, 300, 600, 1800]),
            "account": draw.choice("ab"),
            "priority": draw.choice([0, 0, 0, 5]),
            "pods": 1,
            "resources_per_pod": {"gpus": draw.choice([1, 1, 2, 4, 8])},
        }
        if draw.random() < 0.3:
            job["min_runtime"] = 600
        lines.append(json.dumps(job))
    path.write_text("\n".join(lines) + "\n")
    return path


def plain_walk(scheduler: Scheduler) -> None:
    """Every pending job's whole turn, in queue order: the walk without its shortcut."""
    walker = scheduler.walker

    def walk(
        turn: Turn,
        runs: Iterable[Iterable[QueueEntry]],
        size: int,
        _: Walk,
        __: frozenset[str],
        ___: bool,
    ) -> bool:
        entries = [entry for run in runs for entry in run]
        pending = [scheduler.jobs[entry.job_id] for entry in entries]
        nominated = [job.nomination.nodes for job in pending if job.nomination is not None]
        if nominated:
            turn.fence.close(np.concatenate(nominated))
        turn.result.considered = size
        for entry, job in zip(entries, pending, strict=True):
            walker.consider(turn, entry, job)
        return False  # leaves nothing for a cycle after submissions only

    walker.walk = walk  # type: ignore[method-assign,assignment]


def note_told(
    scheduler: Scheduler, told: list[list[Told]], results: list[CycleResult] | None = None
) -> None:
    """After each of the scheduler's cycles, what each pending job was told is appended to
    `told` (and the cycle's result to `results`, if given)."""
    cycle = scheduler.cycle

    def noted(now: float) -> CycleResult:
        result = cycle(now)
        if results is not None:
            results.append(result)
        told.append(
            [
                (job.job_id, job.reason, str(job.reason_code), job.refusal)
                for job in scheduler.jobs.values()
                if job.state is JobState.PENDING
            ]
        )
        return result

    scheduler.cycle = noted  # type: ignore[method-assign]


def told_after_each_cycle(path: Path, plain: bool) -> tuple[CycleLog, list[list[Told]]]:
    """The decision log of a run of the workload in `path` with every cycle a full one, and
    what each pending job was told after each cycle."""
    told: list[list[Told]] = []

    def configure(scheduler: Scheduler) -> None:
        if plain:
            plain_walk(scheduler)
        note_told(scheduler, told)

    log = logged_run(load_workload(path), configure, incremental=False)
    return log, told


def test_a_flood_is_told_what_a_plain_walk_tells_it(tmp_path: Path) -> None:
    path = write_flood(tmp_path / "flood.jsonl", jobs=300, seed=3)

    plain, plain_told = told_after_each_cycle(path, plain=True)
    walked, walked_told = told_after_each_cycle(path, plain=False)

    assert plain.lines and walked.lines == plain.lines
    assert len(walked_told) == len(plain_told) > 10
    for number, (want, got) in enumerate(zip(plain_told, walked_told, strict=True), start=1):
        assert got == want, f"cycle {number}: a pending job was told otherwise"
    assert any(len(pending) > 100 for pending in plain_told), "the queue never grew long"
