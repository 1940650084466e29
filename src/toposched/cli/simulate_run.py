"""What a `toposched simulate` run is made of: the scheduler its options ask for, the workload
(built, saved, warned about), the calibration measured around the run, and the runs themselves,
each writing DIR/summary.json (`simulate`, `compare`). The simulator, the scheduler and rich are
imported where a run needs them."""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from toposched.cli.policy_options import policy_settings
from toposched.cli.simulate_values import TopologyPriceOption, full_cycle_settings
from toposched.workloads.catalog import WorkloadKind, workload_by_name, workload_kind

if TYPE_CHECKING:
    from rich.console import Console

    from toposched.sim.compare import Comparison, ComparisonInterrupted, ComparisonRun
    from toposched.sim.engine import SimulationInterrupted
    from toposched.sim.protocol import SchedulerFactory
    from toposched.sim.topology_price import TopologyPrice
    from toposched.workloads.model import Workload

__all__ = [
    "CALIBRATION_RUNS",
    "Compared",
    "Simulated",
    "build_workload",
    "compare",
    "prepare_workload",
    "scheduler_factory",
    "scheduler_settings",
    "simulate",
    "topology_price",
]


def topology_price(args: argparse.Namespace) -> TopologyPrice | None:
    """The simulated price of spread placements `--topology-price` asks for (None: off)."""
    from toposched.sim.topology_price import DEFAULT_CAP, TopologyPrice

    given: TopologyPriceOption | None = args.topology_price
    if given is None:
        return None
    return TopologyPrice(given.slowdown, DEFAULT_CAP if given.cap is None else given.cap)


