"""`toposched simulate`: replay a workload through the scheduler and summarise what happened."""

from __future__ import annotations

import argparse
import json
import math
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.table import Table

from toposched.bench.harness import calibration, interpreter_calibration, machine
from toposched.cluster.errors import InputError
from toposched.cluster.units import DAY, HOUR, MINUTE, format_span, format_timing, parse_duration
from toposched.policy.contract import Contract
from toposched.scheduler.core import Scheduler
from toposched.sim.engine import DEFAULT_SAMPLE_INTERVAL, Simulation
from toposched.sim.metrics import summarize
from toposched.sim.protocol import SchedulerFactory, toposched_scheduler
from toposched.workloads.catalog import WORKLOAD_HELP, workload_by_name
from toposched.workloads.files import save_workload
from toposched.workloads.model import Workload

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

EPILOG = """\
outputs: a summary table (or JSON with --json) and DIR/summary.json with every metric and the
sampled timeline; docs/simulator.md defines each metric and the workload file format.

examples:
  toposched simulate                               Ai2-like cluster, 30 days, 3,072 GPUs
  toposched simulate --workload ai2 --days 3 --gpus 2048 --seed 7
  toposched simulate --workload ai2:team-sized     no training run larger than its team's budget
  toposched simulate --workload itp:04 --json
  toposched simulate --workload openb:gpushare40 --days 20
  toposched simulate --workload my-lab.jsonl --out results/
  toposched simulate --workload ai2 --days 1 --save-workload ai2-1d.jsonl
"""

TARGETS = {
    "owed_met": 0.98,
    "occupancy": 0.98,
    "debug_p90_s": 30.0,
    "events_per_second": 50_000.0,
    "frontier_days_per_wall_minute": 3.0,
}
"""Ai2's published outcomes and toposched's simulator speed targets: the outcomes and the event
rate apply to the Ai2-like workload, the wall time (30 days in 10 minutes) to the frontier lab."""


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


def add_options(parser: argparse.ArgumentParser, workload_default: str = "ai2") -> None:
    parser.add_argument(
        "--workload",
        default=workload_default,
        metavar="W",
        help=f"ai2, ai2:team-sized, frontier, itp:NN, openb[:TRACE] or a workload FILE (default: "
        f"{workload_default})",
    )
    parser.add_argument(
        "--days",
        type=float,
        metavar="N",
        help="simulated days (generators: how much work to make; replays and files: stop "
        "after N days; default: 30 for ai2 and frontier, the whole trace otherwise)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, metavar="N", help="seed of the generators (default: 0)"
    )
    parser.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help="cluster size in GPUs (ai2: about N in 8-GPU nodes, default 3,072; frontier: "
        "shrinks the 1,000,080-GPU fleet; itp: N/8 nodes)",
    )
    parser.add_argument(
        "--out",
        default="out",
        metavar="DIR",
        help="folder for summary.json (default: out/)",
    )
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument(
        "--sample-interval",
        type=_interval,
        default=DEFAULT_SAMPLE_INTERVAL,
        metavar="S",
        help="seconds between timeline samples (default: 3600)",
    )
    parser.add_argument(
        "--cycle-every",
        type=_cycle_interval,
        default=0.0,
        metavar="S",
        help="at most one scheduler cycle per S simulated seconds (default: 0, a cycle after "
        "every instant with events)",
    )
    parser.add_argument(
        "--traces-dir",
        metavar="PATH",
        help="folder holding itp/ and openb/ (default: $TOPOSCHED_TRACES or ../shared/traces)",
    )
    parser.add_argument(
        "--save-workload",
        metavar="FILE",
        help="also write the workload to FILE (.yaml, .json or .jsonl) to replay or edit later",
    )
    parser.add_argument(
        "--spares",
        type=_spares,
        metavar="LEVEL:N",
        help="hold N idle nodes per LEVEL domain (e.g. rack:1) as spares: a gang whose node "
        "fails restarts on its surviving nodes plus a spare of the same domain (default: none)",
    )
    parser.add_argument(
        "--failed-gangs",
        choices=("first", "in-order"),
        default="first",
        help="a gang a node failure interrupts while it runs within its team's budget: first = "
        "it heads the next cycle, trying to restart before the queue can take its surviving "
        "nodes; in-order = it waits in the queue's order like any pending job (default: "
        "first; a gang given a spare by --spares restarts there either way)",
    )
    parser.add_argument(
        "--unprotected-borrowing",
        action="store_true",
        help="a job that takes its team past its budget gets no min-runtime protection; the "
        "same as --borrowed-min-runtime 0",
    )
    parser.add_argument(
        "--borrowed-min-runtime",
        type=_duration,
        metavar="D",
        help="protect a job that takes its team past its budget for at most D (seconds, or "
        "e.g. 30m, 1h), so that a team back under its budget reclaims its share within D "
        "(default: none, each job keeps the min runtime it declared)",
    )
    parser.add_argument(
        "--cross-account",
        choices=("budget", "fair-share"),
        default="budget",
        help="when a job may evict another account's job past its min runtime: budget = only "
        "to reclaim its account's budget, never taking the victim's account below its own; "
        "fair-share = whenever its account ranks above in fair share (default: budget)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on long runs")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also run the baselines (FIFO first-fit, Slurm-like, kube-like) on the same "
        "workload, print them side by side and write DIR/report.html",
    )


