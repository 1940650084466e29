"""Timed replays of published traces: Microsoft ITP clusters and the Alibaba openb pod lists."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, NamedTuple

from toposched.cluster.errors import InputError
from toposched.cluster.loaders import load_openb_nodes
from toposched.cluster.units import DAY, HOUR, MILLI_PER_GPU
from toposched.workloads.model import SpecFactory, Workload, WorkloadJob, build_cluster
from toposched.workloads.openb import load_openb_pods
from toposched.workloads.traces import (
    ITP_CLUSTER_NODES,
    NODE_LIST,
    TRACES_ENV,
    default_traces_dir,
    itp_trace_path,
    pod_list_path,
)

__all__ = [
    "ITP_CLUSTER_NODES",
    "ITP_COLUMNS",
    "TRACES_ENV",
    "default_traces_dir",
    "itp_cluster_description",
    "itp_replay",
    "ItpJob",
    "load_itp_trace",
    "openb_replay",
]

ITP_COLUMNS = ("job_id", "submission_time", "duration", "num_gpu")
GPUS_PER_NODE = 8
NODES_PER_UNIT = 16

# Jobs replayed from traces declare a min runtime of an hour (the contract's default) and are
# not resumable: the traces say nothing about checkpoints.
REPLAY_MIN_RUNTIME = HOUR


class _Where(NamedTuple):
    """A row of a trace file: the file and its line (from 1)."""

    file: str
    line: int


def _at(where: _Where, column: str, value: Any, rule: str) -> InputError:
    return InputError(column, value, rule, file=where.file, line=where.line)


def _number(where: _Where, column: str, text: str, integer: bool = False) -> float:
    rule = "must be an integer >= 1" if integer else "must be a number of seconds >= 0"
    try:
        value = float(text)
    except ValueError:
        raise _at(where, column, text, rule) from None
    if not math.isfinite(value) or value < 0 or (integer and (value < 1 or value % 1)):
        raise _at(where, column, text, rule)
    return value


class ItpJob(NamedTuple):
    """One row of an ITP cluster CSV."""

    job_id: str
    submission_time: float
    duration: float
    """Seconds the job ran."""
    num_gpu: int


def load_itp_trace(path: str | Path) -> list[ItpJob]:
    """The rows of an ITP cluster CSV, in file order; errors name the file, the line and the
    column."""
    file_path = Path(path)
    if not file_path.is_file():
        raise InputError("ITP trace", file_path, "file not found")
    rows: list[ItpJob] = []
    with file_path.open(newline="") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None or tuple(column.strip() for column in header) != ITP_COLUMNS:
            raise _at(
                _Where(str(file_path), 1),
                "header",
                ",".join(header or []),
                f"expected the columns {','.join(ITP_COLUMNS)}",
            )
        for row in reader:
            if not row:
                continue
            where = _Where(str(file_path), reader.line_num)
            if len(row) != len(ITP_COLUMNS):
                raise _at(where, "row", ",".join(row), f"has {len(row)} fields, expected 4")
            job_id = row[0].strip()
            if not job_id:
                raise _at(where, "job_id", row[0], "must not be empty")
            submit = _number(where, "submission_time", row[1].strip())
            duration = _number(where, "duration", row[2].strip())
            if duration <= 0:
                raise _at(where, "duration", row[2], "must be a number of seconds > 0")
            gpus = int(_number(where, "num_gpu", row[3].strip(), integer=True))
            rows.append(ItpJob(job_id, submit, duration, gpus))
    return rows


def itp_cluster_description(nodes: int) -> dict[str, Any]:
    """A cluster of `nodes` 8-GPU nodes: one unit up to 16 nodes, else whole units of 16 nodes
    (a count that is not a multiple of 16 is rounded up)."""
    if nodes <= NODES_PER_UNIT:
        return {
            "builder": "superpod",
            "spine_groups": 1,
            "units_per_group": 1,
            "nodes_per_unit": nodes,
        }
    units = math.ceil(nodes / NODES_PER_UNIT)
    return {
        "builder": "superpod",
        "spine_groups": 1,
        "units_per_group": units,
        "nodes_per_unit": NODES_PER_UNIT,
    }


def itp_replay(
    cluster: int,
    nodes: int | None = None,
    days: float | None = None,
    traces_dir: str | Path | None = None,
) -> Workload:
    """Replay ITP cluster `cluster` (1-10) on `nodes` 8-GPU nodes (default: ITP_CLUSTER_NODES).

    Times are shifted so the first submission is at 0. A job of up to 8 GPUs is one pod on one
    node; a larger one is a gang of 8-GPU pods preferring one scalable unit. Jobs run for their
    trace duration, declare no expected runtime (the trace has none), a min runtime of 1 h, and
    cannot resume. All jobs charge one account holding the whole cluster. `days` keeps the jobs
    submitted in the first `days` days and stops the simulation there; without it, the
    simulation runs until the last job ends.
    """
    folder = Path(traces_dir) if traces_dir is not None else default_traces_dir()
    path = itp_trace_path(folder, cluster)
    rows = load_itp_trace(path)
    node_count = nodes if nodes is not None else ITP_CLUSTER_NODES[cluster]
    if isinstance(node_count, bool) or not isinstance(node_count, int) or node_count < 1:
        raise InputError("nodes", node_count, "must be an integer >= 1")
    description = itp_cluster_description(node_count)
    topology = build_cluster(description)
    first = min((row.submission_time for row in rows), default=0.0)
    horizon = None if days is None else days * DAY
    factory = SpecFactory()
    jobs: list[WorkloadJob] = []
    largest = topology.n_gpus
    for index, (job_id, submit, duration, gpus) in enumerate(rows):
        at = submit - first
        if horizon is not None and at >= horizon:
            continue
        if gpus > largest:
            raise _at(
                _Where(str(path), index + 2),
                "num_gpu",
                gpus,
                f"is more than the {largest} GPUs of a {node_count}-node cluster; give more nodes",
            )
        if gpus <= GPUS_PER_NODE:
            pods, per_pod, topology_spec = 1, gpus, None
        else:
            pods, per_pod = math.ceil(gpus / GPUS_PER_NODE), GPUS_PER_NODE
            topology_spec = {"preferred": topology.levels[-1]}
        spec = factory.make(
            f"itp{cluster:02d}-{index}-{job_id[:8]}",
            "default",
            pods,
            {"gpus": per_pod},
            topology=topology_spec,
            min_runtime=REPLAY_MIN_RUNTIME,
            resumable=False,
        )
        jobs.append(WorkloadJob(spec, at, duration, "trace"))
    return Workload(
        name=f"itp:{cluster:02d}",
        topology=topology,
        cluster=description,
        jobs=jobs,
        horizon=horizon,
        description=(
            f"ITP cluster {cluster:02d} (ElasticFlow traces): {len(jobs):,} jobs on "
            f"{node_count} nodes x 8 GPUs"
        ),
        notes={"trace": str(path), "nodes": node_count, "first_submission_s": first},
    )


def openb_replay(
    trace: str = "default", days: float | None = None, traces_dir: str | Path | None = None
) -> Workload:
    """Replay an openb pod list (Alibaba GPU-sharing trace, FGD ATC'23) on its 6,212-GPU
    cluster, in time: each pod arrives at its creation time and, once placed, runs for as long
    as it held resources in the trace (deletion - scheduled time). A pod the trace never
    scheduled runs deletion - creation if placed, and is withdrawn at its deletion time if not.

    Best-effort pods (qos BE) are unallocated work (min runtime 0, preemptible); the others
    declare a min runtime of 1 h. GPU-model constraints (gpu_spec) and shares of one GPU are
    kept. Job classes are the qos values in lower case (ls, be, burstable, guaranteed).
    """
    folder = Path(traces_dir) if traces_dir is not None else default_traces_dir()
    openb_dir = folder / "openb"
    pods = load_openb_pods(pod_list_path(openb_dir, trace))
    if not pods.has_times:
        raise InputError("trace", trace, "has no creation/deletion times; pick a timed pod list")
    assert pods.creation_time is not None and pods.deletion_time is not None
    assert pods.scheduled_time is not None and pods.qos is not None
    node_list = openb_dir / NODE_LIST
    topology = load_openb_nodes(node_list)
    models = {model.name for model in topology.gpu_models}
    horizon = None if days is None else days * DAY
    factory = SpecFactory()
    jobs: list[WorkloadJob] = []
    for index in range(len(pods)):
        created = float(pods.creation_time[index])
        deleted = float(pods.deletion_time[index])
        scheduled = float(pods.scheduled_time[index])
        if math.isnan(created) or math.isnan(deleted) or deleted <= created:
            continue
        if horizon is not None and created >= horizon:
            continue
        placed = not math.isnan(scheduled)
        runtime = deleted - (scheduled if placed else created)
        if runtime <= 0:
            continue
        gpus = int(pods.num_gpu[index])
        resources: dict[str, Any] = {
            "cpu": f"{int(pods.cpu_milli[index])}m",
            "memory": int(pods.memory_mib[index]),
        }
        if gpus:
            milli = int(pods.gpu_milli[index])
            resources.update({"gpus": gpus} if milli >= MILLI_PER_GPU else {"gpu_milli": milli})
            allowed = [name for name in pods.allowed_models(index) if name in models]
            if pods.allowed_models(index):
                if not allowed:
                    continue  # no GPU of its models in this cluster: it could never run
                resources["gpu_models"] = allowed
        qos = pods.qos[index] or "unknown"
        spec = factory.make(
            pods.names[index],
            "default",
            1,
            resources,
            min_runtime=0.0 if qos == "BE" else REPLAY_MIN_RUNTIME,
            resumable=False,
        )
        jobs.append(
            WorkloadJob(
                spec,
                created,
                runtime,
                qos.lower(),
                cancel_after=None if placed else deleted - created,
            )
        )
    return Workload(
        name=f"openb:{trace}",
        topology=topology,
        cluster={"openb": str(node_list)},
        jobs=jobs,
        horizon=horizon,
        description=(
            f"openb {trace} timed replay (Alibaba GPU-sharing trace, FGD ATC'23): "
            f"{len(jobs):,} pods on {topology.n_gpus:,} GPUs"
        ),
        notes={"trace": str(pod_list_path(openb_dir, trace))},
    )
