"""Tests of the FGD packing protocol: the arrival sequence, the checkpoints, runs and the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from toposched.cli.main import main
from toposched.cluster.loaders import load_openb_nodes
from toposched.evaluation.packing import (
    CHECKPOINTS,
    PUBLISHED_ALLOCATION,
    allocation_at,
    plan_jobs,
    run_jobs,
    run_packing,
    summarise,
    task_sequence,
)
from toposched.workloads.openb import FULL_COLUMNS, NODE_LIST, load_openb_pods

OPENB = Path(__file__).resolve().parents[2] / "shared" / "traces" / "openb"
needs_traces = pytest.mark.skipif(
    not (OPENB / "openb_pod_list_default.csv").is_file(),
    reason=f"the openb traces are not at {OPENB} (they live outside the repository)",
)

# A tiny openb-style folder: 3 nodes with 10 GPUs, and a pod list of 10 tasks asking for 5 GPUs.
TINY_NODES = """sn,cpu_milli,memory_mib,gpu,model
tiny-node-0,32000,131072,4,T4
tiny-node-1,32000,131072,4,T4
tiny-node-2,64000,262144,2,V100M16
"""
TINY_PODS = [
    "p0,4000,8192,1,1000,,LS,Running,0,10,0",
    "p1,2000,4096,1,500,,LS,Running,1,10,1",
    "p2,2000,4096,1,250,,BE,Running,2,10,2",
    "p3,8000,16384,2,1000,,LS,Running,3,10,3",
    "p4,1000,2048,0,0,,BE,Running,4,10,4",
    "p5,2000,4096,1,500,V100M16,LS,Running,5,10,5",
    "p6,2000,4096,1,250,,BE,Running,6,10,6",
    "p7,4000,8192,1,1000,T4,LS,Running,7,10,7",
    "p8,2000,4096,1,250,,BE,Pending,8,10,",
    "p9,2000,4096,1,250,,BE,Running,9,10,9",
]


@pytest.fixture
def tiny_traces(tmp_path: Path) -> Path:
    (tmp_path / NODE_LIST).write_text(TINY_NODES)
    pods = "\n".join([",".join(FULL_COLUMNS), *TINY_PODS]) + "\n"
    (tmp_path / "openb_pod_list_tiny.csv").write_text(pods)
    return tmp_path


# --- the arrival sequence ---------------------------------------------------------------------


def test_sequence_appends_copies_until_the_next_would_pass_the_target() -> None:
    demand = np.array([1000, 500, 0, 250], dtype=np.int64)  # 1,750 milli of 2,000 capacity
    sequence = task_sequence(demand, capacity_milli=2000, seed=42, shuffle=False)
    assert sequence[:4].tolist() == [0, 1, 2, 3]  # the trace first, in its own order
    total = int(demand[sequence].sum())
    # 1.3 x 2,000 = 2,600: never passed, and no copy could have been added after the last one
    # unless it was at most the largest demand short of it.
    assert 2600 - 1000 < total <= 2600
    assert np.array_equal(sequence, task_sequence(demand, 2000, seed=42, shuffle=False))
    shuffled = task_sequence(demand, 2000, seed=42)
    assert sorted(shuffled[:4].tolist()) == [0, 1, 2, 3]
    assert np.array_equal(shuffled, task_sequence(demand, 2000, seed=42))


def test_sequence_drops_random_tasks_when_the_trace_asks_too_much() -> None:
    demand = np.array([1000] * 10, dtype=np.int64)  # 10 GPUs of demand on a 5-GPU cluster
    sequence = task_sequence(demand, capacity_milli=5000, seed=7, shuffle=False)
    # 1.3 x 5 = 6.5 GPUs: 6 tasks stay, in trace order.
    assert len(sequence) == 6
    assert sequence.tolist() == sorted(sequence.tolist())


def test_allocation_at_averages_the_arrivals_that_round_to_the_checkpoint() -> None:
    arrived = np.array([89.4, 89.6, 90.2, 90.6, 99.7, 100.4, 129.6])
    allocated = np.array([80.0, 82.0, 84.0, 86.0, 90.0, 92.0, 95.0])
    # 89.6 and 90.2 round to 90; 89.4 and 90.6 do not.
    assert allocation_at(arrived, allocated, 90) == pytest.approx(83.0)
    assert allocation_at(arrived, allocated, 100) == pytest.approx(91.0)
    # Nothing rounds to 110 and nothing is within one point of it.
    assert math.isnan(allocation_at(arrived, allocated, 110))
    # Nothing rounds to 129, but 129.6 (130) is within one point.
    assert allocation_at(arrived, allocated, 129) == pytest.approx(95.0)


# --- runs ---------------------------------------------------------------------------------------


def test_runs_are_deterministic_and_book_arrivals(tiny_traces: Path) -> None:
    topology = load_openb_nodes(tiny_traces / NODE_LIST)
    trace = load_openb_pods(tiny_traces / "openb_pod_list_tiny.csv")
    for policy in ("random", "fgd", "fgd-balanced"):
        first = run_packing(topology, trace, policy, seed=42)
        again = run_packing(topology, trace, policy, seed=42)
        assert (first.allocation_pct, first.placed) == (again.allocation_pct, again.placed)
        sequence = task_sequence(trace.total_gpu_milli, 10_000, 42)
        assert first.tasks == len(sequence)
        assert first.arrived_pct == pytest.approx(trace.total_gpu_milli[sequence].sum() / 100)
        assert 0 < first.final_allocation_pct <= 100
        assert first.final_allocation_pct <= first.arrived_pct


def test_grid_runs_over_processes_and_summarises(tiny_traces: Path) -> None:
    jobs = plan_jobs(tiny_traces, ["tiny"], ["bestfit", "fgd"], seeds=2)
    assert [(job.policy, job.seed) for job in jobs] == [
        ("bestfit", 42),
        ("bestfit", 43),
        ("fgd", 42),
        ("fgd", 43),
    ]
    seen: list[str] = []
    results = run_jobs(jobs, workers=2, on_result=lambda result: seen.append(result.policy))
    assert sorted(seen) == ["bestfit", "bestfit", "fgd", "fgd"]
    assert [(r.policy, r.seed) for r in results] == [(j.policy, j.seed) for j in jobs]
    summaries = summarise(results)
    assert [(s.trace, s.policy, s.runs) for s in summaries] == [
        ("tiny", "bestfit", 2),
        ("tiny", "fgd", 2),
    ]
    assert summaries[0].published_fgd is None  # no published figures for this trace


@needs_traces
def test_one_seed_on_the_default_trace() -> None:
    topology = load_openb_nodes(OPENB / NODE_LIST)
    trace = load_openb_pods(OPENB / "openb_pod_list_default.csv")
    result = run_packing(topology, trace, "fgd-balanced", seed=42, shuffle=True)
    assert topology.n_gpus == 6212
    # The trace asks for 6,086.8 GPUs, 98% of capacity: copies bring it just under 130%.
    assert result.tasks > len(trace)
    assert 129 < result.arrived_pct <= 130
    for checkpoint, allocated in zip(CHECKPOINTS, result.allocation_pct, strict=True):
        assert 0 < allocated <= min(100, checkpoint + 0.5)
    # Allocation only grows as tasks arrive and none leaves.
    assert result.allocation_pct == tuple(sorted(result.allocation_pct))
    assert result.placed < result.tasks  # at 130% arrived some tasks must fail


# --- the command ----------------------------------------------------------------------------


def test_cli_json_on_a_tiny_configuration(
    tiny_traces: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["eval", "packing", "--traces-dir", str(tiny_traces), "--traces", "tiny"]
    argv += ["--policies", "bestfit,fgd-balanced", "--seeds", "2", "--workers", "1", "--json"]
    assert main(argv) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["protocol"]["seeds"] == [42, 43]
    assert report["protocol"]["order"] == "shuffled"
    assert [(s["policy"], s["runs"]) for s in report["summary"]] == [
        ("bestfit", 2),
        ("fgd-balanced", 2),
    ]
    assert len(report["runs"]) == 4
    assert all(0 < run["final_allocation_pct"] <= 100 for run in report["runs"])


def test_cli_table_and_trace_order(tiny_traces: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", "packing", "--traces-dir", str(tiny_traces), "--traces", "tiny"]
    argv += ["--policies", "fgd", "--seeds", "1", "--workers", "1", "--order", "trace"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "tiny" in out and "fgd" in out and "arrival order: trace" in out


@needs_traces
def test_cli_table_shows_the_published_figures(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["eval", "packing", "--traces-dir", str(OPENB), "--traces", "default"]
    argv += ["--policies", "bestfit", "--seeds", "1", "--workers", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    fgd = PUBLISHED_ALLOCATION["default"]["FGD"]
    assert " / ".join(f"{v:.1f}" for v in fgd) in out


def test_cli_errors_are_messages_not_tracebacks(
    tmp_path: Path, tiny_traces: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere"
    assert main(["eval", "packing", "--traces-dir", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "not found" in err and "--traces-dir" in err and "Traceback" not in err
    base = ["eval", "packing", "--traces-dir", str(tiny_traces), "--seeds", "1"]
    assert main([*base, "--traces", "tiny", "--policies", "worstfit"]) == 2
    assert "unknown policy" in capsys.readouterr().err
    assert main([*base, "--traces", "nosuch"]) == 2
    assert "available: tiny" in capsys.readouterr().err


def test_cli_help_explains_the_protocol(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["eval", "packing", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "FGD" in out and "--traces-dir" in out and "fgd-balanced" in out
