"""A reservation kept through releases: when nothing but the ends and starts of jobs released
before the one it waits for changed the cluster since the last search, the last answer is
kept, the releases ahead counted again. Each kept answer is checked by a search
(`verify_kept`), and the decisions are those of the runs that check them."""

from __future__ import annotations

import pytest
from cycle_log import CycleLog, logged_run

from toposched.scheduler.core import Scheduler
from toposched.workloads.ai2 import ai2_like
from toposched.workloads.frontier import frontier_lab
from toposched.workloads.model import Workload

SIMULATIONS = {
    "ai2-seed7": lambda: ai2_like(seed=7, days=1.0, gpus=256),
    "frontier-seed5": lambda: frontier_lab(seed=5, days=1.0, racks_per_block=2),
}


def kept(log: CycleLog) -> int:
    return sum(scheduler.reservations.kept_through_releases for scheduler in log.schedulers)


def run(workload: Workload, verify: bool) -> CycleLog:
    def configure(scheduler: Scheduler) -> None:
        scheduler.reservations.verify_kept = verify

    return logged_run(workload, configure)


@pytest.mark.parametrize("name", sorted(SIMULATIONS))
def test_reservations_kept_through_releases_are_what_a_search_finds(name: str) -> None:
    verified = run(SIMULATIONS[name](), verify=True)  # raises where a search answers otherwise
    trusted = run(SIMULATIONS[name](), verify=False)
    assert verified.lines, "no decisions to compare"
    assert trusted.lines == verified.lines
    assert kept(trusted) == kept(verified) > 0
