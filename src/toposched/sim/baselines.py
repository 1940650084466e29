"""Baseline schedulers the simulator drives next to toposched: FIFO, Slurm-like and kube-like.

Each baseline is a factory `(state, tree) -> SchedulerLike`, like `toposched_scheduler`, and
each subclasses `toposched.scheduler.core.Scheduler`, so that job bookkeeping, node failures,
requeues and the decisions the simulator carries out are the same code for every scheduler.
What differs is what the baselines are about: queue order, placement and the cycle.

- `fifo_first_fit`: strict FIFO with head-of-line blocking, first-fit over a flat node list.
- `slurm_like`: multifactor priority (age, classic fair share, job size), EASY backfill
  behind one reservation for the queue head, tree topology as a preference (`--switches`).
- `kube_like`: kube-scheduler defaults: FIFO without head-of-line blocking, pods placed one by
  one on the least allocated node, gangs all-or-nothing (coscheduling), no topology.

None of them preempts, defragments or distinguishes allocated from unallocated work in its
ordering. The simulator's own accounting (allocated vs unallocated GPU-hours, owed GPU-hours)
still labels the work by its budget, so the summaries compare like with like.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sortedcontainers import SortedList

from toposched.cluster.errors import InputError, ToposchedError
from toposched.cluster.state import MILLI_PER_GPU, ClusterState
from toposched.jobs.spec import JobSpec
from toposched.placement.capacity import CapacityView
from toposched.placement.policies import BestFit, PlacementPolicy, Spread
from toposched.placement.request import GangRequest
from toposched.placement.search import (
    Placement,
    PlacementResult,
    Unschedulable,
    UnschedulableCode,
    allocate_on,
)
from toposched.policy.budget import ROOT, BudgetTree
from toposched.policy.fairshare import JobExplanation, QueueEntry, QueueTier, Ranking
from toposched.policy.usage import UsageTracker
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.scheduler.jobs import Job

__all__ = [
    "BASELINES",
    "FifoFirstFit",
    "FirstFit",
    "KubeLike",
    "LeastAllocated",
    "MultifactorQueue",
    "SlurmLike",
    "SubmitOrderQueue",
    "fifo_first_fit",
    "flat_place",
    "kube_like",
    "slurm_like",
]

IntArray = NDArray[np.int64]
DAY = 86400.0

# Slurm's multifactor plugin: PriorityMaxAge defaults to 7 days and PriorityCalcPeriod to
# 5 minutes; the weights are a common site configuration (fair share dominates, age and size
# break ties among accounts in similar standing).
SLURM_MAX_AGE = 7 * DAY
SLURM_RECALC_INTERVAL = 300.0
SLURM_WEIGHT_AGE = 1000.0
SLURM_WEIGHT_FAIRSHARE = 10000.0
SLURM_WEIGHT_JOB_SIZE = 1000.0


# --- placement without topology ---------------------------------------------------------------
class FirstFit:
    """Lowest index first at every level: the first domain, node and GPU with room."""

    name = "firstfit"

    def domain_scores(self, capacity: IntArray, need: int) -> IntArray:
        return np.zeros(len(capacity), dtype=np.int64)

    def node_scores(
        self, state: ClusterState, nodes: IntArray, capacity: IntArray, request: GangRequest
    ) -> IntArray:
        return nodes

    def gpu_choice(
        self, state: ClusterState, node: int, free_milli: IntArray, request: GangRequest
    ) -> int:
        return int(np.argmax(free_milli >= request.gpu_milli))


class LeastAllocated(Spread):
    """kube-scheduler's NodeResourcesFit `LeastAllocated` score on GPUs: emptiest node first,
    re-scored after every pod (`flat_place(..., per_pod=True)`)."""

    name = "leastallocated"


def _pod_room(state: ClusterState, nodes: IntArray, request: GangRequest) -> tuple[IntArray, int]:
    """Free room of each node in the unit a pod takes, and what one pod takes of it."""
    if request.is_fractional:
        milli: IntArray = state.gpu_free_milli[nodes].sum(axis=1, dtype=np.int64)
        return milli, request.gpu_milli
    if request.gpus_per_pod == 0:
        return state.free_cpu_milli[nodes].astype(np.int64), max(request.cpu_milli, 1)
    return state.free_whole_gpus[nodes].astype(np.int64), request.gpus_per_pod


def flat_place(
    state: ClusterState,
    request: GangRequest,
    policy: PlacementPolicy,
    per_pod: bool = False,
) -> PlacementResult:
    """Place a gang on a flat list of nodes, ignoring the topology tree and its constraints.

    Nodes are ranked by the policy's node scores across the whole cluster (ties: lower index)
    and filled in that order, each up to the pods it holds. With `per_pod`, each pod instead
    goes to the node with the most free room left after the pods before it, as a per-pod
    scheduler scoring `LeastAllocated` would do. All or nothing: if the cluster as a whole
    cannot hold the gang, nothing is placed. `required: node` (every pod on one node) is kept.
    """
    view = CapacityView(state, request, exact=True)
    capacity = view.node_capacity()
    candidates = np.flatnonzero(capacity > 0)
    total = int(capacity[candidates].sum())
    if request.on_one_node:
        candidates = np.flatnonzero(capacity >= request.pods)
        if candidates.size == 0:
            return Unschedulable(
                request,
                UnschedulableCode.NODE,
                f"no node has room for {request.pods} pods of this job",
            )
        scores = policy.node_scores(state, candidates, capacity[candidates], request)
        chosen = candidates[int(np.argmin(scores))]
        return _placement(state, request, policy, np.array([chosen]), np.array([request.pods]))
    if total < request.pods:
        return Unschedulable(
            request,
            UnschedulableCode.CAPACITY,
            f"needs {request.pods} pods of {request.describe_pod_plain()}; the cluster has "
            f"room for {total} such pod{'' if total == 1 else 's'}",
        )
    if per_pod:
        nodes, pods = _least_allocated_pods(state, request, candidates, capacity[candidates])
    else:
        scores = policy.node_scores(state, candidates, capacity[candidates], request)
        order = np.lexsort((candidates, scores))
        ranked = candidates[order]
        room = capacity[ranked]
        before = np.cumsum(room) - room
        take = np.clip(request.pods - before, 0, room)
        used = take > 0
        nodes, pods = ranked[used], take[used]
    return _placement(state, request, policy, nodes, pods)


def _least_allocated_pods(
    state: ClusterState, request: GangRequest, nodes: IntArray, capacity: IntArray
) -> tuple[IntArray, IntArray]:
    """Pods one at a time onto the node with the most room left (ties: lower index)."""
    room, cost = _pod_room(state, nodes, request)
    room = room.copy()
    left = capacity.copy()
    pods = np.zeros(nodes.size, dtype=np.int64)
    for _ in range(request.pods):
        best = int(np.argmax(np.where(left > 0, room, -1)))
        pods[best] += 1
        left[best] -= 1
        room[best] -= cost
    used = pods > 0
    return nodes[used], pods[used]


def _placement(
    state: ClusterState,
    request: GangRequest,
    policy: PlacementPolicy,
    nodes: IntArray,
    pods: IntArray,
) -> Placement:
    """The allocation of `pods[i]` pods on `nodes[i]`, GPUs picked as the placement engine
    picks them."""
    order = np.argsort(nodes, kind="stable")
    allocation = allocate_on(
        state, request, policy, nodes[order].astype(np.int64), pods[order].astype(np.int64)
    )
    return Placement(request, allocation)


def _without_topology(request: GangRequest) -> GangRequest:
    return replace(request, required=0, preferred=None, slices=())


# --- queues -----------------------------------------------------------------------------------
class _BaselineQueue:
    """The queue interface `Scheduler` uses, over one sorted list of (key, job id).

    Every job is in one tier (`ALLOCATED`): baselines order all work alike, so the `owed`
    accounts `Scheduler` may name are not told apart (their schedulers name none).
    """

    def __init__(self) -> None:
        self._entries: dict[str, QueueEntry] = {}
        self._keys: dict[str, tuple[object, ...]] = {}
        self._order: SortedList = SortedList()
        self.clock = 0.0
        """The latest time the scheduler told the queue about (keys of new entries use it)."""

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._entries

    def key(self, entry: QueueEntry, now: float) -> tuple[object, ...]:
        raise NotImplementedError

    def get(self, job_id: str) -> QueueEntry:
        if job_id not in self._entries:
            raise InputError("job_id", job_id, "is not in the pending queue")
        return self._entries[job_id]

    def add(self, entry: QueueEntry) -> None:
        if entry.job_id in self._entries:
            raise InputError("job_id", entry.job_id, "is already in the pending queue")
        key = self.key(entry, self.clock)
        self._entries[entry.job_id] = entry
        self._keys[entry.job_id] = key
        self._order.add(key)

    def remove(self, job_id: str) -> QueueEntry:
        entry = self.get(job_id)
        self._order.remove(self._keys.pop(job_id))
        del self._entries[job_id]
        return entry

    def accounts(self) -> list[str]:
        return sorted({entry.account for entry in self._entries.values()})

    def ordered(self, now: float, owed: Collection[str] = ()) -> Iterator[QueueEntry]:
        """Every pending job, first to run first (a copy: the queue may change meanwhile)."""
        self.clock = max(self.clock, now)
        entries = self._entries
        for key in list(self._order):
            entry = entries.get(str(key[-1]))
            if entry is not None:
                yield entry

    def ranking(self, now: float) -> Ranking:
        raise ToposchedError("a baseline's queue ranks no accounts: baselines never preempt")

    def tier(self, entry: QueueEntry, ranking: object = None) -> QueueTier:
        return QueueTier.ALLOCATED

    def position(self, job_id: str, now: float, owed: Collection[str] = ()) -> int:
        self.get(job_id)
        return int(self._order.index(self._keys[job_id]))

    def explain(self, job_id: str, now: float, owed: Collection[str] = ()) -> JobExplanation:
        return self._explanation(self.get(job_id), self.position(job_id, now), now)

    def explanations(self, now: float, owed: Collection[str] = ()) -> Iterator[JobExplanation]:
        for position, entry in enumerate(self.ordered(now)):
            yield self._explanation(entry, position, now)

    def _explanation(self, entry: QueueEntry, position: int, now: float) -> JobExplanation:
        key: Any = self._keys[entry.job_id]
        waiting = max(now - entry.submit_time, 0.0)
        return JobExplanation(entry, position, QueueTier.ALLOCATED, None, key, False, waiting)


class SubmitOrderQueue(_BaselineQueue):
    """First come, first served: by submit time (a requeued job keeps its original time)."""

    def key(self, entry: QueueEntry, now: float) -> tuple[object, ...]:
        return (entry.submit_time, entry.job_id)


class MultifactorQueue(_BaselineQueue):
    """Slurm's multifactor priority, recomputed every `recalc_interval` seconds.

    priority = w_age * min(age / max_age, 1)
             + w_fairshare * 2 ** (-U / S)
             + w_size * gpus / cluster GPUs

    U is the account's share of all usage in the scheduler's sliding window (every job it ran,
    allocated or not), S its effective budget share of the cluster (classic fair share; an
    account without a share gets factor 0). Larger jobs score higher (PriorityFavorSmall=NO).
    No QOS or partition factor; the job's own priority field is not used. A new (or requeued)
    job is scored when it arrives, with its account's fair-share factor from the last
    recalculation; the whole queue is re-scored every `recalc_interval`, as Slurm's
    PriorityCalcPeriod does. Ties: earlier submission, then job id.
    """

    def __init__(
        self,
        tree: BudgetTree,
        usage: UsageTracker,
        capacity_gpus: int,
        gpus_of: dict[str, float],
        recalc_interval: float = SLURM_RECALC_INTERVAL,
        max_age: float = SLURM_MAX_AGE,
        weights: tuple[float, float, float] = (
            SLURM_WEIGHT_AGE,
            SLURM_WEIGHT_FAIRSHARE,
            SLURM_WEIGHT_JOB_SIZE,
        ),
    ) -> None:
        super().__init__()
        self.tree = tree
        self.usage = usage
        self.capacity_gpus = max(capacity_gpus, 1)
        self.gpus_of = gpus_of
        self.recalc_interval = recalc_interval
        self.max_age = max_age
        self.weights = weights
        self._scored_at = -math.inf
        self._fairshare: dict[str, float] = {}

    def fairshare_factor(self, account: str, now: float) -> float:
        """2 ** (-U / S): 1 for an idle account, 0.5 at exactly its share, towards 0 above."""
        share = self.tree.effective_share(account) if account in self.tree else 0.0
        if share <= 0:
            return 0.0
        total = self.usage.usage(ROOT, now)
        used = self.usage.usage(account, now) / total if total > 0 else 0.0
        return float(2.0 ** (-used / share))

    def priority(self, entry: QueueEntry, now: float) -> float:
        w_age, w_fairshare, w_size = self.weights
        fairshare = self._fairshare.get(entry.account)
        if fairshare is None:
            fairshare = self._fairshare[entry.account] = self.fairshare_factor(entry.account, now)
        age = min(max(now - entry.submit_time, 0.0) / self.max_age, 1.0)
        size = min(self.gpus_of.get(entry.job_id, 0.0) / self.capacity_gpus, 1.0)
        return w_age * age + w_fairshare * fairshare + w_size * size

    def key(self, entry: QueueEntry, now: float) -> tuple[object, ...]:
        return (-self.priority(entry, now), entry.submit_time, entry.job_id)

    def ordered(self, now: float, owed: Collection[str] = ()) -> Iterator[QueueEntry]:
        if now >= self._scored_at + self.recalc_interval:
            self.rescore(now)
        return super().ordered(now)

    def rescore(self, now: float) -> None:
        """Recompute every pending job's priority at `now`."""
        self.clock = max(self.clock, now)
        self._scored_at = now
        self._fairshare = {}
        self._keys = {job_id: self.key(entry, now) for job_id, entry in self._entries.items()}
        self._order = SortedList(self._keys.values())


