"""Run one workload through toposched and the baselines, and lay their summaries side by side."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray
from rich.table import Table

from toposched.cluster.state import ClusterState, Health
from toposched.cluster.units import DAY, format_span, format_timing
from toposched.jobs.spec import JobSpec
from toposched.placement.request import GangRequest
from toposched.policy.budget import BudgetTree
from toposched.scheduler.defrag import fragmentation
from toposched.scheduler.jobs import JobState
from toposched.scheduler.settings import SchedulerSettings
from toposched.sim.baseline_names import DEFAULT_BASELINES, chosen_baselines
from toposched.sim.baselines import BASELINES
from toposched.sim.engine import DEFAULT_SAMPLE_INTERVAL, Simulation, SimulationInterrupted
from toposched.sim.metrics import summarize
from toposched.sim.progress import ProgressBoard, ProgressSink
from toposched.sim.protocol import (
    CycleLike,
    JobLike,
    SchedulerFactory,
    SchedulerLike,
    SparesLike,
    toposched_scheduler,
)
from toposched.sim.records import SimulationResult
from toposched.sim.topology_price import TopologyPrice
from toposched.sim.workers import Outcomes, Task, run_in_workers
from toposched.workloads.model import Workload

__all__ = [
    "DEFAULT_SCHEDULERS",
    "ClusterSnapshot",
    "Comparison",
    "ComparisonInterrupted",
    "ComparisonRun",
    "RunStopped",
    "FragmentationReading",
    "TeamRatios",
    "compare",
    "comparison_table",
    "run_comparison",
    "schedulers_named",
]

DEFAULT_SCHEDULERS: dict[str, SchedulerFactory] = {
    "toposched": toposched_scheduler,
    **{name: BASELINES[name] for name in DEFAULT_BASELINES},
}
"""toposched first, then the default baselines: the columns of the comparison."""
MAX_MAP_DOMAINS = 4096
"""Cluster maps use the innermost domain level with at most this many domains."""
MAX_FRAGMENTATION_SHAPES = 32


@dataclass(frozen=True)
class ClusterSnapshot:
    """Occupancy (busy GPUs / GPUs) of every cell of a cluster map at one moment.

    Cells are nodes when the cluster has at most `MAX_MAP_DOMAINS` of them, else the domains
    of the innermost level with at most that many; `rows` are the start indices of each
    enclosing domain (`row_level`), so a map draws one row per rack, unit or block.
    """

    time: float
    level: str
    row_level: str
    names: list[str]
    occupancy: list[float]
    rows: list[int]


class FragmentationReading(NamedTuple):
    """The share of free GPUs no pending shape can use, at one moment."""

    time: float
    share: float


@dataclass
class ComparisonRun:
    """One scheduler's run of the workload: the raw result, its summary and what was observed.

    `fragmentation` holds readings of the share of free GPUs no pending shape can use, against
    the jobs' own requests (with their topology constraints), so every scheduler is judged by
    the same shapes. `snapshots` are cluster maps at the chosen moments and at the end.
    """

    name: str
    result: SimulationResult
    summary: dict[str, Any]
    fragmentation: list[FragmentationReading] = field(default_factory=list)
    snapshots: list[ClusterSnapshot] = field(default_factory=list)


def schedulers_named(
    toposched: SchedulerFactory, baselines: str | Sequence[str] | None = None
) -> dict[str, SchedulerFactory]:
    """toposched, then the baselines named (see `chosen_baselines`), as `run_comparison`
    takes them."""
    names = chosen_baselines(baselines)
    return {"toposched": toposched, **{name: BASELINES[name] for name in names}}


def snapshot(state: ClusterState, now: float) -> ClusterSnapshot:
    """The cluster map now: per node (or per domain on large clusters) occupancy."""
    topology = state.topology
    gpus = topology.gpu_count.astype(np.int64)
    free = state.free_whole_gpus.astype(np.int64)
    leaf = len(topology.domain_levels) - 1
    if topology.n_nodes <= MAX_MAP_DOMAINS:
        cell_level, level_name = None, "node"
        names = list(topology.node_names)
        row_level = leaf
        rows = topology.domain_starts[leaf][:-1]
    else:
        cell_level = next(
            (
                level
                for level in range(leaf, -1, -1)
                if topology.n_domains(level) <= MAX_MAP_DOMAINS
            ),
            0,
        )
        starts = topology.domain_starts[cell_level]
        gpus = np.add.reduceat(gpus, starts[:-1])
        free = np.add.reduceat(free, starts[:-1])
        level_name = topology.domain_levels[cell_level]
        names = [topology.domain_name(cell_level, d) for d in range(topology.n_domains(cell_level))]
        row_level = max(cell_level - 1, 0)
        rows = np.searchsorted(starts, topology.domain_starts[row_level][:-1])
    occupancy = np.where(gpus > 0, 1.0 - free / np.maximum(gpus, 1), 0.0)
    return ClusterSnapshot(
        time=now,
        level=level_name,
        row_level=topology.domain_levels[row_level],
        names=[str(name) for name in names],
        occupancy=[float(x) for x in occupancy],
        rows=[int(r) for r in rows],
    )


class _Observer:
    """Wraps a scheduler; before the first event at or after each chosen moment (when the state
    still is what the last cycle left), records fragmentation and, at map moments, a snapshot.

    Observations happen in event calls, which the simulator does not time, so the measured
    decision latency stays the scheduler's own.
    """

    def __init__(
        self,
        scheduler: SchedulerLike,
        curve_moments: Sequence[float],
        map_moments: Sequence[float],
    ) -> None:
        self.scheduler = scheduler
        self.moments = sorted({*curve_moments, *map_moments}, reverse=True)
        self.map_moments = set(map_moments)
        self.fragmentation: list[FragmentationReading] = []
        self.snapshots: list[ClusterSnapshot] = []
        self.requests: dict[str, GangRequest] = {}

    # --- the scheduler's interface, observed before every event -----------------------------
    @property
    def state(self) -> ClusterState:
        return self.scheduler.state

    @property
    def jobs(self) -> Mapping[str, JobLike]:
        return self.scheduler.jobs

    @property
    def spares(self) -> SparesLike | None:
        return self.scheduler.spares

    @property
    def settings(self) -> SchedulerSettings:
        return self.scheduler.settings

    def submit(self, spec: JobSpec, now: float) -> JobLike:
        self.observe_until(now)
        self.requests[spec.name] = GangRequest.from_spec(spec, self.state.topology)
        return self.scheduler.submit(spec, now)

    def cycle(self, now: float) -> CycleLike:
        return self.scheduler.cycle(now)

    def finish(self, job_id: str, now: float) -> JobLike:
        self.observe_until(now)
        return self.scheduler.finish(job_id, now)

    def evicted(self, job_id: str, now: float) -> JobLike:
        self.observe_until(now)
        return self.scheduler.evicted(job_id, now)

    def cancel(self, job_id: str, now: float) -> JobLike:
        self.observe_until(now)
        return self.scheduler.cancel(job_id, now)

    def set_health(self, nodes: NDArray[np.int64], health: Health, now: float) -> Sequence[JobLike]:
        self.observe_until(now)
        return self.scheduler.set_health(nodes, health, now)

    def report_checkpoint(self, job_id: str, now: float) -> None:
        # Moves no GPUs: nothing to observe.
        self.scheduler.report_checkpoint(job_id, now)

    # --- observing ---------------------------------------------------------------------------
    def observe_until(self, now: float) -> None:
        while self.moments and self.moments[-1] <= now:
            moment = self.moments.pop()
            self.fragmentation.append(FragmentationReading(moment, self.measure_fragmentation()))
            if moment in self.map_moments:
                self.snapshots.append(snapshot(self.state, moment))

    def measure_fragmentation(self) -> float:
        pending = [job for job in self.scheduler.jobs.values() if job.state is JobState.PENDING]
        pending.sort(key=lambda job: (job.submit_time, job.job_id))
        shapes: dict[tuple[object, ...], GangRequest] = {}
        for job in pending:
            request = self.requests.get(job.job_id)
            if request is None:
                continue
            key = (request.gpus_per_pod, request.gpu_milli, request.required, request.slices)
            shapes.setdefault((*key, request.pods), request)
            if len(shapes) >= MAX_FRAGMENTATION_SHAPES:
                break
        return fragmentation(self.state, shapes.values())


class RunStopped(KeyboardInterrupt):
    """A run of a comparison stopped by Ctrl-C or SIGTERM in a worker process: the summary of
    what it simulated (`simulated.interrupted` set), all the parent needs of it."""

    def __init__(self, name: str, summary: dict[str, Any]) -> None:
        super().__init__(f"{name}'s run stopped")
        self.name = name
        self.summary = summary

    def __reduce__(self) -> tuple[type[RunStopped], tuple[str, dict[str, Any]]]:
        return type(self), (self.name, self.summary)


class ComparisonInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped a comparison: the runs that finished, and the summary of what
    each run that was stopped had simulated (`simulated.interrupted` set), by scheduler; runs
    not started are in neither."""

    def __init__(
        self, finished: dict[str, ComparisonRun], stopped: dict[str, dict[str, Any]]
    ) -> None:
        super().__init__(f"comparison interrupted: {', '.join(stopped) or 'between runs'}")
        self.finished = finished
        self.stopped = stopped


