"""`toposched simulate`: replay a workload through the scheduler and summarise what happened."""

from __future__ import annotations

import argparse
import json
import math
import signal
import tempfile
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from toposched.cli.options import (
    check_days,
    check_seed,
    check_traces_dir,
    check_workload_options,
)
from toposched.cluster.errors import InputError
from toposched.cluster.limits import MAX_NODES, MAX_TEAMS, check_gpus
from toposched.cluster.units import DAY, HOUR, parse_duration
from toposched.sim.baseline_names import chosen_baselines
from toposched.workloads.catalog import (
    WORKLOAD_HELP,
    WORKLOAD_OPTIONS,
    WorkloadKind,
    workload_by_name,
    workload_kind,
)
from toposched.workloads.paths import check_workload_path

if TYPE_CHECKING:
    from rich.console import Console

    from toposched.policy.worth import EvictionWorth
    from toposched.sim.protocol import SchedulerFactory
    from toposched.sim.topology_price import TopologyPrice
    from toposched.workloads.model import Workload

# The simulator, the scheduler and rich are imported where a run needs them, so that the
# parser (`--help`, usage errors) loads none of them.
DEFAULT_SAMPLE_INTERVAL = HOUR
"""toposched.sim.engine.DEFAULT_SAMPLE_INTERVAL (tests/test_cli_start.py checks they agree)."""

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


