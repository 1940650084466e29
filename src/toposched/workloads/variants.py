"""What-if variants of a workload: its jobs split among teams, or a share of them resumable.

Both change only who a job charges or whether it can resume: arrivals, sizes and runtimes stay
as built, so a variant compares with its base run for run.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import replace

import numpy as np

from toposched.cluster.errors import InputError
from toposched.cluster.limits import MAX_TEAMS
from toposched.cluster.units import HOUR
from toposched.workloads.model import Workload, WorkloadJob

__all__ = ["TRAINING_GPUS", "split_among_teams", "with_resumable_share"]

TRAINING_GPUS = 16
"""A job of at least this many GPUs is `training` in a split workload."""
DEBUG_RUNTIME = 0.5 * HOUR
"""A job that runs at most this long is `debug` in a split workload."""


def split_among_teams(workload: Workload, teams: int) -> Workload:
    """`workload`'s jobs charged to `teams` teams (`team-01`, ...), each job to one team by a
    hash of its name with Zipf-like weights (team k gets about 1/k of the jobs), each team's
    budget its share of the jobs' GPU-time (at least 0.1%). Jobs are classed `debug` (runs of
    at most 30 min), `training` (16 GPUs or more) or `other`."""
    if isinstance(teams, bool) or not isinstance(teams, int) or not 2 <= teams <= MAX_TEAMS:
        raise InputError("teams", teams, f"must be a whole number of teams from 2 to {MAX_TEAMS}")
    weights = np.array([1.0 / (rank + 1) for rank in range(teams)])
    bounds = np.cumsum(weights / weights.sum())
    names = [f"team-{number + 1:02d}" for number in range(teams)]
    used = [0.0] * teams
    jobs: list[WorkloadJob] = []
    for job in workload.jobs:
        draw = (zlib.crc32(job.spec.name.encode()) % 100_000) / 100_000
        team = min(int(np.searchsorted(bounds, draw, side="right")), teams - 1)
        used[team] += job.gpus * job.runtime
        spec = job.spec.model_copy(update={"account": names[team]})
        jobs.append(replace(job, spec=spec, job_class=_job_class(job)))
    grand = sum(used) or 1.0
    accounts = {
        name: {"share": max(0.1, math.floor(1000 * used[i] / grand) / 10)}
        for i, name in enumerate(names)
    }
    return replace(
        workload,
        jobs=jobs,
        budget={"accounts": accounts},
        name=f"{workload.name} x {teams} teams",
        description=f"{workload.description}, split among {teams} teams by a hash of job names",
        notes={**workload.notes, "teams": teams},
    )


def with_resumable_share(workload: Workload, share: float, seed: int = 0) -> Workload:
    """`workload` with each job able to resume with probability `share` (0-1), drawn from its
    own random stream (`seed`), so the rest of the workload stays as built. A job made
    resumable checkpoints at the workload's interval unless it names its own."""
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= 1:
        raise InputError("resumable", share, "must be a share from 0 to 1 (0% to 100%)")
    rng = np.random.default_rng([seed, zlib.crc32(b"resumable")])
    draws = rng.random(len(workload.jobs))
    jobs = [
        replace(job, spec=job.spec.model_copy(update={"resumable": bool(draw < share)}))
        for job, draw in zip(workload.jobs, draws.tolist(), strict=True)
    ]
    percent = f"{100 * share:g}%"
    return replace(
        workload,
        jobs=jobs,
        description=f"{workload.description}, {percent} of jobs resumable",
        notes={**workload.notes, "resumable_share": share},
    )


def _job_class(job: WorkloadJob) -> str:
    if job.runtime <= DEBUG_RUNTIME:
        return "debug"
    if job.gpus >= TRAINING_GPUS:
        return "training"
    return "other"
