"""Multi-team replay of ITP cluster 04 for the preemption cost/benefit measurements.

The ITP traces name no teams, so each job is given one of 12 teams by a hash of its id, with
Zipf-like weights; every team's budget is its share of the replayed GPU-time. Jobs cannot
resume and declare a min runtime of 1 h (as `itp_replay` makes them). Classes: `debug` (runs
at most 30 min), `training` (16 GPUs or more), `other`. See docs/preemption.md.

    .venv/bin/python benchmarks/itp_teams.py --days 14 --gpus 512 [--no-worth] [--only toposched]
    .venv/bin/python benchmarks/itp_teams.py --only toposched --owed-only --loss-budget 100 \
        --horizon-h 4      # the rule's options: EvictionWorth(owed_only=..., loss_budget=...)
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from toposched.cluster.units import HOUR
from toposched.policy.contract import Contract
from toposched.policy.worth import EvictionWorth
from toposched.scheduler.core import Scheduler
from toposched.sim.baselines import BASELINES
from toposched.sim.compare import comparison_table, run_comparison
from toposched.sim.protocol import SchedulerFactory, toposched_scheduler
from toposched.workloads.model import Workload
from toposched.workloads.replay import itp_replay
from toposched.workloads.variants import split_among_teams

TEAMS = 12


def team_workload(days: float, gpus: int) -> Workload:
    """ITP cluster 04 split among the teams (`toposched simulate --workload itp:04 --teams 12`)."""
    return split_among_teams(itp_replay(4, nodes=gpus // 8, days=days), TEAMS)


def worth_scheduler(worth: EvictionWorth | None) -> SchedulerFactory:
    contract = Contract(worth=worth)
    return lambda state, tree: Scheduler(state, tree, contract=contract)


def _span(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _delivered(summary: dict[str, Any]) -> float:
    return float(summary["utilisation"]["gpu_hours"]["delivered"])


def issue_rows(summaries: dict[str, Any]) -> list[str]:
    """The measures of issue 43 as a Markdown table, one column per run."""

    def owed(s: dict[str, Any]) -> str:
        fairness = s["fairness"]
        return f"{100 * fairness['owed_met']:.1f}% / {100 * fairness['worst_team_owed_met']:.1f}%"

    def lost(s: dict[str, Any]) -> str:
        gone = s["disruption"]["gpu_hours_lost"]
        delivered = s["utilisation"]["gpu_hours"]["delivered"]
        share = 100 * gone / delivered
        return f"{s['disruption']['preemptions']:,} / {gone:,.0f} ({share:.1f}%)"

    def wait(job_class: str) -> Callable[[dict[str, Any]], str]:
        def cell(s: dict[str, Any]) -> str:
            waits = s["classes"].get(job_class, {}).get("wait_s", {})
            return f"{_span(waits.get('p50'))} / {_span(waits.get('p90'))}"

        return cell

    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("owed GPU-hours delivered (all / worst team)", owed),
        (
            "occupancy while work waits",
            lambda s: f"{100 * s['utilisation']['occupancy_while_work_waits']:.1f}%",
        ),
        (
            "GPU-hours delivered",
            lambda s: f"{s['utilisation']['gpu_hours']['delivered']:,.0f}",
        ),
        (
            "GPU-hours of useful work (delivered - lost)",
            lambda s: f"{_delivered(s) - s['disruption']['gpu_hours_lost']:,.0f}",
        ),
        ("preemptions / GPU-hours lost (of delivered)", lost),
        ("debug wait p50 / p90", wait("debug")),
        ("other jobs' wait p50 / p90", wait("other")),
        ("training (>= 16 GPUs) wait p50 / p90", wait("training")),
    ]
    lines = ["| | " + " | ".join(summaries) + " |", "|---|" + "---:|" * len(summaries)]
    for label, cell in rows:
        lines.append(f"| {label} | " + " | ".join(cell(s) for s in summaries.values()) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", type=float, default=14.0)
    parser.add_argument("--gpus", type=int, default=512)
    parser.add_argument(
        "--no-worth",
        action="store_true",
        help="toposched without the cost/benefit rule (Contract(worth=None))",
    )
    parser.add_argument("--ratio", type=float, default=None)
    parser.add_argument("--horizon-h", type=float, default=None)
    parser.add_argument("--shortfall-weight", type=float, default=None)
    parser.add_argument("--owed-only", action="store_true", help="EvictionWorth(owed_only=True)")
    parser.add_argument("--age-wait", type=float, default=None)
    parser.add_argument("--loss-budget", type=float, default=None, help="GPU-hours per day")
    parser.add_argument("--only", default=None, help="comma-separated scheduler names")
    parser.add_argument("--json", default=None, help="write the summaries to this file")
    parser.add_argument(
        "--table",
        nargs="+",
        metavar="LABEL=FILE",
        help="print the issue's measures from summaries written by --json, and run nothing",
    )
    args = parser.parse_args()
    if args.table:
        columns: dict[str, Any] = {}
        for item in args.table:
            label, _, path = item.partition("=")
            with open(path) as source:
                for name, summary in json.load(source).items():
                    columns[f"{label} {name}".strip()] = summary
        print("\n".join(issue_rows(columns)))
        return
    workload = team_workload(args.days, args.gpus)
    factory: SchedulerFactory = toposched_scheduler
    tuned = (args.ratio, args.horizon_h, args.shortfall_weight, args.age_wait, args.loss_budget)
    if args.no_worth:
        factory = worth_scheduler(None)
    elif args.owed_only or any(value is not None for value in tuned):
        worth = EvictionWorth()
        if args.ratio is not None:
            worth = replace(worth, max_lost_per_gained=args.ratio)
        if args.horizon_h is not None:
            worth = replace(worth, horizon=args.horizon_h * HOUR)
        if args.shortfall_weight is not None:
            worth = replace(worth, shortfall_weight=args.shortfall_weight)
        if args.age_wait is not None:
            worth = replace(worth, age_wait=args.age_wait)
        if args.owed_only:
            worth = replace(worth, owed_only=True)
        if args.loss_budget is not None:
            worth = replace(worth, loss_budget=args.loss_budget * HOUR)
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
