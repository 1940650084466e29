"""Whose reservation a team's large runs wait behind, in a toposched run.

Runs toposched alone with the options of `toposched simulate` and, after every cycle, finds the
teams short of their budget whose every waiting budgeted job asks for more GPUs than the whole
budget (the owed GPU-hours' cause `jobs_larger_than_budget`): such a run starts on borrowed
room, and a reservation is what drains room for it, one job's at a time (docs/policy.md). Until
the next cycle, each such team's shortfall (min(budget, demand) less its running budgeted GPUs)
is counted by who holds the cycle's reservation: a run of the team itself, another team's job,
or nobody. Prints JSON: the run's outcomes and, per team, the GPU-hours short that way by
holder, most first.

    .venv/bin/python benchmarks/reservation_waits.py --days 30 --checkpoint-wait 1h \\
        --urgent-priority 10 --eviction-worth 1 --eviction-worth-scope own-account \\
        --checkpoint-wait-owed --checkpoint-wait-first 1h --unallocated-headroom 0.5 \\
        --unallocated-headroom-reserved --unallocated-order oldest
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from typing import Any

from pending_watch import watched_run

from toposched.cli.simulate_options import add_options, check_options
from toposched.cluster.units import HOUR
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Reserve
from toposched.scheduler.jobs import Job
from toposched.scheduler.turn import CycleResult
from toposched.sim.metrics import summarize

OWN = "its own run"
NOBODY = "no reservation"


def holder_of(result: CycleResult, jobs: dict[str, Job]) -> str | None:
    """The account of the job holding the cycle's reservation (None: no reservation)."""
    reserved = [decision for decision in result.decisions if isinstance(decision, Reserve)]
    return jobs[reserved[-1].job_id].spec.account if reserved else None


def short_of_large_runs(scheduler: Scheduler, waiting: dict[str, list[float]]) -> dict[str, float]:
    """GPUs each team is short of min(budget, demand) while every job it has waiting (their
    GPUs in `waiting`, by account) is larger than its whole budget."""
    short = {}
    for account, sizes in waiting.items():
        budget = scheduler.budget_gpus(account)
        if budget <= 0 or min(sizes) <= budget:
            continue
        running = scheduler.running_gpus(account)
        missing = min(budget, running + sum(sizes)) - running
        if missing > 1e-6:
            short[account] = missing
    return short


class HolderLedger:
    """GPU-seconds short while waiting with runs larger than the budget, by team and holder."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.seconds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self._since = 0.0
        self._short: dict[str, float] = {}
        self._holder: str | None = None

    def close(self, now: float) -> None:
        """Count the shortfall since the last cycle up to `now`."""
        span = now - self._since
        for account, gpus in self._short.items():
            holder = self._holder
            by = NOBODY if holder is None else OWN if holder == account else holder
            self.seconds[account][by] += gpus * span
        self._since = now

    def observe(self, now: float, result: CycleResult, pending: list[Job]) -> None:
        """After a cycle at `now`: the teams short and the reservation's holder until the next."""
        self.close(now)
        waiting: dict[str, list[float]] = defaultdict(list)
        for job in pending:
            if job.spec.min_runtime != 0:  # declared unallocated work is owed nothing
                waiting[job.spec.account].append(job.spec.total_gpus)
        self._short = short_of_large_runs(self.scheduler, waiting)
        self._holder = holder_of(result, self.scheduler.jobs)


def report(summary: dict[str, Any], ledger: HolderLedger) -> dict[str, Any]:
    """The run's outcomes and, per team, the GPU-hours short by holder, most first."""
    fairness = summary["fairness"]
    teams = {}
    for account, by in sorted(ledger.seconds.items(), key=lambda item: -sum(item[1].values())):
        holders = sorted(by.items(), key=lambda item: -item[1])
        teams[account] = {
            "owed_met": fairness["teams"][account]["owed_met"],
            "short_gpu_hours": sum(by.values()) / HOUR,
            "by_holder": {holder: seconds / HOUR for holder, seconds in holders},
        }
    return {
        "owed_met": fairness["owed_met"],
        "worst_team_owed_met": fairness["worst_team_owed_met"],
        "short_gpu_hours_jobs_larger_than_budget": fairness["shortfall_gpu_hours_by_cause"][
            "jobs_larger_than_budget"
        ],
        "teams": teams,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_options(parser)
    args = parser.parse_args()
    check_options(args)
    result, ledger = watched_run(args, HolderLedger)
    summary = summarize(result)
    print(json.dumps(report(summary, ledger), indent=2))


if __name__ == "__main__":
    main()
