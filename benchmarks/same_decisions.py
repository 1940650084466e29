"""Whether a whole run decides the same with cycles that skip settled jobs as with full cycles.

Runs toposched twice on the workload of the `toposched simulate` options given: once as
configured (cycles after submissions, checkpoints, protection ends, completions, preemptions and
evicted jobs' leaving skip the jobs the last cycle settled; docs/policy.md, *Cycles after
submissions only*) and once with every cycle a full one (`incremental=False`), and compares the
two decision logs, every Bind, Evict and Reserve with the time of its cycle. Unlike
`--check-incremental`, which runs a full cycle on a copy of the scheduler beside each such
cycle, it costs two runs, so a month can be checked whole.

    .venv/bin/python benchmarks/same_decisions.py --days 30 [--full-cycle-every 0]

Prints the number of decisions and of cycles that skipped jobs, or the first difference, as
JSON; exits 1 if the logs differ.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from toposched.cli.simulate_options import add_options, check_options
from toposched.cli.simulate_run import build_workload, scheduler_settings
from toposched.cli.simulate_values import FullCycleEvery
from toposched.cluster.state import ClusterState
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Decision
from toposched.scheduler.incremental import differences
from toposched.scheduler.turn import CycleResult
from toposched.sim.engine import simulate
from toposched.workloads.model import Workload


@dataclass
class Log:
    """A run's decisions in order, the time of each one's cycle, and what its cycles did."""

    times: list[float] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    incremental: int = 0
    seconds: float = 0.0


def logged(workload: Workload, settings: dict[str, Any]) -> Log:
    """Simulate `workload` under toposched with `settings`, logging every cycle's decisions."""
    log = Log()

    def build(state: ClusterState, tree: BudgetTree) -> Scheduler:
        scheduler = Scheduler(state, tree, **settings)
        cycle = scheduler.cycle

        def recorded(now: float) -> CycleResult:
            result = cycle(now)
            log.times.extend(now for _ in result.decisions)
            log.decisions.extend(result.decisions)
            log.incremental += result.incremental
            return result

        scheduler.cycle = recorded  # type: ignore[method-assign]
        return scheduler

    began = time.perf_counter()
    simulate(workload, build, scheduler_name="toposched")
    log.seconds = time.perf_counter() - began
    return log


def compare(shortcut: Log, full: Log) -> dict[str, Any]:
    """The two logs side by side: their sizes, and the first difference if any."""
    out: dict[str, Any] = {
        "decisions": len(full.decisions),
        "cycles_that_skipped_jobs": shortcut.incremental,
        "seconds": {"skipping": round(shortcut.seconds, 1), "full": round(full.seconds, 1)},
    }
    difference = differences(full.decisions, shortcut.decisions)
    if difference is None:  # as many decisions, each the same: made at the same times?
        pairs = zip(full.times, shortcut.times, strict=True)
        for number, (want, got) in enumerate(pairs, start=1):
            if want != got:
                difference = f"decision {number} made at {got!r}, not {want!r}"
                break
    out["same"] = difference is None
    if difference is not None:
        out["difference"] = difference
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_options(parser)
    args = parser.parse_args()
    check_options(args)
    if args.full_cycle_every is FullCycleEvery.ALWAYS:
        parser.error("--full-cycle-every always leaves no cycle that skips jobs to compare")
    workload = build_workload(args)
    settings = scheduler_settings(args)
    shortcut = logged(workload, {**settings, "incremental": True})
    full = logged(workload, {**settings, "incremental": False})
    out = compare(shortcut, full)
    json.dump(out, sys.stdout, indent=2)
    print()
    if not out["same"]:
        sys.exit(1)


if __name__ == "__main__":
    main()
