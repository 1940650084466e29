"""The openb pod lists (Alibaba GPU-sharing trace, FGD ATC'23) as arrays of task shapes."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.errors import InputError
from toposched.cluster.units import MILLI_PER_GPU
from toposched.workloads.traces import NODE_LIST as NODE_LIST
from toposched.workloads.traces import POD_LIST_PREFIX
from toposched.workloads.traces import available_traces as available_traces
from toposched.workloads.traces import pod_list_path as pod_list_path

SHAPE_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
"""The columns every pod list has (the multigpu variants have only these)."""
FULL_COLUMNS = (
    *SHAPE_COLUMNS,
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
"""The columns of the default pod list and most variants."""
TIME_COLUMNS = ("creation_time", "deletion_time", "scheduled_time")

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class OpenbTrace:
    """The tasks of one openb pod list, in file order, one array entry per task.

    `gpu_milli` is per GPU: below 1000 means a share of one GPU, and multi-GPU tasks take
    whole GPUs. `gpu_spec[i]` is "" when task i may use any GPU model, else the allowed models
    joined by "|". The optional columns are None when the file lacks them; times are seconds,
    NaN where a row leaves the field empty (e.g. a pod never scheduled).
    """

    source: str
    names: tuple[str, ...]
    cpu_milli: IntArray
    memory_mib: IntArray
    num_gpu: IntArray
    gpu_milli: IntArray
    gpu_spec: tuple[str, ...]
    qos: tuple[str, ...] | None = None
    pod_phase: tuple[str, ...] | None = None
    creation_time: FloatArray | None = None
    deletion_time: FloatArray | None = None
    scheduled_time: FloatArray | None = None

    def __len__(self) -> int:
        return len(self.names)

    @property
    def name(self) -> str:
        """The trace's short name: `default` for openb_pod_list_default.csv."""
        stem = Path(self.source).stem
        return stem[len(POD_LIST_PREFIX) :] if stem.startswith(POD_LIST_PREFIX) else stem

    @property
    def is_fractional(self) -> NDArray[np.bool_]:
        """Tasks that take a share of one GPU."""
        mask: NDArray[np.bool_] = (self.num_gpu == 1) & (self.gpu_milli < MILLI_PER_GPU)
        return mask

    @property
    def total_gpu_milli(self) -> IntArray:
        """GPU demand of every task in milli-GPU (num_gpu x gpu_milli)."""
        total: IntArray = self.num_gpu * self.gpu_milli
        return total

    @property
    def has_times(self) -> bool:
        return self.creation_time is not None

    def allowed_models(self, index: int) -> tuple[str, ...]:
        """GPU models task `index` may use; empty when any model will do."""
        spec = self.gpu_spec[index]
        return tuple(name for name in spec.split("|") if name) if spec else ()

    def take(self, indices: Sequence[int] | IntArray) -> OpenbTrace:
        """The tasks at `indices`, in that order (repeats allowed)."""
        picks = np.asarray(indices, dtype=np.int64)
        listed = picks.tolist()

        def pick_text(values: tuple[str, ...] | None) -> tuple[str, ...] | None:
            return None if values is None else tuple(values[i] for i in listed)

        def pick_times(values: FloatArray | None) -> FloatArray | None:
            return None if values is None else values[picks]

        return OpenbTrace(
            source=self.source,
            names=tuple(self.names[i] for i in listed),
            cpu_milli=self.cpu_milli[picks],
            memory_mib=self.memory_mib[picks],
            num_gpu=self.num_gpu[picks],
            gpu_milli=self.gpu_milli[picks],
            gpu_spec=tuple(self.gpu_spec[i] for i in listed),
            qos=pick_text(self.qos),
            pod_phase=pick_text(self.pod_phase),
            creation_time=pick_times(self.creation_time),
            deletion_time=pick_times(self.deletion_time),
            scheduled_time=pick_times(self.scheduled_time),
        )


class _Where(NamedTuple):
    """A row of a trace file: the file and its line (from 1)."""

    file: str
    line: int


def _at(where: _Where, column: str, value: Any, rule: str) -> InputError:
    return InputError(column, value, rule, file=where.file, line=where.line)