def _seconds_option(text: str, positive: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or (positive and value == 0):
        rule = "> 0" if positive else ">= 0"
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of seconds {rule}")
    return value


def _interval(text: str) -> float:
    return _seconds_option(text, positive=True)


def _cycle_interval(text: str) -> float:
    return _seconds_option(text, positive=False)


def _duration(text: str) -> float | None:
    """Seconds, or None for 'none': no cap on a borrowing job's protection (the default)."""
    if text.strip().lower() == "none":
        return None
    try:
        return parse_duration(text, "--borrowed-min-runtime")
    except InputError as error:
        raise argparse.ArgumentTypeError(
            f"{text!r}: {error.rule}; or 'none' to keep each job's declared min runtime"
        ) from None


def _spares(text: str) -> tuple[str, int]:
    level, _, count = text.partition(":")
    if not level or not count.isdigit() or int(count) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected LEVEL:N with N >= 1 idle nodes per domain, e.g. rack:1"
        )
    return level, int(count)


def scheduler_factory(args: argparse.Namespace) -> SchedulerFactory:
    """toposched's scheduler with the options given on the command line."""
    spares = getattr(args, "spares", None)
    protect = not getattr(args, "unprotected_borrowing", False)
    borrowed = getattr(args, "borrowed_min_runtime", None)
    cross_account = getattr(args, "cross_account", "budget")
    failed_first = getattr(args, "failed_gangs", "first") == "first"
    if (
        spares is None
        and protect
        and borrowed is None
        and cross_account == "budget"
        and failed_first
    ):
        return toposched_scheduler
    contract = Contract(cross_account="fair_share" if cross_account == "fair-share" else "budget")
    return lambda state, tree: Scheduler(
        state,
        tree,
        contract=contract,
        spares=spares,
        protect_beyond_budget=protect,
        borrowed_min_runtime=borrowed,
        failed_first=failed_first,
    )


def build_workload(args: argparse.Namespace) -> Workload:
    return workload_by_name(
        args.workload, seed=args.seed, days=args.days, gpus=args.gpus, traces_dir=args.traces_dir
    )


# Runs of each yardstick before and after a simulation, after one warm-up run: under a second
# in all where the sort is slow (about 35 ms on some CPUs; 5 ms on others).
CALIBRATION_RUNS = 5
CALIBRATION_WARMUP = 1
_T = TypeVar("_T")


