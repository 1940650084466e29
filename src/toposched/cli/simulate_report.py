"""What `toposched simulate` (and the demo) prints once a run is done: the summary table (in
full, or the plain one), the comparison with the baselines, or the JSON, and where each file
was written."""

from __future__ import annotations

import argparse
import json
from typing import Any

from toposched.cli.simulate_options import check_outputs
from toposched.cli.simulate_run import compare, simulate
from toposched.cluster.units import DAY

__all__ = ["compare_and_report", "simulate_and_report"]


def simulate_and_report(
    args: argparse.Namespace, title: str | None = None, verbose: bool = True
) -> dict[str, Any]:
    """Build the workload, run it, write DIR/summary.json, print the table or the JSON: the
    full summary, or when not `verbose` the plain one. An interrupted run (Ctrl-C, SIGTERM)
    writes the summary of what it simulated and says so. The options and outputs are checked
    first, before rich and the simulator load."""
    out = check_outputs(args)

    from rich.console import Console

    from toposched.cli.console import output_console

    console = output_console(stderr=args.json)
    workload, summary, path, interrupted = simulate(args, out, console)

    from toposched.cli.summary import plain_table, summary_table

    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        heading = title or f"toposched: {workload.description}"
        shown = (
            summary_table(summary, heading)
            if verbose
            else plain_table({"toposched": summary}, heading)
        )
        console.print(shown)
        console.print(f"summary written to {path}", highlight=False, soft_wrap=True)
    if interrupted is not None:
        Console(stderr=True).print(
            f"interrupted: the summary covers the first {interrupted.result.duration / DAY:.2f} "
            f"simulated days, written to {path}",
            highlight=False,
            soft_wrap=True,
        )
        raise interrupted
    return summary


def compare_and_report(
    args: argparse.Namespace, title: str | None = None, verbose: bool = True
) -> dict[str, Any]:
    """Run toposched and the baselines on one workload; print the comparison (in full, or when
    not `verbose` the plain table), write the summaries (DIR/summary.json, one entry per
    scheduler) and DIR/report.html. The options and outputs are checked first, before rich and
    the simulator load."""
    out = check_outputs(args)

    from toposched.cli.console import output_console

    console = output_console(stderr=args.json)
    workload, summaries, _, out, report = compare(args, out, console, title)

    from toposched.cli.summary import plain_table, summary_table
    from toposched.sim.compare import comparison_table

    if args.json:
        print(json.dumps(summaries, indent=1))
    elif not verbose:
        ordered = {"toposched": summaries["toposched"]}
        ordered.update(
            (name, summary) for name, summary in summaries.items() if name != "toposched"
        )
        console.print(plain_table(ordered, title or f"toposched: {workload.description}"))
        console.print(
            f"summaries written to {out / 'summary.json'}; report: {report}",
            highlight=False,
            soft_wrap=True,
        )
    else:
        console.print(
            summary_table(summaries["toposched"], title or f"toposched: {workload.description}")
        )
        console.print(comparison_table(summaries, "toposched and the baselines, same workload"))
        console.print(f"summaries written to {out / 'summary.json'}; report: {report}")
    return summaries
