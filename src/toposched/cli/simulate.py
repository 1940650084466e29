"""`toposched simulate`: replay a workload through the scheduler and summarise what happened.

The command's parser and its run; its options and their rules are in `simulate_options` (their
values' parsers in `simulate_values`), the runs in `simulate_run`, what is printed in
`simulate_report`.
"""

from __future__ import annotations

import argparse
import textwrap
from typing import Any

from toposched.cli.simulate_options import DEFAULT_SAMPLE_INTERVAL, add_options
from toposched.cli.simulate_report import compare_and_report, simulate_and_report
from toposched.cli.simulate_run import scheduler_factory
from toposched.workloads.catalog import WORKLOAD_HELP, WORKLOAD_OPTIONS, WorkloadKind

__all__ = [
    "DEFAULT_SAMPLE_INTERVAL",
    "register",
    "run",
    "scheduler_factory",
]

DESCRIPTION = """\
Replay a workload through toposched's scheduler on a simulated clock. The simulator jumps from
event to event (submissions, completions, min-runtime expiries, grace-period ends, node failures
and repairs), runs one scheduler cycle after each instant's events, starts bound jobs at once and
ends them after their actual runtime. The scheduler is the one the service runs; only the clock
and the backend are simulated. The same workload and seed give the same result, bit for bit.

workloads (--workload):
""" + "\n".join(
    textwrap.fill(text, 96, initial_indent=f"  {name:<15} ", subsequent_indent=" " * 18)
    for name, text in WORKLOAD_HELP.items()
)

_KIND_NAMES = {
    WorkloadKind.AI2: "ai2, ai2:team-sized",
    WorkloadKind.FRONTIER: "frontier",
    WorkloadKind.ITP: "itp:NN",
    WorkloadKind.OPENB: "openb[:TRACE]",
    WorkloadKind.FILE: "FILE",
}


def _options_read() -> str:
    """Which workload options each kind reads, from catalog.WORKLOAD_OPTIONS."""
    lines = ["options each workload reads (another one given is an error, never ignored):"]
    for kind, options in WORKLOAD_OPTIONS.items():
        flags = ["--days"] + sorted("--" + option.value.replace("_", "-") for option in options)
        lines.append(f"  {_KIND_NAMES[kind]:<21} {', '.join(flags)}")
    return "\n".join(lines) + "\n\n"


EPILOG = (
    _options_read()
    + """\
outputs: a summary table (or JSON with --json) and DIR/summary.json with every metric and the
sampled timeline; docs/simulator.md defines each metric and the workload file format. --out and
--save-workload are checked before the run. Ctrl-C or SIGTERM stops a run and writes the summary
of what it simulated so far ("interrupted" in summary.json). A job asking for more GPUs than the
whole cluster is kept (it can never start) and named in a warning before the run.

examples:
  toposched simulate                               Ai2-like cluster, 30 days, 3,072 GPUs
  toposched simulate --workload ai2 --days 3 --gpus 2048 --seed 7
  toposched simulate --workload ai2:team-sized     no training run larger than its team's budget
  toposched simulate --workload itp:04 --json
  toposched simulate --workload openb:gpushare40 --days 20
  toposched simulate --workload my-lab.jsonl --out results/
  toposched simulate --workload ai2 --days 1 --save-workload ai2-1d.jsonl
"""
)


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "simulate",
        help="replay a workload (ai2, frontier, itp:NN, openb, or a file) through the scheduler",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_options(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    # Each checks the options and outputs before the simulator (numpy, the compiled loops) and
    # rich load: a bad option answers at once.
    if args.compare:
        compare_and_report(args)
    else:
        simulate_and_report(args)
    return 0
