"""One self-contained HTML report of a comparison: tables and inline SVG plots, nothing external."""

from __future__ import annotations

import html
import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from toposched.cluster.units import DAY, HOUR
from toposched.sim.compare import ClusterSnapshot, ComparisonRun, comparison_rows
from toposched.sim.metrics import SHORTFALL_CAUSES, RecordState, SimulationResult

__all__ = ["SECTIONS", "render_report", "write_report"]

SECTIONS = (
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

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
WIDTH, HEIGHT = 720, 260
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 56, 12, 12, 36
MAX_POLYLINE_POINTS = 2000

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
pre { background: #f6f6f6; padding: 1em; overflow-x: auto; font-size: 0.8em; }
"""


# --- tiny SVG helpers -----------------------------------------------------------------------
def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    if not math.isfinite(low) or not math.isfinite(high) or high <= low:
        return [low]
    raw = (high - low) / count
    step = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= step * factor:
            step *= factor
            break
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def _label(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1000 or abs(value) < 0.01:
        return f"{value:.3g}"
    return f"{value:g}" if value == round(value, 2) else f"{value:.2f}"


class _Axes:
    """Maps data to pixels for one plot and writes its frame, ticks and labels."""

    def __init__(
        self,
        x_range: tuple[float, float],
        y_range: tuple[float, float],
        x_label: str,
        y_label: str,
        x_log: bool = False,
    ) -> None:
        self.x_log = x_log
        low, high = x_range
        if x_log:
            low, high = math.log10(max(low, 1e-9)), math.log10(max(high, 1e-9))
        self.x0, self.x1 = low, high if high > low else low + 1
        self.y0, self.y1 = y_range[0], y_range[1] if y_range[1] > y_range[0] else y_range[0] + 1
        self.x_label, self.y_label = x_label, y_label
        self.left, self.right = MARGIN_LEFT, WIDTH - MARGIN_RIGHT
        self.top, self.bottom = MARGIN_TOP, HEIGHT - MARGIN_BOTTOM

    def x(self, value: float) -> float:
        if self.x_log:
            value = math.log10(max(value, 1e-9))
        return self.left + (value - self.x0) / (self.x1 - self.x0) * (self.right - self.left)

    def y(self, value: float) -> float:
        return self.bottom - (value - self.y0) / (self.y1 - self.y0) * (self.bottom - self.top)

    def frame(self) -> list[str]:
        parts = [
            f'<rect x="{self.left}" y="{self.top}" width="{self.right - self.left}" '
            f'height="{self.bottom - self.top}" fill="none" stroke="#999"/>'
        ]
        for tick in _nice_ticks(self.y0, self.y1):
            y = self.y(tick)
            parts.append(
                f'<line x1="{self.left}" y1="{y:.1f}" x2="{self.right}" y2="{y:.1f}" '
                'stroke="#eee"/>'
            )
            parts.append(
                f'<text x="{self.left - 4}" y="{y + 4:.1f}" text-anchor="end">{_label(tick)}</text>'
            )
        if self.x_log:
            ticks = [10.0**k for k in range(math.floor(self.x0), math.ceil(self.x1) + 1)]
            ticks = [t for t in ticks if self.x0 <= math.log10(t) <= self.x1]
        else:
            ticks = _nice_ticks(self.x0, self.x1, 8)
        for tick in ticks:
            x = self.x(tick)
            parts.append(
                f'<text x="{x:.1f}" y="{self.bottom + 14}" text-anchor="middle">'
                f"{_label(tick)}</text>"
            )
        parts.append(
            f'<text x="{(self.left + self.right) / 2}" y="{HEIGHT - 6}" '
            f'text-anchor="middle">{_e(self.x_label)}</text>'
        )
        parts.append(
            f'<text x="12" y="{(self.top + self.bottom) / 2}" text-anchor="middle" '
            f'transform="rotate(-90 12 {(self.top + self.bottom) / 2})">{_e(self.y_label)}</text>'
        )
        return parts


def _svg(parts: Sequence[str], title: str, width: int = WIDTH, height: int = HEIGHT) -> str:
    body = "\n".join(parts)
    return (
        f'<svg width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img"><title>{_e(title)}</title>\n{body}\n</svg>'
    )


def _thin(xs: Sequence[float], ys: Sequence[float]) -> tuple[list[float], list[float]]:
    if len(xs) <= MAX_POLYLINE_POINTS:
        return list(xs), list(ys)
    index = np.linspace(0, len(xs) - 1, MAX_POLYLINE_POINTS).astype(int)
    return [xs[i] for i in index], [ys[i] for i in index]


def line_chart(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    x_label: str,
    y_label: str,
    title: str,
    y_range: tuple[float, float] | None = None,
    x_log: bool = False,
    step: bool = False,
) -> str:
    """Polylines, one per named series of (xs, ys), in the palette's order."""
    xs_all = [x for xs, _ in series.values() for x in xs]
    ys_all = [y for _, ys in series.values() for y in ys]
    if not xs_all:
        return f'<p class="note">No data for {_e(title)}.</p>'
    x_low = min(x for x in xs_all if x > 0) if x_log and any(x > 0 for x in xs_all) else 0.0
    axes = _Axes(
        (x_low if x_log else min(xs_all), max(xs_all)),
        y_range or (min(0.0, min(ys_all)), max(ys_all) * 1.05 or 1.0),
        x_label,
        y_label,
        x_log,
    )
    parts = axes.frame()
    for index, (_, (xs, ys)) in enumerate(series.items()):
        xs, ys = _thin(xs, ys)
        points: list[str] = []
        for i, (x, y) in enumerate(zip(xs, ys, strict=True)):
            if x_log and x <= 0:
                x = x_low
            if step and i:
                points.append(f"{axes.x(x):.1f},{axes.y(ys[i - 1]):.1f}")
            points.append(f"{axes.x(x):.1f},{axes.y(y):.1f}")
        colour = PALETTE[index % len(PALETTE)]
        parts.append(
            f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" '
            f'points="{" ".join(points)}"/>'
        )
    return _svg(parts, title)


def bar_chart(
    groups: Sequence[str],
    series: Mapping[str, Sequence[float]],
    y_label: str,
    title: str,
    reference: Sequence[float] | None = None,
) -> str:
    """Grouped bars: one group per label, one bar per series; `reference` marks a tick per
    group (e.g. what was owed)."""
    values = [v for vs in series.values() for v in vs] + list(reference or [])
    if not groups or not values:
        return f'<p class="note">No data for {_e(title)}.</p>'
    height = HEIGHT + 60
    axes = _Axes((0, len(groups)), (0, max(values) * 1.05 or 1.0), "", y_label)
    axes.bottom = height - MARGIN_BOTTOM - 60
    parts = axes.frame()
    slot = (axes.right - axes.left) / len(groups)
    width = slot * 0.8 / max(len(series), 1)
    for g, group in enumerate(groups):
        left = axes.left + g * slot + slot * 0.1
        for s, (_, vs) in enumerate(series.items()):
            value = vs[g]
            top = axes.y(value)
            parts.append(
                f'<rect x="{left + s * width:.1f}" y="{top:.1f}" width="{width:.1f}" '
                f'height="{axes.bottom - top:.1f}" fill="{PALETTE[s % len(PALETTE)]}">'
                f"<title>{_e(group)}: {value:,.1f}</title></rect>"
            )
        if reference is not None:
            y = axes.y(reference[g])
            parts.append(
                f'<line x1="{left:.1f}" y1="{y:.1f}" x2="{left + slot * 0.8:.1f}" y2="{y:.1f}" '
                'stroke="#000" stroke-width="2" stroke-dasharray="4 2"/>'
            )
        x = left + slot * 0.4
        parts.append(
            f'<text x="{x:.1f}" y="{axes.bottom + 8}" text-anchor="end" '
            f'transform="rotate(-40 {x:.1f} {axes.bottom + 8})">{_e(group)}</text>'
        )
    return _svg(parts, title, height=height)


def _legend(names: Sequence[str], extra: str = "") -> str:
    items = "".join(
        f'<span><span class="swatch" style="background:{PALETTE[i % len(PALETTE)]}"></span>'
        f"{_e(name)}</span>"
        for i, name in enumerate(names)
    )
    return f'<p class="legend">{items}{extra}</p>'


def _occupancy_colour(value: float) -> str:
    """White (idle) to dark blue (full)."""
    value = min(max(value, 0.0), 1.0)
    red = round(247 - value * (247 - 8))
    green = round(251 - value * (251 - 48))
    blue = round(255 - value * (255 - 107))
    return f"#{red:02x}{green:02x}{blue:02x}"


def cluster_map(snapshot: ClusterSnapshot, title: str) -> str:
    """One row per enclosing domain, one square per cell, coloured by occupancy."""
    rows = [*snapshot.rows, len(snapshot.occupancy)]
    longest = max((rows[i + 1] - rows[i] for i in range(len(rows) - 1)), default=1)
    cell = max(3, min(14, (WIDTH - 80) // max(longest, 1)))
    height = 16 + (len(rows) - 1) * (cell + 2)
    parts: list[str] = []
    for row in range(len(rows) - 1):
        y = 8 + row * (cell + 2)
        for column, index in enumerate(range(rows[row], rows[row + 1])):
            value = snapshot.occupancy[index]
            parts.append(
                f'<rect x="{70 + column * (cell + 1)}" y="{y}" width="{cell}" height="{cell}" '
                f'fill="{_occupancy_colour(value)}" stroke="#ccc" stroke-width="0.5">'
                f"<title>{_e(snapshot.names[index])}: {100 * value:.0f}%</title></rect>"
            )
        if len(rows) - 1 <= 64 or row % 8 == 0:
            parts.append(
                f'<text x="64" y="{y + cell - 1}" text-anchor="end">'
                f"{_e(snapshot.row_level)} {row}</text>"
            )
    width = 80 + longest * (cell + 1)
    return _svg(parts, title, width=max(width, 200), height=max(height, 40))


# --- the sections ----------------------------------------------------------------------------
def _days(seconds: Sequence[float]) -> list[float]:
    return [s / DAY for s in seconds]


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
    header = "".join(f"<th>{_e(name)}</th>" for name in summaries)
    body = "".join(
        f"<tr><td>{_e(label)}</td>{''.join(f'<td>{_e(c)}</td>' for c in cells)}</tr>"
        for label, cells in comparison_rows(summaries)
    )
    return f"<table><tr><th>metric</th>{header}</tr>{body}</table>"


def _occupancy_section(summaries: Mapping[str, Mapping[str, Any]]) -> str:
    series = {
        name: (
            _days(summary.get("timeline", {}).get("time_s", [])),
            [100 * v for v in summary.get("timeline", {}).get("occupancy", [])],
        )
        for name, summary in summaries.items()
    }
    return _legend(list(summaries)) + line_chart(
        series, "simulated days", "occupancy %", "Occupancy over time", (0, 100), step=True
    )


def _waits_section(runs: Mapping[str, ComparisonRun] | None, names: Sequence[str]) -> str:
    if not runs:
        return '<p class="note">Per-job waits were not passed to the report: no CDFs.</p>'
    per_run = {name: _waits(run.result) for name, run in runs.items()}
    classes = sorted({c for waits in per_run.values() for c in waits})
    classes.sort(key=lambda c: (c != "debug", c))
    parts = [
        _legend(names),
        '<p class="note">Jobs that never started count the time they waited until withdrawn or '
        "until the run ended. Log scale; waits of 0 s sit at the left edge.</p>",
    ]
    for job_class in classes:
        series = {name: _cdf(per_run[name].get(job_class, [])) for name in runs if per_run[name]}
        series = {name: xy for name, xy in series.items() if xy[0]}
        parts.append(f"<h3>{_e(job_class)}</h3>")
        parts.append(
            line_chart(
                series,
                "wait (seconds, log scale)",
                "share of jobs",
                f"Wait-time CDF: {job_class}",
                (0, 1),
                x_log=True,
                step=True,
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
        _legend(names, "<span>- - - owed (first scheduler's run)</span>")
        + '<p class="note">Bars: GPU-hours delivered within what each team was owed (its share, '
        "capped hour by hour by its demand). Owed depends on demand, which each run shapes.</p>"
        + bar_chart(teams, delivered, "GPU-hours", "Delivered vs owed per team", owed)
        + _shortfall_table(names[0], teams, first)
    )


def _shortfall_table(name: str, teams: Sequence[str], by_team: Mapping[str, Any]) -> str:
    """Per team of one run: owed GPU-hours, the share received, and why the rest was not."""
    causes = list(SHORTFALL_CAUSES)
    header = "".join(f"<th>{_e(cause.replace('_', ' '))}</th>" for cause in causes)
    rows = []
    for team in teams:
        report = by_team.get(team, {})
        owed = report.get("owed_gpu_hours", 0.0)
        met = report.get("owed_met")
        split = report.get("shortfall_gpu_hours_by_cause", {})
        cells = "".join(f"<td>{split.get(cause, 0.0):,.0f}</td>" for cause in causes)
        received = "-" if met is None else f"{100 * met:.1f}%"
        rows.append(f"<tr><td>{_e(team)}</td><td>{owed:,.0f}</td><td>{received}</td>{cells}</tr>")
    return (
        f'<p class="note">Owed GPU-hours {_e(name)} did not deliver, by cause '
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
        _legend(list(runs))
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
    series: dict[str, tuple[list[float], list[float]]] = {}
    for name, summary in summaries.items():
        timeline = summary.get("timeline", {})
        if timeline.get("fragmentation"):
            series[name] = (
                _days(timeline["time_s"]),
                [100 * v for v in timeline["fragmentation"]],
            )
        elif runs and name in runs and runs[name].fragmentation:
            points = runs[name].fragmentation
            series[name] = (_days([p.time for p in points]), [100 * p.share for p in points])
    if not series:
        return (
            '<p class="note">Fragmentation is absent: neither the summaries nor the runs carry '
            "fragmentation readings.</p>"
        )
    return (
        _legend(list(series))
        + '<p class="note">Share of free GPUs that none of the pending job shapes (with their '
        "own topology constraints) could use.</p>"
        + line_chart(
            series, "simulated days", "fragmentation %", "Fragmentation over time", (0, 100)
        )
    )


def _map_section(runs: Mapping[str, ComparisonRun] | None) -> str:
    if not runs or not any(run.snapshots for run in runs.values()):
        return '<p class="note">No cluster snapshots were passed to the report: no map.</p>'
    parts = [
        '<p class="note">Each square is one '
        f"{_e(next(iter(runs.values())).snapshots[0].level)}, white idle to dark blue full; "
        "rows are the enclosing domains.</p>"
    ]
    for name, run in runs.items():
        parts.append(f"<h3>{_e(name)}</h3>")
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
    facts = (
        f"Workload {_e(first.get('workload', '?'))} on {first.get('cluster', {}).get('gpus', 0):,}"
        f" GPUs, {first.get('simulated', {}).get('days', 0):.2f} simulated days; schedulers: "
        f"{_e(', '.join(names))}."
    )
    bodies = {
        "summary": _summary_section(summaries),
        "occupancy": _occupancy_section(summaries),
        "waits": _waits_section(runs, names),
        "teams": _teams_section(summaries),
        "latency": _latency_section(summaries, runs),
        "fragmentation": _fragmentation_section(summaries, runs),
        "cluster-map": _map_section(runs),
        "json": "<details><summary>show</summary><pre>"
        + _e(json.dumps(summaries, indent=1, default=str))
        + "</pre></details>",
    }
    sections = "\n".join(
        f'<section id="{key}"><h2>{_e(heading)}</h2>\n{bodies[key]}\n</section>'
        for key, heading in SECTIONS
    )
    intro = f"<p>{_e(description)}</p>" if description else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_STYLE}</style></head><body>\n"
        f"<h1>{_e(title)}</h1>{intro}<p>{facts}</p>\n{sections}\n</body></html>\n"
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