def add_options(
    parser: argparse.ArgumentParser,
    workload_default: str = "ai2",
    days: float | None = None,
    gpus: int | None = None,
) -> None:
    """The options of a simulation; `days` and `gpus` set defaults other than the workload's
    own (as the demo does), and the help says them."""
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
        default=days,
        metavar="N",
        help="simulated days (generators: how much work to make; replays and files: stop "
        "after N days; default: "
        + (
            f"{days:g}"
            if days is not None
            else "30 for ai2 and frontier, the whole trace otherwise"
        )
        + ")",
    )
    parser.add_argument(
        "--seed",
        type=int,
        metavar="N",
        help="seed of the generators, ai2 and frontier (default: 0)",
    )
    parser.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help=f"cluster size in GPUs (ai2: about N in 8-GPU nodes, default {gpus or 3072:,}; "
        "frontier: shrinks the 1,000,080-GPU fleet, 2,160 to 1,000,080; itp: N/8 nodes; "
        "openb and files bring their own cluster and refuse it)",
    )
    # Set apart from --gpus so that only a size given on the command line is checked against
    # workloads that do not read one.
    parser.set_defaults(ai2_gpus=gpus)
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
        "--teams",
        type=_teams,
        metavar="N",
        help="itp and openb: split the replay's jobs among N teams (2-100; each job to one by a "
        "hash of its name, team k getting about 1/k of them), each team's budget its share of "
        "the GPU-time, jobs classed debug (<= 30 min), training (>= 16 GPUs) or other "
        "(default: one account holds everything)",
    )
    parser.add_argument(
        "--resumable",
        type=_percent,
        metavar="PERCENT",
        help="make PERCENT of the jobs (0-100, drawn at random with the seed) able to resume "
        "from their checkpoints and the others not (default: as the workload builds them)",
    )
    parser.add_argument(
        "--save-workload",
        metavar="FILE",
        help="also write the workload to FILE (.yaml, .yml, .json, .jsonl or .ndjson: the suffix "
        "picks the format; the folder must exist) to replay or edit later",
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
    parser.add_argument(
        "--eviction-worth",
        type=_worth_ratio,
        metavar="RATIO",
        help="evict allocated work past its min runtime only when the work lost is at most "
        "RATIO x the GPU-time the preemptor's earlier start gains (1: no more lost than "
        "gained; docs/preemption.md, 'Is the eviction worth it?'; default: off, every "
        "eviction the contract allows)",
    )
    parser.add_argument(
        "--eviction-worth-horizon",
        type=_worth_horizon,
        metavar="D",
        help="with --eviction-worth: the longest wait an eviction is credited with avoiding "
        "(seconds, or e.g. 30m, 2h; default: 2h)",
    )
    parser.add_argument(
        "--eviction-worth-owed",
        action="store_true",
        help="with --eviction-worth: credit an eviction only with the preemptor's GPUs that "
        "bring its team back up to its budget, not those it would borrow beyond it",
    )
    parser.add_argument(
        "--eviction-loss-budget",
        type=_loss_budget,
        metavar="GPU_HOURS",
        help="with --eviction-worth: the most GPU-hours of budgeted work evictions may throw "
        "away in any 24 hours; the less of it is left, the more an eviction must gain "
        "(default: no budget)",
    )
    parser.add_argument(
        "--unallocated-admission",
        type=_worth_horizon,
        metavar="D",
        help="keep unallocated work off the reservation's nodes when the reserved job is due "
        "before the work's first checkpoint; D: when a resumable job checkpoints first "
        "(seconds, or e.g. 30m, 1h; docs/preemption.md, 'Where unallocated work starts'; "
        "default: off, unallocated work backfills onto reserved nodes)",
    )
    parser.add_argument(
        "--topology-price",
        type=_topology_price,
        metavar="SPEC",
        help="slow down the runs of jobs with topology constraints that a scheduler spreads "
        "over more domains than they ask for: 'default' (+5%% of the run per extra domain at "
        "the innermost level, e.g. a rack, +10%% at the next, e.g. a block, +25%% further out, "
        "at most 2x) or LEVEL=FRACTION pairs with an optional cap, e.g. "
        "rack=0.05,block=0.1,cap=2 (default: off, placement costs nothing)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar on long runs")
    parser.add_argument(
        "--check-incremental",
        action="store_true",
        help="debugging: beside every cycle that runs after submissions only (and skips the "
        "pending jobs the last cycle settled), run a full cycle on a copy of the scheduler and "
        "stop with an error if their decisions differ (slow; docs/policy.md)",
    )
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also run the baselines (FIFO first-fit, Slurm-like, kube-like) on the same "
        "workload, print them side by side and write DIR/report.html",
    )
    parser.add_argument(
        "--baselines",
        metavar="NAMES",
        help="with --compare, the baselines to run, comma-separated, in this order, from "
        "slurm_like, slurm_like_preempt (Slurm preempting by partition priority, victims "
        "requeued), kube_like, fifo_first_fit (default: slurm_like,kube_like,fifo_first_fit)",
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


class TopologyPriceOption(NamedTuple):
    """`--topology-price` as given: per-level slowdowns (None: the defaults) and a cap."""

    slowdown: dict[str, float] | None
    cap: float | None


def _topology_price(text: str) -> TopologyPriceOption:
    if text.strip() == "default":
        return TopologyPriceOption(None, None)
    slowdown: dict[str, float] = {}
    cap: float | None = None
    for item in text.split(","):
        name, separator, value = item.strip().partition("=")
        try:
            number = float(value) if separator and name else math.nan
        except ValueError:
            number = math.nan
        if not math.isfinite(number) or number < (1 if name == "cap" else 0):
            rule = "cap=FACTOR >= 1" if name == "cap" else "LEVEL=FRACTION with FRACTION >= 0"
            raise argparse.ArgumentTypeError(
                f"{item.strip()!r}: expected 'default' or comma-separated {rule} (e.g. rack=0.05)"
            )
        if name == "cap":
            cap = number
        else:
            slowdown[name] = number
    return TopologyPriceOption(slowdown, cap)


def topology_price(args: argparse.Namespace) -> TopologyPrice | None:
    """The simulated price of spread placements `--topology-price` asks for (None: off)."""
    from toposched.sim.topology_price import DEFAULT_CAP, TopologyPrice

    given: TopologyPriceOption | None = args.topology_price
    if given is None:
        return None
    return TopologyPrice(given.slowdown, DEFAULT_CAP if given.cap is None else given.cap)


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


def _teams(text: str) -> int:
    if not text.isdigit() or not 2 <= int(text) <= MAX_TEAMS:
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r}: expected a whole number of teams from 2 to {MAX_TEAMS}"
        )
    return int(text)


def _percent(text: str) -> float:
    try:
        value = float(text.removesuffix("%"))
    except ValueError:
        value = math.nan
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"{text[:80]!r}: expected a percentage from 0 to 100")
    return value / 100


def _worth_ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r}: expected GPU-seconds lost per GPU-second gained, a number >= 0 "
            "(e.g. 1)"
        )
    return value


def _worth_horizon(text: str) -> float:
    try:
        value = parse_duration(text, "--eviction-worth-horizon")
    except InputError as error:
        raise argparse.ArgumentTypeError(f"{text[:80]!r}: {error.rule}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text[:80]!r}: expected a duration > 0, e.g. 2h")
    return value


def _loss_budget(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r}: expected GPU-hours per 24 hours, a number > 0 (e.g. 100)"
        )
    return value * HOUR


