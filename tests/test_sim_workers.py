"""Runs side by side in forked worker processes: the same results as one after another, errors
and lost workers reported, and Ctrl-C or SIGTERM stopping every run with its summary written
and no process left behind."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from toposched.cli.main import main
from toposched.cluster.errors import InputError, ToposchedError
from toposched.sim.baselines import fifo_first_fit, kube_like
from toposched.sim.compare import Comparison, ComparisonRun
from toposched.sim.progress import ProgressReading, ProgressSink
from toposched.sim.protocol import toposched_scheduler
from toposched.sim.workers import WorkerLost, can_fork, run_in_workers, worker_count
from toposched.workloads.ai2 import ai2_like

pytestmark = pytest.mark.skipif(not can_fork(), reason="workers are forked processes")


def _pid(sink: ProgressSink) -> int:
    sink(ProgressReading("pid", "{done:.0f}", 1.0, 1.0))
    return os.getpid()


def _raise_input_error(sink: ProgressSink) -> int:
    raise InputError("field", 7, "must be even")


def _raise_value_error(sink: ProgressSink) -> int:
    raise ValueError("broken task")


def _sleep_once_started(started: Path, sink: ProgressSink) -> int:
    started.touch()
    time.sleep(60)
    return 0


def _raise_once_started(started: Path, sink: ProgressSink) -> int:
    # A task stopped before it began reports nothing: the other task must be running first.
    deadline = time.monotonic() + 20
    while not started.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return _raise_value_error(sink)


def _die(sink: ProgressSink) -> int:
    os.kill(os.getpid(), signal.SIGKILL)
    return 0


def test_tasks_run_in_other_processes_and_come_back_in_their_order() -> None:
    outcomes = run_in_workers({name: _pid for name in "abcde"}, workers=2)
    assert list(outcomes.finished) == list("abcde")
    assert not outcomes.raised and not outcomes.interrupted
    pids = set(outcomes.finished.values())
    assert os.getpid() not in pids and 1 <= len(pids) <= 2


def test_a_task_that_raises_stops_the_others_and_its_error_comes_back(tmp_path: Path) -> None:
    marker = tmp_path / "slow-started"
    tasks = {
        "slow": functools.partial(_sleep_once_started, marker),
        "broken": functools.partial(_raise_once_started, marker),
    }
    started = time.monotonic()
    outcomes = run_in_workers(tasks, workers=2)
    assert time.monotonic() - started < 40  # the sleeping task was stopped, not awaited
    error = outcomes.raised["broken"]
    assert isinstance(error, ValueError) and str(error) == "broken task"
    # The worker's own traceback comes with it.
    assert any("_raise_value_error" in note for note in getattr(error, "__notes__", []))
    assert isinstance(outcomes.raised["slow"], KeyboardInterrupt)
    assert not outcomes.finished and not outcomes.interrupted


def test_an_error_of_toposched_keeps_its_message() -> None:
    outcomes = run_in_workers({"bad": _raise_input_error}, workers=2)
    error = outcomes.raised["bad"]
    assert isinstance(error, ToposchedError)
    assert str(error) == "field: 7 is invalid: must be even"


def test_a_worker_that_dies_is_reported_lost() -> None:
    outcomes = run_in_workers({"dies": _die, "fine": _pid}, workers=1)
    assert isinstance(outcomes.raised["dies"], WorkerLost)
    assert "dies" in str(outcomes.raised["dies"])
    assert "fine" not in outcomes.finished  # nothing more was handed out


def test_worker_count_is_at_most_one_per_task() -> None:
    assert worker_count(8, 3) == 3
    assert worker_count(1, 3) == 1
    assert 1 <= worker_count(None, 4) <= 4


def _comparable(runs: dict[str, ComparisonRun]) -> dict[str, object]:
    comparable: dict[str, object] = {}
    for name, run in runs.items():
        summary = dict(run.summary)
        summary.pop("scheduler_speed")
        comparable[name] = (summary, run.fragmentation, run.snapshots, len(run.result.records))
    return comparable


def test_runs_side_by_side_are_the_runs_one_after_another() -> None:
    comparison = Comparison(
        ai2_like(seed=3, days=0.2, gpus=64),
        {"toposched": toposched_scheduler, "kube_like": kube_like, "fifo": fifo_first_fit},
        curve_points=6,
    )
    alone = comparison.run(jobs=1)
    side_by_side = comparison.run(jobs=2)
    assert list(side_by_side) == ["toposched", "kube_like", "fifo"]
    assert _comparable(side_by_side) == _comparable(alone)


def _many_jobs(tmp_path: Path, count: int) -> Path:
    """A workload file of `count` one-GPU jobs submitted at once on two 8-GPU nodes."""
    nodes = [{"name": f"n{i}", "labels": {"rack": "r1"}} for i in (1, 2)]
    cluster = {"levels": ["rack"], "defaults": {"gpus": 8, "gpu_model": "H100"}, "nodes": nodes}
    lines = [json.dumps({"cluster": cluster, "budget": {"accounts": {"research": 100}}})]
    job = {"submit": 0, "account": "research", "pods": 1, "resources_per_pod": {"gpus": 1}}
    lines += [json.dumps({**job, "name": f"j{i}", "runtime": 60 + i}) for i in range(count)]
    path = tmp_path / "many.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_sigterm_stops_every_run_writes_their_summaries_and_leaves_no_process(
    tmp_path: Path,
) -> None:
    workload = _many_jobs(tmp_path, 60_000)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "toposched.cli.main", "simulate", "--workload", str(workload)]
    command += ["--compare", "--baselines", "fifo_first_fit", "--jobs", "2", "--no-progress"]
    command += ["--out", str(out), "--save-workload", str(tmp_path / "w.jsonl")]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()  # written just before the runs start
    assert line.startswith("workload written to")
    # Past the imports and the runs' start, well inside both runs (on an idle machine FIFO's
    # ends about 13 s after the workload line, toposched's about 21 s).
    time.sleep(8.0)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert "interrupted:" in err and "holds the summaries of" in err and "Traceback" not in err
    summaries = json.loads((out / "summary.json").read_text())
    # toposched's run, stopped; FIFO's, stopped or finished: in the comparison's order.
    assert list(summaries) in (["toposched"], ["toposched", "fifo_first_fit"])
    assert summaries["toposched"]["simulated"]["interrupted"] is True
    with pytest.raises(ProcessLookupError):  # no worker outlived the command
        os.killpg(process.pid, 0)


def test_jobs_must_be_a_whole_number_of_processes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--compare", "--jobs", "0", "--out", str(tmp_path)])
    assert "expected a whole number of processes >= 1" in capsys.readouterr().err
    assert not (tmp_path / "summary.json").exists()


def test_jobs_applies_only_to_a_comparison(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "--jobs", "2", "--out", str(tmp_path)]) == 2
    assert "--jobs: 2 is invalid: applies only with --compare" in capsys.readouterr().err
    assert not (tmp_path / "summary.json").exists()


def test_runs_side_by_side_each_show_a_progress_bar(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich draws its bars only on a terminal
    arguments = ["simulate", "--days", "0.25", "--gpus", "64", "--compare", "--jobs", "2"]
    arguments += ["--baselines", "fifo_first_fit", "--out", str(tmp_path)]
    assert main(arguments) == 0
    err = capsys.readouterr().err
    assert "simulating toposched" in err and "simulating fifo_first_fit" in err
    assert "day " in err and " of 0.2" in err
