"""Tests of the openb pod list loader: the real traces, and bad rows named by file, line, field."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from toposched.cluster.errors import InputError
from toposched.workloads.openb import (
    FULL_COLUMNS,
    SHAPE_COLUMNS,
    available_traces,
    load_openb_pods,
    pod_list_path,
)

OPENB = Path(__file__).resolve().parents[2] / "shared" / "traces" / "openb"
needs_traces = pytest.mark.skipif(
    not (OPENB / "openb_pod_list_default.csv").is_file(),
    reason=f"the openb traces are not at {OPENB} (they live outside the repository)",
)

HEADER = ",".join(FULL_COLUMNS)
GOOD_ROW = "pod-a,12000,16384,1,460,,LS,Running,0,100,0"


def write(tmp_path: Path, *lines: str, name: str = "openb_pod_list_tiny.csv") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return path


# --- the real traces ------------------------------------------------------------------------


@needs_traces
def test_default_trace_has_its_published_task_counts() -> None:
    trace = load_openb_pods(OPENB / "openb_pod_list_default.csv")
    assert len(trace) == 8152
    assert int(trace.is_fractional.sum()) == 3078
    assert trace.name == "default"
    assert trace.has_times and trace.qos is not None and trace.pod_phase is not None
    # CPU-only tasks ask for no GPU at all; multi-GPU tasks take whole GPUs.
    assert ((trace.num_gpu == 0) == (trace.gpu_milli == 0)).all()
    assert (trace.gpu_milli[trace.num_gpu > 1] == 1000).all()
    # Times survive for a timed replay: creation is never after deletion.
    assert trace.creation_time is not None and trace.deletion_time is not None
    assert (trace.creation_time <= trace.deletion_time).all()


@needs_traces
def test_multigpu_trace_has_only_the_five_shape_columns() -> None:
    header = (OPENB / "openb_pod_list_multigpu50.csv").read_text().splitlines()[0]
    assert tuple(header.split(",")) == SHAPE_COLUMNS
    trace = load_openb_pods(OPENB / "openb_pod_list_multigpu50.csv")
    assert len(trace) == 9061
    assert not trace.has_times
    assert trace.qos is None and trace.creation_time is None
    assert set(trace.gpu_spec) == {""}  # no column, so no model constraint
    assert int((trace.num_gpu == 8).sum()) == 556


@needs_traces
def test_gpuspec_trace_keeps_model_constraints() -> None:
    trace = load_openb_pods(OPENB / "openb_pod_list_gpuspec33.csv")
    constrained = [i for i, spec in enumerate(trace.gpu_spec) if spec]
    assert len(constrained) == 8152 - 5764
    both = next(i for i in constrained if trace.gpu_spec[i] == "V100M16|V100M32")
    assert trace.allowed_models(both) == ("V100M16", "V100M32")


@needs_traces
def test_trace_lookup_by_name_and_listing() -> None:
    assert pod_list_path(OPENB, "gpushare100").name == "openb_pod_list_gpushare100.csv"
    assert {"default", "gpushare100", "gpuspec33", "multigpu50"} <= set(available_traces(OPENB))
    with pytest.raises(InputError, match="available: .*default"):
        pod_list_path(OPENB, "nosuchtrace")


# --- parsing rules on small files -----------------------------------------------------------


def test_reads_both_layouts_and_empty_times_as_nan(tmp_path: Path) -> None:
    full = write(tmp_path, HEADER, GOOD_ROW, "pod-b,4000,8192,0,0,,BE,Pending,5,9,")
    trace = load_openb_pods(full)
    assert trace.names == ("pod-a", "pod-b")
    assert trace.cpu_milli.tolist() == [12000, 4000]
    assert trace.total_gpu_milli.tolist() == [460, 0]
    assert trace.scheduled_time is not None and math.isnan(float(trace.scheduled_time[1]))
    short = write(tmp_path, ",".join(SHAPE_COLUMNS), "pod-c,1000,2048,8,1000", name="m.csv")
    assert load_openb_pods(short).num_gpu.tolist() == [8]


def test_take_keeps_every_column_aligned(tmp_path: Path) -> None:
    path = write(tmp_path, HEADER, GOOD_ROW, "pod-b,4000,8192,2,1000,T4|G2,BE,Running,5,9,6")
    trace = load_openb_pods(path).take(np.array([1, 1, 0]))
    assert trace.names == ("pod-b", "pod-b", "pod-a")
    assert trace.gpu_spec == ("T4|G2", "T4|G2", "")
    assert trace.creation_time is not None and trace.creation_time.tolist() == [5.0, 5.0, 0.0]


@pytest.mark.parametrize(
    ("row", "field", "rule"),
    [
        ("pod-x,12k,16384,1,460,,LS,Running,0,1,0", "cpu_milli", "integer >= 0"),
        ("pod-x,12000,-1,1,460,,LS,Running,0,1,0", "memory_mib", "integer >= 0"),
        ("pod-x,12000,16384,one,460,,LS,Running,0,1,0", "num_gpu", "integer >= 0"),
        ("pod-x,12000,16384,1,1500,,LS,Running,0,1,0", "gpu_milli", "<= 1000"),
        ("pod-x,12000,16384,2,500,,LS,Running,0,1,0", "gpu_milli", "applies to one GPU"),
        ("pod-x,12000,16384,0,300,,LS,Running,0,1,0", "gpu_milli", "must be 0"),
        ("pod-x,12000,16384,1,0,,LS,Running,0,1,0", "gpu_milli", "must be > 0"),
        ("pod-x,12000,16384,1,460,,LS,Running,soon,1,0", "creation_time", "seconds"),
        (",12000,16384,1,460,,LS,Running,0,1,0", "name", "must not be empty"),
        ("pod-x,12000,16384,1,460", "row", "has 5 fields, expected 11"),
    ],
)
def test_bad_rows_name_file_line_and_field(tmp_path: Path, row: str, field: str, rule: str) -> None:
    path = write(tmp_path, HEADER, GOOD_ROW, row)
    with pytest.raises(InputError) as caught:
        load_openb_pods(path)
    # The bad row is the file's third line (header, good row, bad row).
    assert (caught.value.file, caught.value.line, caught.value.field) == (str(path), 3, field)
    assert rule in caught.value.rule
    assert str(path) in str(caught.value) and ":3:" in str(caught.value)


def test_bad_header_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="expected the columns"):
        load_openb_pods(write(tmp_path, "name,cpu,memory", "a,1,2"))
    with pytest.raises(InputError, match="file not found"):
        load_openb_pods(tmp_path / "absent.csv")
    with pytest.raises(InputError, match="empty file"):
        load_openb_pods(write(tmp_path, "", name="empty.csv"))
