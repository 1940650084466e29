"""What the service remembers about each job, as stored: one row per job."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from toposched.cluster.state import Allocation
from toposched.scheduler.jobs import JobState

LIVE_STATES = (JobState.PENDING, JobState.RUNNING)


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
    spec: dict[str, Any]
    submit_time: float
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

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES

    @property
    def pending(self) -> bool:
        return self.state is JobState.PENDING


def allocation_to_json(allocation: Allocation | None) -> str | None:
    if allocation is None:
        return None
    return json.dumps(
        {
            "nodes": allocation.nodes.tolist(),
            "gpus": allocation.gpus.tolist(),
            "gpu_milli": allocation.gpu_milli,
            "cpu_milli": allocation.cpu_milli,
            "memory_mib": allocation.memory_mib,
        }
    )


def allocation_from_json(text: str | None) -> Allocation | None:
    if text is None:
        return None
    data = json.loads(text)
    nodes = np.asarray(data["nodes"], dtype=np.int64)
    gpus = np.asarray(data["gpus"], dtype=np.int64).reshape(len(nodes), -1)
    return Allocation(nodes, gpus, data["gpu_milli"], data["cpu_milli"], data["memory_mib"])
