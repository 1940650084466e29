"""Running jobs as the scheduler keeps them: in release order, by protection end, per account
the GPUs they hold and those on their way out, and as arrays for preemption decisions."""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Sequence
from itertools import compress
from operator import attrgetter

import numpy as np
from numpy.typing import NDArray
from sortedcontainers import SortedList

from toposched.cluster.state import ClusterState, distinct
from toposched.policy.budget import BudgetTree
from toposched.policy.contract import RunningJob
from toposched.policy.usage import UsageTracker
from toposched.scheduler.jobs import Job
from toposched.scheduler.preemptible import Holdings, PreemptibleIndex
from toposched.scheduler.release_order import ReleaseOrder
from toposched.scheduler.takeable import Takeable

RECENT_STARTS = 64
"""How many jobs' starts `Ledger.recent_starts` keeps."""

IntArray = NDArray[np.int64]

#: Sorts after every job id: `(time, LAST_ID)` bisects after every entry at `time`.
LAST_ID = "\uffff"


def work_since(job: Job) -> float:
    """Since when a running job's work would be lost: its last checkpoint if it can resume
    from one, else its start."""
    assert job.start_time is not None
    if job.spec.resumable and job.last_checkpoint is not None:
        return max(job.start_time, job.last_checkpoint)
    return job.start_time


def release_time(job: Job) -> tuple[float, str]:
    """When a running job is expected to free its GPUs: its expected end, or else its
    min-runtime expiry (from then on the contract lets it be preempted); with its id."""
    start = job.start_time
    assert start is not None
    spec = job.spec
    runtime = spec.expected_runtime  # `job.expected_end`, its fields read once
    return (start + runtime if runtime is not None else start + job.min_runtime, spec.name)