class Comparison:
    """One workload's runs through several schedulers (a fresh cluster state and budget tree
    each; the workload, hence its seed, is shared), each a task of its own that any process may
    run: in this one, one after another (`run`, jobs=1), or side by side in worker processes.

    `curve_points` evenly spaced moments get a fragmentation reading; `map_moments` (fractions
    of the simulated span) a cluster map, and the end state one more.
    """

    def __init__(
        self,
        workload: Workload,
        schedulers: Mapping[str, SchedulerFactory] | None = None,
        *,
        horizon: float | None = None,
        sample_interval: float = DEFAULT_SAMPLE_INTERVAL,
        curve_points: int = 48,
        map_moments: Sequence[float] = (0.25, 0.5, 0.75),
        topology_price: TopologyPrice | None = None,
    ) -> None:
        self.workload = workload
        self.schedulers = dict(DEFAULT_SCHEDULERS if schedulers is None else schedulers)
        self.horizon = horizon
        self.sample_interval = sample_interval
        self.topology_price = topology_price
        end = horizon if horizon is not None else workload.horizon
        if end is None:
            end = max((job.submit_time + job.runtime for job in workload.jobs), default=1.0)
        self.curve = (
            [end * i / curve_points for i in range(curve_points)] if curve_points > 0 else []
        )
        self.maps = [end * fraction for fraction in map_moments]

    @property
    def names(self) -> list[str]:
        """The schedulers, in the order given: the columns of the comparison."""
        return list(self.schedulers)

    def run_one(self, name: str, progress: bool | ProgressSink = False) -> ComparisonRun:
        """The run of the scheduler `name`; a stopped one raises `SimulationInterrupted`."""
        factory = self.schedulers[name]
        observers: list[_Observer] = []

        def observed(state: ClusterState, tree: BudgetTree) -> SchedulerLike:
            observer = _Observer(factory(state, tree), self.curve, self.maps)
            observers.append(observer)
            return observer

        simulation = Simulation(
            self.workload,
            observed,
            horizon=self.horizon,
            sample_interval=self.sample_interval,
            progress=progress,
            scheduler_name=name,
            topology_price=self.topology_price,
        )
        result = simulation.run()
        observer = observers[0]
        observer.observe_until(result.end)
        observer.snapshots.append(snapshot(observer.state, result.end))
        return ComparisonRun(
            name=name,
            result=result,
            summary=summarize(result),
            fragmentation=observer.fragmentation,
            snapshots=observer.snapshots,
        )

    def task(self, name: str) -> Task[ComparisonRun]:
        """The run of `name` as a worker's task (see `sim/workers.py`); stopped, it raises
        `RunStopped` with its summary, summarised where its records are."""

        def run(sink: ProgressSink) -> ComparisonRun:
            try:
                return self.run_one(name, sink)
            except SimulationInterrupted as stop:
                raise RunStopped(name, summarize(stop.result)) from None

        return run

    def run(self, jobs: int = 1, progress: bool = False) -> dict[str, ComparisonRun]:
        """Every run: in this process, one after another (`jobs` 1), else on up to `jobs`
        worker processes, the first scheduler's run handed out first. Ctrl-C or SIGTERM raises
        `ComparisonInterrupted`."""
        if jobs <= 1:
            finished: dict[str, ComparisonRun] = {}
            for name in self.schedulers:
                try:
                    finished[name] = self.run_one(name, progress)
                except SimulationInterrupted as stop:
                    stopped = {name: summarize(stop.result)}
                    raise ComparisonInterrupted(finished, stopped) from None
            return finished
        tasks = {name: self.task(name) for name in self.schedulers}
        board = ProgressBoard() if progress else None
        return self.collect(run_in_workers(tasks, jobs, board))

    def collect(self, outcomes: Outcomes[Any]) -> dict[str, ComparisonRun]:
        """The runs from what worker processes gave (other tasks may have run beside them):
        the first error any task raised, else `ComparisonInterrupted` if the tasks were
        interrupted, else every run, in this comparison's order."""
        for error in outcomes.raised.values():
            if not isinstance(error, KeyboardInterrupt):
                raise error
        finished = {
            name: run
            for name in self.schedulers
            if isinstance(run := outcomes.finished.get(name), ComparisonRun)
        }
        if outcomes.interrupted or outcomes.raised:
            stopped = {
                name: error.summary
                for name, error in outcomes.raised.items()
                if isinstance(error, RunStopped)
            }
            raise ComparisonInterrupted(finished, stopped)
        return finished