def _integer(where: _Where, column: str, text: str, maximum: int | None = None) -> int:
    rule = "must be an integer >= 0" + (f" and <= {maximum}" if maximum is not None else "")
    try:
        value = int(text)
    except ValueError:
        raise _at(where, column, text, rule) from None
    if value < 0 or (maximum is not None and value > maximum):
        raise _at(where, column, text, rule)
    return value


def _seconds(where: _Where, column: str, text: str) -> float:
    if text == "":
        return math.nan
    try:
        value = float(text)
    except ValueError:
        raise _at(where, column, text, "must be a number of seconds >= 0") from None
    if not math.isfinite(value) or value < 0:
        raise _at(where, column, text, "must be a number of seconds >= 0")
    return value


def load_openb_pods(path: str | Path) -> OpenbTrace:
    """Read an openb pod list; errors name the file, the line and the field.

    Accepts both layouts: the 11-column one (with gpu_spec, qos, phase and times) and the
    5-column one of the multigpu variants. A GPU share (gpu_milli < 1000) applies to one GPU;
    CPU-only tasks have num_gpu = 0 and gpu_milli = 0.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError("pod list", path, "file not found")
    with path.open(newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if not header:
            raise _at(_Where(str(path), 1), "header", "", "empty file; expected a header row")
        header = [column.strip() for column in header]
        if tuple(header) not in (FULL_COLUMNS, SHAPE_COLUMNS):
            raise _at(
                _Where(str(path), 1),
                "header",
                ",".join(header),
                f"expected the columns {','.join(FULL_COLUMNS)} or {','.join(SHAPE_COLUMNS)}",
            )
        full = len(header) == len(FULL_COLUMNS)
        names: list[str] = []
        shapes: list[tuple[int, int, int, int]] = []
        specs: list[str] = []
        qos: list[str] = []
        phases: list[str] = []
        times: list[tuple[float, float, float]] = []
        for row in reader:
            line = reader.line_num
            where = _Where(str(path), line)
            if not row:
                continue
            if len(row) != len(header):
                raise _at(
                    where, "row", ",".join(row), f"has {len(row)} fields, expected {len(header)}"
                )
            name = row[0].strip()
            if not name:
                raise _at(where, "name", row[0], "must not be empty")
            cpu = _integer(where, "cpu_milli", row[1])
            memory = _integer(where, "memory_mib", row[2])
            gpus = _integer(where, "num_gpu", row[3])
            milli = _integer(where, "gpu_milli", row[4], maximum=MILLI_PER_GPU)
            if gpus == 0 and milli != 0:
                raise _at(where, "gpu_milli", row[4], "must be 0 when num_gpu is 0")
            if gpus > 0 and milli == 0:
                raise _at(where, "gpu_milli", row[4], "must be > 0 when num_gpu > 0")
            if gpus > 1 and milli != MILLI_PER_GPU:
                raise _at(
                    where,
                    "gpu_milli",
                    row[4],
                    "must be 1000 when num_gpu > 1 (a share applies to one GPU)",
                )
            names.append(name)
            shapes.append((cpu, memory, gpus, milli))
            if full:
                specs.append(row[5].strip())
                qos.append(row[6].strip())
                phases.append(row[7].strip())
                times.append(
                    (
                        _seconds(where, "creation_time", row[8].strip()),
                        _seconds(where, "deletion_time", row[9].strip()),
                        _seconds(where, "scheduled_time", row[10].strip()),
                    )
                )
    columns = np.array(shapes, dtype=np.int64).reshape(-1, 4)
    time_columns = np.array(times, dtype=np.float64).reshape(-1, 3) if full else None
    return OpenbTrace(
        source=str(path),
        names=tuple(names),
        cpu_milli=columns[:, 0].copy(),
        memory_mib=columns[:, 1].copy(),
        num_gpu=columns[:, 2].copy(),
        gpu_milli=columns[:, 3].copy(),
        gpu_spec=tuple(specs) if full else ("",) * len(names),
        qos=tuple(qos) if full else None,
        pod_phase=tuple(phases) if full else None,
        creation_time=None if time_columns is None else time_columns[:, 0].copy(),
        deletion_time=None if time_columns is None else time_columns[:, 1].copy(),
        scheduled_time=None if time_columns is None else time_columns[:, 2].copy(),
    )
