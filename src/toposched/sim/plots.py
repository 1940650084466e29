"""Inline SVG plots for the simulator report: line and bar charts with readable axes, and
occupancy maps of the cluster with their colour scale. Nothing external, no scripts."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

import numpy as np

from toposched.cluster.units import DAY, HOUR
from toposched.sim.compare import ClusterSnapshot

__all__ = [
    "DURATION_TICKS",
    "PALETTE",
    "Ticks",
    "bar_chart",
    "cluster_map",
    "escape",
    "legend",
    "line_chart",
]

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
WIDTH, HEIGHT = 720, 260
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 56, 12, 12, 36
MAX_POLYLINE_POINTS = 2000
MAX_X_TICKS = 9
DURATION_TICKS = (
    (1.0, "1 s"),
    (2.0, "2 s"),
    (5.0, "5 s"),
    (10.0, "10 s"),
    (30.0, "30 s"),
    (60.0, "1 min"),
    (120.0, "2 min"),
    (300.0, "5 min"),
    (600.0, "10 min"),
    (1800.0, "30 min"),
    (HOUR, "1 h"),
    (2 * HOUR, "2 h"),
    (5 * HOUR, "5 h"),
    (10 * HOUR, "10 h"),
    (DAY, "1 d"),
    (2 * DAY, "2 d"),
    (5 * DAY, "5 d"),
    (10 * DAY, "10 d"),
    (30 * DAY, "30 d"),
    (100 * DAY, "100 d"),
)
"""Ticks of a log-scale duration axis (seconds), labelled in the unit people read."""
Ticks = Sequence[tuple[float, str]]


def escape(text: object) -> str:
    """Text safe in HTML content and attribute values."""
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
    """A tick's number without exponents: 12k, 1.5M, 0.001."""
    if value == 0:
        return "0"
    if abs(value) >= 1e6:
        return f"{value / 1e6:g}M"
    if abs(value) >= 1e4:
        return f"{value / 1e3:g}k"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) < 0.01:
        return f"{value:f}".rstrip("0")
    return f"{round(value, 2):g}"


class _Axes:
    """Maps data to pixels for one plot and writes its frame, ticks and labels."""

    def __init__(
        self,
        x_range: tuple[float, float],
        y_range: tuple[float, float],
        x_label: str,
        y_label: str,
        x_log: bool = False,
        x_ticks: Ticks | None = None,
    ) -> None:
        """`x_ticks`: (value, label) of each x tick, when not numbers chosen from the range
        (an empty sequence: none)."""
        self.x_log = x_log
        self.x_ticks = x_ticks
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

    def _x_ticks(self) -> Ticks:
        if self.x_log:
            ticks = self.x_ticks or [
                (10.0**k, _label(10.0**k))
                for k in range(math.floor(self.x0), math.ceil(self.x1) + 1)
            ]
            shown = [(t, label) for t, label in ticks if self.x0 <= math.log10(t) <= self.x1]
            while len(shown) > MAX_X_TICKS:
                shown = shown[::2]
            return shown
        if self.x_ticks is not None:
            return self.x_ticks
        return [(t, _label(t)) for t in _nice_ticks(self.x0, self.x1, 8)]

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
        for tick, label in self._x_ticks():
            x = self.x(tick)
            parts.append(
                f'<text x="{x:.1f}" y="{self.bottom + 14}" text-anchor="middle">'
                f"{escape(label)}</text>"
            )
        parts.append(
            f'<text x="{(self.left + self.right) / 2}" y="{HEIGHT - 6}" '
            f'text-anchor="middle">{escape(self.x_label)}</text>'
        )
        middle = (self.top + self.bottom) / 2
        parts.append(
            f'<text x="12" y="{middle}" text-anchor="middle" '
            f'transform="rotate(-90 12 {middle})">{escape(self.y_label)}</text>'
        )
        return parts


def _svg(parts: Sequence[str], title: str, width: int = WIDTH, height: int = HEIGHT) -> str:
    body = "\n".join(parts)
    return (
        f'<svg width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img"><title>{escape(title)}</title>\n{body}\n</svg>'
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
    x_ticks: Ticks | None = None,
) -> str:
    """Polylines, one per named series of (xs, ys), in the palette's order; values outside
    `y_range` sit on its edge."""
    xs_all = [x for xs, _ in series.values() for x in xs]
    ys_all = [y for _, ys in series.values() for y in ys]
    if not xs_all:
        return f'<p class="note">No data for {escape(title)}.</p>'
    x_low = min(x for x in xs_all if x > 0) if x_log and any(x > 0 for x in xs_all) else 0.0
    axes = _Axes(
        (x_low if x_log else min(xs_all), max(xs_all)),
        y_range or (min(0.0, min(ys_all)), max(ys_all) * 1.05 or 1.0),
        x_label,
        y_label,
        x_log,
        x_ticks,
    )
    parts = axes.frame()
    for index, (_, (xs, ys)) in enumerate(series.items()):
        xs, ys = _thin(xs, ys)
        ys = [min(max(y, axes.y0), axes.y1) for y in ys]
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
        return f'<p class="note">No data for {escape(title)}.</p>'
    height = HEIGHT + 90
    axes = _Axes((0, len(groups)), (0, max(values) * 1.05 or 1.0), "", y_label, x_ticks=())
    axes.bottom = height - 100
    axes.left += 40  # room for the first group's slanted name
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
                f"<title>{escape(group)}: {value:,.1f}</title></rect>"
            )
        if reference is not None:
            y = axes.y(reference[g])
            parts.append(
                f'<line x1="{left:.1f}" y1="{y:.1f}" x2="{left + slot * 0.8:.1f}" y2="{y:.1f}" '
                'stroke="#000" stroke-width="2" stroke-dasharray="4 2"/>'
            )
        x = left + slot * 0.4
        parts.append(
            f'<text class="group" x="{x:.1f}" y="{axes.bottom + 18}" text-anchor="end" '
            f'transform="rotate(-35 {x:.1f} {axes.bottom + 18})">{escape(group)}</text>'
        )
    return _svg(parts, title, height=height)


def legend(names: Sequence[str], extra: str = "") -> str:
    items = "".join(
        f'<span><span class="swatch" style="background:{PALETTE[i % len(PALETTE)]}"></span>'
        f"{escape(name)}</span>"
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
                f"<title>{escape(snapshot.names[index])}: {100 * value:.0f}%</title></rect>"
            )
        if len(rows) - 1 <= 64 or row % 8 == 0:
            parts.append(
                f'<text x="64" y="{y + cell - 1}" text-anchor="end">'
                f"{escape(snapshot.row_level)} {row}</text>"
            )
    parts.extend(_colour_scale(70, height + 4))
    width = 80 + longest * (cell + 1)
    return _svg(parts, title, width=max(width, 330), height=height + 40)


def _colour_scale(left: int, top: int) -> list[str]:
    """The map's legend: the occupancy colours from idle to full, in ten steps."""
    parts = [f'<text x="{left - 6}" y="{top + 11}" text-anchor="end">occupancy</text>']
    for step in range(11):
        parts.append(
            f'<rect x="{left + step * 22}" y="{top}" width="22" height="12" '
            f'fill="{_occupancy_colour(step / 10)}" stroke="#ccc" stroke-width="0.5"/>'
        )
    for step, label in ((0, "0% idle"), (5, "50%"), (10, "100% full")):
        parts.append(
            f'<text x="{left + step * 22 + 11}" y="{top + 26}" text-anchor="middle">{label}</text>'
        )
    return parts
