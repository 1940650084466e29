"""The most occupancy any scheduler can reach on a workload: a fluid bound from the jobs alone.

The relaxation drops everything that makes scheduling hard: topology, gangs (a job may run on
any number of GPUs up to its own, at any moment, its work being GPU-seconds), node shapes,
min runtimes, budgets, and withdrawals unless asked to keep them (`occupancy_bound`'s
`windows`). What remains: a job's work is its GPUs x its runtime; it can be done no earlier
than the job arrives, no faster than on all its GPUs at once, and all jobs together no faster
than the cluster's GPUs (a workload with node failures is refused). The GPU-seconds of work
that can be done within the horizon under those rules, over capacity x horizon, bounds the
report's `utilisation.occupancy` less the GPU time runs spent on work they later lost (evicted
or interrupted since their last checkpoint, then redone): GPUs held by a run are busy whether
its work is kept or not, so a scheduler that throws work away and redoes it can show more
occupancy than the bound (see `occupancy_with_loss`).

Time is cut into steps; a job counts as arrived from the start of the step it arrives in (an
earlier arrival only loosens the bound). The most work the stepped problem allows is a maximum
flow (jobs -> steps -> cluster); the bound reported is the capacity of a cut of that network,
which no flow, and so no schedule, exceeds. A fluid schedule that gives each step's GPUs to the
jobs with the least slack (the most runtime still to run, when no window ends before the
horizon) shows how close the cut is to what can be done: `certified_gap` is the cut less that
schedule, 0 when both meet.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.units import MILLI_PER_GPU, MINUTE
from toposched.jobs.spec import JobSpec
from toposched.workloads.model import Workload

__all__ = ["DEFAULT_STEP", "OccupancyBound", "occupancy_bound", "whole_gpus"]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

DEFAULT_STEP = MINUTE
"""Seconds per step of the fluid schedule: arrivals move to the start of their step."""
_SATURATED = 1e-9
"""A step is full when its idle GPU-seconds are below this fraction of its capacity."""
_CUT_ROUNDS = 4
"""Passes over the runs of full steps when looking for a smaller cut."""


def whole_gpus(spec: JobSpec) -> int:
    """GPUs a job can keep busy at once, a shared GPU counting whole: its whole GPUs, and one
    GPU per pod that asks for a share of one."""
    sets = spec.pod_sets if spec.pod_sets is not None else None
    if sets is None:
        per_pod = spec.resources_per_pod
        return spec.pods * (math.ceil(per_pod.gpu_milli_total / MILLI_PER_GPU))
    return sum(
        pod_set.pods * math.ceil(pod_set.resources_per_pod.gpu_milli_total / MILLI_PER_GPU)
        for pod_set in sets
    )


@dataclass(frozen=True)
class OccupancyBound:
    """The fluid bound of a workload on its cluster over [0, horizon)."""

    capacity_gpus: int
    horizon: float
    step: float
    offered_gpu_seconds: float
    """Work of the jobs that arrive within the horizon (whole GPUs x runtime), all of it."""
    bound_gpu_seconds: float
    """The cut: no schedule does more work within the horizon."""
    schedule_gpu_seconds: float
    """Work the largest-remaining-first fluid schedule does within the horizon."""
    step_busy: FloatArray
    """The fluid schedule's busy GPUs (mean) in each step."""
    step_starts: FloatArray

    @property
    def capacity_gpu_seconds(self) -> float:
        return self.capacity_gpus * self.horizon

    @property
    def occupancy(self) -> float:
        """The bound on occupancy less the share of GPU time spent on work later lost."""
        return self.bound_gpu_seconds / self.capacity_gpu_seconds

    @property
    def schedule_occupancy(self) -> float:
        return self.schedule_gpu_seconds / self.capacity_gpu_seconds

    @property
    def certified_gap(self) -> float:
        """Cut less fluid schedule, as a share of capacity x horizon."""
        return (self.bound_gpu_seconds - self.schedule_gpu_seconds) / self.capacity_gpu_seconds

    def occupancy_with_loss(self, lost_share_of_delivered: float) -> float:
        """The most occupancy a run can show when a share of the GPU time it delivers goes to
        work later lost (and redone): busy = useful + lost, lost = share x busy."""
        if not 0 <= lost_share_of_delivered < 1:
            raise ValueError("the lost share of delivered GPU time must be in [0, 1)")
        return min(1.0, self.occupancy / (1.0 - lost_share_of_delivered))

    def idle_gpu_seconds_between(self, start: float, end: float) -> float:
        """GPU-seconds the fluid schedule leaves idle in the steps starting in [start, end)."""
        chosen = (self.step_starts >= start) & (self.step_starts < end)
        lengths = np.diff(np.append(self.step_starts, self.horizon))[chosen]
        return float((self.capacity_gpus * lengths - self.step_busy[chosen] * lengths).sum())