# --- the baselines ----------------------------------------------------------------------------
class _FlatSubmitOrder(Scheduler):
    """Shared by the FIFO and kube-like baselines: submit order, no topology, no preemption."""

    orders_owed_first = False

    def __init__(self, state: ClusterState, tree: BudgetTree, policy: PlacementPolicy) -> None:
        # Nothing is preempted, so borrowed work keeps the protection it declared: a shorter one
        # would only make reservations expect GPUs back that never come.
        super().__init__(
            state,
            tree,
            queue=SubmitOrderQueue(),
            policy=policy,
            max_preemptions_per_cycle=0,
            defragment=False,
            borrowed_min_runtime=None,
            # A failed gang is requeued like any job, as in the schedulers these stand for.
            failed_first=False,
        )

    def submit(self, spec: JobSpec, now: float) -> Job:
        job = super().submit(spec, now)
        job.request = _without_topology(job.request)
        return job


class FifoFirstFit(_FlatSubmitOrder):
    """Strict FIFO with first-fit placement and no topology: the simplest batch scheduler.

    Jobs are taken in submit order; the first job that does not fit stops the cycle (head-of-line
    blocking: nothing behind it starts, however small). Placement is first fit on a flat node
    list (lowest node index first); topology constraints (required, preferred, slices) are
    dropped. No preemption, no reservation, no backfill.
    """

    def __init__(self, state: ClusterState, tree: BudgetTree) -> None:
        super().__init__(state, tree, FirstFit())

    def cycle(self, now: float) -> CycleResult:
        result = CycleResult(now)
        for entry in list(self.queue.ordered(now)):
            job = self.jobs[entry.job_id]
            result.considered += 1
            result.searches += 1
            outcome = flat_place(self.state, job.request, self.policy)
            if isinstance(outcome, Unschedulable):
                job.reason = f"head of the FIFO queue; {outcome.reason}"
                break
            result.decisions.append(self.bind(job.job_id, outcome, now))
        return result