def _calibrated(run: Callable[[], _T]) -> tuple[_T, dict[str, Any]]:
    """`run()`, and the calibration measured just before and just after it, with the machine:
    speed figures of runs on different machines, or in different states of one machine,
    compare only through it."""
    before = calibration(CALIBRATION_RUNS, CALIBRATION_WARMUP).median_s
    interpreter = interpreter_calibration(CALIBRATION_RUNS, CALIBRATION_WARMUP)
    interpreter_before = interpreter.median_s
    outcome = run()
    after = calibration(CALIBRATION_RUNS, CALIBRATION_WARMUP).median_s
    interpreter_after = interpreter_calibration(CALIBRATION_RUNS, CALIBRATION_WARMUP).median_s
    return outcome, {
        "what": f"numpy.sort of 1M float32, median of {CALIBRATION_RUNS} runs",
        "before_s": before,
        "after_s": after,
        "interpreter_what": f"{interpreter.name.removeprefix('calibration: ')}, median of "
        f"{CALIBRATION_RUNS} runs",
        "interpreter_before_s": interpreter_before,
        "interpreter_after_s": interpreter_after,
        "machine": machine(),
    }


def simulate_and_report(args: argparse.Namespace, title: str | None = None) -> dict[str, Any]:
    """Build the workload, run it, write DIR/summary.json, print the table or the JSON."""
    console = Console(stderr=args.json)
    started = time.perf_counter()
    with console.status(f"building workload {args.workload}..."):
        workload = build_workload(args)
    built = time.perf_counter() - started
    if args.save_workload:
        save_workload(workload, args.save_workload)
    simulation = Simulation(
        workload,
        scheduler_factory(args),
        sample_interval=args.sample_interval,
        progress=not args.no_progress,
        cycle_interval=args.cycle_every,
    )
    result, calibrated = _calibrated(simulation.run)
    summary = summarize(result)
    summary["scheduler_speed"]["calibration"] = calibrated
    summary["workload_description"] = workload.description
    summary["workload_build_seconds"] = built
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "summary.json"
    path.write_text(json.dumps(summary, indent=1) + "\n")
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        console.print(summary_table(summary, title or f"toposched: {workload.description}"))
        console.print(f"summary written to {path}")
    return summary


def compare_and_report(args: argparse.Namespace, title: str | None = None) -> dict[str, Any]:
    """Run toposched and the baselines on one workload; print the comparison, write the
    summaries (DIR/summary.json, one entry per scheduler) and DIR/report.html."""
    from toposched.sim.compare import comparison_table, run_comparison
    from toposched.sim.report import write_report

    console = Console(stderr=args.json)
    with console.status(f"building workload {args.workload}..."):
        workload = build_workload(args)
    if args.save_workload:
        save_workload(workload, args.save_workload)
    from toposched.sim.compare import DEFAULT_SCHEDULERS

    schedulers = {**DEFAULT_SCHEDULERS, "toposched": scheduler_factory(args)}
    runs, calibrated = _calibrated(
        lambda: run_comparison(
            workload,
            schedulers,
            sample_interval=args.sample_interval,
            progress=not args.no_progress,
        )
    )
    summaries = {name: run.summary for name, run in runs.items()}
    for summary in summaries.values():
        summary["scheduler_speed"]["calibration"] = calibrated
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summaries, indent=1) + "\n")
    report = out / "report.html"
    write_report(
        report,
        summaries,
        runs,
        title=title or f"toposched: {workload.description}",
        description=workload.description,
    )
    if args.json:
        print(json.dumps(summaries, indent=1))
    else:
        console.print(
            summary_table(summaries["toposched"], title or f"toposched: {workload.description}")
        )
        console.print(comparison_table(summaries, "toposched and the baselines, same workload"))
        console.print(f"summaries written to {out / 'summary.json'}; report: {report}")
    return summaries


def run(args: argparse.Namespace) -> int:
    if args.compare:
        compare_and_report(args)
    else:
        simulate_and_report(args)
    return 0


# --- the table -------------------------------------------------------------------------------


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value == 0:
        return "0 s"
    if value < 1:
        return format_timing(value, digits=1)
    return format_span(value, minutes_from=2 * MINUTE, hours_from=2 * HOUR)