def run_comparison(
    workload: Workload,
    schedulers: Mapping[str, SchedulerFactory] | None = None,
    *,
    horizon: float | None = None,
    sample_interval: float = DEFAULT_SAMPLE_INTERVAL,
    progress: bool = False,
    curve_points: int = 48,
    map_moments: Sequence[float] = (0.25, 0.5, 0.75),
    topology_price: TopologyPrice | None = None,
    jobs: int = 1,
) -> dict[str, ComparisonRun]:
    """Run the same workload through each scheduler, in this process or on `jobs` worker
    processes (see `Comparison`); the runs in the order given."""
    comparison = Comparison(
        workload,
        schedulers,
        horizon=horizon,
        sample_interval=sample_interval,
        curve_points=curve_points,
        map_moments=map_moments,
        topology_price=topology_price,
    )
    return comparison.run(jobs, progress)


def compare(
    workload: Workload,
    schedulers: Mapping[str, SchedulerFactory] | None = None,
    **options: Any,
) -> dict[str, dict[str, Any]]:
    """The JSON summary of each scheduler's run of `workload`; see `run_comparison`."""
    return {
        name: run.summary for name, run in run_comparison(workload, schedulers, **options).items()
    }


# --- the side-by-side table ----------------------------------------------------------------------
def _get(summary: Mapping[str, Any], *path: str) -> Any:
    value: Any = summary
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return None
        value = value[key]
    return value


