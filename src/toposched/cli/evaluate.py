"""`toposched eval`: scheduling quality measured on published traces, next to published results."""

from __future__ import annotations

import argparse
import json
import math
import time
from typing import TYPE_CHECKING, Any

from toposched.cli.options import check_count, check_traces_dir
from toposched.cluster.errors import InputError
from toposched.workloads.traces import TRACES_ENV, check_openb_traces_dir, openb_traces_dir

if TYPE_CHECKING:
    from rich.table import Table

    from toposched.evaluation.packing import PackingResult, PackingSummary

# The evaluation (numpy, the compiled loops) and rich are imported when it runs, so that
# `eval --help` and usage errors load none of them; the help's figures are the evaluation's
# own (tests/test_cli_start.py checks that they agree).
DEFAULT_TRACES = ("default", "gpushare100", "gpuspec33", "multigpu50")
DEFAULT_POLICIES = ("random", "bestfit", "fgd", "fgd-balanced")
KNOWN_POLICIES = ("bestfit", "spread", "random", "fgd", "fgd-balanced")
FIRST_SEED = 42
TUNE_RATIO = 1.3

TABLE_WIDTH = 170
MAX_EVAL_SEEDS = 1000
"""The most seeds --seeds runs: a hundred times the published protocol's ten."""
MAX_WORKERS = 1024
"""The most processes --workers starts."""
PACKING_DESCRIPTION = f"""\
Reproduce the packing experiment of FGD (Weng et al., "Beware of Fragmentation", USENIX ATC'23)
on the openb traces and print our GPU allocation next to the published table.

Protocol: the 6,212-GPU openb cluster starts empty; the trace's tasks arrive one at a time
(shuffled with the seed, as the published run scripts do; --order trace keeps file order), then
uniformly drawn copies of its tasks until the GPU demand reaches {TUNE_RATIO} x capacity. Each
task is placed at arrival or dropped; none leaves. For each checkpoint (GPU demand arrived, in
% of capacity) the figure is the mean allocated GPU share over the arrivals that round to it,
averaged over seeds {FIRST_SEED}, {FIRST_SEED + 1}, ... Runs are spread over all cores.
"""

PACKING_EPILOG = f"""\
policies: {", ".join(KNOWN_POLICIES)}
  bestfit and random are our controls (our bestfit ranks nodes by free GPU only; the published
  BestFit also weighs CPU). fgd is FGD as published; fgd-balanced adds stranded-GPU and GPU-model
  scarcity costs (see toposched.placement.fragmentation).

examples:
  toposched eval packing                             all four traces, 10 seeds (a few minutes)
  toposched eval packing --traces default --seeds 1  a quick look
  toposched eval packing --policies fgd,fgd-balanced --json > packing.json
"""


