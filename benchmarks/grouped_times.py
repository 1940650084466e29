"""What the scripts that time a frontier run's calls one by one share: their options, the run,
the table they print (per group, the calls, their total, mean and median time, and a last line
for every call) and the log they write."""

from __future__ import annotations

import argparse
import time
from collections.abc import Mapping, Sequence

import numpy as np

from toposched.cluster.units import DAY
from toposched.sim.engine import Simulation
from toposched.sim.protocol import toposched_scheduler
from toposched.workloads.catalog import workload_by_name

UNITS = {"us": 1e6, "ms": 1e3}


def print_groups(what: str, timed: Mapping[str, Sequence[float]], unit: str) -> None:
    """`timed`: seconds per call by group, printed largest total first in `unit` ("us", "ms"),
    with each group's share of the total."""
    scale = UNITS[unit]
    width = max(len(what), *(len(name) for name in timed)) + 2
    print(
        f"{what:<{width}}{'count':>8}{'total s':>10}{'mean ' + unit:>10}"
        f"{'median ' + unit:>11}{'share':>8}"
    )
    rows = sorted(timed.items(), key=lambda item: -sum(item[1]))
    every = np.concatenate([np.array(times, dtype=float) for _, times in rows])
    total = float(every.sum()) or 1.0
    for name, times in [*rows, ("every call", every)]:
        values = np.array(times, dtype=float)
        print(
            f"{name:<{width}}{values.size:>8,}{values.sum():>10.3f}"
            f"{values.mean() * scale:>10.2f}{np.median(values) * scale:>11.2f}"
            f"{values.sum() / total:>8.1%}"
        )


def write_log(path: str, lines: Sequence[str]) -> None:
    """One line per call, in call order: two runs decided alike when their logs are equal."""
    with open(path, "w") as out:
        out.write("\n".join(lines) + "\n")


def frontier_options(description: str, days: float, logged: str) -> argparse.Namespace:
    """`--days` (default `days`), `--seed` and `--log` (`logged`: what each line says)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--days", type=float, default=days, help=f"simulated days (default {days:g})"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log", help=f"write {logged} to this file")
    return parser.parse_args()


def frontier_run(days: float, seed: int) -> float:
    """The frontier workload's run, one cycle per 10 minutes; returns its wall time."""
    workload = workload_by_name("frontier", seed=seed, days=days)
    simulation = Simulation(workload, toposched_scheduler, progress=False, cycle_interval=600.0)
    start = time.perf_counter()
    simulation.run()
    return time.perf_counter() - start


def report(
    args: argparse.Namespace,
    wall: float,
    what: str,
    timed: Mapping[str, Sequence[float]],
    unit: str,
    log: Sequence[str],
) -> None:
    print(f"{args.days:g} frontier days ({args.days * DAY:,.0f} s simulated) in {wall:.1f} s wall")
    print_groups(what, timed, unit)
    if args.log:
        write_log(args.log, log)