def _eviction_worth(args: argparse.Namespace) -> EvictionWorth | None:
    """The cost/benefit rule `--eviction-worth` asks for (None: off)."""
    from toposched.policy.worth import DEFAULT_WORTH_HORIZON, EvictionWorth

    ratio = getattr(args, "eviction_worth", None)
    horizon = getattr(args, "eviction_worth_horizon", None)
    owed = getattr(args, "eviction_worth_owed", False)
    budget = getattr(args, "eviction_loss_budget", None)
    if ratio is None:
        given = (
            ("--eviction-worth-horizon", horizon),
            ("--eviction-worth-owed", owed or None),
            ("--eviction-loss-budget", budget),
        )
        for option, value in given:
            if value is not None:
                raise InputError(option, value, "applies only with --eviction-worth")
        return None
    return EvictionWorth(
        ratio,
        DEFAULT_WORTH_HORIZON if horizon is None else horizon,
        owed_only=owed,
        loss_budget=budget,
    )


def _spares(text: str) -> tuple[str, int]:
    level, _, count = text.partition(":")
    if not level or not count.isdigit() or not 1 <= int(count) <= MAX_NODES:
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r}: expected LEVEL:N with N >= 1 idle nodes per domain (at most "
            f"{MAX_NODES:,}), e.g. rack:1"
        )
    return level, int(count)


def scheduler_factory(args: argparse.Namespace) -> SchedulerFactory:
    """toposched's scheduler with the options given on the command line."""
    from toposched.policy.contract import Contract
    from toposched.scheduler.admission import AdmissionRule
    from toposched.scheduler.core import Scheduler
    from toposched.sim.protocol import toposched_scheduler

    spares = getattr(args, "spares", None)
    protect = not getattr(args, "unprotected_borrowing", False)
    borrowed = getattr(args, "borrowed_min_runtime", None)
    cross_account = getattr(args, "cross_account", "budget")
    failed_first = getattr(args, "failed_gangs", "first") == "first"
    worth = _eviction_worth(args)
    check = getattr(args, "check_incremental", False)
    admission = getattr(args, "unallocated_admission", None)
    if (
        admission is None
        and not check
        and spares is None
        and protect
        and borrowed is None
        and cross_account == "budget"
        and failed_first
        and worth is None
    ):
        return toposched_scheduler
    contract = Contract(
        cross_account="fair_share" if cross_account == "fair-share" else "budget", worth=worth
    )
    return lambda state, tree: Scheduler(
        state,
        tree,
        contract=contract,
        spares=spares,
        protect_beyond_budget=protect,
        borrowed_min_runtime=borrowed,
        failed_first=failed_first,
        check_incremental=check,
        admission=None if admission is None else AdmissionRule(admission),
    )