def occupancy_bound(
    workload: Workload,
    horizon: float | None = None,
    step: float = DEFAULT_STEP,
    *,
    windows: bool = False,
) -> OccupancyBound:
    """The fluid bound of `workload` over [0, horizon) (default: the workload's).

    With `windows`, a job that the workload withdraws unless started within `cancel_after`
    does all its work between its arrival and that moment plus its runtime: a bound for
    schedulers that never suspend a run once started (the simulator's baselines that do not
    preempt), not for those that evict and resume, whose runs may end later.
    """
    end = workload.horizon if horizon is None else horizon
    if end is None or not end > 0:
        raise ValueError("the bound needs a horizon > 0")
    if not step > 0:
        raise ValueError("step must be > 0")
    if workload.failures:
        raise ValueError("the bound assumes every GPU healthy: the workload has node failures")
    capacity = workload.capacity_gpus
    submits, latest, gpus, runtimes = [], [], [], []
    for job in workload.jobs:
        width = whole_gpus(job.spec)
        if job.submit_time >= end or width == 0 or width > capacity or job.runtime <= 0:
            continue
        submit = max(job.submit_time, 0.0)
        submits.append(submit)
        window = job.cancel_after if windows and job.cancel_after is not None else math.inf
        latest.append(min(submit + window + job.runtime, end))
        gpus.append(float(width))
        runtimes.append(job.runtime)
    starts = np.arange(0.0, end, step, dtype=np.float64)
    lengths = np.diff(np.append(starts, end))
    jobs = _Jobs(
        arrival=np.floor(np.asarray(submits, dtype=np.float64) / step).astype(np.int64),
        # The step holding the job's last moment of work is the last it may use.
        close=np.ceil(np.asarray(latest, dtype=np.float64) / step).astype(np.int64),
        gpus=np.asarray(gpus, dtype=np.float64),
        runtime=np.asarray(runtimes, dtype=np.float64),
    )
    jobs = jobs._replace(close=np.minimum(jobs.close, lengths.size))
    busy = _least_slack_first(jobs, starts, lengths, capacity)
    return OccupancyBound(
        capacity_gpus=capacity,
        horizon=float(end),
        step=float(step),
        offered_gpu_seconds=float((jobs.gpus * jobs.runtime).sum()),
        bound_gpu_seconds=_least_cut(jobs, lengths, capacity, busy),
        schedule_gpu_seconds=float((busy * lengths).sum()),
        step_busy=busy,
        step_starts=starts,
    )


class _Jobs(NamedTuple):
    arrival: IntArray
    """First step a job may use."""
    close: IntArray
    """One past the last step it may use."""
    gpus: FloatArray
    runtime: FloatArray


def _least_slack_first(
    jobs: _Jobs, starts: FloatArray, lengths: FloatArray, capacity: int
) -> FloatArray:
    """Mean busy GPUs per step of a fluid schedule that serves, each step, the arrived jobs
    with the least slack first (the end of their window less the runtime they have left; all
    windows ending at the horizon, the most runtime left first), each on at most its GPUs."""
    order = np.argsort(jobs.arrival, kind="stable")
    arrival, close, gpus = jobs.arrival[order], jobs.close[order], jobs.gpus[order]
    remaining = jobs.runtime[order].copy()
    window_end = np.append(starts, starts[-1] + lengths[-1])[close]
    busy = np.zeros(lengths.size, dtype=np.float64)
    active = np.zeros(0, dtype=np.int64)
    next_job = 0
    for k, length in enumerate(lengths):
        stop = int(np.searchsorted(arrival, k, side="right"))
        if stop > next_job:
            active = np.concatenate([active, np.arange(next_job, stop, dtype=np.int64)])
            next_job = stop
        active = active[(remaining[active] > 1e-9) & (close[active] > k)]
        if active.size == 0:
            continue
        ranked = active[np.argsort(window_end[active] - remaining[active], kind="stable")]
        seconds = np.minimum(remaining[ranked], length)
        wanted = gpus[ranked] * seconds
        room = capacity * length
        total = np.cumsum(wanted)
        if total[-1] <= room:
            remaining[ranked] -= seconds
            busy[k] = total[-1] / length
        else:
            full = int(np.searchsorted(total, room, side="right"))
            remaining[ranked[:full]] -= seconds[:full]
            spent = total[full - 1] if full else 0.0
            partial = ranked[full]
            remaining[partial] -= (room - spent) / gpus[partial]
            busy[k] = float(capacity)
    return busy


def _cut(jobs: _Jobs, lengths: FloatArray, capacity: int, taken: NDArray[np.bool_]) -> float:
    """The capacity of the cut that takes the steps `taken` whole (capacity x their length)
    and, for each job, the smaller of its work and its GPUs x the length of its window's
    steps not taken."""
    outside = np.concatenate([[0.0], np.cumsum(np.where(taken, 0.0, lengths))])
    reach = outside[jobs.close] - outside[np.minimum(jobs.arrival, jobs.close)]
    return capacity * float(lengths[taken].sum()) + float(
        np.minimum(jobs.gpus * jobs.runtime, jobs.gpus * reach).sum()
    )


def _least_cut(jobs: _Jobs, lengths: FloatArray, capacity: int, busy: FloatArray) -> float:
    """The smallest cut found among: no step, every step, and the runs of steps the fluid
    schedule fills, each kept or left out while that lowers the cut (a schedule that does the
    most that can be done fills exactly the steps of some such cut)."""
    full = busy >= capacity * (1.0 - _SATURATED)
    best = min(
        _cut(jobs, lengths, capacity, np.zeros_like(full)),
        _cut(jobs, lengths, capacity, np.ones_like(full)),
    )
    edges = np.flatnonzero(np.diff(np.concatenate([[0], full.astype(np.int8), [0]])))
    runs = list(zip(edges[0::2], edges[1::2], strict=True))
    taken = full.copy()
    value = _cut(jobs, lengths, capacity, taken)
    for _ in range(_CUT_ROUNDS):
        improved = False
        for first, stop in runs:
            taken[first:stop] = ~taken[first:stop]
            other = _cut(jobs, lengths, capacity, taken)
            if other < value:
                value, improved = other, True
            else:
                taken[first:stop] = ~taken[first:stop]
        if not improved:
            break
    return min(best, value)