def _cell(text: Callable[[Any], str], *path: str) -> Callable[[Mapping[str, Any]], str]:
    """A cell of the side-by-side table: the summary's value at `path`, as `text` writes it."""
    return lambda summary: text(_get(summary, *path))


def _percent(value: Any) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _small_share(value: Any) -> str:
    """A share that is small where it matters (work lost), to two decimals: 1.46%."""
    return "-" if value is None else f"{100 * value:.2f}%"


def _seconds(value: Any) -> str:
    return "-" if value is None else format_span(value, days_from=2 * DAY)


def _latency(value: Any) -> str:
    return "-" if value is None else format_timing(value, microseconds=False)


def _number(value: Any, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


class TeamRatios(NamedTuple):
    """The share of owed GPU-hours delivered across teams with demand: the worst and the mean."""

    worst: float | None
    mean: float | None


def team_ratios(summary: Mapping[str, Any]) -> TeamRatios:
    """The worst and the mean share of owed GPU-hours delivered across teams with demand."""
    teams = _get(summary, "fairness", "teams") or {}
    ratios = [team["owed_met"] for team in teams.values() if team.get("owed_met") is not None]
    if not ratios:
        return TeamRatios(None, None)
    return TeamRatios(min(ratios), sum(ratios) / len(ratios))


def _owed_share(summary: Mapping[str, Any], cause: str) -> float | None:
    """The owed GPU-hours not received for `cause`, as a share of all owed GPU-hours."""
    teams = _get(summary, "fairness", "teams") or {}
    owed = sum(team.get("owed_gpu_hours", 0.0) for team in teams.values())
    lost = _get(summary, "fairness", "shortfall_gpu_hours_by_cause", cause)
    return lost / owed if lost is not None and owed > 0 else None


def comparison_rows(summaries: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, list[str]]]:
    """(metric, one cell per scheduler) rows of the side-by-side summary."""
    names = list(summaries)
    rows: list[tuple[str, list[str]]] = []

    def add(label: str, cell: Callable[[Mapping[str, Any]], str]) -> None:
        rows.append((label, [cell(summaries[name]) for name in names]))

    add("occupancy", lambda s: _percent(_get(s, "utilisation", "occupancy")))
    add(
        "occupancy while work waits",
        lambda s: _percent(_get(s, "utilisation", "occupancy_while_work_waits")),
    )
    add(
        "allocated share",
        lambda s: _percent(_get(s, "utilisation", "allocated_share_of_delivered")),
    )
    add(
        "unallocated share",
        lambda s: _percent(_get(s, "utilisation", "unallocated_share_of_delivered")),
    )
    add("teams: owed delivered (all)", lambda s: _percent(_get(s, "fairness", "owed_met")))
    add("teams: owed delivered (min)", lambda s: _percent(team_ratios(s).worst))
    add("teams: owed delivered (mean)", lambda s: _percent(team_ratios(s).mean))
    add(
        "  owed lost to jobs larger than budget",
        lambda s: _percent(_owed_share(s, "jobs_larger_than_budget")),
    )
    classes = sorted(
        {c for s in summaries.values() for c in (_get(s, "classes") or {}) if c != "debug"}
    )
    for job_class in ["debug", *classes]:
        for point in ("p50", "p90", "p99"):
            add(f"wait {job_class} {point}", _cell(_seconds, "classes", job_class, "wait_s", point))
    add("largest jobs: wait p50", lambda s: _seconds(_get(s, "largest_jobs", "wait_s", "p50")))
    add("largest jobs: wait max", lambda s: _seconds(_get(s, "largest_jobs", "max_wait_s")))
    add("preemptions", lambda s: _number(_get(s, "disruption", "preemptions")))
    add("GPU-hours lost", lambda s: _number(_get(s, "disruption", "gpu_hours_lost"), 1))
    add(
        "  of it, evicting allocated work",
        lambda s: _number(
            _get(s, "disruption", "gpu_hours_lost_by_cause", "evictions_of_allocated_work"), 1
        ),
    )
    add(
        "  of all delivered",
        lambda s: _small_share(_get(s, "disruption", "gpu_hours_lost_share_of_delivered")),
    )
    add(
        "evictions per unallocated job started",
        lambda s: _number(_get(s, "disruption", "evictions_per_unallocated_job_started"), 2),
    )
    add(
        "GPU-hours slowed by topology",
        lambda s: _number(_get(s, "disruption", "gpu_hours_lost_to_topology"), 1),
    )
    for point in ("p50", "p99", "max"):
        add(
            f"decision latency {point}",
            _cell(_latency, "scheduler_speed", "decision_latency_s", point),
        )
    add("events/s", lambda s: _number(_get(s, "scheduler_speed", "events_per_second")))
    return rows


def comparison_table(summaries: Mapping[str, Mapping[str, Any]], title: str | None = None) -> Table:
    """A rich table: one row per metric, one column per scheduler."""
    table = Table(title=title, show_lines=False)
    table.add_column("metric", style="bold")
    for name in summaries:
        table.add_column(name, justify="right")
    for label, cells in comparison_rows(summaries):
        table.add_row(label, *cells)
    return table
