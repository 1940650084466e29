"""The HTML report: one self-contained file with every section, plots inline, nothing external."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from toposched.cluster.units import DAY
from toposched.sim.baselines import fifo_first_fit
from toposched.sim.compare import ComparisonRun, compare, comparison_rows, run_comparison
from toposched.sim.plots import DURATION_TICKS, line_chart
from toposched.sim.report import SECTIONS, write_report
from toposched.sim.team_ledger import SHORTFALL_CAUSES
from toposched.workloads.ai2 import ai2_like

EXTERNAL = re.compile(r"(https?:)?//", re.IGNORECASE)


class _Outline(HTMLParser):
    """Sections by id, the plot elements inside each, and every reference to elsewhere."""

    def __init__(self) -> None:
        super().__init__()
        self.section: str | None = None
        self.sections: list[str] = []
        self.plots: dict[str, int] = {}
        self.external: list[str] = []
        self.scripts = 0
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "section":
            self.section = values.get("id")
            assert self.section is not None
            self.sections.append(self.section)
        if tag in ("svg", "img") and self.section is not None:
            self.plots[self.section] = self.plots.get(self.section, 0) + 1
        if tag in ("script", "link", "iframe", "object", "embed"):
            self.scripts += 1
        for name, value in attrs:
            if value and name in ("src", "href", "xlink:href", "action", "data", "style"):
                if EXTERNAL.search(value) or "url(" in value:
                    self.external.append(f"{tag} {name}={value}")

    def handle_data(self, data: str) -> None:
        self.text.append(data)


@pytest.fixture(scope="module")
def runs() -> dict[str, ComparisonRun]:
    return run_comparison(ai2_like(seed=1, days=0.25, gpus=64), curve_points=8)


def outline(path: Path) -> _Outline:
    parser = _Outline()
    parser.feed(path.read_text(encoding="utf-8"))
    parser.close()
    return parser


@pytest.fixture(scope="module")
def full_report(tmp_path_factory: pytest.TempPathFactory, runs: dict[str, ComparisonRun]) -> Path:
    """The report of every run, with its cycle timings and cluster observations."""
    path = tmp_path_factory.mktemp("report") / "report.html"
    summaries = {name: run.summary for name, run in runs.items()}
    write_report(path, summaries, runs, description="tiny")
    return path


def test_report_has_every_section_with_inline_plots(
    full_report: Path, runs: dict[str, ComparisonRun]
) -> None:
    parsed = outline(full_report)
    assert parsed.sections == [key for key, _ in SECTIONS]
    for section in ("occupancy", "waits", "teams", "latency", "fragmentation", "cluster-map"):
        assert parsed.plots.get(section, 0) >= 1, section
    # One cluster map per scheduler per moment (three chosen moments and the end).
    assert parsed.plots["cluster-map"] == 4 * len(runs)
    assert parsed.external == []
    assert parsed.scripts == 0
    text = "".join(parsed.text)
    for name in runs:
        assert name in text
    assert "absent" not in text


def test_report_tells_why_owed_gpu_hours_were_not_delivered(
    full_report: Path, runs: dict[str, ComparisonRun]
) -> None:
    page = full_report.read_text(encoding="utf-8")
    teams = runs["toposched"].summary["fairness"]["teams"]
    assert teams
    for team, report in teams.items():
        split = report["shortfall_gpu_hours_by_cause"]
        cells = "".join(f"<td>{split[cause]:,.0f}</td>" for cause in SHORTFALL_CAUSES)
        met = report["owed_met"]
        received = "-" if met is None else f"{100 * met:.1f}%"
        owed = f"{report['owed_gpu_hours']:,.0f}"
        assert f"<tr><td>{team}</td><td>{owed}</td><td>{received}</td>{cells}</tr>" in page


def test_report_without_runs_says_what_is_missing(
    tmp_path: Path, runs: dict[str, ComparisonRun]
) -> None:
    path = tmp_path / "summaries-only.html"
    write_report(path, {name: run.summary for name, run in runs.items()})
    parsed = outline(path)
    assert parsed.sections == [key for key, _ in SECTIONS]
    text = "".join(parsed.text)
    assert "Fragmentation is absent" in text
    assert "no CDFs" in text
    assert "no map" in text
    assert parsed.plots.get("occupancy", 0) == 1
    assert parsed.external == []


def test_report_embeds_the_json_summaries(tmp_path: Path, runs: dict[str, ComparisonRun]) -> None:
    path = tmp_path / "report.html"
    summaries = {name: run.summary for name, run in runs.items()}
    write_report(path, summaries, runs)
    parsed = outline(path)
    embedded = json.loads("".join(parsed.text).split("show", 1)[1].strip())
    assert list(embedded) == list(runs)
    assert embedded["toposched"]["jobs"]["total"] == summaries["toposched"]["jobs"]["total"]


def test_comparison_runs_every_scheduler_on_the_same_workload(
    runs: dict[str, ComparisonRun],
) -> None:
    assert list(runs) == ["toposched", "slurm_like", "kube_like", "fifo_first_fit"]
    totals = {run.summary["jobs"]["total"] for run in runs.values()}
    assert len(totals) == 1
    for run in runs.values():
        assert run.summary["scheduler"] == run.name
        assert run.summary["conservation"]["holds"]
        assert len(run.fragmentation) == 8
        assert all(0.0 <= share <= 1.0 for _, share in run.fragmentation)
        assert all(0.0 <= x <= 1.0 for shot in run.snapshots for x in shot.occupancy)
    rows = dict(comparison_rows({name: run.summary for name, run in runs.items()}))
    assert len(rows["occupancy"]) == 4
    assert "wait debug p90" in rows
    assert rows["preemptions"][1:] == ["0", "0", "0"]
    assert rows["  of all delivered"][1:] == ["0.00%", "0.00%", "0.00%"]
    for name, cell in zip(runs, rows["evictions per unallocated job started"], strict=True):
        per_job = runs[name].summary["disruption"]["evictions_per_unallocated_job_started"]
        assert cell == ("-" if per_job is None else f"{per_job:,.2f}")
        assert name == "toposched" or per_job in (None, 0.0)
    disruption = runs["toposched"].summary["disruption"]
    assert rows["  of all delivered"][0] == (
        f"{100 * disruption['gpu_hours_lost_share_of_delivered']:.2f}%"
    )
    for name, cell in zip(runs, rows["  owed lost to jobs larger than budget"], strict=True):
        fairness = runs[name].summary["fairness"]
        owed = sum(team["owed_gpu_hours"] for team in fairness["teams"].values())
        lost = fairness["shortfall_gpu_hours_by_cause"]["jobs_larger_than_budget"]
        assert cell == f"{100 * lost / owed:.1f}%"


def test_compare_returns_deterministic_summaries() -> None:
    workload = ai2_like(seed=2, days=0.1, gpus=64)
    chosen = {"fifo_first_fit": fifo_first_fit}
    first, second = compare(workload, chosen), compare(workload, chosen)
    for summary in (*first.values(), *second.values()):
        summary.pop("scheduler_speed")
    assert first == second


def test_plot_ticks_read_without_exponents() -> None:
    chart = line_chart({"a": ([1.0, 3 * DAY], [0.0, 20_000.0])}, "wait", "GPU-hours", "t")
    ticks = re.findall(r'text-anchor="end">([^<]+)</text>', chart)
    assert "20k" in ticks and not [t for t in ticks if "e+" in t]
    durations = line_chart(
        {"a": ([1.0, 3 * DAY], [0.0, 1.0])},
        "wait",
        "share",
        "t",
        x_log=True,
        x_ticks=DURATION_TICKS,
    )
    centred = re.findall(r'text-anchor="middle">([^<]+)</text>', durations)
    assert {"1 s", "1 h", "1 d"} <= set(centred)