def register(commands: Any) -> None:
    parser = commands.add_parser(
        "eval",
        help="measure scheduling quality on published traces against published results",
        description="Evaluations on published traces, printed next to published figures.",
    )
    evaluations = parser.add_subparsers(dest="evaluation", metavar="EVALUATION", required=True)
    packing = evaluations.add_parser(
        "packing",
        help="GPU allocation on the openb traces under the FGD (ATC'23) protocol",
        description=PACKING_DESCRIPTION,
        epilog=PACKING_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    packing.add_argument(
        "--traces",
        default=",".join(DEFAULT_TRACES),
        help=f"comma-separated openb pod lists (default: {','.join(DEFAULT_TRACES)})",
    )
    packing.add_argument(
        "--policies",
        default=",".join(DEFAULT_POLICIES),
        help=f"comma-separated policies (default: {','.join(DEFAULT_POLICIES)})",
    )
    packing.add_argument(
        "--seeds",
        type=int,
        default=10,
        help=f"number of seeds, from {FIRST_SEED} up (default: 10, as published)",
    )
    packing.add_argument(
        "--order",
        choices=("shuffled", "trace"),
        default="shuffled",
        help="arrival order of the trace's own tasks (default: shuffled, as published)",
    )
    packing.add_argument(
        "--traces-dir",
        default=None,
        help=f"the openb traces folder (default: ${TRACES_ENV}, else ../shared/traces/openb "
        "next to the project)",
    )
    packing.add_argument(
        "--workers", type=int, default=None, help="processes to run on (default: one per core)"
    )
    packing.add_argument("--json", action="store_true", help="print JSON instead of a table")
    packing.set_defaults(handler=run_packing_command)


def _names(text: str, what: str) -> list[str]:
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise InputError(f"--{what}", text, "must name at least one")
    return names


def run_packing_command(args: argparse.Namespace) -> int:
    # Before the evaluation and rich load (numpy, the compiled loops): a missing folder or a
    # bad count answers at once.
    check_traces_dir(args.traces_dir)
    folder = openb_traces_dir(args.traces_dir or None)
    check_openb_traces_dir(folder)
    if args.workers is not None:
        check_count("--workers", args.workers, MAX_WORKERS)
    check_count("--seeds", args.seeds, MAX_EVAL_SEEDS)
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from toposched.cli.console import output_console
    from toposched.evaluation.packing import plan_jobs, run_jobs, summarise

    jobs = plan_jobs(
        folder,
        _names(args.traces, "traces"),
        _names(args.policies, "policies"),
        args.seeds,
        shuffle=args.order == "shuffled",
    )
    console = output_console(stderr=args.json)
    started = time.perf_counter()
    with Progress(
        TextColumn("[bold]packing[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        bar = progress.add_task("", total=len(jobs))

        def advance(result: PackingResult) -> None:
            progress.update(
                bar, advance=1, description=f"{result.trace} {result.policy} seed {result.seed}"
            )

        results = run_jobs(jobs, workers=args.workers, on_result=advance)
    elapsed = time.perf_counter() - started
    summaries = summarise(results)
    if args.json:
        print(json.dumps(_as_json(args, folder, results, summaries, elapsed), indent=2))
        return 0
    if not console.is_terminal:
        console.width = max(console.width, TABLE_WIDTH)  # files and pipes get unwrapped rows
    console.print(_table(summaries, args.order, elapsed))
    return 0


def _figure(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f}"


def _triple(values: tuple[float, ...] | None) -> str:
    return "-" if values is None else " / ".join(_figure(v) for v in values)


def _table(summaries: list[PackingSummary], order: str, elapsed: float) -> Table:
    from rich.table import Table

    from toposched.bench.harness import machine
    from toposched.evaluation.packing import CHECKPOINTS

    points = "/".join(str(c) for c in CHECKPOINTS)
    table = Table(
        title=f"GPU allocation (%) at {points} % of GPU capacity arrived, openb cluster",
        title_justify="left",
    )
    table.add_column("trace")
    table.add_column("policy")
    table.add_column("seeds", justify="right")
    for checkpoint in CHECKPOINTS:
        table.add_column(f"ours {checkpoint}", justify="right")
    table.add_column("+/- (130)", justify="right")
    table.add_column("published (same)", justify="right")
    table.add_column("published FGD", justify="right")
    table.add_column("vs FGD at 100 / 130", justify="right")
    table.add_column("published BestFit", justify="right")
    previous = None
    for summary in summaries:
        versus = summary.versus_fgd()
        delta = "-"
        if versus is not None:
            delta = " / ".join(f"[{'green' if v >= 0 else 'red'}]{v:+.1f}[/]" for v in versus[1:])
        table.add_row(
            summary.trace if summary.trace != previous else "",
            summary.policy,
            str(summary.runs),
            *(_figure(v) for v in summary.allocation_pct),
            _figure(summary.spread_pct[-1]),
            _triple(summary.published_same),
            _triple(summary.published_fgd),
            delta,
            _triple(summary.published_bestfit),
        )
        previous = summary.trace
    info = machine()
    table.caption = (
        f"arrival order: {order}; +/- is the standard deviation over seeds. Published: Weng et "
        "al., USENIX ATC'23 artifact (mean of seeds 42..51, tasks shuffled). "
        f"{elapsed:.0f} s on {info['cpu']}, {info['cores']} cores."
    )
    table.caption_justify = "left"
    return table


def _as_json(
    args: argparse.Namespace,
    folder: Any,
    results: list[PackingResult],
    summaries: list[PackingSummary],
    elapsed: float,
) -> dict[str, Any]:
    from toposched.bench.harness import machine
    from toposched.evaluation.packing import CHECKPOINTS

    def clean(values: tuple[float, ...] | None) -> list[float | None] | None:
        if values is None:
            return None
        return [None if math.isnan(v) else round(v, 3) for v in values]

    return {
        "protocol": {
            "checkpoints_pct": list(CHECKPOINTS),
            "tune_ratio": TUNE_RATIO,
            "order": args.order,
            "seeds": sorted({r.seed for r in results}),
            "traces_dir": str(folder),
        },
        "machine": machine(),
        "elapsed_s": round(elapsed, 2),
        "summary": [
            {
                "trace": s.trace,
                "policy": s.policy,
                "runs": s.runs,
                "allocation_pct": clean(s.allocation_pct),
                "std_pct": clean(s.spread_pct),
                "failed_tasks_mean": s.failed_tasks,
                "seconds_per_run": round(s.seconds, 3),
                "published_same_policy": clean(s.published_same),
                "published_fgd": clean(s.published_fgd),
                "published_bestfit": clean(s.published_bestfit),
            }
            for s in summaries
        ],
        "runs": [
            {
                "trace": r.trace,
                "policy": r.policy,
                "seed": r.seed,
                "tasks": r.tasks,
                "placed": r.placed,
                "arrived_pct": round(r.arrived_pct, 3),
                "allocation_pct": clean(r.allocation_pct),
                "final_allocation_pct": round(r.final_allocation_pct, 3),
                "seconds": round(r.seconds, 3),
            }
            for r in results
        ],
    }