def scheduler_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The scheduler settings the command line asks for: the scheduling policy's
    (`policy_settings`), `--full-cycle-every` and `--check-incremental`."""
    settings = policy_settings(args)
    settings.update(full_cycle_settings(getattr(args, "full_cycle_every", None)))
    if getattr(args, "check_incremental", False):
        settings["check_incremental"] = True
    return settings


def scheduler_factory(args: argparse.Namespace) -> SchedulerFactory:
    """toposched's scheduler with the settings the command line asks for
    (`scheduler_settings`)."""
    from toposched.scheduler.core import Scheduler
    from toposched.sim.protocol import toposched_scheduler

    settings = scheduler_settings(args)
    if not settings:
        return toposched_scheduler
    return lambda state, tree: Scheduler(state, tree, **settings)


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


class _Yardsticks(NamedTuple):
    """One reading of the calibration: the median seconds of each yardstick."""

    sort_s: float
    interpreter_s: float
    interpreter_name: str


def _yardsticks() -> _Yardsticks:
    from toposched.bench.harness import calibration, interpreter_calibration

    sort = calibration(CALIBRATION_RUNS, CALIBRATION_WARMUP)
    interpreter = interpreter_calibration(CALIBRATION_RUNS, CALIBRATION_WARMUP)
    return _Yardsticks(sort.median_s, interpreter.median_s, interpreter.name)


def _calibration(before: _Yardsticks, after: _Yardsticks, runs_at_once: int) -> dict[str, Any]:
    """The calibration the summaries carry, with the machine: speed figures of runs on
    different machines, or in different states of one machine, compare only through it."""
    from toposched.bench.harness import machine

    return {
        "what": f"numpy.sort of 1M float32, median of {CALIBRATION_RUNS} runs",
        "before_s": before.sort_s,
        "after_s": after.sort_s,
        "interpreter_what": f"{before.interpreter_name.removeprefix('calibration: ')}, median "
        f"of {CALIBRATION_RUNS} runs",
        "interpreter_before_s": before.interpreter_s,
        "interpreter_after_s": after.interpreter_s,
        "runs_at_once": runs_at_once,
        "machine": machine(),
    }


def _calibrated(run: Callable[[], _T]) -> tuple[_T, dict[str, Any]]:
    """`run()`, and the calibration measured just before and just after it."""
    before = _yardsticks()
    outcome = run()
    return outcome, _calibration(before, _yardsticks(), 1)


def prepare_workload(args: argparse.Namespace, console: Console) -> tuple[Workload, float]:
    """Build the workload (and save it when asked); warn of jobs that can never start."""
    from rich.console import Console

    from toposched.workloads.model import oversized_jobs

    started = time.perf_counter()
    with console.status(f"building workload {args.workload}..."):
        workload = build_workload(args)
    built = time.perf_counter() - started
    if args.save_workload:
        # The writer (and YAML) only for a workload to save.
        from toposched.workloads.files import save_workload

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


class Simulated(NamedTuple):
    """A run of toposched's scheduler: the workload, the summary written to `path`, and the
    stop when the run was interrupted (the summary then covers what it simulated)."""

    workload: Workload
    summary: dict[str, Any]
    path: Path
    interrupted: SimulationInterrupted | None


def simulate(args: argparse.Namespace, out: Path, console: Console) -> Simulated:
    """Build the workload, run it and write `out`/summary.json (`out` checked by
    `simulate_options.check_outputs`); an interrupted run (Ctrl-C, SIGTERM) writes the summary
    of what it simulated."""
    # The workload first: a bad workload file answers before the simulator (and numba) loads.
    workload, built = prepare_workload(args, console)

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
    return Simulated(workload, summary, path, interrupted)


class Compared(NamedTuple):
    """toposched and the baselines on one workload: each one's summary (written to
    DIR/summary.json) and run, and the HTML report written."""

    workload: Workload
    summaries: dict[str, dict[str, Any]]
    runs: dict[str, ComparisonRun]
    out: Path
    report: Path


_BEFORE = "calibration before"
_AFTER = "calibration after"


def _compared(
    comparison: Comparison, jobs: int, progress: bool
) -> tuple[dict[str, ComparisonRun], dict[str, Any]]:
    """Every run of `comparison` on `jobs` processes, and the calibration around them.

    One after another in this process (`jobs` 1), the yardsticks run just before the first
    and just after the last. Side by side, they run in a worker like the runs: the first
    beside the first run (the longest, toposched's), the second once the last run is handed
    out, each while runs occupy the other cores, as the runs' own figures were measured."""
    if jobs <= 1:
        return _calibrated(lambda: comparison.run(1, progress))
    from toposched.sim.progress import ProgressBoard
    from toposched.sim.workers import Task, run_in_workers

    first, *others = comparison.names
    tasks: dict[str, Task[ComparisonRun | _Yardsticks]] = {
        first: comparison.task(first),
        _BEFORE: lambda sink: _yardsticks(),
        **{name: comparison.task(name) for name in others},
        _AFTER: lambda sink: _yardsticks(),
    }
    board = ProgressBoard() if progress else None
    outcomes = run_in_workers(tasks, jobs, board)
    runs = comparison.collect(outcomes)
    before, after = outcomes.finished[_BEFORE], outcomes.finished[_AFTER]
    assert isinstance(before, _Yardsticks) and isinstance(after, _Yardsticks)
    return runs, _calibration(before, after, jobs)


def compare(
    args: argparse.Namespace, out: Path, console: Console, title: str | None = None
) -> Compared:
    """Run toposched and the baselines on one workload (on `--jobs` processes); write the
    summaries (`out`/summary.json, one entry per scheduler) and `out`/report.html titled
    `title` (default: the workload's description). An interrupted comparison writes the
    summaries of the runs it finished and of those it stopped."""
    # The workload first: a bad workload file answers before the simulator (and numba) loads.
    workload, _ = prepare_workload(args, console)

    from toposched.sim.compare import Comparison, ComparisonInterrupted, schedulers_named
    from toposched.sim.report import write_report
    from toposched.sim.workers import worker_count

    comparison = Comparison(
        workload,
        schedulers_named(scheduler_factory(args), getattr(args, "baselines", None)),
        sample_interval=args.sample_interval,
        topology_price=topology_price(args),
    )
    jobs = worker_count(getattr(args, "jobs", None), len(comparison.names))
    _stop_on_sigterm()
    try:
        runs, calibrated = _compared(comparison, jobs, progress=not args.no_progress)
    except ComparisonInterrupted as stop:
        _write_interrupted(out / "summary.json", comparison.names, stop)
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
    return Compared(workload, summaries, dict(runs), out, report)


def _write_interrupted(path: Path, names: list[str], stop: ComparisonInterrupted) -> None:
    """Write the summaries of the runs an interrupted comparison finished or stopped, in the
    comparison's order, and say on stderr what they cover."""
    from rich.console import Console

    summaries = {name: run.summary for name, run in stop.finished.items()}
    summaries.update(stop.stopped)
    covered = [
        f"{name}'s run over its first {stop.stopped[name]['simulated']['days']:.2f} simulated days"
        if name in stop.stopped
        else f"{name}'s whole run"
        for name in names
        if name in summaries
    ]
    if covered:
        path.write_text(json.dumps({n: summaries[n] for n in names if n in summaries}, indent=1))
        told = f"{path} holds the summaries of {', '.join(covered)}"
    else:
        told = "no run had started; nothing written"
    Console(stderr=True).print(f"interrupted: {told}", highlight=False, soft_wrap=True)
