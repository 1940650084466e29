"""Terminal tables shared by CLI subcommands: a cluster's levels and domains, and a simulation's
summary next to the targets of its workload."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from rich.table import Table

from toposched.cluster.state import ClusterState
from toposched.cluster.units import DAY, HOUR, MINUTE, format_span, format_timing


def cluster_table(state: ClusterState, title: str, build_seconds: float | None = None) -> Table:
    """Levels, domains per level, nodes, GPUs, memory and build time of a cluster."""
    top = state.topology
    table = Table(title=title, title_justify="left")
    table.add_column("level")
    table.add_column("domains", justify="right")
    table.add_column("nodes per domain", justify="right")
    table.add_column("GPUs per domain", justify="right")
    for level, name in enumerate(top.domain_levels):
        sizes = top.domain_sizes(level)
        gpus = state.free_gpus[level]  # a fresh state: free equals capacity on healthy nodes
        span = (
            f"{sizes.min():,}" if sizes.min() == sizes.max() else f"{sizes.min():,}-{sizes.max():,}"
        )
        gspan = f"{gpus.min():,}" if gpus.min() == gpus.max() else f"{gpus.min():,}-{gpus.max():,}"
        table.add_row(name, f"{top.n_domains(level):,}", span, gspan)
    models = ", ".join(m.name for m in top.gpu_models if m.name) or "-"
    table.caption = (
        f"{top.n_nodes:,} nodes, {top.n_gpus:,} GPUs ({models}); "
        f"state {state.nbytes() / 2**20:.1f} MiB"
        + (f"; built in {build_seconds * 1e3:.0f} ms" if build_seconds is not None else "")
    )
    table.caption_justify = "left"
    return table


# --- a simulation's summary ------------------------------------------------------------------

TARGETS = {
    "owed_met": 0.98,
    "occupancy": 0.98,
    "debug_p90_s": 30.0,
    "events_per_second": 50_000.0,
    "frontier_days_per_wall_minute": 10.0,
    "lost_share_of_delivered": 0.015,
    "evictions_per_unallocated_job_started": 1.0,
}
"""Ai2's published outcomes and toposched's own targets: the outcomes, the event rate and the
work lost to evictions (at most 1.5% of the GPU-hours delivered) apply to the Ai2-like workload;
the wall time (30 days in 3 minutes) and at most one eviction per unallocated job started
(docs/simulator.md) to the frontier lab."""


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _percent2(value: float) -> str:
    """A share with two decimals, e.g. 1.46%: lost work is a small share of delivered."""
    return f"{100 * value:.2f}%"


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


class _Row(NamedTuple):
    """A row of the summary table."""

    metric: str
    value: str
    target: str = ""
    verdict: str = ""


def _row_with_target(ai2: bool, metric: str, value: str, target: str, met: bool | None) -> _Row:
    """A row whose target (one of Ai2's outcomes) shows only for the Ai2-like workload."""
    return _Row(metric, value, target, _verdict(met)) if ai2 else _Row(metric, value)


def _outcome_rows(summary: dict[str, Any], ai2: bool) -> list[_Row]:
    """The cluster, the jobs, occupancy and what the teams received."""
    use = summary["utilisation"]
    fair = summary["fairness"]
    jobs = summary["jobs"]
    days = summary["simulated"]["days"]
    policy = summary.get("policy") or {}
    rows = [
        _Row("cluster / simulated time", f"{summary['cluster']['gpus']:,} GPUs / {days:.1f} days"),
        _Row("policy: settings changed from the defaults", ", ".join(policy) or "none"),
        _Row(
            "jobs submitted / finished / waiting at end",
            f"{jobs['submitted']:,} / {jobs['finished']:,} / {jobs['pending_at_end']:,}",
        ),
    ]
    occupancy = use["occupancy"]
    rows.append(
        _row_with_target(
            ai2,
            "occupancy (time average)",
            _percent(occupancy),
            _percent(TARGETS["occupancy"]),
            None if occupancy is None else occupancy >= TARGETS["occupancy"],
        )
    )
    waiting = use.get("occupancy_while_work_waits")
    if waiting is not None:
        rows.append(
            _Row(
                "occupancy while work waits (share of the time)",
                f"{_percent(waiting)} ({_percent(use['share_of_time_work_waits'])})",
            )
        )
    rows.append(
        _Row(
            "unallocated share of delivered GPU time",
            _percent(use["unallocated_share_of_delivered"]),
        )
    )
    outstanding = use["mean_outstanding_ratio"]
    rows.append(
        _Row(
            "outstanding demand / capacity (mean)",
            "-" if outstanding is None else f"{outstanding:.2f}x",
        )
    )
    owed = fair["owed_met"]
    if owed is not None:
        rows.append(
            _row_with_target(
                ai2,
                "GPU-hours owed that teams received",
                _percent(owed),
                _percent(TARGETS["owed_met"]),
                owed >= TARGETS["owed_met"],
            )
        )
        rows.append(
            _Row(
                "teams at >= 95% of owed / worst team",
                f"{fair['teams_served']} of {fair['teams_with_demand']} / "
                f"{_percent(fair['worst_team_owed_met'])}",
            )
        )
        causes = _shortfall_causes(fair.get("shortfall_gpu_hours_by_cause", {}))
        if causes:
            rows.append(_Row("owed GPU-hours not received, by cause", causes))
    return rows


def _wait_rows(summary: dict[str, Any], ai2: bool) -> list[_Row]:
    """Waits per class of work, and of the largest jobs."""
    rows = []
    debug = summary["debug_wait_s"]
    if debug["p90"] is not None:
        rows.append(
            _row_with_target(
                ai2,
                "debug wait p50 / p90 / p99",
                f"{_seconds(debug['p50'])} / {_seconds(debug['p90'])} / {_seconds(debug['p99'])}",
                f"p90 {_seconds(TARGETS['debug_p90_s'])}",
                debug["p90"] <= TARGETS["debug_p90_s"],
            )
        )
    for name, report in summary["classes"].items():
        if name == "debug":
            continue
        wait = report["wait_s"]
        rows.append(
            _Row(
                f"{name} wait p50 / p90 ({report['submitted']:,} jobs)",
                f"{_seconds(wait['p50'])} / {_seconds(wait['p90'])}",
            )
        )
    largest = summary["largest_jobs"]
    if largest["jobs"]:
        rows.append(
            _Row(
                f"largest jobs (>= {largest['gpus_at_least']:,.0f} GPUs) wait p50 / max",
                f"{_seconds(largest['wait_s']['p50'])} / {_seconds(largest['max_wait_s'])}",
            )
        )
    return rows


def _disruption_rows(summary: dict[str, Any], ai2: bool, frontier: bool) -> list[_Row]:
    """Preemptions, failures and the work they cost; how often unallocated work is evicted."""
    disruption = summary["disruption"]
    by_cause = disruption["gpu_hours_lost_by_cause"]
    rows = [
        _Row(
            "preemptions / failures / GPU-hours lost",
            f"{disruption['preemptions']:,} / {disruption['node_failures']:,} / "
            f"{disruption['gpu_hours_lost']:,.0f}",
        ),
        _Row(
            "GPU-hours lost by cause: evicted unallocated / allocated work, failures",
            f"{by_cause['evictions_of_unallocated_work']:,.0f} / "
            f"{by_cause['evictions_of_allocated_work']:,.0f} / {by_cause['node_failures']:,.0f}",
        ),
    ]
    lost = disruption["gpu_hours_lost_share_of_delivered"]
    if lost is not None:
        limit = TARGETS["lost_share_of_delivered"]
        rows.append(
            _row_with_target(
                ai2,
                "GPU-hours lost, of those delivered",
                _percent2(lost),
                _percent2(limit),
                lost <= limit,
            )
        )
    per_job = disruption["evictions_per_unallocated_job_started"]
    if per_job is not None:
        most = TARGETS["evictions_per_unallocated_job_started"]
        value = (
            f"{per_job:,.2f} ({disruption['evictions_of_unallocated_jobs']:,} / "
            f"{disruption['unallocated_jobs_started']:,})"
        )
        label = "evictions per unallocated job started"
        rows.append(
            _Row(label, value, f"<= {most:g}", _verdict(per_job <= most))
            if frontier
            else _Row(label, value)
        )
    return rows


def _speed_rows(summary: dict[str, Any], ai2: bool, frontier: bool) -> list[_Row]:
    """The scheduler's and the simulator's speed, and the calibration around the run."""
    speed = summary["scheduler_speed"]
    latency = speed["decision_latency_s"]
    events = speed["events_per_second"]
    days_per_minute = 60 * (speed["simulated_seconds_per_wall_second"] or 0) / DAY
    pace = TARGETS["frontier_days_per_wall_minute"]
    rows = [
        _Row(
            "decision latency p50 / p99 / max",
            f"{_seconds(latency['p50'])} / {_seconds(latency['p99'])} / {_seconds(latency['max'])}",
        ),
        _Row(
            "scheduler time: wall / CPU",
            f"{speed['scheduler_seconds']:,.1f} s / "
            f"{speed.get('scheduler_cpu_seconds', 0.0):,.1f} s",
        ),
        _row_with_target(
            ai2,
            "scheduler events per second (wall)",
            "-" if events is None else f"{events:,.0f}",
            f"{TARGETS['events_per_second']:,.0f}",
            None if events is None else events >= TARGETS["events_per_second"],
        ),
        _Row(
            "wall time / simulated days per wall minute",
            f"{speed['wall_seconds']:.1f} s / {days_per_minute:.2f}",
            f"{pace:.2f} (the pace of 30 days in 3 min)" if frontier else "",
            _verdict(days_per_minute >= pace) if frontier else "",
        ),
    ]
    calibrated = speed.get("calibration")
    if calibrated is not None:
        rows.append(
            _Row(
                "calibration before / after: numpy.sort of 1M float32",
                f"{calibrated['before_s'] * 1e3:.1f} / {calibrated['after_s'] * 1e3:.1f} ms",
            )
        )
        if "interpreter_before_s" in calibrated:
            rows.append(
                _Row(
                    "calibration before / after: small numpy calls and dict updates",
                    f"{calibrated['interpreter_before_s'] * 1e3:.1f} / "
                    f"{calibrated['interpreter_after_s'] * 1e3:.1f} ms",
                )
            )
        at_once = calibrated.get("runs_at_once", 1)
        if at_once > 1:
            rows.append(
                _Row("runs side by side, each timed in its own process (--jobs)", f"{at_once}")
            )
    return rows


def summary_table(summary: dict[str, Any], title: str) -> Table:
    """The headline figures of a simulation summary, with the targets of its workload: Ai2's
    outcomes and the event rate for the Ai2-like cluster, the wall time for the frontier lab."""
    ai2 = str(summary.get("workload")).startswith("ai2")
    # The wall-time target is for the full fleet; a shrunken one (--gpus) has none.
    frontier = summary.get("workload") == "frontier" and summary["cluster"]["gpus"] >= 1_000_000
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("target", justify="right")
    table.add_column("", justify="left")
    balance = summary["conservation"]
    rows = [
        *_outcome_rows(summary, ai2),
        *_wait_rows(summary, ai2),
        *_disruption_rows(summary, ai2, frontier),
        *_speed_rows(summary, ai2, frontier),
        _Row(
            "conservation: delivered + idle + unavailable",
            f"error {balance['relative_error']:.1e}",
            "= capacity x time",
            _verdict(balance["holds"]),
        ),
    ]
    for row in rows:
        table.add_row(*row)
    if ai2:
        table.caption = (
            "targets: Ai2's outcomes ('Impactful scheduling for GPU clusters', 2026), "
            "toposched's simulator speed target (docs/benchmarks.md) and its bound on the work "
            "lost to evictions (docs/simulator.md)"
        )
    elif frontier:
        table.caption = (
            "targets: the 30-day frontier-lab run on 1,000,080 GPUs in 3 minutes "
            "(docs/benchmarks.md), at most one eviction per unallocated job started "
            "(docs/simulator.md)"
        )
    else:
        table.caption = "Ai2's outcome targets apply to the Ai2-like workload (--workload ai2)"
    table.caption_justify = "left"
    return table


# --- the demo's summary: schedulers side by side, each metric said in words ---------------------


class _Plain(NamedTuple):
    """A metric of the demo's table: its name, what it means, and its value in a summary."""

    name: str
    meaning: str
    value: Callable[[dict[str, Any]], str]


def _largest_wait(summary: dict[str, Any]) -> str:
    largest = summary["largest_jobs"]
    return _seconds(largest["wait_s"]["p50"]) if largest["jobs"] else "-"


_PLAIN_METRICS = (
    _Plain(
        "GPUs busy",
        "share of GPU time running work; the rest sat idle (time average)",
        lambda s: _percent(s["utilisation"]["occupancy"]),
    ),
    _Plain(
        "owed GPU-hours received",
        "teams are owed their budget's GPU-hours while they have work waiting; the share they got",
        lambda s: _percent(s["fairness"]["owed_met"]),
    ),
    _Plain(
        "worst team",
        "the same, for the team served worst",
        lambda s: _percent(s["fairness"]["worst_team_owed_met"]),
    ),
    _Plain(
        "debug wait (p90)",
        "9 in 10 debug jobs started within this",
        lambda s: _seconds(s["debug_wait_s"]["p90"]),
    ),
    _Plain(
        "largest jobs' wait (median)",
        "how long the biggest gangs waited to start",
        _largest_wait,
    ),
    _Plain(
        "unallocated work",
        "share of delivered GPU time that ran beyond any budget, on GPUs no team claimed",
        lambda s: _percent(s["utilisation"]["unallocated_share_of_delivered"]),
    ),
    _Plain(
        "preemptions",
        "running jobs stopped to make room (one that can resume goes on from its last "
        "checkpoint, another starts over)",
        lambda s: f"{s['disruption']['preemptions']:,}",
    ),
    _Plain(
        "GPU-hours lost",
        "work redone after preemptions and node failures",
        lambda s: f"{s['disruption']['gpu_hours_lost']:,.0f}",
    ),
    _Plain(
        "jobs finished / waiting at end",
        "of the jobs submitted over the run",
        lambda s: f"{s['jobs']['finished']:,} / {s['jobs']['pending_at_end']:,}",
    ),
)


def plain_table(summaries: Mapping[str, dict[str, Any]], title: str) -> Table:
    """What a user compares first: one row per metric, one column per scheduler (all on the
    same workload), and a last column saying what the metric means. Targets, calibration and
    the scheduler's speed are left to the full summary (`summary_table`)."""
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    for name in summaries:
        table.add_column(name, justify="right")
    table.add_column("what it means", style="dim")
    for metric in _PLAIN_METRICS:
        table.add_row(
            metric.name, *(metric.value(summary) for summary in summaries.values()), metric.meaning
        )
    first = next(iter(summaries.values()))
    days = first["simulated"]["days"]
    table.caption = (
        f"{first['cluster']['gpus']:,} GPUs, {days:.1f} simulated days"
        + (" (interrupted)" if first["simulated"].get("interrupted") else "")
        + "; --verbose adds every metric, the targets and the scheduler's speed"
    )
    table.caption_justify = "left"
    return table
