"""Workload variants: a replay split among teams, a share of jobs made resumable."""

from __future__ import annotations

import json
import zlib
from collections import Counter
from pathlib import Path

import pytest

from toposched.cli.main import main
from toposched.cluster.errors import InputError
from toposched.cluster.units import HOUR
from toposched.workloads.ai2 import ai2_like
from toposched.workloads.catalog import workload_by_name
from toposched.workloads.model import Workload
from toposched.workloads.replay import default_traces_dir
from toposched.workloads.variants import split_among_teams, with_resumable_share

TRACES = default_traces_dir()


@pytest.fixture(scope="module")
def base() -> Workload:
    return ai2_like(seed=1, days=1.0, gpus=256)


def test_split_charges_each_job_to_the_team_its_name_hashes_to(base: Workload) -> None:
    split = split_among_teams(base, 4)
    # Zipf-like weights 1, 1/2, 1/3, 1/4 over 25/12: cumulative bounds 0.48, 0.72, 0.88, 1.
    bounds = [12 / 25, 18 / 25, 22 / 25, 1.0]
    for before, after in zip(base.jobs, split.jobs, strict=True):
        draw = (zlib.crc32(before.spec.name.encode()) % 100_000) / 100_000
        team = next(i for i, bound in enumerate(bounds) if draw < bound or i == 3)
        assert after.spec.account == f"team-{team + 1:02d}"
        assert (after.submit_time, after.runtime, after.gpus) == (
            before.submit_time,
            before.runtime,
            before.gpus,
        )
        expected = "debug" if before.runtime <= 0.5 * HOUR else None
        expected = expected or ("training" if before.gpus >= 16 else "other")
        assert after.job_class == expected
    counts = Counter(job.spec.account for job in split.jobs)
    assert counts["team-01"] > counts["team-02"] > counts["team-04"]


def test_split_budgets_are_the_teams_shares_of_gpu_time(base: Workload) -> None:
    split = split_among_teams(base, 3)
    used = Counter[str]()
    for job in split.jobs:
        used[job.spec.account] += job.gpus * job.runtime
    total = sum(used.values())
    shares = {name: spec["share"] for name, spec in split.budget["accounts"].items()}
    assert set(shares) == {"team-01", "team-02", "team-03"}
    for name, share in shares.items():
        assert share == max(0.1, int(1000 * used[name] / total) / 10)
    assert split.name.endswith("x 3 teams") and split.notes["teams"] == 3


@pytest.mark.parametrize("teams", [1, 101, True, 2.5])
def test_split_refuses_team_counts_out_of_range(base: Workload, teams: object) -> None:
    with pytest.raises(InputError, match="teams"):
        split_among_teams(base, teams)  # type: ignore[arg-type]


def test_resumable_share_changes_only_who_can_resume(base: Workload) -> None:
    none, every = with_resumable_share(base, 0.0), with_resumable_share(base, 1.0)
    assert not any(job.spec.resumable for job in none.jobs)
    assert all(job.spec.resumable for job in every.jobs)
    fifth = with_resumable_share(base, 0.2, seed=3)
    share = sum(job.spec.resumable for job in fifth.jobs) / len(fifth.jobs)
    assert 0.15 < share < 0.25, share
    again = with_resumable_share(base, 0.2, seed=3)
    assert [j.spec.resumable for j in again.jobs] == [j.spec.resumable for j in fifth.jobs]
    other = with_resumable_share(base, 0.2, seed=4)
    assert [j.spec.resumable for j in other.jobs] != [j.spec.resumable for j in fifth.jobs]
    for before, after in zip(base.jobs, fifth.jobs, strict=True):
        assert after.spec.name == before.spec.name and after.runtime == before.runtime
    assert fifth.notes["resumable_share"] == 0.2 and "20% of jobs resumable" in fifth.description


def test_workload_by_name_applies_both(base: Workload) -> None:
    built = workload_by_name("ai2", seed=1, days=1.0, gpus=256, resumable=0.0)
    assert not any(job.spec.resumable for job in built.jobs)
    with pytest.raises(InputError, match="has its own accounts"):
        workload_by_name("ai2", days=1.0, gpus=256, teams=3)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--workload", "ai2", "--teams", "3"], "has its own accounts"),
        (["--workload", "frontier", "--teams", "3"], "has its own accounts"),
        (["--workload", "itp:04", "--teams", "1"], "from 2 to 100"),
        (["--resumable", "101"], "a percentage from 0 to 100"),
        (["--resumable", "x%"], "a percentage from 0 to 100"),
    ],
)
def test_the_cli_refuses_bad_values_before_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    try:
        code = main(["simulate", "--days", "1", "--out", str(tmp_path), *flags])
    except SystemExit as exit_info:
        code = exit_info.code
    assert code == 2
    assert message in capsys.readouterr().err


@pytest.mark.skipif(not (TRACES / "itp").is_dir(), reason=f"ITP traces not found at {TRACES}")
def test_an_itp_replay_split_among_teams_from_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "out"
    argv = ["simulate", "--workload", "itp:04", "--teams", "12", "--gpus", "512", "--days", "1"]
    assert main([*argv, "--traces-dir", str(TRACES), "--no-progress", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert "split among 12 teams" in summary["workload_description"]
    assert set(summary["fairness"]["teams"]) <= {f"team-{i:02d}" for i in range(1, 13)}
