"""The raw record of a simulation: each job's life, the cluster over time, and the whole run."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from toposched.sim.team_ledger import TeamLedger
from toposched.workloads.model import WorkloadJob

__all__ = ["Integrals", "JobRecord", "RecordState", "Sample", "SimulationResult"]


class RecordState(StrEnum):
    """Where a job of the workload is in its life, as the simulated backend sees it."""

    FUTURE = "future"
    """Not submitted yet."""
    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(slots=True)
class JobRecord:
    """One job's life in the simulation, from the backend's side."""

    job: WorkloadJob
    name: str
    """The job's name (`job.name`), read at every event of its runs."""
    gpus: float
    allocated: bool
    """Whether its budget pays for it (min runtime > 0 and its account has a budget)."""
    remaining: float
    """Seconds of work still to do at the start of the current or next run."""
    checkpoint_interval: float
    state: RecordState = RecordState.FUTURE
    attempt: int = 0
    run_start: float = 0.0
    run_gpus: float = 0.0
    run_unallocated: bool = False
    run_slowdown: float = 1.0
    """How many times longer the current run takes than its work (see `sim/topology_price.py`)."""
    first_start: float | None = None
    end_time: float | None = None
    delivered_gpu_seconds: float = 0.0
    unallocated_gpu_seconds: float = 0.0
    lost_gpu_seconds: float = 0.0
    """Work lost to interruptions: the three below together."""
    lost_evicted_unallocated_gpu_seconds: float = 0.0
    """Lost to evictions of runs that were unallocated work."""
    lost_evicted_allocated_gpu_seconds: float = 0.0
    """Lost to evictions of runs that a budget paid for."""
    lost_to_failures_gpu_seconds: float = 0.0
    topology_gpu_seconds: float = 0.0
    """GPU time its runs spent slowed by domains crossed beyond their constraints."""
    preemptions: int = 0
    interruptions: int = 0
    backfilled: bool = False

    @property
    def job_class(self) -> str:
        return self.job.job_class

    @property
    def account(self) -> str:
        return self.job.spec.account


@dataclass(frozen=True, slots=True)
class Sample:
    """The cluster at one moment, after that moment's cycle."""

    time: float
    occupancy: float
    """GPUs holding any allocation / all GPUs."""
    allocation_ratio: float
    """Allocated milli-GPU / all milli-GPU (equals occupancy without GPU sharing)."""
    unallocated_share: float
    """Share of allocated GPUs running unallocated work."""
    running_jobs: int
    pending_jobs: int
    pending_gpus: float
    outstanding_ratio: float
    """(Pending + running GPUs requested) / all GPUs: outstanding demand against capacity."""
    unhealthy_gpus: int


@dataclass
class Integrals:
    """Time integrals of piecewise-constant cluster quantities, in GPU-seconds."""

    delivered: float = 0.0
    """GPU-seconds held by running jobs, counted from the jobs' own run intervals."""
    unallocated: float = 0.0
    idle: float = 0.0
    """Free GPU-seconds on healthy nodes, read from the cluster state."""
    unavailable: float = 0.0
    """Free GPU-seconds on nodes that are draining, cordoned or down."""
    busy: float = 0.0
    """GPU-seconds of GPUs holding any allocation (a shared GPU counts whole)."""
    outstanding: float = 0.0
    """GPU-seconds of demand: pending plus running jobs' GPUs."""
    waiting_seconds: float = 0.0
    """Seconds during which at least one submitted job waited to start."""
    busy_while_waiting: float = 0.0
    """`busy` counted only over `waiting_seconds`: GPUs left idle then are the scheduler's to
    explain; idle GPUs while nothing waits are the workload's."""


@dataclass
class SimulationResult:
    """The raw record of one simulation; `metrics.summarize` turns it into the JSON summary."""

    workload: str
    scheduler: str
    capacity_gpus: int
    start: float
    end: float
    team_shares: dict[str, float]
    """Each budgeted leaf account's share of the whole cluster (a fraction)."""
    records: dict[str, JobRecord]
    samples: list[Sample]
    integrals: Integrals
    ledger: TeamLedger
    cycle_seconds: list[float]
    """Wall-clock seconds of every scheduler cycle."""
    wall_seconds: float
    scheduler_events: int
    """Calls that changed the scheduler's world: submissions, completions, cancellations,
    evictions, node failures and repairs."""
    counts: dict[str, int] = field(default_factory=dict)
    notes: dict[str, Any] = field(default_factory=dict)
    scheduler_cpu_seconds: float = 0.0
    """CPU time of the process during the cycles: it counts only while the process runs, so it
    parts from their wall time where other work or the host takes the core."""
    interrupted: bool = False
    """The run was stopped (Ctrl-C, SIGTERM) before its end: the record covers start..end."""
    policy: dict[str, object] = field(default_factory=dict)
    """The scheduler's settings that differ from the defaults, as plain JSON
    (`SchedulerSettings.changes_as_json`)."""

    @property
    def duration(self) -> float:
        return self.end - self.start
