"""Preemption through `Scheduler.cycle` on the churned fleet (see toposched.bench.preempt):
each run submits a one-rack job where no rack is free, and its plan is checked."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from toposched.bench.checks import check_cycle, check_victims_free_room
from toposched.bench.cycle import gang_spec
from toposched.bench.mixes import account_of, churned_scheduler, take_free_racks
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.scheduler.decisions import Evict
from toposched.scheduler.jobs import JobState


@pytest.fixture(scope="module")
def churned() -> Scheduler:
    scheduler = churned_scheduler()
    take_free_racks(scheduler, 1.0)
    return scheduler


def test_one_rack_preemption_cycle(benchmark: Any, churned: Scheduler) -> None:
    clock = itertools.count(2.0)
    names = itertools.count()
    results: list[tuple[str, CycleResult]] = []

    def submit() -> tuple[tuple[()], dict[str, Any]]:
        name = f"rack-job-{next(names)}"
        churned.submit(gang_spec(name, account_of(0), 18, 4, required="rack"), next(clock))
        results.append((name, CycleResult(0.0)))
        return (), {}

    def decide() -> None:
        results[-1] = (results[-1][0], churned.cycle(float(next(clock))))

    benchmark.pedantic(decide, setup=submit, rounds=5, iterations=1)
    name, result = results[-1]
    check_cycle(churned, result)
    victims = [d.job_id for d in result.decisions if isinstance(d, Evict)]
    if victims:
        check_victims_free_room(churned.state, churned.jobs[name].request, victims)
    else:
        assert churned.jobs[name].state is JobState.RUNNING