_SHORTFALL_LABELS = {
    "jobs_larger_than_budget": "every waiting job larger than the team's budget",
    "jobs_past_budget": "every waiting job larger than its unused budget",
    "job_within_budget": "a waiting job fitting its unused budget",
    "demand_within_hour": "hourly cap, no moment short",
}


def _shortfall_causes(by_cause: dict[str, float]) -> str:
    """Each cause's share of the owed GPU-hours not received (docs/simulator.md)."""
    total = sum(by_cause.values())
    if total <= 0:
        return ""
    return "\n".join(
        f"{100 * hours / total:.0f}% {_SHORTFALL_LABELS.get(cause, cause)}"
        for cause, hours in by_cause.items()
        if hours > 0
    )


def _verdict(met: bool | None) -> str:
    if met is None:
        return ""
    return "[green]met[/]" if met else "[red]missed[/]"


def summary_table(summary: dict[str, Any], title: str) -> Table:
    """The headline figures of a simulation summary, with the targets of its workload: Ai2's
    outcomes and the event rate for the Ai2-like cluster, the wall time for the frontier lab."""
    ai2 = str(summary.get("workload")).startswith("ai2")
    # The wall-time target is for the full fleet; a shrunken one (--gpus) has none.
    frontier = summary.get("workload") == "frontier" and summary["cluster"]["gpus"] >= 1_000_000

    def target(text: str, met: bool | None) -> tuple[str, str]:
        return (text, _verdict(met)) if ai2 else ("", "")

    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("target", justify="right")
    table.add_column("", justify="left")
    use = summary["utilisation"]
    fair = summary["fairness"]
    speed = summary["scheduler_speed"]
    jobs = summary["jobs"]
    days = summary["simulated"]["days"]
    table.add_row(
        "cluster / simulated time", f"{summary['cluster']['gpus']:,} GPUs / {days:.1f} days", "", ""
    )
    table.add_row(
        "jobs submitted / finished / waiting at end",
        f"{jobs['submitted']:,} / {jobs['finished']:,} / {jobs['pending_at_end']:,}",
        "",
        "",
    )
    occupancy = use["occupancy"]
    table.add_row(
        "occupancy (time average)",
        _percent(occupancy),
        *target(
            _percent(TARGETS["occupancy"]),
            None if occupancy is None else occupancy >= TARGETS["occupancy"],
        ),
    )
    waiting = use.get("occupancy_while_work_waits")
    if waiting is not None:
        table.add_row(
            "occupancy while work waits (share of the time)",
            f"{_percent(waiting)} ({_percent(use['share_of_time_work_waits'])})",
            "",
            "",
        )
    table.add_row(
        "unallocated share of delivered GPU time",
        _percent(use["unallocated_share_of_delivered"]),
        "",
        "",
    )
    outstanding = use["mean_outstanding_ratio"]
    table.add_row(
        "outstanding demand / capacity (mean)",
        "-" if outstanding is None else f"{outstanding:.2f}x",
        "",
        "",
    )
    owed = fair["owed_met"]
    if owed is not None:
        table.add_row(
            "GPU-hours owed that teams received",
            _percent(owed),
            *target(_percent(TARGETS["owed_met"]), owed >= TARGETS["owed_met"]),
        )
        table.add_row(
            "teams at >= 95% of owed / worst team",
            f"{fair['teams_served']} of {fair['teams_with_demand']} / "
            f"{_percent(fair['worst_team_owed_met'])}",
            "",
            "",
        )
        causes = _shortfall_causes(fair.get("shortfall_gpu_hours_by_cause", {}))
        if causes:
            table.add_row("owed GPU-hours not received, by cause", causes, "", "")
    debug = summary["debug_wait_s"]
    if debug["p90"] is not None:
        table.add_row(
            "debug wait p50 / p90 / p99",
            f"{_seconds(debug['p50'])} / {_seconds(debug['p90'])} / {_seconds(debug['p99'])}",
            *target(
                f"p90 {_seconds(TARGETS['debug_p90_s'])}", debug["p90"] <= TARGETS["debug_p90_s"]
            ),
        )
    for name, report in summary["classes"].items():
        if name == "debug":
            continue
        wait = report["wait_s"]
        table.add_row(
            f"{name} wait p50 / p90 ({report['submitted']:,} jobs)",
            f"{_seconds(wait['p50'])} / {_seconds(wait['p90'])}",
            "",
            "",
        )
    largest = summary["largest_jobs"]
    if largest["jobs"]:
        table.add_row(
            f"largest jobs (>= {largest['gpus_at_least']:,.0f} GPUs) wait p50 / max",
            f"{_seconds(largest['wait_s']['p50'])} / {_seconds(largest['max_wait_s'])}",
            "",
            "",
        )
    disruption = summary["disruption"]
    table.add_row(
        "preemptions / failures / GPU-hours lost",
        f"{disruption['preemptions']:,} / {disruption['node_failures']:,} / "
        f"{disruption['gpu_hours_lost']:,.0f}",
        "",
        "",
    )
    by_cause = disruption["gpu_hours_lost_by_cause"]
    table.add_row(
        "GPU-hours lost by cause: evicted unallocated / allocated work, failures",
        f"{by_cause['evictions_of_unallocated_work']:,.0f} / "
        f"{by_cause['evictions_of_allocated_work']:,.0f} / {by_cause['node_failures']:,.0f}",
        "",
        "",
    )
    latency = speed["decision_latency_s"]
    table.add_row(
        "decision latency p50 / p99 / max",
        f"{_seconds(latency['p50'])} / {_seconds(latency['p99'])} / {_seconds(latency['max'])}",
        "",
        "",
    )
    table.add_row(
        "scheduler time: wall / CPU",
        f"{speed['scheduler_seconds']:,.1f} s / {speed.get('scheduler_cpu_seconds', 0.0):,.1f} s",
        "",
        "",
    )
    events = speed["events_per_second"]
    table.add_row(
        "scheduler events per second (wall)",
        "-" if events is None else f"{events:,.0f}",
        *target(
            f"{TARGETS['events_per_second']:,.0f}",
            None if events is None else events >= TARGETS["events_per_second"],
        ),
    )
    days_per_minute = 60 * (speed["simulated_seconds_per_wall_second"] or 0) / DAY
    pace = TARGETS["frontier_days_per_wall_minute"]
    table.add_row(
        "wall time / simulated days per wall minute",
        f"{speed['wall_seconds']:.1f} s / {days_per_minute:.2f}",
        f"{pace:.2f} (the pace of 30 days in 10 min)" if frontier else "",
        _verdict(days_per_minute >= pace) if frontier else "",
    )
    calibrated = speed.get("calibration")
    if calibrated is not None:
        table.add_row(
            "calibration before / after: numpy.sort of 1M float32",
            f"{calibrated['before_s'] * 1e3:.1f} / {calibrated['after_s'] * 1e3:.1f} ms",
            "",
            "",
        )
        if "interpreter_before_s" in calibrated:
            table.add_row(
                "calibration before / after: small numpy calls and dict updates",
                f"{calibrated['interpreter_before_s'] * 1e3:.1f} / "
                f"{calibrated['interpreter_after_s'] * 1e3:.1f} ms",
                "",
                "",
            )
    balance = summary["conservation"]
    table.add_row(
        "conservation: delivered + idle + unavailable",
        f"error {balance['relative_error']:.1e}",
        "= capacity x time",
        _verdict(balance["holds"]),
    )
    if ai2:
        table.caption = (
            "targets: Ai2's outcomes ('Impactful scheduling for GPU clusters', 2026) and "
            "toposched's simulator speed target (docs/benchmarks.md)"
        )
    elif frontier:
        table.caption = (
            "target: the 30-day frontier-lab run on 1,000,080 GPUs in 10 minutes "
            "(docs/benchmarks.md)"
        )
    else:
        table.caption = "Ai2's outcome targets apply to the Ai2-like workload (--workload ai2)"
    table.caption_justify = "left"
    return table
