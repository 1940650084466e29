"""The simulator's report as people see it: opened in Debian's Chromium (headless, driven by
playwright), screenshotted, and checked for what makes it readable: the definitions at the top,
axes in hours and durations (never `1e+04`), team names clear of other labels, a colour scale
under each cluster map, the smoothed fragmentation curve.

The screenshot is written to $TOPOSCHED_ARTIFACTS (default: the test's temporary folder)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_service_dashboard import CHROMIUM, CHROMIUM_ARGS, colour_pixels

from toposched.sim.compare import run_comparison
from toposched.sim.plots import DURATION_TICKS
from toposched.sim.report import write_report
from toposched.workloads.ai2 import ai2_like

playwright_api = pytest.importorskip("playwright.sync_api")

EXPONENT = re.compile(r"\de[+-]\d")
FULL = "#08306b"
"""The cluster map's colour for a full domain (and the scale's right end)."""


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The report of a quarter-day comparison, open in Chromium; console errors are kept on
    the page object as `errors`."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"Chromium is not installed at {CHROMIUM} (Debian package `chromium`)")
    runs = run_comparison(ai2_like(seed=1, days=0.25, gpus=64), curve_points=24)
    path = tmp_path_factory.mktemp("report") / "report.html"
    write_report(path, {name: run.summary for name, run in runs.items()}, runs)
    with playwright_api.sync_playwright() as driver:
        try:
            chromium = driver.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
            )
        except playwright_api.Error as error:
            pytest.skip(f"Chromium did not start: {str(error)[:300]}")
        try:
            opened = chromium.new_page(viewport={"width": 1100, "height": 900})
            errors: list[str] = []
            opened.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            opened.on("pageerror", lambda e: errors.append(str(e)))
            opened.goto(path.as_uri())
            opened.errors = errors
            yield opened
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def screenshot(page: Any, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    folder = Path(os.environ.get("TOPOSCHED_ARTIFACTS") or tmp_path_factory.mktemp("shots"))
    folder.mkdir(parents=True, exist_ok=True)
    png: bytes = page.screenshot(path=str(folder / "report.png"), full_page=True)
    return png


def texts(page: Any, selector: str) -> list[str]:
    return [str(t) for t in page.locator(selector).all_text_contents()]


def test_the_report_opens_with_how_to_read_it(page: Any, screenshot: bytes) -> None:
    assert page.errors == []
    assert len(screenshot) > 50_000
    first = page.locator("section").first
    assert first.locator("h2").inner_text() == "How to read this"
    terms = texts(page, "#how-to-read dt")
    assert terms[:3] == ["Owed GPU-hours", "Unallocated work", "Min runtime"]
    assert "min_runtime: 0" in first.inner_text()
    assert first.is_visible()


def test_axes_read_in_hours_and_durations(page: Any) -> None:
    labels = texts(page, "svg text")
    assert not [label for label in labels if EXPONENT.search(label)]
    assert "simulated hours" in texts(page, "#occupancy svg text")
    assert "simulated hours" in texts(page, "#fragmentation svg text")
    assert "fragmentation % (moving average)" in texts(page, "#fragmentation svg text")
    durations = {label for _, label in DURATION_TICKS}
    # the x axis's ticks and labels are the plots' centred texts
    centred = set(texts(page, '#waits svg text[text-anchor="middle"]'))
    wait_ticks = centred - {"wait (log scale)", "share of jobs"}
    assert len(wait_ticks) >= 2 and wait_ticks <= durations, wait_ticks


def test_occupancy_axis_starts_where_its_note_says(page: Any) -> None:
    note = page.locator("#occupancy p.note").inner_text()
    start = re.search(r"axis starts at (\d+)%", note)
    assert start is not None, note
    ticks = [float(t) for t in texts(page, "#occupancy svg text") if re.fullmatch(r"\d+", t)]
    assert min(ticks) >= float(start.group(1))
    assert max(ticks) == 100


def test_team_names_are_clear_of_other_labels(page: Any) -> None:
    overlaps = page.evaluate(
        """() => {
        const svg = document.querySelector("#teams svg");
        const names = [...svg.querySelectorAll("text.group")];
        const others = [...svg.querySelectorAll("text:not(.group)")];
        const hit = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom
            && b.top < a.bottom;
        const clashes = [];
        for (const name of names) {
            const box = name.getBoundingClientRect();
            for (const other of others) {
                if (hit(box, other.getBoundingClientRect())) clashes.push(name.textContent
                    + " / " + other.textContent);
            }
        }
        return [names.length, clashes];
    }"""
    )
    count, clashes = overlaps
    assert count >= 2
    assert clashes == []


def test_cluster_maps_carry_a_colour_scale(page: Any, screenshot: bytes) -> None:
    maps = page.locator("#cluster-map svg")
    assert maps.count() >= 4
    for index in range(maps.count()):
        labels = texts(maps.nth(index), "text")
        assert {"occupancy", "0% idle", "100% full"} <= set(labels)
    shot = maps.first.screenshot()
    assert colour_pixels(page, shot, FULL) >= 150  # at least the scale's dark end
    assert "white idle to dark blue full" in page.locator("#cluster-map p.note").inner_text()