class KubeLike(_FlatSubmitOrder):
    """kube-scheduler's default profile with gang coscheduling, on GPUs.

    The queue is FIFO by submit time, but a job that does not fit does not block the ones behind
    it: every pending job is tried in every cycle. Pods are placed one at a time on the node
    with the most free GPUs left (NodeResourcesFit `LeastAllocated`); a gang binds only if all
    its pods fit (the coscheduling plugin's all-or-nothing Permit). Topology constraints are
    dropped; nothing is reserved and nothing preempted (kube's PriorityClass preemption is not
    modelled: job priorities here order work within a team, not across the cluster).
    """

    def __init__(self, state: ClusterState, tree: BudgetTree) -> None:
        super().__init__(state, tree, LeastAllocated())

    def cycle(self, now: float) -> CycleResult:
        result = CycleResult(now)
        # The smallest gang of each pod shape that did not fit: larger ones cannot fit either,
        # since flat placement fails only when the cluster's room is too small.
        too_large: dict[tuple[object, ...], int] = {}
        free_gpus = int(self.state.free_gpus[0][0])
        for entry in list(self.queue.ordered(now)):
            job = self.jobs[entry.job_id]
            request = job.request
            result.considered += 1
            shape = _pod_shape(request)
            smallest_failed = too_large.get(shape)
            if smallest_failed is not None and request.pods >= smallest_failed:
                continue
            if request.gpus_per_pod and not request.is_fractional and free_gpus < job.gpus:
                too_large[shape] = request.pods
                job.reason = f"needs {job.gpus:g} GPUs; {free_gpus} are free"
                continue
            result.searches += 1
            outcome = flat_place(self.state, request, self.policy, per_pod=True)
            if isinstance(outcome, Unschedulable):
                too_large[shape] = min(request.pods, smallest_failed or request.pods)
                job.reason = outcome.reason
                continue
            result.decisions.append(self.bind(job.job_id, outcome, now))
            free_gpus = int(self.state.free_gpus[0][0])
        return result


