"""Tests of the benchmark harness (warm-up runs are untimed, the cold first run is kept) and of
a suite run through `toposched bench`."""

from __future__ import annotations

import json

import pytest

from toposched.bench import harness
from toposched.cli.main import main


class FakeClock:
    """A perf_counter that moves only when a run says how long it took."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_warm_up_runs_are_untimed_and_the_first_run_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(harness.time, "perf_counter", clock.perf_counter)
    # The first run is cold (9 s), two more warm-up runs take 5 s, timed runs 1..4 s.
    durations = iter([9.0, 5.0, 5.0, 1.0, 2.0, 3.0, 4.0])
    calls: list[str] = []

    def run() -> None:
        calls.append("run")
        clock.now += next(durations)

    def setup() -> None:
        calls.append("setup")

    result = harness.measure("x", run, runs=4, setup=setup, warmup=3)
    assert calls == ["setup", "run"] * 7
    assert result.runs == 4
    assert result.min_s == 1.0
    assert result.median_s == 2.5
    assert result.first_s == 9.0
    assert result.as_dict()["first_s"] == 9.0


def test_warm_up_never_exceeds_the_runs_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(harness.time, "perf_counter", clock.perf_counter)
    count = 0

    def run() -> None:
        nonlocal count
        count += 1
        clock.now += 1.0

    result = harness.measure("x", run, runs=2)
    assert count == 4  # two warm-up runs, two timed
    assert result.runs == 2


def test_without_warm_up_the_first_timed_run_is_the_cold_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = FakeClock()
    monkeypatch.setattr(harness.time, "perf_counter", clock.perf_counter)
    durations = iter([7.0, 1.0, 1.0])

    def run() -> None:
        clock.now += next(durations)

    result = harness.measure("x", run, runs=3, warmup=0)
    assert result.first_s == 7.0
    assert result.median_s == 1.0


@pytest.mark.parametrize(
    ("runs", "rank"),
    [(1, 1), (2, 2), (9, 9), (10, 9), (11, 10), (20, 18), (50, 45), (100, 90)],
)
def test_p90_is_the_nearest_rank_not_the_next_one(runs: int, rank: int) -> None:
    ordered = [float(value) for value in range(1, runs + 1)]
    assert harness.nearest_rank(ordered, 0.9) == float(rank)


def test_the_p90_of_ten_runs_is_not_the_slowest(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(harness.time, "perf_counter", clock.perf_counter)
    durations = iter([1.0] * 9 + [50.0])

    def run() -> None:
        clock.now += next(durations)

    result = harness.measure("x", run, runs=10, warmup=0)
    assert result.p90_s == 1.0


def test_bench_cluster_runs_every_scenario_through_the_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["bench", "cluster", "--quick", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    names = [result["name"] for result in report["results"]]
    assert len(names) == 5
    assert names[3].startswith("allocate + release a 50,004-node gang")
    assert names[4].startswith("release + roll back 680 running 4-node jobs")
    assert all(result["median_s"] > 0 for result in report["results"])
    assert report["calibration"]["median_s"] > 0
    assert report["interpreter_calibration"]["median_s"] > 0
    assert report["interpreter_calibration"]["name"].startswith("calibration: 20,000 rounds")


def test_the_interpreter_yardstick_runs_its_whole_loop() -> None:
    # One key per value of the round number's low byte: every round ran.
    assert harness._interpreter_rounds() == 256
    assert harness.INTERPRETER_ROUNDS >= 256
