"""End-to-end: `toposched simulate --compare` runs the baselines and writes the HTML report."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest

from toposched.cli.main import main


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)


def test_simulate_compare_writes_summaries_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "simulate",
            "--workload",
            "ai2",
            "--days",
            "0.25",
            "--gpus",
            "64",
            "--compare",
            "--no-progress",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0
    summaries = json.loads((tmp_path / "summary.json").read_text())
    # toposched first, then the three baselines, all on the same workload.
    assert list(summaries) == ["toposched", "slurm_like", "kube_like", "fifo_first_fit"]
    submitted = {name: s["jobs"]["submitted"] for name, s in summaries.items()}
    assert len(set(submitted.values())) == 1 and submitted["toposched"] > 0
    html = (tmp_path / "report.html").read_text()
    tags = _Tags()
    tags.feed(html)
    assert "svg" in tags.tags and "table" in tags.tags
    assert "http://" not in html and "https://" not in html
    printed = capsys.readouterr().out
    assert "toposched and the baselines" in printed
    # One calibration around the whole comparison, the same in every summary.
    calibrations = [s["scheduler_speed"]["calibration"] for s in summaries.values()]
    assert calibrations[0]["before_s"] > 0 and all(c == calibrations[0] for c in calibrations)
    assert "calibration" in printed
