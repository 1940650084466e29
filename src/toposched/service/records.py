"""What the service remembers about each job, as stored: one row per job."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import Allocation
from toposched.scheduler.jobs import JobState

LIVE_STATES = (JobState.PENDING, JobState.RUNNING)


class _Document:
    """`JobRecord.spec`: the job document, given as a dict, or None with its JSON text in
    `spec_text` (a record read back from the store), then parsed when first read: a restart
    reads a hundred thousand records, and the scheduler's specs come from their texts
    (`restore.RestoredSpecs`), so that few documents are ever parsed. Setting a document
    drops the text it may no longer match."""

    @overload
    def __get__(self, record: None, owner: type) -> _Document: ...
    @overload
    def __get__(self, record: JobRecord, owner: type) -> dict[str, Any]: ...
    def __get__(self, record: JobRecord | None, owner: type) -> dict[str, Any] | _Document:
        if record is None:
            raise AttributeError("spec")  # so that the dataclass field has no default
        document = record._parsed
        if document is None:
            assert record.spec_text is not None, "a record has a document or its text"
            document = record._parsed = json.loads(record.spec_text)
        return document

    def __set__(self, record: JobRecord, value: dict[str, Any] | None) -> None:
        record._parsed = value
        if value is not None:
            record.spec_text = None


@dataclass
class JobRecord:
    """A job's durable row, its fields in the order of the store's columns (a restart builds
    records from rows positionally). `spec` is the job document as accepted (with `run` and the
    server-assigned `submit_time`); `attempt` counts starts, telling runs of a requeued job
    apart; `allocation` is held while the job runs, so that a restart can adopt it."""

    job_id: str
    account: str
    priority: int
    state: JobState
    spec: _Document = _Document()
    # Required all the same: `_Document` on the class raises AttributeError (mypy takes it
    # for a default).
    submit_time: float  # type: ignore[misc]
    start_time: float | None = None
    end_time: float | None = None
    attempt: int = 0
    preemptions: int = 0
    idempotency_key: str | None = None
    body_hash: str | None = None
    allocation: Allocation | None = None
    unallocated: bool = False
    reason: str = ""
    seq: int = 0
    """Submission order, assigned by the store."""
    spec_text: str | None = field(default=None, compare=False, repr=False)
    """`spec` as JSON text, when it was made with the document (a submission of a known
    shape: the store's first write takes it instead of dumping `spec`, and drops it), or
    when the record was read back from the store (`spec` is parsed from it when read)."""
    _parsed: dict[str, Any] | None = field(default=None, init=False, compare=False, repr=False)
    """`spec` once given or parsed (None: not yet)."""

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    @property
    def pending(self) -> bool:
        return self.state is JobState.PENDING


_SETS = '{"sets": '
"""How the text of an allocation of several pod shapes begins: each set's, in a list."""


def allocation_to_json(allocation: Allocation | None) -> str | None:
    if allocation is None:
        return None
    if allocation.sets:
        return _SETS + json.dumps([_one_shape(part) for part in allocation.sets]) + "}"
    return _one_shape_text(allocation)


def _one_shape_text(allocation: Allocation) -> str:
    """`json.dumps(_one_shape(allocation))` written directly (every start stores one): a list
    of ints is written by `repr` as JSON writes it."""
    nodes, gpus = allocation.nodes, allocation.gpus
    milli, cpu, memory = allocation.gpu_milli, allocation.cpu_milli, allocation.memory_mib
    if not (
        nodes.dtype.kind in "iu"
        and gpus.dtype.kind in "iu"
        and type(milli) is int
        and type(cpu) is int
        and type(memory) is int
    ):
        return json.dumps(_one_shape(allocation))
    return (
        f'{{"nodes": {nodes.tolist()!r}, "gpus": {gpus.tolist()!r}, "gpu_milli": {milli}, '
        f'"cpu_milli": {cpu}, "memory_mib": {memory}}}'
    )


def _one_shape(allocation: Allocation) -> dict[str, Any]:
    return {
        "nodes": allocation.nodes.tolist(),
        "gpus": allocation.gpus.tolist(),
        "gpu_milli": allocation.gpu_milli,
        "cpu_milli": allocation.cpu_milli,
        "memory_mib": allocation.memory_mib,
    }


def allocation_from_json(text: str | None) -> Allocation | None:
    if text is None:
        return None
    data = json.loads(text)
    if "sets" in data:
        # Kept apart as written: an elastic job's sets may share one shape.
        return Allocation.of_sets([_read_one_shape(part) for part in data["sets"]], keep_sets=True)
    return _read_one_shape(data)


def _read_one_shape(data: dict[str, Any]) -> Allocation:
    nodes = np.asarray(data["nodes"], dtype=np.int64)
    gpus = np.asarray(data["gpus"], dtype=np.int64).reshape(len(nodes), -1)
    return Allocation(nodes, gpus, data["gpu_milli"], data["cpu_milli"], data["memory_mib"])


def allocations_from_json(texts: Sequence[str]) -> list[Allocation]:
    """`allocation_from_json` of many texts (a restart reads a hundred thousand), scanned as
    one stream of bytes when they are `allocation_to_json`'s: only non-negative integers, the
    nodes one list deep, the GPUs two, the three scalars at the top in their order. Any other
    text (a fraction, a sign, another layout) is read one by one."""
    if any(text.startswith(_SETS) for text in texts):
        # Allocations of several pod shapes are read one by one, the rest scanned together.
        several = [i for i, text in enumerate(texts) if text.startswith(_SETS)]
        rest = iter(allocations_from_json([t for t in texts if not t.startswith(_SETS)]))
        read = {i: _from_json(texts[i]) for i in several}
        return [read[i] if i in read else next(rest) for i in range(len(texts))]
    scanned = _scan_numbers(texts)
    if scanned is None:
        return [_from_json(text) for text in texts]
    values, depth, owner = scanned
    n = len(texts)
    scalars = values[depth == 0]
    in_nodes, in_gpus = depth == 1, depth == 2
    pods = np.bincount(owner[in_nodes], minlength=n)
    held = np.bincount(owner[in_gpus], minlength=n)
    width = held // np.maximum(pods, 1)
    if (
        scalars.size != 3 * n
        or not np.array_equal(np.bincount(owner[depth == 0], minlength=n), np.full(n, 3))
        or not np.array_equal(width * pods, held)
    ):
        return [_from_json(text) for text in texts]
    nodes, gpus, scalars = values[in_nodes], values[in_gpus], scalars.reshape(n, 3).tolist()
    node_ends = np.cumsum(pods).tolist()
    gpu_ends = np.cumsum(held).tolist()
    if n and width[0] > 0 and bool((width == width[0]).all()):
        # Pods of one width throughout (the usual case): rows of one table, sliced.
        rows = gpus.reshape(-1, int(width[0]))
        return [
            Allocation(nodes[start:end], rows[start:end], milli, cpu, memory)
            for (milli, cpu, memory), start, end in zip(
                scalars, [0, *node_ends[:-1]], node_ends, strict=True
            )
        ]
    allocations = []
    node_start = gpu_start = 0
    for (milli, cpu, memory), node_end, gpu_end, columns in zip(
        scalars, node_ends, gpu_ends, width.tolist(), strict=True
    ):
        allocations.append(
            Allocation(
                nodes[node_start:node_end],
                gpus[gpu_start:gpu_end].reshape(node_end - node_start, columns),
                milli,
                cpu,
                memory,
            )
        )
        node_start, gpu_start = node_end, gpu_end
    return allocations


def _from_json(text: str) -> Allocation:
    allocation = allocation_from_json(text)
    assert allocation is not None
    return allocation


_MAX_DIGITS = 18
"""At most this many digits per number: int64 holds them."""
_OTHER, _DIGIT, _OPEN, _CLOSE, _OBJECT, _SIGN_OR_POINT, _COMMA, _OBJECT_END = range(8)
_KIND = np.full(256, _OTHER, dtype=np.int8)
_KIND[ord("0") : ord("9") + 1] = _DIGIT
for _byte, _kind in (
    ("[", _OPEN),
    ("]", _CLOSE),
    ("{", _OBJECT),
    ("-", _SIGN_OR_POINT),
    (".", _SIGN_OR_POINT),
    (",", _COMMA),
    ("}", _OBJECT_END),
):
    _KIND[ord(_byte)] = _kind
_KIND_TABLE = _KIND.tobytes()
"""What each byte is to the scan (`_KIND`), as a table for `bytes.translate`."""
_ENDS_NUMBER = np.isin(np.arange(8), (_CLOSE, _COMMA, _OBJECT_END))
"""The kinds of byte a number may end at."""


def _scan_numbers(
    texts: Sequence[str],
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]] | None:
    """Every number of the texts, each with its depth in brackets and the index of its text;
    None where the texts hold anything but non-negative integers in flat objects. Each byte
    is classed once (`_KIND`); the passes after that go over the classes, or over the
    numbers and brackets only."""
    try:
        text = ",".join(texts).encode("ascii")
    except UnicodeEncodeError:
        return None
    data = np.frombuffer(text, dtype=np.uint8)
    kind = np.frombuffer(text.translate(_KIND_TABLE), dtype=np.int8)
    edges = np.diff((kind == _DIGIT).view(np.int8), prepend=np.int8(0), append=np.int8(0))
    begins = edges == 1
    starts, ends = np.flatnonzero(begins), np.flatnonzero(edges == -1)
    if starts.size == 0:
        return None
    lengths = ends - starts
    longest = int(lengths.max())
    if (
        int(np.count_nonzero(kind == _OBJECT)) != len(texts)
        or longest > _MAX_DIGITS
        or bool((kind == _SIGN_OR_POINT).any())
        # Each number ends at a separator (no fraction, exponent or sign anywhere).
        or not bool(_ENDS_NUMBER[kind[np.minimum(ends, data.size - 1)]].all())
    ):
        return None
    # Digit by digit from the last: numbers are short (node indices, a few amounts).
    values = (data[ends - 1] - ord("0")).astype(np.int64)
    for place in range(1, longest):
        longer = np.flatnonzero(lengths > place)
        digits = (data[ends[longer] - 1 - place] - ord("0")).astype(np.int64)
        values[longer] += digits * 10**place
    # Brackets opened less closed, and objects begun, before each number: running counts
    # over the bytes that matter (brackets, braces and the numbers' first digits), where a
    # number counts for nothing.
    at = kind[np.flatnonzero(begins[:-1] | ((kind >= _OPEN) & (kind <= _OBJECT)))]
    numbers = at == _DIGIT
    depth = np.cumsum((at == _OPEN).view(np.int8) - (at == _CLOSE).view(np.int8), dtype=np.int64)
    owner = np.cumsum(at == _OBJECT, dtype=np.int64)[numbers] - 1
    return values, depth[numbers], owner
