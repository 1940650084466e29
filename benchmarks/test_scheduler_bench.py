"""Scheduler benchmarks on the 1M-GPU fleet through the scheduler's public path (`submit`,
`cycle`, `evicted`): a cycle on the arranged cycle setting, and preemption cycles on the
churned fleet as `toposched bench preempt` measures them."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from toposched.bench.checks import check_cycle, check_victims_free_room
from toposched.bench.cycle import (
    busy_scheduler,
    gang_spec,
    replace_a_running_job,
    submit_blocked,
)
from toposched.bench.mixes import account_of, churned_scheduler, take_free_racks
from toposched.bench.preempt import PreemptionRounds, pretraining_job
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Evict
from toposched.scheduler.jobs import JobState


@pytest.fixture(scope="module")
def busy() -> Scheduler:
    # About 100,000 running jobs, 40% of the racks lent to unallocated work; 10,000 pending.
    scheduler = busy_scheduler(106_000, unallocated_share=0.4)
    submit_blocked(scheduler, 10_000)
    scheduler.cycle(1.0)  # first cycle places what fits and evicts for what may preempt
    return scheduler


def test_cycle_where_nothing_new_fits(benchmark: Any, busy: Scheduler) -> None:
    # After a job's end (replaced in place), so remembered failures cannot answer the cycle.
    result = benchmark.pedantic(
        lambda: busy.cycle(1.0),
        setup=lambda: replace_a_running_job(busy, 1.0),
        rounds=10,
        iterations=1,
    )
    assert not result.bound


@pytest.fixture(scope="module")
def churned() -> Scheduler:
    # The churned fleet adopted by a scheduler, as `toposched bench preempt` measures it.
    return churned_scheduler()


def test_cycle_deciding_the_200k_gpu_job(benchmark: Any, churned: Scheduler) -> None:
    # One round: a preemption changes the fleet. The cycle's decisions are checked, and the
    # victims it chose for the job, if any, must free room for it; then all is undone.
    job = churned.submit(pretraining_job(), 1.0)
    result = benchmark.pedantic(lambda: churned.cycle(1.0), rounds=1, iterations=1)
    check_cycle(churned, result)
    evictions = [d for d in result.decisions if isinstance(d, Evict)]
    victims = [d.job_id for d in evictions if d.preemptor == job.job_id]
    if victims:
        check_victims_free_room(churned.state, job.request, victims)
    else:
        assert job.state is JobState.RUNNING or job.reason
    for eviction in evictions:
        churned.evicted(eviction.job_id, 1.5)
    for name in [job.job_id, *(d.job_id for d in evictions)]:
        if churned.jobs[name].state in (JobState.PENDING, JobState.RUNNING):
            churned.cancel(name, 1.5)


def test_preemption_cycle_one_rack(benchmark: Any, churned: Scheduler) -> None:
    # Every free rack taken by protected services first, so a one-rack job finds room only by
    # preemption. A new one-rack job each round, and the cycle that preempts for it; the round
    # before is checked (its victims free room, its preemptor starts there) and cleaned up.
    take_free_racks(churned, 2.0)
    rounds = PreemptionRounds(churned)
    clock, names = itertools.count(3), itertools.count()

    def submit() -> None:
        now = float(next(clock))
        rounds.settle(now)
        rounds.preemptor = f"rack-job-{next(names)}"
        churned.submit(gang_spec(rounds.preemptor, account_of(0), 18, 4, required="rack"), now)

    def decide() -> None:
        rounds.last = churned.cycle(float(next(clock)))

    benchmark.pedantic(decide, setup=submit, rounds=10, iterations=1)
    rounds.settle(float(next(clock)))
    assert len(rounds.victims) == 10 and min(rounds.victims) > 0
