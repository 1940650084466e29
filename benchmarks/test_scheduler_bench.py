"""Scheduler benchmarks: cycles, preemption decisions and node failures on the 1M-GPU fleet."""

from __future__ import annotations

from typing import Any

import pytest

from toposched.bench.cycle import (
    busy_scheduler,
    gang_spec,
    replace_a_running_job,
    submit_blocked,
    team_name,
)
from toposched.bench.preempt import _decide, frontier_job
from toposched.scheduler.core import Scheduler
from toposched.scheduler.preemption import PreemptionPlan


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


def test_preemption_decision_one_rack(benchmark: Any, busy: Scheduler) -> None:
    busy.submit(gang_spec("rack-job", team_name(0), 18, 4, required="rack"), 1.0)
    plan = benchmark.pedantic(lambda: _decide(busy, "rack-job", 1.0), rounds=10, iterations=1)
    busy.cancel("rack-job", 1.0)
    assert isinstance(plan, PreemptionPlan)


def test_preemption_decision_200k_gpu_job(benchmark: Any, busy: Scheduler) -> None:
    busy.submit(frontier_job(), 1.0)
    plan = benchmark.pedantic(lambda: _decide(busy, "frontier-job", 1.0), rounds=5, iterations=1)
    busy.cancel("frontier-job", 1.0)
    assert isinstance(plan, PreemptionPlan)
