"""Simulator benchmarks: scheduler events per second of wall time on short Ai2-like runs."""

from __future__ import annotations

from typing import Any

import pytest

from toposched.sim.engine import simulate
from toposched.workloads.ai2 import ai2_like
from toposched.workloads.model import Workload


@pytest.fixture(scope="module")
def ai2_quarter_day() -> Workload:
    # The demo's workload (1,024 GPUs), a quarter of a day: its backlog and first arrivals.
    return ai2_like(seed=0, days=0.25, gpus=1024)


def test_ai2_like_quarter_day(benchmark: Any, ai2_quarter_day: Workload) -> None:
    result = benchmark.pedantic(lambda: simulate(ai2_quarter_day), rounds=3, iterations=1)
    events = result.scheduler_events
    benchmark.extra_info["scheduler_events"] = events
    if benchmark.stats is not None:  # None under --benchmark-disable (a smoke run)
        benchmark.extra_info["events_per_second"] = events / benchmark.stats.stats.median
    assert events > 0 and result.counts["binds"] > 0
