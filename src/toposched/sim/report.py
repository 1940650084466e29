"""One self-contained HTML report of a comparison: tables and inline SVG plots, nothing external."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from toposched.cluster.units import DAY, HOUR
from toposched.sim.compare import ComparisonRun, comparison_rows
from toposched.sim.plots import DURATION_TICKS, bar_chart, cluster_map, escape, legend, line_chart
from toposched.sim.records import RecordState, SimulationResult
from toposched.sim.team_ledger import SHORTFALL_CAUSES

__all__ = ["SECTIONS", "render_report", "write_report"]

SECTIONS = (
    ("how-to-read", "How to read this"),
    ("summary", "Side by side"),
    ("occupancy", "Occupancy over time"),
    ("waits", "Wait-time distributions per class"),
    ("teams", "Team GPU-hours: delivered vs owed"),
    ("latency", "Decision latency"),
    ("fragmentation", "Fragmentation"),
    ("cluster-map", "Cluster map"),
    ("json", "JSON summary"),
)
"""(id, heading) of every section, in order."""

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.9em; }
td, th { padding: 2px 10px; border-bottom: 1px solid #eee; text-align: right; }
td:first-child, th:first-child { text-align: left; }
.legend span { display: inline-block; margin-right: 1.5em; }
.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 4px; }
.note { color: #666; font-size: 0.9em; }
svg text { font-size: 11px; fill: #333; }
dt { font-weight: 600; margin-top: .4em; } dd { margin-left: 1.5em; }
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; font-size: 0.8em; }
"""


def _time_unit(seconds: float) -> tuple[float, str]:
    """(seconds per unit, axis label) of a simulated-time axis spanning `seconds`: hours up
    to three days, days beyond."""
    return (HOUR, "simulated hours") if seconds <= 3 * DAY else (DAY, "simulated days")


def _in(unit: float, seconds: Sequence[float]) -> list[float]:
    return [s / unit for s in seconds]


def _lowest_shown(values: Sequence[float]) -> float:
    """Where a percentage axis starts so the lines fill it: 5 below the 5th percentile of the
    readings, rounded down to 5 (the first hours' ramp-up sits on the bottom edge)."""
    if not values:
        return 0.0
    low = float(np.percentile(np.asarray(values, dtype=float), 5)) - 5
    return float(min(max(math.floor(low / 5) * 5, 0), 90))


def _smoothed(xs: Sequence[float], ys: Sequence[float], window: float) -> list[float]:
    """The mean of the readings within `window` / 2 of each reading's time."""
    times = np.asarray(xs, dtype=float)
    sums = np.concatenate([[0.0], np.cumsum(np.asarray(ys, dtype=float))])
    low = np.searchsorted(times, times - window / 2, side="left")
    high = np.searchsorted(times, times + window / 2, side="right")
    return [float(v) for v in (sums[high] - sums[low]) / np.maximum(high - low, 1)]


def _how_to_read() -> str:
    return (
        "<dl>"
        "<dt>Owed GPU-hours</dt><dd>A team's budget is a share of the cluster's GPUs. While it "
        "has work waiting or running it is owed that share each hour (or what its work asks "
        "for, if less); <em>delivered</em> is the part of those hours it got. Time beyond what "
        "was owed in one hour does not make up for another.</dd>"
        "<dt>Unallocated work</dt><dd>Work no budget pays for: jobs with "
        "<code>min_runtime: 0</code> or of an account whose share is 0. It runs on GPUs nobody "
        "claims right now, counts towards occupancy but never towards owed GPU-hours, and any "
        "budgeted job may evict it.</dd>"
        "<dt>Min runtime</dt><dd>How long a job is protected from preemption once it starts "
        "(<code>min_runtime</code>, at most 8 h). After it the job may be preempted; a resumable "
        "job restarts from its last checkpoint, and the work since then is lost.</dd>"
        "<dt>The plots</dt><dd>Time is simulated time, in hours for runs up to three days and "
        "in days beyond; sizes are in GPUs and GPU-hours. Each scheduler has one colour "
        "throughout, named in the legend above each plot.</dd>"
        "</dl>"
    )


