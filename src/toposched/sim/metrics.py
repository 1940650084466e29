"""The JSON summary of a simulation: utilisation, fairness, waits, disruption and the
scheduler's speed, with the conservation balance it checks."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from toposched.cluster.units import DAY, HOUR
from toposched.policy.owed import owed_gpu_seconds
from toposched.sim.records import JobRecord, RecordState, Sample, SimulationResult
from toposched.sim.team_ledger import SHORTFALL_CAUSES

__all__ = ["Conservation", "conservation", "percentiles", "summarize"]

DEBUG_CLASS = "debug"
# A team counts as served when it got this share of what it was owed (Ai2 reports how many of
# its 15 teams reached 95%).
SERVED_THRESHOLD = 0.95
# Jobs at least this fraction of the largest job's GPUs count among "the largest jobs".
LARGEST_FRACTION = 0.5


def percentiles(values: Iterable[float], points: Sequence[float] = (50, 90, 99)) -> dict[str, Any]:
    """{"p50": ..., "p90": ..., "p99": ...} of `values` (None when there are none)."""
    array = np.asarray(list(values), dtype=float)
    if array.size == 0:
        return {f"p{point:g}": None for point in points}
    return {f"p{point:g}": float(np.percentile(array, point, method="linear")) for point in points}


@dataclass(frozen=True)
class Conservation:
    """GPU-seconds delivered + idle + unavailable against capacity x time."""

    delivered: float
    idle: float
    unavailable: float
    expected: float

    @property
    def error(self) -> float:
        """Relative error of the balance (0 when it holds exactly)."""
        total = self.delivered + self.idle + self.unavailable
        return abs(total - self.expected) / self.expected if self.expected else 0.0

    def holds(self, tolerance: float = 1e-9) -> bool:
        return self.error <= tolerance


def conservation(result: SimulationResult) -> Conservation:
    """The balance of a run: delivered (from job intervals) + idle and unavailable (from the
    cluster state) must equal capacity x time, since every GPU is in exactly one of them."""
    integrals = result.integrals
    return Conservation(
        delivered=integrals.delivered,
        idle=integrals.idle,
        unavailable=integrals.unavailable,
        expected=result.capacity_gpus * result.duration,
    )


def _wait(record: JobRecord, end: float) -> float | None:
    """Seconds from submission to first start; jobs that never started count what they waited
    until they were withdrawn or the run ended (a lower bound, never left out)."""
    submit = record.job.submit_time
    if record.first_start is not None:
        return record.first_start - submit
    if record.state is RecordState.FUTURE:
        return None
    stop = record.end_time if record.end_time is not None else end
    return max(stop - submit, 0.0)


def _team_report(result: SimulationResult) -> dict[str, Any]:
    hours = max(1, math.ceil(result.duration / HOUR - 1e-9))
    teams: dict[str, Any] = {}
    owed_total = delivered_total = met_total = 0.0
    ratios: list[float] = []
    by_cause = dict.fromkeys(SHORTFALL_CAUSES, 0.0)
    for team, share in result.team_shares.items():
        delivered, demand = result.ledger.hours(team, hours)
        entitled = share * result.capacity_gpus * HOUR
        owed = owed_gpu_seconds(entitled, demand)
        met = np.minimum(delivered, owed)
        team_causes = _shortfall_by_cause(owed - met, result.ledger.short_hours(team, hours))
        for cause, gpu_seconds in team_causes.items():
            by_cause[cause] += gpu_seconds
        owed_sum, met_sum, delivered_sum = (
            float(owed.sum()),
            float(met.sum()),
            float(delivered.sum()),
        )
        ratio = met_sum / owed_sum if owed_sum > 0 else None
        teams[team] = {
            "share": share,
            "owed_gpu_hours": owed_sum / HOUR,
            "delivered_gpu_hours": delivered_sum / HOUR,
            "delivered_within_owed_gpu_hours": met_sum / HOUR,
            "owed_met": ratio,
            "delivered_over_owed": delivered_sum / owed_sum if owed_sum > 0 else None,
            "demand_gpu_hours": float(demand.sum()) / HOUR,
            "shortfall_gpu_hours_by_cause": {
                cause: gpu_seconds / HOUR for cause, gpu_seconds in team_causes.items()
            },
        }
        owed_total += owed_sum
        met_total += met_sum
        delivered_total += delivered_sum
        if ratio is not None:
            ratios.append(ratio)
    return {
        "owed_met": met_total / owed_total if owed_total > 0 else None,
        "delivered_over_owed": delivered_total / owed_total if owed_total > 0 else None,
        "teams_served": sum(1 for ratio in ratios if ratio >= SERVED_THRESHOLD),
        "teams_with_demand": len(ratios),
        "worst_team_owed_met": min(ratios) if ratios else None,
        "shortfall_gpu_hours_by_cause": {
            cause: gpu_seconds / HOUR for cause, gpu_seconds in by_cause.items()
        },
        "teams": teams,
    }


def _shortfall_by_cause(shortfall: np.ndarray, short: dict[str, np.ndarray]) -> dict[str, float]:
    """Split each hour's shortfall (owed - delivered within owed, GPU-seconds) between causes.

    Within an hour, the GPU-seconds the team ran below min(budget, demand) under each cause
    (`short`) share the hour's shortfall in proportion; they can add up to more than it, when
    delivery above the budget at other moments of the hour made up for them. Any shortfall
    beyond them is the hourly cap's: demand above the budget in part of the hour and below it
    in the rest counts as owed for the whole hour, though no moment was short.
    """
    total = sum(short.values(), np.zeros_like(shortfall))
    scale = np.divide(
        np.minimum(shortfall, total), total, out=np.zeros_like(shortfall), where=total > 0
    )
    split = dict.fromkeys(SHORTFALL_CAUSES, 0.0)
    for cause, seconds in short.items():
        split[cause] = float((seconds * scale).sum())
    split["demand_within_hour"] = float(np.maximum(shortfall - total, 0.0).sum())
    return split


def _class_report(records: Sequence[JobRecord], end: float) -> dict[str, Any]:
    waits = [w for w in (_wait(r, end) for r in records) if w is not None]
    completions = [
        r.end_time - r.job.submit_time
        for r in records
        if r.state is RecordState.FINISHED and r.end_time is not None
    ]
    submitted = sum(1 for r in records if r.state is not RecordState.FUTURE)
    return {
        "submitted": submitted,
        "started": sum(1 for r in records if r.first_start is not None),
        "finished": sum(1 for r in records if r.state is RecordState.FINISHED),
        "never_started": sum(
            1 for r in records if r.first_start is None and r.state is not RecordState.FUTURE
        ),
        "wait_s": percentiles(waits),
        "completion_time_s": percentiles(completions),
        "gpu_hours_delivered": sum(r.delivered_gpu_seconds for r in records) / HOUR,
    }


def _largest_jobs(records: Sequence[JobRecord], end: float) -> dict[str, Any]:
    submitted = [r for r in records if r.state is not RecordState.FUTURE and r.gpus > 0]
    if not submitted:
        return {"gpus_at_least": None, "jobs": 0, "wait_s": percentiles([]), "max_wait_s": None}
    largest = max(r.gpus for r in submitted)
    chosen = [r for r in submitted if r.gpus >= LARGEST_FRACTION * largest]
    waits = [w for w in (_wait(r, end) for r in chosen) if w is not None]
    return {
        "largest_job_gpus": largest,
        "gpus_at_least": LARGEST_FRACTION * largest,
        "jobs": len(chosen),
        "never_started": sum(1 for r in chosen if r.first_start is None),
        "wait_s": percentiles(waits, (50, 90)),
        "max_wait_s": max(waits) if waits else None,
    }


def _jobs_report(records: Sequence[JobRecord]) -> dict[str, Any]:
    states = [r.state for r in records]
    return {
        "total": len(records),
        "submitted": sum(1 for state in states if state is not RecordState.FUTURE),
        "finished": states.count(RecordState.FINISHED),
        "running_at_end": states.count(RecordState.RUNNING),
        "pending_at_end": states.count(RecordState.PENDING),
        "failed": states.count(RecordState.FAILED),
        "cancelled": states.count(RecordState.CANCELLED),
    }


def _utilisation_report(result: SimulationResult) -> dict[str, Any]:
    integrals = result.integrals
    capacity_seconds = result.capacity_gpus * result.duration
    delivered = integrals.delivered
    return {
        "occupancy": integrals.busy / capacity_seconds if capacity_seconds else None,
        "allocation_ratio": delivered / capacity_seconds if capacity_seconds else None,
        "unallocated_share_of_delivered": (
            integrals.unallocated / delivered if delivered > 0 else None
        ),
        "allocated_share_of_delivered": (
            (delivered - integrals.unallocated) / delivered if delivered > 0 else None
        ),
        "mean_outstanding_ratio": (
            integrals.outstanding / capacity_seconds if capacity_seconds else None
        ),
        "occupancy_while_work_waits": (
            integrals.busy_while_waiting / (result.capacity_gpus * integrals.waiting_seconds)
            if result.capacity_gpus and integrals.waiting_seconds > 0
            else None
        ),
        "share_of_time_work_waits": (
            integrals.waiting_seconds / result.duration if result.duration > 0 else None
        ),
        "gpu_hours": {
            "capacity": capacity_seconds / HOUR,
            "delivered": delivered / HOUR,
            "idle": integrals.idle / HOUR,
            "unavailable": integrals.unavailable / HOUR,
        },
    }


def _conservation_report(result: SimulationResult) -> dict[str, Any]:
    balance = conservation(result)
    return {
        "delivered_gpu_hours": balance.delivered / HOUR,
        "idle_gpu_hours": balance.idle / HOUR,
        "unavailable_gpu_hours": balance.unavailable / HOUR,
        "capacity_x_time_gpu_hours": balance.expected / HOUR,
        "relative_error": balance.error,
        "holds": balance.holds(1e-6),
    }


def _disruption_report(result: SimulationResult, records: Sequence[JobRecord]) -> dict[str, Any]:
    unallocated = [r for r in records if not r.allocated]
    started = sum(1 for r in unallocated if r.first_start is not None)
    evicted = sum(r.preemptions for r in unallocated)
    delivered = sum(r.delivered_gpu_seconds for r in records)
    lost = sum(r.lost_gpu_seconds for r in records)
    return {
        "preemptions": sum(r.preemptions for r in records),
        "jobs_preempted": sum(1 for r in records if r.preemptions),
        "unallocated_jobs_started": started,
        "evictions_of_unallocated_jobs": evicted,
        "evictions_per_unallocated_job_started": evicted / started if started else None,
        "gpu_hours_lost_share_of_delivered": lost / delivered if delivered > 0 else None,
        "node_failures": result.counts.get("failures", 0),
        "repairs": result.counts.get("repairs", 0),
        "interruptions_by_failure": sum(r.interruptions for r in records),
        "jobs_interrupted": sum(1 for r in records if r.interruptions),
        "gpu_hours_lost": sum(r.lost_gpu_seconds for r in records) / HOUR,
        "gpu_hours_lost_by_cause": {
            "evictions_of_unallocated_work": sum(
                r.lost_evicted_unallocated_gpu_seconds for r in records
            )
            / HOUR,
            "evictions_of_allocated_work": sum(
                r.lost_evicted_allocated_gpu_seconds for r in records
            )
            / HOUR,
            "node_failures": sum(r.lost_to_failures_gpu_seconds for r in records) / HOUR,
        },
        "gpu_hours_lost_to_topology": sum(r.topology_gpu_seconds for r in records) / HOUR,
        "jobs_slowed_by_topology": sum(1 for r in records if r.topology_gpu_seconds > 0),
    }


def _speed_report(result: SimulationResult) -> dict[str, Any]:
    cycles = np.asarray(result.cycle_seconds, dtype=float)
    return {
        "cycles": int(cycles.size),
        "decision_latency_s": {
            **percentiles(cycles, (50, 99)),
            "max": float(cycles.max()) if cycles.size else None,
            "mean": float(cycles.mean()) if cycles.size else None,
        },
        "scheduler_seconds": float(cycles.sum()),
        "scheduler_cpu_seconds": result.scheduler_cpu_seconds,
        "wall_seconds": result.wall_seconds,
        "scheduler_events": result.scheduler_events,
        "events_per_second": (
            result.scheduler_events / result.wall_seconds if result.wall_seconds > 0 else None
        ),
        "simulated_seconds_per_wall_second": (
            result.duration / result.wall_seconds if result.wall_seconds > 0 else None
        ),
    }


def _timeline(samples: Sequence[Sample]) -> dict[str, list[Any]]:
    return {
        "time_s": [s.time for s in samples],
        "occupancy": [s.occupancy for s in samples],
        "allocation_ratio": [s.allocation_ratio for s in samples],
        "unallocated_share": [s.unallocated_share for s in samples],
        "running_jobs": [s.running_jobs for s in samples],
        "pending_jobs": [s.pending_jobs for s in samples],
        "pending_gpus": [s.pending_gpus for s in samples],
        "outstanding_ratio": [s.outstanding_ratio for s in samples],
        "unhealthy_gpus": [s.unhealthy_gpus for s in samples],
    }


def summarize(result: SimulationResult) -> dict[str, Any]:
    """The JSON summary: utilisation, fairness, waits, disruption and the scheduler's speed."""
    records = list(result.records.values())
    by_class: dict[str, list[JobRecord]] = {}
    for record in records:
        by_class.setdefault(record.job_class, []).append(record)
    return {
        "workload": result.workload,
        "scheduler": result.scheduler,
        "policy": result.policy,
        "cluster": {"gpus": result.capacity_gpus},
        "simulated": {
            "start_s": result.start,
            "end_s": result.end,
            "days": result.duration / DAY,
            "interrupted": result.interrupted,
        },
        "jobs": _jobs_report(records),
        "utilisation": _utilisation_report(result),
        "conservation": _conservation_report(result),
        "fairness": _team_report(result),
        "classes": {
            name: _class_report(group, result.end) for name, group in sorted(by_class.items())
        },
        "debug_wait_s": _class_report(by_class.get(DEBUG_CLASS, []), result.end)["wait_s"],
        "largest_jobs": _largest_jobs(records, result.end),
        "disruption": _disruption_report(result, records),
        "scheduler_speed": _speed_report(result),
        "counts": dict(result.counts),
        "timeline": _timeline(result.samples),
        "notes": result.notes,
    }
