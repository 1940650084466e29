"""The most occupancy any scheduler can reach on a workload, against simulated runs.

Builds the Ai2-like workload (or reads a workload file), computes the fluid bounds of
`toposched.sim.occupancy_bound` and, for each `summary.json` given, sets the run's occupancy
beside them: its useful occupancy (GPU time held less the GPU-hours its runs lost) is what the
bound caps. See docs/simulator.md, *How much occupancy the workload allows*.

    .venv/bin/python benchmarks/occupancy_bound.py --gpus 1024 --days 30 out/summary.json
    .venv/bin/python benchmarks/occupancy_bound.py --workload runs/ai2.jsonl --json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from toposched.cluster.units import DAY, HOUR
from toposched.sim.occupancy_bound import DEFAULT_STEP, OccupancyBound, occupancy_bound
from toposched.workloads.ai2 import ai2_like
from toposched.workloads.files import load_workload
from toposched.workloads.model import Workload

LOST_TARGET = 0.015
"""Issue 43's limit: GPU-hours lost to evictions at most 1.5% of those delivered."""


def bound_figures(bound: OccupancyBound) -> dict[str, Any]:
    days = int(bound.horizon // DAY)
    return {
        "occupancy_bound": bound.occupancy,
        "fluid_schedule_occupancy": bound.schedule_occupancy,
        "certified_gap": bound.certified_gap,
        "offered_over_capacity": bound.offered_gpu_seconds / bound.capacity_gpu_seconds,
        "occupancy_bound_losing_1_5_percent": bound.occupancy_with_loss(LOST_TARGET),
        "fluid_schedule_occupancy_by_day": [
            round(
                1
                - bound.idle_gpu_seconds_between(d * DAY, (d + 1) * DAY)
                / (bound.capacity_gpus * DAY),
                4,
            )
            for d in range(days)
        ],
    }


def run_figures(summary: dict[str, Any], bound: OccupancyBound) -> dict[str, Any]:
    capacity_hours = bound.capacity_gpu_seconds / HOUR
    occupancy = summary["utilisation"]["occupancy"]
    lost = summary["disruption"]["gpu_hours_lost"]
    useful = occupancy - lost / capacity_hours
    return {
        "scheduler": summary["scheduler"],
        "occupancy": occupancy,
        "gpu_hours_lost": lost,
        "useful_occupancy": useful,
        "below_bound_points": 100 * (bound.occupancy - useful),
    }


def workload_of(args: argparse.Namespace) -> Workload:
    if args.workload is not None:
        return load_workload(Path(args.workload))
    return ai2_like(seed=args.seed, days=args.days, gpus=args.gpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("summaries", nargs="*", help="summary.json files of runs to compare")
    parser.add_argument("--workload", help="a workload file instead of the Ai2-like one")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--days", type=float, default=30.0)
    parser.add_argument("--gpus", type=int, default=3072)
    parser.add_argument("--step", type=float, default=DEFAULT_STEP, help="seconds per step")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    workload = workload_of(args)
    bound = occupancy_bound(workload, step=args.step)
    windowed = occupancy_bound(workload, step=args.step, windows=True)
    figures: dict[str, Any] = {
        "workload": workload.description or workload.name,
        "gpus": workload.capacity_gpus,
        "any_scheduler": bound_figures(bound),
        "runs_never_suspended": bound_figures(windowed),
        "runs": [run_figures(json.loads(Path(p).read_text()), bound) for p in args.summaries],
    }
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(figures["workload"])
    for key in ("any_scheduler", "runs_never_suspended"):
        part = figures[key]
        bound, schedule = part["occupancy_bound"], part["fluid_schedule_occupancy"]
        offered, lossy = part["offered_over_capacity"], part["occupancy_bound_losing_1_5_percent"]
        print(
            f"{key}: occupancy at most {bound:.4%} (fluid schedule {schedule:.4%}; offered "
            f"{offered:.3f}x capacity; losing 1.5% of delivered: {lossy:.4%})"
        )
    for path, run in zip(args.summaries, figures["runs"], strict=True):
        print(
            f"{path}: occupancy {run['occupancy']:.4%}, lost {run['gpu_hours_lost']:,.0f} "
            f"GPU-hours, useful {run['useful_occupancy']:.4%} "
            f"({run['below_bound_points']:.2f} points below the bound)"
        )


if __name__ == "__main__":
    main()