def _pod_shape(request: GangRequest) -> tuple[object, ...]:
    models = None if request.allowed_models is None else tuple(request.allowed_models.tolist())
    return (
        request.gpus_per_pod,
        request.gpu_milli,
        request.cpu_milli,
        request.memory_mib,
        models,
        request.on_one_node,
    )


class SlurmLike(Scheduler):
    """Slurm with the multifactor priority plugin, the backfill scheduler and topology/tree.

    Order: `MultifactorQueue` (age, classic fair share over the same sliding usage window
    toposched uses, job size). The cycle is toposched's own, with preemption, defragmentation
    and the allocated/unallocated split turned off, which leaves EASY backfill: jobs start in
    priority order while they fit; the first job that does not fit gets a reservation (the
    earliest time it fits as running jobs end at their declared runtimes, else at their min
    runtimes), and jobs behind it start only outside the reserved nodes or, if their declared
    runtime ends before the reservation, on them. Topology: `--switches` is approximated by
    preferring the fewest innermost domains (leaf switches) and never requiring them, so a job
    never waits for a better shape; required levels and slices are dropped. Placement inside
    that preference is best fit, as select/cons_tres does.
    """

    orders_owed_first = False

    def __init__(self, state: ClusterState, tree: BudgetTree) -> None:
        self._gpus_of: dict[str, float] = {}
        usage = UsageTracker()
        self.multifactor = MultifactorQueue(tree, usage, state.topology.n_gpus, self._gpus_of)
        super().__init__(
            state,
            tree,
            usage=usage,
            queue=self.multifactor,
            # Slurm charges every job to its account's usage (GPU time: none without GPUs).
            charge_unallocated=True,
            policy=BestFit(),
            reserve_min_gpus=0,
            max_preemptions_per_cycle=0,
            defragment=False,
            # As in `_FlatSubmitOrder`: no preemption, so no shorter protection for borrowers,
            # and a failed gang requeued in priority order.
            borrowed_min_runtime=None,
            failed_first=False,
        )
        self._leaf_level = len(state.topology.domain_levels) - 1

    def submit(self, spec: JobSpec, now: float) -> Job:
        self._gpus_of[spec.name] = spec.total_gpu_milli / MILLI_PER_GPU
        self.multifactor.clock = max(self.multifactor.clock, now)
        job = super().submit(spec, now)
        job.request = replace(
            job.request,
            required=0,
            preferred=self._leaf_level if self._leaf_level > 0 else None,
            slices=(),
        )
        return job

    def fail(self, job_id: str, now: float, requeue: bool | None = None) -> Job:
        self.multifactor.clock = max(self.multifactor.clock, now)
        return super().fail(job_id, now, requeue)

    def evicted(self, job_id: str, now: float) -> Job:
        self.multifactor.clock = max(self.multifactor.clock, now)
        return super().evicted(job_id, now)


def fifo_first_fit(state: ClusterState, tree: BudgetTree) -> FifoFirstFit:
    """Strict FIFO, first fit, no topology, no preemption, reservation or backfill."""
    return FifoFirstFit(state, tree)


def slurm_like(state: ClusterState, tree: BudgetTree) -> SlurmLike:
    """Multifactor priority, EASY backfill, tree topology as a preference."""
    return SlurmLike(state, tree)


def kube_like(state: ClusterState, tree: BudgetTree) -> KubeLike:
    """FIFO without head-of-line blocking, per-pod least-allocated placement, gang binding."""
    return KubeLike(state, tree)


BASELINES = {
    "slurm_like": slurm_like,
    "kube_like": kube_like,
    "fifo_first_fit": fifo_first_fit,
}
"""The baselines by name, in the order reports show them (after toposched)."""