class Ledger:
    """Running jobs and what the contract and the reservation read of them.

    `releases` holds (expected release time, job id) in order, kept sorted as jobs start and
    stop, so a reservation reads them without sorting every running job each cycle;
    `protection` holds (protection end, job id) of allocated jobs and `unallocated` the ids of
    unallocated ones, so that preemption candidates are found without scanning every running
    job. GPUs of allocated jobs on their way out (evicted or moved, in their grace period)
    are counted per account: the budget rule counts an account without them. It answers
    `running_gpus` and `budget_gpus` for the contract (its `AccountLoads`).
    """

    def __init__(self, state: ClusterState, tree: BudgetTree, usage: UsageTracker) -> None:
        self.state = state
        self.tree = tree
        self.usage = usage
        self.running: dict[str, Job] = {}
        self.views: dict[str, RunningJob] = _Views(self.running)
        """The contract's view of each running job (made when first read)."""
        self.releases: SortedList = SortedList()
        leaf_level = len(state.topology.domain_levels) - 1
        self.release_order = ReleaseOrder(
            self.releases,
            state.topology.node_domain[leaf_level].astype(np.int64),
            state.topology.n_domains(leaf_level),
        )
        """The running jobs of `releases`, in its order, as arrays."""
        self.protection: SortedList = SortedList()
        self.unallocated: set[str] = set()
        self.preemptible = PreemptibleIndex(state)
        self.preemptor_of: dict[str, str] = {}
        """The preemptor each evicted or moved job leaves for."""
        self.leaving_gpus: dict[str, float] = {}
        self.leaving_version = 0
        # Budgets in GPUs by account, valid for one version of the budget tree.
        self._budgets: dict[str, float] = {}
        self._budgets_version = -1
        self._takeable: dict[tuple[float, bool], Takeable] = {}
        """`takeable` answers, all for one time."""
        self.starts = 0
        """Counts the jobs put in `releases`: while it stays, the release order only loses
        jobs."""
        self.recent_starts: deque[tuple[float, str]] = deque(maxlen=RECENT_STARTS)
        """The release keys of the last jobs started one by one (`remember`), oldest first;
        emptied when many start at once (`started_many`)."""

    def running_gpus(self, account: str) -> float:
        """GPUs the account's allocated jobs hold now, without those already on their way out
        (the contract's `AccountLoads`): an eviction decided in one cycle counts against the
        victim's account at once, so that no later decision takes it below its budget."""
        return self.usage.running(account) - self.leaving_gpus.get(account, 0.0)

    def budget_gpus(self, account: str) -> float:
        """The account's budget in GPUs: its effective share of the cluster's GPUs."""
        if self._budgets_version != self.tree.version:
            self._budgets.clear()
            self._budgets_version = self.tree.version
        budget = self._budgets.get(account)
        if budget is None:
            budget = self.tree.effective_share(account) * self.state.topology.n_gpus
            self._budgets[account] = budget
        return budget

    def beyond_budget(self, job: Job, also: float = 0.0) -> bool:
        """Whether the team's running allocated GPUs, this job and `also` more included, exceed
        its budget."""
        account = job.spec.account
        return self.running_gpus(account) + also + job.gpus > self.budget_gpus(account) + 1e-9

    def unprotected_count(self, now: float) -> int:
        """How many allocated running jobs are past their protection at `now`."""
        ended: int = self.protection.bisect_right((now, LAST_ID))
        return ended

    def next_protection_end(self, now: float) -> float:
        """When the next protection after `now` ends (inf if none)."""
        protections = self.protection
        ended = protections.bisect_right((now, LAST_ID))
        return float(protections[ended][0]) if ended < len(protections) else float("inf")

    def unprotected_ids(self, now: float) -> list[str]:
        """Allocated running jobs past their protection at `now`, by protection end."""
        ended = self.unprotected_count(now)
        return [job_id for _, job_id in self.protection.islice(0, ended)]

    def takeable(self, now: float, only_unallocated: bool) -> Takeable:
        """Slots in the preemptible index of the unallocated jobs, by name, then (unless
        `only_unallocated`) of the allocated jobs past their protection at `now`, by its end:
        every running job a preemption may weigh, in the order victim searches read them.
        Remembered for `now` while no job stops and no job of the list starts (a cycle's
        searches ask again after each start, which is never one of them but for unallocated
        work or a job without protection)."""
        known = self._takeable
        if known and next(iter(known))[0] != now:
            known.clear()
        takeable = known.get((now, only_unallocated))
        if takeable is None:
            names = sorted(self.unallocated)
            if not only_unallocated:
                names += self.unprotected_ids(now)
            slot_of = self.preemptible.slot_of
            slots = np.fromiter(map(slot_of.__getitem__, names), np.int64, len(names))
            takeable = known[(now, only_unallocated)] = Takeable(slots)
        return takeable

    def _may_be_takeable(self, job: Job) -> None:
        """Forget `takeable` if `job`, starting, belongs in its lists."""
        known = self._takeable
        if known and (
            job.unallocated
            or job.start_time is None
            or job.start_time + job.min_runtime <= next(iter(known))[0]
        ):
            known.clear()

    def owners_on(self, nodes: IntArray) -> set[str]:
        """Running jobs holding anything on `nodes`."""
        index = self.preemptible
        holders = index.holders_on(distinct(np.asarray(nodes, dtype=np.int64)))
        return {str(job_id) for job_id in index.ids[holders].tolist()}

    def started(self, job: Job) -> None:
        """`job` started (its allocation is held in the state)."""
        self.running[job.job_id] = job
        job.last_checkpoint = None
        self.remember(job)

    def stopped(self, job: Job, jobs: dict[str, Job]) -> None:
        """`job` stopped running; `jobs` holds its preemptor, if it was leaving for one."""
        self.forget(job, jobs)
        del self.running[job.job_id]

    def started_many(self, jobs: Sequence[Job]) -> None:
        """`started` for each of many jobs (a restart's), with the same result: the sorted
        records and the preemptible index filled at once from the jobs' fields read as
        columns (what `_count_in`, `release_time` and `work_since` read of each)."""
        n = len(jobs)
        if n == 0:
            return
        self._takeable.clear()
        specs = list(map(_SPEC, jobs))
        job_ids = list(map(_NAME, specs))
        self.running.update(zip(job_ids, jobs, strict=True))
        starts: list[float] = list(map(_START_TIME, jobs))
        assert None not in starts
        for job in jobs:
            job.last_checkpoint = None  # so the work at stake counts from the start
        start = np.array(starts, dtype=np.float64)
        protected_until = start + np.fromiter(map(_MIN_RUNTIME, jobs), np.float64, n)
        runtimes = list(map(_EXPECTED_RUNTIME, specs))
        if None in runtimes:
            ends = np.where(
                [runtime is None for runtime in runtimes],
                protected_until,
                start + np.array([runtime or 0.0 for runtime in runtimes], dtype=np.float64),
            )
        else:
            ends = start + np.array(runtimes, dtype=np.float64)
        unallocated: list[bool] = list(map(_UNALLOCATED, jobs))
        self.unallocated.update(compress(job_ids, unallocated))
        allocated = ~np.array(unallocated, dtype=bool)
        allocations = self.state.allocations
        self.preemptible.add_many(
            Holdings(
                job_ids,
                list(map(_LARGEST, map(allocations.__getitem__, job_ids))),
                list(map(_GPUS, jobs)),
                starts,
                protected_until,
                unallocated,
                list(map(_ACCOUNT, specs)),
                list(map(_PRIORITY, specs)),
            )
        )
        in_order = _in_time_order(ends, job_ids)
        self.starts += n
        self.recent_starts.clear()
        self.releases.update(in_order)
        self.release_order.add_many(in_order, [allocations[job_id] for _, job_id in in_order])
        self.protection.update(
            _in_time_order(protected_until[allocated], list(compress(job_ids, allocated.tolist())))
        )

    def remember(self, job: Job) -> None:
        """Count the running `job` in every record."""
        assert job.start_time is not None
        self._may_be_takeable(job)
        self._count_in(job)
        key = release_time(job)
        self.starts += 1
        self.recent_starts.append(key)
        self.releases.add(key)
        self.release_order.add(key, self.state.allocations[job.job_id])
        if not job.unallocated:
            self.protection.add((job.start_time + job.min_runtime, job.job_id))

    def _count_in(self, job: Job) -> None:
        """The records of the running `job` but the sorted ones: the preemptible index, the set
        of unallocated work (its view is made when first read)."""
        assert job.start_time is not None
        spec = job.spec
        # Of an allocation of several pod shapes, the index keeps its largest set.
        self.preemptible.add(
            job.job_id,
            self.state.allocations[job.job_id].largest,
            job.gpus,
            work_since(job),
            job.start_time + job.min_runtime,
            job.unallocated,
            spec.account,
            spec.priority,
        )
        if job.unallocated:
            self.unallocated.add(job.job_id)

    def forget(self, job: Job, jobs: dict[str, Job]) -> None:
        """Take the running `job` out of every record; a preemptor it was leaving for no
        longer waits for it."""
        start = job.start_time
        assert start is not None
        spec = job.spec
        job_id = spec.name
        self._takeable.clear()
        self.releases.remove(release_time(job))
        self.release_order.remove(job_id)
        self.views.pop(job_id, None)
        self.preemptible.remove(job_id)
        unallocated = job.unallocated
        if unallocated:
            self.unallocated.discard(job_id)
        else:
            self.protection.remove((start + job.min_runtime, job_id))
        preemptor = self.preemptor_of.pop(job_id, None)
        if preemptor is not None:
            nomination = jobs[preemptor].nomination
            if nomination is not None:
                nomination.victims.discard(job_id)
        if job.evicting and not unallocated and (gpus := job.gpus) > 0:
            account = spec.account
            left = self.leaving_gpus[account] - gpus
            if left > 1e-9:
                self.leaving_gpus[account] = left
            else:
                del self.leaving_gpus[account]
            self.leaving_version += 1
        job.evicting = False

    def mark_leaving(self, job: Job) -> None:
        """The running `job` was told to leave (evicted or moved)."""
        job.evicting = True
        if not job.unallocated and job.gpus > 0:
            account = job.spec.account
            self.leaving_gpus[account] = self.leaving_gpus.get(account, 0.0) + job.gpus
            self.leaving_version += 1

    def set_priority(self, job: Job) -> None:
        """The running `job`'s spec has a new priority: later verdicts judge it by that."""
        view = self.views[job.job_id]
        self.views[job.job_id] = dataclasses.replace(view, priority=job.spec.priority)
        self.preemptible.set_priority(job.job_id, job.spec.priority)