def build_workload(args: argparse.Namespace) -> Workload:
    gpus = args.gpus
    if gpus is None and workload_kind(args.workload) is WorkloadKind.AI2:
        gpus = getattr(args, "ai2_gpus", None)
    return workload_by_name(
        args.workload,
        seed=args.seed,
        days=args.days,
        gpus=gpus,
        traces_dir=args.traces_dir,
        teams=getattr(args, "teams", None),
        resumable=getattr(args, "resumable", None),
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
    from toposched.bench.harness import calibration, interpreter_calibration, machine

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


def check_options(args: argparse.Namespace) -> None:
    """The options' rules (docs/limits.md), checked before anything loads or is made."""
    check_seed(args.seed)
    check_days(args.days)
    check_gpus(args.gpus)
    check_traces_dir(args.traces_dir)
    check_workload_options(
        args.workload, args.gpus, args.seed, args.traces_dir, getattr(args, "teams", None)
    )
    if getattr(args, "compare", False):
        chosen_baselines(getattr(args, "baselines", None))


def check_outputs(args: argparse.Namespace) -> Path:
    """The output folder, made now, and the --save-workload path checked: a path that cannot
    be written fails before the run rather than after it, losing nothing. The options'
    rules are checked first, before anything is made."""
    check_options(args)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise InputError(
            "--out", args.out, "is a file, not a folder; give a folder for summary.json"
        )
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as error:
        raise InputError("--out", args.out, f"cannot be written: {error.strerror}") from None
    if args.save_workload:
        check_workload_path(args.save_workload, "--save-workload")
    return out


def prepare_workload(args: argparse.Namespace, console: Console) -> tuple[Workload, float]:
    """Build the workload (and save it when asked); warn of jobs that can never start."""
    from rich.console import Console

    from toposched.workloads.files import save_workload
    from toposched.workloads.model import oversized_jobs

    started = time.perf_counter()
    with console.status(f"building workload {args.workload}..."):
        workload = build_workload(args)
    built = time.perf_counter() - started
    if args.save_workload:
        saved = save_workload(workload, args.save_workload)
        console.print(
            f"workload written to {saved} ({len(workload.jobs):,} jobs)",
            highlight=False,
            soft_wrap=True,
        )
    oversized = oversized_jobs(workload)
    if oversized:
        # A warning, not an error: a trace replayed on a smaller cluster legitimately holds
        # such jobs, and the rest of the run still measures the scheduler.
        names = ", ".join(f"{job.name} ({job.gpus:,g} GPUs)" for job in oversized[:5])
        more = f" and {len(oversized) - 5:,} more" if len(oversized) > 5 else ""
        Console(stderr=True).print(
            f"warning: {len(oversized):,} job(s) ask for more GPUs than the cluster's "
            f"{workload.topology.n_gpus:,} and can never start: {names}{more}",
            highlight=False,
            soft_wrap=True,
        )
    return workload, built


def _stop_on_sigterm() -> None:
    """SIGTERM stops a run as Ctrl-C does: with the partial summary written."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)


def simulate_and_report(
    args: argparse.Namespace, title: str | None = None, verbose: bool = True
) -> dict[str, Any]:
    """Build the workload, run it, write DIR/summary.json, print the table or the JSON: the
    full summary, or when not `verbose` the plain one. An interrupted run (Ctrl-C, SIGTERM)
    writes the summary of what it simulated and says so."""
    from rich.console import Console

    from toposched.cli.console import output_console

    console = output_console(stderr=args.json)
    out = check_outputs(args)
    # The workload first: a bad workload file answers before the simulator (and numba) loads.
    workload, built = prepare_workload(args, console)

    from toposched.cli.summary import plain_table, summary_table
    from toposched.sim.engine import Simulation, SimulationInterrupted
    from toposched.sim.metrics import summarize

    simulation = Simulation(
        workload,
        scheduler_factory(args),
        sample_interval=args.sample_interval,
        progress=not args.no_progress,
        cycle_interval=args.cycle_every,
        topology_price=topology_price(args),
    )
    _stop_on_sigterm()
    interrupted: SimulationInterrupted | None = None
    try:
        result, calibrated = _calibrated(simulation.run)
    except SimulationInterrupted as stop:
        interrupted, result, calibrated = stop, stop.result, {}
    summary = summarize(result)
    if calibrated:
        summary["scheduler_speed"]["calibration"] = calibrated
    summary["workload_description"] = workload.description
    summary["workload_build_seconds"] = built
    path = out / "summary.json"
    path.write_text(json.dumps(summary, indent=1) + "\n")
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
            f"interrupted: the summary covers the first {result.duration / DAY:.2f} simulated "
            f"days, written to {path}",
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
    scheduler) and DIR/report.html."""
    from rich.console import Console

    from toposched.cli.console import output_console

    console = output_console(stderr=args.json)
    out = check_outputs(args)
    # The workload first: a bad workload file answers before the simulator (and numba) loads.
    workload, _ = prepare_workload(args, console)

    from toposched.cli.summary import plain_table, summary_table
    from toposched.sim.compare import comparison_table, run_comparison, schedulers_named
    from toposched.sim.engine import SimulationInterrupted
    from toposched.sim.metrics import summarize
    from toposched.sim.report import write_report

    schedulers = schedulers_named(scheduler_factory(args), getattr(args, "baselines", None))
    _stop_on_sigterm()
    try:
        runs, calibrated = _calibrated(
            lambda: run_comparison(
                workload,
                schedulers,
                sample_interval=args.sample_interval,
                progress=not args.no_progress,
                topology_price=topology_price(args),
            )
        )
    except SimulationInterrupted as stop:
        # The runs already finished are not returned: keep the one that was stopped.
        path = out / "summary.json"
        partial = {stop.result.scheduler: summarize(stop.result)}
        path.write_text(json.dumps(partial, indent=1) + "\n")
        Console(stderr=True).print(
            f"interrupted: {path} holds the summary of {stop.result.scheduler}'s run over its "
            f"first {stop.result.duration / DAY:.2f} simulated days",
            highlight=False,
            soft_wrap=True,
        )
        raise
    summaries = {name: run.summary for name, run in runs.items()}
    for summary in summaries.values():
        summary["scheduler_speed"]["calibration"] = calibrated
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


def run(args: argparse.Namespace) -> int:
    # Before the simulator loads (numpy, the compiled loops): a bad option answers at once.
    check_outputs(args)
    if args.compare:
        compare_and_report(args)
    else:
        simulate_and_report(args)
    return 0
