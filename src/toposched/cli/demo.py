"""`toposched demo`: an Ai2-like research cluster simulated for a few days, or the 1M-GPU fleet."""

from __future__ import annotations

import argparse
import time
from typing import Any

from toposched.cli.simulate_options import add_options
from toposched.cli.simulate_report import compare_and_report, simulate_and_report
from toposched.workloads.catalog import WorkloadKind, workload_kind

DEMO_DAYS = 2.0
DEMO_GPUS = 1024
"""Sized so the demo runs in seconds on a 2-core machine, toposched's run beside the baselines'
(see docs/simulator.md)."""


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "demo",
        help="simulate an Ai2-like research cluster for a few days and print the summary",
        description=f"Simulate the Ai2-like workload (15 budgeted teams, outstanding demand "
        f"2-3x capacity, debug, training, eval and unallocated work) on {DEMO_GPUS:,} GPUs for "
        f"{DEMO_DAYS:g} simulated days through toposched's scheduler and, on the same workload, "
        "three baselines (FIFO first-fit, Slurm-like multifactor with backfill, kube-like "
        "spread); print the schedulers side by side, one line per metric saying what it means "
        "(--verbose: every metric, Ai2's published outcomes as targets, the scheduler's speed), "
        "and write out/summary.json and the self-contained out/report.html. The runs go side "
        "by side, one per core (--jobs 1: one after another). With "
        "--fleet, build the reference 1,000,080-GPU GB300 NVL72 fleet instead and "
        "print its summary: levels, domains per level, nodes, GPUs, memory and build time. "
        "Other options are those of `toposched simulate`.",
    )
    parser.add_argument(
        "--fleet",
        action="store_true",
        help="build the 1,000,080-GPU GB300 fleet and print its summary (no simulation)",
    )
    parser.add_argument(
        "--alone",
        action="store_true",
        help="run toposched only, without the baselines and the HTML report",
    )
    parser.add_argument(
        "--verbose",
        action="store_true",
        help="print the full summary: every metric, the targets and the scheduler's speed",
    )
    add_options(parser, days=DEMO_DAYS, gpus=DEMO_GPUS)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.fleet:
        from toposched.cli.console import output_console
        from toposched.cli.summary import cluster_table
        from toposched.cluster.builders import million_gpu_cluster
        from toposched.cluster.state import ClusterState

        started = time.perf_counter()
        state = ClusterState(million_gpu_cluster())
        elapsed = time.perf_counter() - started
        output_console().print(
            cluster_table(state, "toposched: 1,000,080-GPU GB300 NVL72 fleet", elapsed)
        )
        return 0
    # Another workload (--workload) is titled by its own description.
    ai2 = workload_kind(args.workload) is WorkloadKind.AI2
    title = "toposched demo: Ai2-like research cluster" if ai2 else None
    if args.alone:
        simulate_and_report(args, title, verbose=args.verbose)
    else:
        compare_and_report(args, title, verbose=args.verbose)
    return 0