class _Views(dict[str, RunningJob]):
    """The contract's view of each running job, made when first read: a restart adopts a
    hundred thousand jobs, of which only those a preemption weighs are ever read. A view holds
    what its job's start fixed, which does not change while it runs (a new priority replaces
    the view: `Ledger.set_priority`)."""

    def __init__(self, running: dict[str, Job]) -> None:
        super().__init__()
        self._running = running

    def __missing__(self, job_id: str) -> RunningJob:
        job = self._running[job_id]
        view = self[job_id] = _view(job, job.gpus)
        return view


def _view(job: Job, gpus: float) -> RunningJob:
    """The contract's view of the running `job`, which holds `gpus`."""
    assert job.start_time is not None
    spec = job.spec
    return RunningJob(
        job_id=job.job_id,
        account=spec.account,
        priority=spec.priority,
        submit_time=job.submit_time,
        start_time=job.start_time,
        min_runtime=job.min_runtime,
        resumable=spec.resumable,
        unallocated=job.unallocated,
        gpus=gpus,
    )


def _in_time_order(times: NDArray[np.float64], job_ids: list[str]) -> list[tuple[float, str]]:
    """Records (time, job id) in time order, ties in the order given: sorting them then (what
    a sorted list's `update` does) only orders the ties by job id, comparing each tuple with
    its neighbour instead of n log n times. Ordered with numpy on the times, for the hundred
    thousand records of a restart."""
    order = np.argsort(times, kind="stable").tolist()
    return list(zip(times[order].tolist(), map(job_ids.__getitem__, order), strict=True))


_SPEC, _NAME, _START_TIME = attrgetter("spec"), attrgetter("name"), attrgetter("start_time")
_MIN_RUNTIME, _EXPECTED_RUNTIME = attrgetter("min_runtime"), attrgetter("expected_runtime")
_UNALLOCATED, _LARGEST, _GPUS = attrgetter("unallocated"), attrgetter("largest"), attrgetter("gpus")
_ACCOUNT, _PRIORITY = attrgetter("account"), attrgetter("priority")
"""Fields of many jobs, specs and allocations, read in C (`started_many`)."""
