"""Multi-team replay of ITP cluster 04 for the preemption cost/benefit measurements.

The ITP traces name no teams, so each job is given one of 12 teams by a hash of its id, with
Zipf-like weights; every team's budget is its share of the replayed GPU-time. Jobs cannot
resume and declare a min runtime of 1 h (as `itp_replay` makes them). Classes: `debug` (runs
at most 30 min), `training` (16 GPUs or more), `other`. See docs/preemption.md.

    .venv/bin/python benchmarks/itp_teams.py --days 14 --gpus 512 [--worth] [--only toposched]
"""

from __future__ import annotations

import argparse
import json
import math
import zlib
from dataclasses import replace

from toposched.cluster.units import HOUR
from toposched.policy.contract import Contract
from toposched.policy.worth import EvictionWorth
from toposched.scheduler.core import Scheduler
from toposched.sim.baselines import BASELINES
from toposched.sim.compare import comparison_table, run_comparison
from toposched.sim.protocol import SchedulerFactory, toposched_scheduler
from toposched.workloads.model import Workload
from toposched.workloads.replay import itp_replay

TEAMS = 12


def team_workload(days: float, gpus: int) -> Workload:
    base = itp_replay(4, nodes=gpus // 8, days=days)
    weights = [1.0 / (rank + 1) for rank in range(TEAMS)]
    total = sum(weights)
    bounds, running = [], 0.0
    for weight in weights:
        running += weight / total
        bounds.append(running)
    jobs, used = [], [0.0] * TEAMS
    for job in base.jobs:
        draw = (zlib.crc32(job.spec.name.encode()) % 100_000) / 100_000
        team = next(i for i, bound in enumerate(bounds) if draw < bound or i == TEAMS - 1)
        gpus_held = job.spec.pods * job.spec.resources_per_pod.gpus
        used[team] += gpus_held * job.runtime
        if job.runtime <= 0.5 * HOUR:
            job_class = "debug"
        elif gpus_held >= 16:
            job_class = "training"
        else:
            job_class = "other"
        spec = job.spec.model_copy(update={"account": f"team-{team + 1:02d}"})
        jobs.append(replace(job, spec=spec, job_class=job_class))
    grand = sum(used)
    accounts = {
        f"team-{i + 1:02d}": {"share": max(0.1, math.floor(1000 * used[i] / grand) / 10)}
        for i in range(TEAMS)
    }
    base.jobs = jobs
    base.budget = {"accounts": accounts}
    base.name = f"itp:04 x {TEAMS} teams"
    return base


def worth_scheduler(worth: EvictionWorth) -> SchedulerFactory:
    contract = Contract(worth=worth)
    return lambda state, tree: Scheduler(state, tree, contract=contract)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", type=float, default=14.0)
    parser.add_argument("--gpus", type=int, default=512)
    parser.add_argument("--worth", action="store_true", help="toposched with EvictionWorth()")
    parser.add_argument("--ratio", type=float, default=None)
    parser.add_argument("--horizon-h", type=float, default=None)
    parser.add_argument("--only", default=None, help="comma-separated scheduler names")
    parser.add_argument("--json", default=None, help="write the summaries to this file")
    args = parser.parse_args()
    workload = team_workload(args.days, args.gpus)
    factory: SchedulerFactory = toposched_scheduler
    if args.worth or args.ratio is not None or args.horizon_h is not None:
        worth = EvictionWorth()
        if args.ratio is not None:
            worth = replace(worth, max_lost_per_gained=args.ratio)
        if args.horizon_h is not None:
            worth = replace(worth, horizon=args.horizon_h * HOUR)
        factory = worth_scheduler(worth)
    schedulers: dict[str, SchedulerFactory] = {"toposched": factory, **BASELINES}
    if args.only:
        schedulers = {name: schedulers[name] for name in args.only.split(",")}
    print(f"{workload.description}, {len(workload.jobs):,} jobs, budget {workload.budget}")
    runs = run_comparison(workload, schedulers, curve_points=0, map_moments=())
    summaries = {name: run.summary for name, run in runs.items()}
    from rich.console import Console

    Console(width=160).print(comparison_table(summaries, title=workload.name))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(summaries, out, default=str)


if __name__ == "__main__":
    main()
