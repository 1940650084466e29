"""Where idle GPU time goes in a toposched run: while work waits, and while nothing does.

Runs toposched alone with the options of `toposched simulate` and, after every cycle, sorts the
free GPUs by why no waiting job took them, until the next cycle:

- `nothing waits`: no job is pending;
- `every waiting job larger`: each pending job asks for more GPUs than are free;
- `fragmented`: some pending job asks for no more GPUs than are free, but none fits the free
  GPUs node by node (its pods' GPUs in whole nodes' free GPUs, topology aside);
- `headroom`: one fits node by node, and every such job is unallocated work the headroom
  keeps off the last free GPUs (`--unallocated-headroom`);
- `waiting for checkpoints`, `reserved nodes`: one fits node by node and its reason says it
  waits for its victims' checkpoints, or that the nodes are reserved for another job;
- `other`: one fits node by node and none of the above says why (topology constraints, the
  budget rule, a job not looked at in that cycle).

    .venv/bin/python benchmarks/idle_while_waiting.py --days 30 --gpus 1024 \
        --checkpoint-wait 1h --urgent-priority 10 --unallocated-headroom 1
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from typing import Any

import numpy as np
from pending_watch import watched_run

from toposched.cli.simulate_options import add_options, check_options
from toposched.cli.simulate_run import build_workload
from toposched.cluster.state import ClusterState
from toposched.cluster.units import DAY, HOUR
from toposched.scheduler.core import Scheduler
from toposched.scheduler.jobs import Job
from toposched.scheduler.turn import CycleResult
from toposched.sim.metrics import summarize
from toposched.sim.records import RecordState
from toposched.workloads.model import Workload

CAUSES = (
    "nothing waits",
    "every waiting job larger",
    "fragmented",
    "headroom",
    "waiting for checkpoints",
    "reserved nodes",
    "other",
)


class IdleLedger:
    """Idle GPU-seconds by cause, and by day, from the state after each cycle."""

    def __init__(self, scheduler: Scheduler, headroom: float, horizon: float) -> None:
        self.scheduler = scheduler
        self.state: ClusterState = scheduler.state
        self.capacity = self.state.topology.n_gpus
        self.headroom_gpus = headroom * self.capacity
        self.horizon = horizon
        self.seconds: dict[str, float] = defaultdict(float)
        self.by_day: dict[str, np.ndarray] = defaultdict(
            lambda: np.zeros(int(np.ceil(horizon / DAY)))
        )
        self.last: tuple[float, float, str] | None = None

    def close(self, now: float) -> None:
        if self.last is None:
            return
        since, idle, cause = self.last
        now = min(now, self.horizon)
        while since < now:
            day = int(since // DAY)
            upto = min(now, (day + 1) * DAY)
            self.seconds[cause] += idle * (upto - since)
            self.by_day[cause][day] += idle * (upto - since)
            since = upto

    def observe(self, now: float, result: CycleResult, pending: list[Job]) -> None:
        self.close(now)
        idle = float(self.state.total_free_gpus)
        self.last = (now, idle, self.cause(idle, pending) if idle > 0 else "nothing waits")

    def cause(self, idle: float, waiting: list[Job]) -> str:
        if not waiting:
            return "nothing waits"
        counted = [job for job in waiting if job.spec.total_gpus <= idle]
        if not counted:
            return "every waiting job larger"
        free = self.state.free_whole_gpus
        fitting = []
        for job in counted:
            per_pod = job.spec.resources_per_pod.gpus
            if per_pod == 0 or int((free // per_pod).sum()) >= job.spec.pods:
                fitting.append(job)
        if not fitting:
            return "fragmented"
        reasons = [job.reason for job in fitting]
        if any("checkpoint" in reason for reason in reasons):
            return "waiting for checkpoints"
        if all(
            ".unallocated." in job.spec.name and idle - job.spec.total_gpus < self.headroom_gpus
            for job in fitting
        ):
            return "headroom"
        if any("reserv" in reason for reason in reasons):
            return "reserved nodes"
        return "other"


def observed(args: argparse.Namespace, workload: Workload) -> tuple[Any, IdleLedger]:
    headroom = (args.unallocated_headroom or 0.0) if hasattr(args, "unallocated_headroom") else 0.0
    horizon = float(workload.horizon or 0.0)
    return watched_run(args, lambda scheduler: IdleLedger(scheduler, headroom, horizon), workload)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_options(parser)
    parser.add_argument("--by-day", action="store_true", help="also each day's idle by cause")
    args = parser.parse_args()
    check_options(args)
    workload = build_workload(args)
    result, ledger = observed(args, workload)
    summary = summarize(result)
    capacity_seconds = result.capacity_gpus * result.duration
    idle = summary["utilisation"]["gpu_hours"]["idle"]
    counted = sum(ledger.seconds.values()) / HOUR
    out: dict[str, Any] = {
        "occupancy": summary["utilisation"]["occupancy"],
        "occupancy_while_work_waits": summary["utilisation"]["occupancy_while_work_waits"],
        "owed_met": summary["fairness"]["owed_met"],
        "worst_team_owed_met": summary["fairness"]["worst_team_owed_met"],
        "debug_wait_p90_s": summary["debug_wait_s"]["p90"],
        "gpu_hours_lost": summary["disruption"]["gpu_hours_lost"],
        "lost_share_of_delivered": summary["disruption"]["gpu_hours_lost"]
        / summary["utilisation"]["gpu_hours"]["delivered"],
        "idle_gpu_hours": idle,
        "idle_gpu_hours_sorted": counted,
        "idle_points_of_occupancy_by_cause": {
            cause: 100 * ledger.seconds.get(cause, 0.0) / capacity_seconds for cause in CAUSES
        },
    }
    withdrawn: dict[str, float] = defaultdict(float)
    withdrawn_jobs: dict[str, int] = defaultdict(int)
    withdrawn_by_day = np.zeros(int(np.ceil(result.duration / DAY)))
    for record in result.records.values():
        if record.state is RecordState.CANCELLED and record.end_time is not None:
            work = record.gpus * record.job.runtime
            withdrawn[record.job_class] += work / HOUR
            withdrawn_jobs[record.job_class] += 1
            withdrawn_by_day[min(int(record.end_time // DAY), withdrawn_by_day.size - 1)] += work
    out["withdrawn_unstarted_gpu_hours"] = dict(withdrawn)
    out["withdrawn_unstarted_jobs"] = dict(withdrawn_jobs)
    if args.by_day:
        out["withdrawn_share_by_day"] = [
            round(x / (result.capacity_gpus * DAY), 4) for x in withdrawn_by_day
        ]
        out["idle_share_by_day"] = {
            cause: [round(x / (result.capacity_gpus * DAY), 4) for x in ledger.by_day[cause]]
            for cause in CAUSES
            if cause in ledger.by_day
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