def _waits(result: SimulationResult) -> dict[str, list[float]]:
    waits: dict[str, list[float]] = {}
    for record in result.records.values():
        if record.state is RecordState.FUTURE:
            continue
        if record.first_start is not None:
            wait = record.first_start - record.job.submit_time
        else:
            stop = record.end_time if record.end_time is not None else result.end
            wait = max(stop - record.job.submit_time, 0.0)
        waits.setdefault(record.job_class, []).append(wait)
    return waits


def _cdf(values: Sequence[float]) -> tuple[list[float], list[float]]:
    ordered = sorted(values)
    n = len(ordered)
    return ordered, [(i + 1) / n for i in range(n)]


def _summary_section(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    header = "".join(f"<th>{escape(name)}</th>" for name in summaries)
    body = "".join(
        f"<tr><td>{escape(label)}</td>{''.join(f'<td>{escape(c)}</td>' for c in cells)}</tr>"
        for label, cells in comparison_rows(summaries)
    )
    return f"<table><tr><th>metric</th>{header}</tr>{body}</table>"


def _occupancy_section(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    timelines = {name: summary.get("timeline", {}) for name, summary in summaries.items()}
    end = max((max(t.get("time_s", [0.0]), default=0.0) for t in timelines.values()), default=0)
    unit, label = _time_unit(end)
    series = {
        name: (_in(unit, t.get("time_s", [])), [100 * v for v in t.get("occupancy", [])])
        for name, t in timelines.items()
    }
    low = _lowest_shown([y for _, ys in series.values() for y in ys])
    gpus = next(iter(summaries.values()), {}).get("cluster", {}).get("gpus", 0)
    y_label = f"occupancy (% of {gpus:,} GPUs)" if gpus else "occupancy %"
    return (
        legend(list(summaries))
        + f'<p class="note">Share of the cluster\'s GPUs running work (allocated or '
        f"unallocated). The axis starts at {low:g}% so the schedulers can be told apart; "
        "readings below it (the first hours, while the cluster fills) sit on its bottom edge.</p>"
        + line_chart(series, label, y_label, "Occupancy over time", (low, 100), step=True)
    )


def _waits_section(runs: Mapping[str, ComparisonRun] | None, names: Sequence[str]) -> str:
    if not runs:
        return '<p class="note">Per-job waits were not passed to the report: no CDFs.</p>'
    per_run = {name: _waits(run.result) for name, run in runs.items()}
    classes = sorted({c for waits in per_run.values() for c in waits})
    classes.sort(key=lambda c: (c != "debug", c))
    parts = [
        legend(names),
        '<p class="note">Jobs that never started count the time they waited until withdrawn or '
        "until the run ended. Log scale; waits of 0 s sit at the left edge.</p>",
    ]
    for job_class in classes:
        series = {name: _cdf(per_run[name].get(job_class, [])) for name in runs if per_run[name]}
        series = {name: xy for name, xy in series.items() if xy[0]}
        parts.append(f"<h3>{escape(job_class)}</h3>")
        parts.append(
            line_chart(
                series,
                "wait (log scale)",
                "share of jobs",
                f"Wait-time CDF: {job_class}",
                (0, 1),
                x_log=True,
                step=True,
                x_ticks=DURATION_TICKS,
            )
        )
    return "\n".join(parts)


def _teams_section(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    names = list(summaries)
    teams = sorted({t for s in summaries.values() for t in s.get("fairness", {}).get("teams", {})})
    if not teams:
        return '<p class="note">No budgeted teams in this workload.</p>'
    delivered = {
        name: [
            summaries[name]["fairness"]["teams"]
            .get(team, {})
            .get("delivered_within_owed_gpu_hours", 0.0)
            for team in teams
        ]
        for name in names
    }
    first = summaries[names[0]]["fairness"]["teams"]
    owed = [first.get(team, {}).get("owed_gpu_hours", 0.0) for team in teams]
    return (
        legend(names, "<span>- - - owed (first scheduler's run)</span>")
        + '<p class="note">Bars: GPU-hours delivered within what each team was owed (its share, '
        "capped hour by hour by its demand). Owed depends on demand, which each run shapes.</p>"
        + bar_chart(teams, delivered, "GPU-hours", "Delivered vs owed per team", owed)
        + _shortfall_table(names[0], teams, first)
    )


def _shortfall_table(name: str, teams: Sequence[str], by_team: Mapping[str, Any]) -> str:
    """Per team of one run: owed GPU-hours, the share received, and why the rest was not."""
    causes = list(SHORTFALL_CAUSES)
    header = "".join(f"<th>{escape(cause.replace('_', ' '))}</th>" for cause in causes)
    rows = []
    for team in teams:
        report = by_team.get(team, {})
        owed = report.get("owed_gpu_hours", 0.0)
        met = report.get("owed_met")
        split = report.get("shortfall_gpu_hours_by_cause", {})
        cells = "".join(f"<td>{split.get(cause, 0.0):,.0f}</td>" for cause in causes)
        received = "-" if met is None else f"{100 * met:.1f}%"
        rows.append(
            f"<tr><td>{escape(team)}</td><td>{owed:,.0f}</td><td>{received}</td>{cells}</tr>"
        )
    return (
        f'<p class="note">Owed GPU-hours {escape(name)} did not deliver, by cause '
        "(docs/simulator.md, <code>fairness.shortfall_gpu_hours_by_cause</code>): while every "
        "waiting job of the team was larger than its whole budget, larger than the part of its "
        "budget it left unused, while one fitted that part, or by the hourly cap alone.</p>"
        f"<table><tr><th>team</th><th>owed GPU-hours</th><th>received</th>{header}</tr>"
        f"{''.join(rows)}</table>"
    )


def _latency_section(
    summaries: Mapping[str, Mapping[str, Any]], runs: Mapping[str, ComparisonRun] | None
) -> str:
    if not runs:
        return '<p class="note">Cycle timings were not passed to the report: no histogram.</p>'
    timings = {
        name: np.asarray(run.result.cycle_seconds, dtype=float) for name, run in runs.items()
    }
    positive = np.concatenate([t[t > 0] for t in timings.values()] or [np.zeros(0)])
    if positive.size == 0:
        return '<p class="note">No scheduler cycles ran.</p>'
    edges = np.logspace(math.log10(positive.min()), math.log10(positive.max() * 1.0001), 30)
    series: dict[str, tuple[list[float], list[float]]] = {}
    for name, values in timings.items():
        counts, _ = np.histogram(np.clip(values, edges[0], edges[-1]), bins=edges)
        share = counts / max(values.size, 1)
        xs = [float(e) * 1e3 for e in edges[:-1]]
        series[name] = (xs, [float(s) for s in share])
    return (
        legend(list(runs))
        + '<p class="note">Wall-clock time of each scheduler cycle (log-spaced bins).</p>'
        + line_chart(
            series,
            "cycle time (ms, log scale)",
            "share of cycles",
            "Decision latency histogram",
            x_log=True,
            step=True,
        )
    )


def _fragmentation_section(
    summaries: Mapping[str, Mapping[str, Any]], runs: Mapping[str, ComparisonRun] | None
) -> str:
    readings: dict[str, tuple[list[float], list[float]]] = {}
    for name, summary in summaries.items():
        timeline = summary.get("timeline", {})
        if timeline.get("fragmentation"):
            readings[name] = (timeline["time_s"], [100 * v for v in timeline["fragmentation"]])
        elif runs and name in runs and runs[name].fragmentation:
            points = runs[name].fragmentation
            readings[name] = ([p.time for p in points], [100 * p.share for p in points])
    if not readings:
        return (
            '<p class="note">Fragmentation is absent: neither the summaries nor the runs carry '
            "fragmentation readings.</p>"
        )
    end = max(max(xs, default=0.0) for xs, _ in readings.values())
    unit, label = _time_unit(end)
    # wide enough to average five readings, a fifteenth of the run, or an hour
    spacing = max(
        float(np.median(np.diff(xs))) if len(xs) > 1 else 0.0 for xs, _ in readings.values()
    )
    window = max(end / 15, 5 * spacing, HOUR)
    series = {
        name: (_in(unit, xs), _smoothed(xs, ys, window)) for name, (xs, ys) in readings.items()
    }
    top = max(y for _, ys in series.values() for y in ys)
    return (
        legend(list(series))
        + '<p class="note">Share of free GPUs that none of the pending job shapes (with their '
        f"own topology constraints) could use, as a moving average over {window / HOUR:,.1f} h "
        "of simulated time (single readings jump as jobs start and end).</p>"
        + line_chart(
            series,
            label,
            "fragmentation % (moving average)",
            "Fragmentation over time",
            (0, min(100.0, max(5.0, math.ceil(top * 1.1 / 5) * 5))),
        )
    )


def _map_section(runs: Mapping[str, ComparisonRun] | None) -> str:
    if not runs or not any(run.snapshots for run in runs.values()):
        return '<p class="note">No cluster snapshots were passed to the report: no map.</p>'
    level = next(iter(runs.values())).snapshots[0].level
    parts = [
        '<p class="note">Each square is one '
        f"{escape(level)}, coloured by the share of its GPUs "
        "in use (the scale under each map: white idle to dark blue full); rows are the "
        "enclosing domains. Hover a square for its name and occupancy.</p>"
    ]
    for name, run in runs.items():
        parts.append(f"<h3>{escape(name)}</h3>")
        for shot in run.snapshots:
            parts.append(f"<p>day {shot.time / DAY:.2f} ({shot.time / HOUR:,.1f} h)</p>")
            parts.append(cluster_map(shot, f"{name} at {shot.time / HOUR:,.1f} h"))
    return "\n".join(parts)


def render_report(
    summaries: Mapping[str, Mapping[str, Any]],
    runs: Mapping[str, ComparisonRun] | None = None,
    title: str = "toposched simulation report",
    description: str = "",
) -> str:
    """The report as one HTML string (see `write_report`)."""
    names = list(summaries)
    first = next(iter(summaries.values()), {})
    gpus = first.get("cluster", {}).get("gpus", 0)
    days = first.get("simulated", {}).get("days", 0)
    facts = (
        f"Workload {escape(first.get('workload', '?'))} on {gpus:,} GPUs, {days:.2f} simulated "
        f"days; schedulers: {escape(', '.join(names))}."
    )
    bodies = {
        "how-to-read": _how_to_read(),
        "summary": _summary_section(summaries),
        "occupancy": _occupancy_section(summaries),
        "waits": _waits_section(runs, names),
        "teams": _teams_section(summaries),
        "latency": _latency_section(summaries, runs),
        "fragmentation": _fragmentation_section(summaries, runs),
        "cluster-map": _map_section(runs),
        "json": "<details><summary>show</summary><pre>"
        + escape(json.dumps(summaries, indent=1, default=str))
        + "</pre></details>",
    }
    sections = "\n".join(
        f'<section id="{key}"><h2>{escape(heading)}</h2>\n{bodies[key]}\n</section>'
        for key, heading in SECTIONS
    )
    intro = f"<p>{escape(description)}</p>" if description else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>\n"
        f"<h1>{escape(title)}</h1>{intro}<p>{facts}</p>\n{sections}\n</body></html>\n"
    )


def write_report(
    path: str | os.PathLike[str],
    summaries: Mapping[str, Mapping[str, Any]],
    runs: Mapping[str, ComparisonRun] | None = None,
    title: str = "toposched simulation report",
    description: str = "",
) -> None:
    """Write one self-contained HTML file: the side-by-side table, occupancy over time, wait
    CDFs per class, team bars, a decision-latency histogram, fragmentation and cluster maps,
    and the JSON summaries. Plots are inline SVG; nothing is fetched when it opens.

    `runs` (from `run_comparison`) supply what summaries do not carry: per-job waits, cycle
    timings, fragmentation readings and cluster snapshots; sections without them say so.
    """
    text = render_report(summaries, runs, title, description)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
