"""What the simulator drives: the scheduler's methods and values it reads, as typed protocols.

toposched's `Scheduler` satisfies `SchedulerLike`, and so do the baselines, which subclass it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import ClusterState, Health
from toposched.jobs.spec import JobSpec
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler
from toposched.scheduler.decisions import Decision
from toposched.scheduler.jobs import JobState
from toposched.scheduler.settings import SchedulerSettings

__all__ = [
    "CycleLike",
    "JobLike",
    "SchedulerFactory",
    "SchedulerLike",
    "SparesLike",
    "toposched_scheduler",
]


class JobLike(Protocol):
    """A scheduler's job, as far as the simulator reads it."""

    @property
    def job_id(self) -> str: ...
    @property
    def state(self) -> JobState: ...
    @property
    def submit_time(self) -> float: ...
    @property
    def min_runtime(self) -> float:
        """Seconds the running job is protected from preemption (0 for unallocated work)."""
        ...


class CycleLike(Protocol):
    """One cycle's outcome: Bind, Reserve and Evict decisions, in the order they were made."""

    @property
    def decisions(self) -> Sequence[Decision]: ...


class SparesLike(Protocol):
    """Spare nodes a scheduler holds idle for restarts."""

    @property
    def gpus(self) -> int:
        """GPUs of the nodes held as spares."""
        ...


class SchedulerLike(Protocol):
    """What the simulator drives: toposched's Scheduler, or a baseline (a subclass of it).

    `set_health` returns the jobs that failed because their nodes went down; `evicted` tells
    the scheduler that an evicted job's grace period ended and its pods are gone;
    `report_checkpoint` that a running job saved its work at `now`.
    """

    @property
    def state(self) -> ClusterState: ...
    @property
    def jobs(self) -> Mapping[str, JobLike]: ...
    @property
    def spares(self) -> SparesLike | None: ...
    @property
    def settings(self) -> SchedulerSettings: ...

    def submit(self, spec: JobSpec, now: float) -> JobLike: ...
    def cycle(self, now: float) -> CycleLike: ...
    def finish(self, job_id: str, now: float) -> JobLike: ...
    def evicted(self, job_id: str, now: float) -> JobLike: ...
    def cancel(self, job_id: str, now: float) -> JobLike: ...
    def report_checkpoint(self, job_id: str, now: float) -> None: ...
    def set_health(
        self, nodes: NDArray[np.int64], health: Health, now: float
    ) -> Sequence[JobLike]: ...


SchedulerFactory = Callable[[ClusterState, BudgetTree], SchedulerLike]
"""Builds the scheduler under test on a fresh cluster state and budget tree."""


def toposched_scheduler(state: ClusterState, tree: BudgetTree) -> SchedulerLike:
    """The scheduler the service runs, with its default contract and placement policy."""
    return Scheduler(state, tree)
