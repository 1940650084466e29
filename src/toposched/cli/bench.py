"""`toposched bench`: the benchmark figures, for people (tables) and machines (--json)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toposched.bench.harness import Measurement

# Each suite's module (numpy, the compiled loops), rich and the harness are imported when the
# suite runs, so that `bench --help` and usage errors load none of them.
SUITES = ("cluster", "cycle", "placement", "preempt", "ray", "serve")
"""The suites: each `toposched.bench.<name>` module's `run_<name>_benchmarks(quick)`."""


def _suite(name: str) -> Callable[[bool], list[Measurement]]:
    module = import_module(f"toposched.bench.{name}")
    suite: Callable[[bool], list[Measurement]] = getattr(module, f"run_{name}_benchmarks")
    return suite


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "bench",
        help="run a benchmark suite and print its figures next to calibration figures",
        description="Run a benchmark suite on this machine. Each figure is the median of its "
        "timed runs, after up to 10 untimed warm-up runs (--json also gives the first, cold "
        "run as first_s), printed next to two calibration figures measured in the same run "
        "(one numpy.sort of 1M float32, and a loop of small numpy calls and dict updates that "
        "tracks interpreter-bound work better), so that readers on other machines can compare. "
        "Suites: "
        "cluster (build the 1M-GPU fleet, one-pod, 1,000-node and 50,004-node changes, a "
        "bulk release on a statement); placement (on the 1,000,080-GPU fleet at 70% "
        "occupancy: a 1-8 GPU job, a 200,016-GPU job of 2,778 rack slices, an 18,432-GPU job "
        "in 4 block slices preferring the fewest racks, a 20,000-GPU job preferring the fewest "
        "blocks, then racks, a 40,000-GPU job in small block slices preferring the fewest "
        "racks, an infeasible job rejected from "
        "aggregates); cycle (the churned 1,000,080-GPU fleet, ~50,000 running and 10,000 "
        "pending jobs: the first cycle over the queue, a cycle after a running job ended, "
        "one after a submission, one placing 1,000 small jobs, a usage update; its set-up "
        "takes a minute or two); preempt (the same busy fleet with 40% of its racks "
        "lent to unallocated work: the preemption decision for a one-rack job and for a "
        "200,016-GPU job, and a node failure with the re-placement of its gang); serve (toposched "
        "serve on the dry-run 1,000,080-GPU fleet over loopback HTTP: sustained durable "
        "submissions per second, submit-to-decision latency at 1,000/s, restart to the first "
        "decision with 100,000 running and 10,000 pending jobs in the store); ray (a local "
        "4-node Ray cluster: a 16-pod gang from its bind to every pod running, an eviction to "
        "its GPUs free, next to Ray's own placement-group times). Targets are "
        "printed next to the figures.",
    )
    parser.add_argument("suite", choices=SUITES, help="which suite to run")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--quick", action="store_true", help="fewer repetitions (a smoke run)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rich.table import Table

    from toposched.bench.harness import calibration, interpreter_calibration, machine
    from toposched.cli.console import output_console
    from toposched.cluster.units import format_timing

    console = output_console(stderr=args.json)
    with console.status(f"running the {args.suite} benchmarks..."):
        yardstick = calibration(runs=5 if args.quick else 15)
        interpreter = interpreter_calibration(runs=5 if args.quick else 15)
        results = _suite(args.suite)(args.quick)
    if args.json:
        print(
            json.dumps(
                {
                    "suite": args.suite,
                    "machine": machine(),
                    "calibration": yardstick.as_dict(),
                    "interpreter_calibration": interpreter.as_dict(),
                    "results": [r.as_dict() for r in results],
                },
                indent=2,
            )
        )
        return 0
    table = Table(title=f"toposched bench {args.suite}", title_justify="left")
    for column in ("benchmark", "median", "p90", "runs", "target", "details"):
        table.add_column(column, justify="left" if column in ("benchmark", "details") else "right")
    for result in [yardstick, interpreter, *results]:
        target = "-"
        if result.target_s is not None:
            verdict = "met" if result.meets_target else "MISSED"
            target = f"{format_timing(result.target_s)} ({verdict})"
        details = ", ".join(f"{k}={v}" for k, v in result.extra.items()) or result.note
        table.add_row(
            result.name,
            format_timing(result.median_s),
            format_timing(result.p90_s),
            str(result.runs),
            target,
            details,
        )
    info = machine()
    table.caption = (
        f"{info['cpu']}, {info['cores']} cores, Python {info['python']}, numpy {info['numpy']}"
    )
    table.caption_justify = "left"
    console.print(table)
    return 0
