"""The Slurm-like baseline: multifactor priority, EASY backfill, topology/tree with `--switches`
waits, and, as an option, preemption by partition priority tier with requeue."""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, replace

from toposched.cluster.errors import InputError
from toposched.cluster.state import MILLI_PER_GPU, ClusterState
from toposched.jobs.spec import JobSpec
from toposched.placement.policies import BestFit
from toposched.policy.budget import BudgetTree
from toposched.policy.usage import UsageTracker
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.scheduler.jobs import Job, JobState
from toposched.scheduler.settings import SchedulerSettings
from toposched.sim.baselines.queues import MultifactorQueue, Partition
from toposched.sim.baselines.slurm_preemption import SlurmPreemption, preempt_for_pending

__all__ = [
    "SLURM_MAX_SWITCH_WAIT",
    "SlurmLike",
    "SlurmOptions",
    "SlurmPreemption",
]

SLURM_MAX_SWITCH_WAIT = 300.0
"""Seconds a job asking for one switch waits for it before taking any nodes: Slurm's
`max_switch_wait` scheduler parameter, the default of `--switches=count@max-time`."""


def _seconds(name: str, value: object, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < 0
    ):
        rule = "must be a number of seconds >= 0" + (", or None" if allow_none else "")
        raise InputError(name, value, rule)


@dataclass(frozen=True)
class SlurmOptions:
    """How the Slurm-like baseline is configured, as a site would configure Slurm."""

    switch_wait: float | None = SLURM_MAX_SWITCH_WAIT
    """A job whose topology says `required: <level>` asks for its pods within one domain of
    that level (`--switches=1` for the innermost level, topology/tree's leaf switches) and
    waits up to this many seconds from its submission for one; then it takes any nodes, still
    preferring the fewest leaf switches (`--switches=1@switch_wait`). None: it waits for ever
    (a strict requirement)."""
    preemption: SlurmPreemption | None = None
    """Preemption by partition priority tier with requeue; None: Slurm's default, no
    preemption (`PreemptType=preempt/none`)."""

    def __post_init__(self) -> None:
        _seconds("switch_wait", self.switch_wait, allow_none=True)
        if self.preemption is not None and not isinstance(self.preemption, SlurmPreemption):
            raise InputError("preemption", self.preemption, "must be a SlurmPreemption or None")


class SlurmLike(Scheduler):
    """Slurm with the multifactor priority plugin, the backfill scheduler and topology/tree.

    Order: `MultifactorQueue` (age, classic fair share over the same sliding usage window
    toposched uses, job size). The cycle is toposched's own, with its preemption,
    defragmentation and allocated/unallocated split turned off, which leaves EASY backfill:
    jobs start in priority order while they fit; the first job that does not fit gets a
    reservation (the earliest time it fits as running jobs end at their declared runtimes,
    else at their min runtimes), and jobs behind it start only outside the reserved nodes or,
    if their declared runtime ends before the reservation, on them. Placement is best fit,
    as select/cons_tres does, preferring the fewest leaf switches (innermost domains).

    Topology (`SlurmOptions.switch_wait`): a job's `required` level is kept for up to
    `switch_wait` seconds from its submission, then dropped at the next cycle, as
    `--switches=1@max-time` waits for one switch; slices are dropped (topology/tree has none).

    Preemption (`SlurmOptions.preemption`): see `SlurmPreemption`; budgeted work sits in a
    partition of a higher priority tier than work no budget pays for, is scheduled before
    it, and preempts it, the victims requeued.
    """

    orders_owed_first = False

    def __init__(
        self, state: ClusterState, tree: BudgetTree, options: SlurmOptions | None = None
    ) -> None:
        self.options = options = options if options is not None else SlurmOptions()
        preemption = options.preemption
        self._gpus_of: dict[str, float] = {}
        usage = UsageTracker()
        self.multifactor = MultifactorQueue(
            tree,
            usage,
            state.topology.n_gpus,
            self._gpus_of,
            partitions=preemption is not None,
        )
        # Every victim gets GraceTime, at most, whatever it asked for.
        settings = (
            None
            if preemption is None
            else SchedulerSettings(grace_s=preemption.grace_s, max_grace_s=preemption.grace_s)
        )
        super().__init__(
            state,
            tree,
            settings,
            usage=usage,
            queue=self.multifactor,
            # Slurm charges every job to its account's usage (GPU time: none without GPUs).
            charge_unallocated=True,
            policy=BestFit(),
            reserve_min_gpus=0,
            # toposched's own preemption stays off; Slurm's runs after the cycle, if asked for.
            max_preemptions_per_cycle=0,
            defragment=False,
            # No shorter protection for borrowers, and a failed gang requeued in priority order.
            borrowed_min_runtime=None,
            failed_first=False,
        )
        self._leaf_level = len(state.topology.domain_levels) - 1
        # (when its --switches wait ends, job id) of pending jobs holding a required level.
        self._switch_waits: list[tuple[float, str]] = []

    def submit(self, spec: JobSpec, now: float) -> Job:
        self._gpus_of[spec.name] = spec.total_gpu_milli / MILLI_PER_GPU
        self.multifactor.clock = max(self.multifactor.clock, now)
        job = super().submit(spec, now)
        request = job.request
        wait = self.options.switch_wait
        required = request.required if wait is None or wait > 0 else 0
        job.request = replace(
            request,
            required=required,
            preferred=self._leaf_level if self._leaf_level > 0 else None,
            slices=(),
            node_slice=1,
        )
        if required and wait is not None:
            heapq.heappush(self._switch_waits, (job.submit_time + wait, job.job_id))
        return job

    def cycle(self, now: float) -> CycleResult:
        self._end_switch_waits(now)
        result = super().cycle(now)
        preemption = self.options.preemption
        if preemption is not None:
            preempt_for_pending(self, preemption, now, result.decisions)
        return result

    def _end_switch_waits(self, now: float) -> None:
        """Pending jobs whose `--switches` wait is over take any nodes from now on."""
        waits = self._switch_waits
        while waits and waits[0][0] <= now:
            _, job_id = heapq.heappop(waits)
            job = self.jobs.get(job_id)
            if job is None or job.state is not JobState.PENDING or job.nomination is not None:
                continue
            if job.request.required:
                self.jobs[job_id] = _with_any_switches(job, now)

    def partition(self, job: Job) -> Partition:
        """The partition a job runs in: scavenger for work no budget pays for."""
        unallocated = self.contract.is_unallocated(
            job.spec.min_runtime, job.spec.account, self.tree
        )
        return Partition.SCAVENGER if unallocated else Partition.NORMAL

    def fail(self, job_id: str, now: float, requeue: bool | None = None) -> Job:
        self.multifactor.clock = max(self.multifactor.clock, now)
        return super().fail(job_id, now, requeue)

    def evicted(self, job_id: str, now: float) -> Job:
        self.multifactor.clock = max(self.multifactor.clock, now)
        return super().evicted(job_id, now)


def _with_any_switches(job: Job, now: float) -> Job:
    """The pending `job`, its required level dropped, as a new record with the same history
    (the scheduler keeps what it learnt of a job's request on the job itself)."""
    relaxed = Job(
        spec=job.spec,
        request=replace(job.request, required=0),
        submit_time=job.submit_time,
        attempts=job.attempts,
        preemptions=job.preemptions,
        history=job.history,
        evictions=job.evictions,
        last_checkpoint=job.last_checkpoint,
    )
    relaxed.record(now, "--switches wait over: takes any nodes")
    return relaxed
