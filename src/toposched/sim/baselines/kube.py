"""The kube-like baseline: kube-scheduler's default profile placing a gang pod by pod, with the
coscheduling plugin holding the gang's pods at Permit until the whole gang is placed."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation, ClusterState, Health
from toposched.jobs.spec import JobSpec
from toposched.placement.capacity import CapacityView
from toposched.placement.request import GangRequest
from toposched.placement.search import Placement
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.scheduler.jobs import Job
from toposched.sim.baselines.flat import FirstFit, placement_on
from toposched.sim.baselines.queues import SubmitOrderQueue

__all__ = [
    "DEFAULT_CPU_MILLI",
    "DEFAULT_MEMORY_MIB",
    "INTER_POD_AFFINITY_WEIGHT",
    "MAX_NODE_SCORE",
    "PERMIT_TIMEOUT_S",
    "QUORUM_GAP",
    "KubeLike",
    "PermitWait",
    "pick_nodes",
    "resource_scores",
]

IntArray = NDArray[np.int64]

MAX_NODE_SCORE = 100
"""kube-scheduler's score range per plugin: 0 to 100."""
DEFAULT_CPU_MILLI = 100
"""The CPU request a pod without one is scored with (the scheduler's non-zero default)."""
DEFAULT_MEMORY_MIB = 200
"""The memory request a pod without one is scored with (200 MiB, the non-zero default)."""
INTER_POD_AFFINITY_WEIGHT = 2
"""InterPodAffinity's weight in the default profile; NodeResourcesFit and
NodeResourcesBalancedAllocation weigh 1 each."""
PERMIT_TIMEOUT_S = 60.0
"""How long pods reserved at Permit wait for the rest of their gang (the coscheduling plugin's
default `permitWaitingTimeSeconds`)."""
QUORUM_GAP = 0.1
"""When a pod of a gang fits nowhere, the coscheduling plugin's PostFilter keeps the pods
already reserved only if at most this share of the gang is missing; else it rejects them."""


def resource_scores(
    total_cpu: IntArray,
    total_memory: IntArray,
    free_cpu: IntArray,
    free_memory: IntArray,
    pod_cpu: int,
    pod_memory: int,
) -> IntArray:
    """The default profile's resource scores of one more pod on each node, 0 to 200.

    NodeResourcesFit with the `LeastAllocated` strategy over CPU and memory, weight 1 each:
    per resource (capacity - requested) * 100 // capacity, where requested counts the pod,
    averaged over the resources the node has (integer division). Plus
    NodeResourcesBalancedAllocation: (1 - |f_cpu - f_memory| / 2) * 100, truncated, with f the
    requested share of each resource (at most 1). GPUs are not scored: an extended resource
    only filters nodes.
    """
    requested = (total_cpu - free_cpu + pod_cpu, total_memory - free_memory + pod_memory)
    totals = (total_cpu, total_memory)
    least = np.zeros(total_cpu.shape, dtype=np.int64)
    weights = np.zeros(total_cpu.shape, dtype=np.int64)
    fractions = []
    for total, used in zip(totals, requested, strict=True):
        has = total > 0
        room = np.where(has & (used <= total), total - used, 0)
        least += np.where(has, room * MAX_NODE_SCORE // np.maximum(total, 1), 0)
        weights += has
        fractions.append(np.where(has, np.minimum(used / np.maximum(total, 1), 1.0), np.nan))
    least = np.where(weights > 0, least // np.maximum(weights, 1), 0)
    spread = np.abs(fractions[0] - fractions[1]) / 2
    # One resource (or none) on the node: nothing to balance.
    spread = np.where(np.isnan(spread), 0.0, spread)
    balanced = np.floor((1.0 - spread) * MAX_NODE_SCORE).astype(np.int64)
    result: IntArray = least + balanced
    return result


def pick_nodes(
    state: ClusterState,
    request: GangRequest,
    pods: int,
    peers: IntArray | None = None,
    defaults: tuple[IntArray, IntArray] | None = None,
    rng: np.random.Generator | None = None,
) -> IntArray:
    """Nodes for up to `pods` more pods of `request`, chosen one pod at a time as
    kube-scheduler's default profile would: among nodes with room for the pod (NodeResourcesFit
    filter), the highest `resource_scores` after the pods before it; among nodes of equal
    score, as the scheduler picks at random among its best, the first in an order `rng` draws
    once per call (without `rng`, the lowest index).

    `peers` are the nodes of the gang's pods already reserved; `defaults` the CPU and memory
    per node that pods without a request of their own count for in scores (see
    `KubeLike.defaults`), beyond what the state holds. `required` acts as a required
    pod affinity to the gang's own pods at that level: once a pod is placed, the rest must land
    in its domain. `preferred` (a level, or node) acts as a preferred affinity: nodes score
    INTER_POD_AFFINITY_WEIGHT x 100 x the gang's pods in their domain, min-max normalised.
    Stops at the first pod that fits nowhere; returns the chosen nodes in pick order.
    """
    topology = state.topology
    capacity = CapacityView(state, request, exact=True).node_capacity()
    nodes = np.flatnonzero(capacity > 0)
    left = capacity[nodes].astype(np.int64)
    free_cpu = state.free_cpu_milli[nodes].astype(np.int64)
    free_memory = state.free_memory_mib[nodes].astype(np.int64)
    if defaults is not None:
        free_cpu -= defaults[0][nodes]
        free_memory -= defaults[1][nodes]
    total_cpu = topology.cpu_milli[nodes].astype(np.int64)
    total_memory = topology.memory_mib[nodes].astype(np.int64)
    score_cpu = request.cpu_milli or DEFAULT_CPU_MILLI
    score_memory = request.memory_mib or DEFAULT_MEMORY_MIB
    base = resource_scores(total_cpu, total_memory, free_cpu, free_memory, score_cpu, score_memory)
    count = nodes.size
    # One key per node, score first, then its place in the order ties go by; -1 for a node
    # that may take no more pods.
    rank = _tie_order(count, rng)
    keys = base * count + rank
    domains, counts = _affinity_domains(state, request, nodes, peers)
    confined = False
    chosen: list[int] = []
    for _ in range(pods if count else 0):
        if request.required and not confined and counts is not None and counts.any():
            assert domains is not None
            keys[counts[domains] == 0] = -1
            confined = True
        ranked = keys
        if not request.required and domains is not None and counts is not None:
            ranked = _with_affinity(keys, base, rank, counts[domains])
        best = int(np.argmax(ranked))
        if ranked[best] < 0:
            break
        chosen.append(int(nodes[best]))
        left[best] -= 1
        free_cpu[best] -= score_cpu
        free_memory[best] -= score_memory
        base[best] = resource_scores(
            total_cpu[best : best + 1],
            total_memory[best : best + 1],
            free_cpu[best : best + 1],
            free_memory[best : best + 1],
            score_cpu,
            score_memory,
        )[0]
        keys[best] = base[best] * count + rank[best] if left[best] > 0 else -1
        if counts is not None and domains is not None:
            counts[domains[best]] += 1
    return np.asarray(chosen, dtype=np.int64)


def _tie_order(count: int, rng: np.random.Generator | None) -> IntArray:
    """Each node's place in the order ties go by (highest first): drawn by `rng`, else the
    lowest index first."""
    if rng is not None:
        return rng.permutation(count).astype(np.int64)
    return np.arange(count - 1, -1, -1, dtype=np.int64)


def _with_affinity(keys: IntArray, base: IntArray, rank: IntArray, near: IntArray) -> IntArray:
    """`keys` with the preferred affinity's score added: INTER_POD_AFFINITY_WEIGHT x the
    gang's pods in each node's domain (`near`), normalised to 0-100 over the usable nodes."""
    usable = keys >= 0
    if not usable.any():
        return keys
    low, high = int(near[usable].min()), int(near[usable].max())
    if high == low:
        return keys
    affinity = (near - low) * MAX_NODE_SCORE // (high - low)
    scores = base + INTER_POD_AFFINITY_WEIGHT * affinity
    ranked: IntArray = np.where(usable, scores * rank.size + rank, -1)
    return ranked


def _affinity_domains(
    state: ClusterState, request: GangRequest, nodes: IntArray, peers: IntArray | None
) -> tuple[IntArray | None, IntArray | None]:
    """For a gang with pod affinity: each of `nodes`' domain at the affinity's level (nodes
    themselves for `preferred: node`), and the gang's pods already in each domain of that level
    (None, None without affinity)."""
    topology = state.topology
    peers = np.zeros(0, dtype=np.int64) if peers is None else peers
    level = request.required or request.preferred
    if request.preferred_node and not request.required:
        return nodes, np.bincount(peers, minlength=topology.n_nodes)
    if not level:
        return None, None
    counts = np.bincount(
        topology.node_domain[level][peers].astype(np.int64), minlength=topology.n_domains(level)
    )
    return topology.node_domain[level][nodes].astype(np.int64), counts


@dataclass
class PermitWait:
    """Pods of a gang reserved and waiting at Permit for the rest of it, since `since`."""

    allocation: Allocation
    since: float


def _joined(first: Allocation, second: Allocation) -> Allocation:
    """Both allocations' pods as one (same per-pod resources), ordered by node."""
    nodes = np.concatenate([first.nodes, second.nodes])
    gpus = np.concatenate([first.gpus, second.gpus])
    order = np.argsort(nodes, kind="stable")
    return Allocation(nodes[order], gpus[order], first.gpu_milli, first.cpu_milli, first.memory_mib)


def _pod_shape(request: GangRequest) -> tuple[object, ...]:
    models = None if request.allowed_models is None else tuple(request.allowed_models.tolist())
    return (
        request.gpus_per_pod,
        request.gpu_milli,
        request.cpu_milli,
        request.memory_mib,
        models,
        request.on_one_node,
        request.required,
        request.preferred,
        request.preferred_node,
    )


class KubeLike(Scheduler):
    """kube-scheduler's default profile with gang coscheduling (the scheduler-plugins
    coscheduling plugin), on GPUs.

    The queue is FIFO by submit time, without head-of-line blocking: every pending gang is tried
    in every cycle. A gang's pods are placed one at a time by `pick_nodes` (LeastAllocated and
    BalancedAllocation over CPU and memory, ties drawn with a seeded generator; a job's
    `required` and `preferred` levels as pod affinity to its own pods; slices are dropped,
    kube has no such constraint). Each placed pod is reserved and waits at Permit; the gang
    binds when its last pod is placed. When a pod fits nowhere, the reserved pods are released
    at once if more than QUORUM_GAP of the gang is missing (PostFilter's rejection); else they
    stay reserved, and the gang tries again for its missing pods in later cycles, until
    `permit_timeout` seconds after its first pod was reserved, when they are released.
    Reserved pods hold their GPUs from every other job but run nothing (the simulator counts
    them idle). Nothing is preempted (kube's PriorityClass preemption is not modelled: job
    priorities order work within a team, not across the cluster).
    """

    orders_owed_first = False

    def __init__(
        self,
        state: ClusterState,
        tree: BudgetTree,
        permit_timeout: float = PERMIT_TIMEOUT_S,
        seed: int = 0,
    ) -> None:
        if (
            isinstance(permit_timeout, bool)
            or not isinstance(permit_timeout, int | float)
            or not math.isfinite(permit_timeout)
            or permit_timeout < 0
        ):
            raise InputError("permit_timeout", permit_timeout, "must be a number of seconds >= 0")
        super().__init__(
            state,
            tree,
            queue=SubmitOrderQueue(),
            policy=FirstFit(),
            max_preemptions_per_cycle=0,
            defragment=False,
            # Nothing is preempted: borrowed work keeps the protection it declared.
            borrowed_min_runtime=None,
            failed_first=False,
        )
        self.permit_timeout = float(permit_timeout)
        self.rng = np.random.default_rng(seed)
        """Draws among nodes of equal score (seeded: a run is a function of its workload)."""
        self.waiting: dict[str, PermitWait] = {}
        """Gangs with pods reserved at Permit, by job id."""
        self.permit_timeouts = 0
        """Gangs whose reserved pods were released because the permit wait ran out."""
        self.rejections = 0
        """Times PostFilter released a gang's reserved pods because too much was missing."""
        nodes = state.topology.n_nodes
        self.defaults = (np.zeros(nodes, dtype=np.int64), np.zeros(nodes, dtype=np.int64))
        """CPU and memory per node that running pods without a request of their own count for
        in scores (kube-scheduler scores the requests of such pods as DEFAULT_CPU_MILLI and
        DEFAULT_MEMORY_MIB)."""

    def submit(self, spec: JobSpec, now: float) -> Job:
        job = super().submit(spec, now)
        job.request = replace(job.request, slices=(), node_slice=1, within=None)
        return job

    def cancel(self, job_id: str, now: float) -> Job:
        self.waiting.pop(job_id, None)
        self._count_defaults(job_id, -1)
        return super().cancel(job_id, now)

    def finish(self, job_id: str, now: float) -> Job:
        self._count_defaults(job_id, -1)
        return super().finish(job_id, now)

    def fail(self, job_id: str, now: float, requeue: bool | None = None) -> Job:
        self._count_defaults(job_id, -1)
        return super().fail(job_id, now, requeue)

    def _count_defaults(self, job_id: str, sign: int) -> None:
        """Add (sign 1) or take away (-1) the scored defaults of a running job's pods."""
        allocation = self.state.allocations.get(job_id)
        job = self.jobs.get(job_id)
        if allocation is None or job is None:
            return
        request = job.request
        for counted, asked, default in zip(
            self.defaults,
            (request.cpu_milli, request.memory_mib),
            (DEFAULT_CPU_MILLI, DEFAULT_MEMORY_MIB),
            strict=True,
        ):
            if asked == 0:
                np.add.at(counted, allocation.nodes, sign * default)

    def set_health(self, nodes: list[int] | IntArray, health: Health, now: float) -> list[Job]:
        if health is not Health.HEALTHY:
            # Pods reserved on a node that leaves are rejected, and their gang's with them.
            gone = set(np.asarray(nodes, dtype=np.int64).tolist())
            for job_id, wait in list(self.waiting.items()):
                if gone.intersection(wait.allocation.nodes.tolist()):
                    del self.waiting[job_id]
        return super().set_health(nodes, health, now)

    @staticmethod
    def holder(job_id: str) -> str:
        """The owner name of a gang's pods reserved at Permit in the cluster state."""
        return f"{job_id}@permit"

    def cycle(self, now: float) -> CycleResult:
        result = CycleResult(now)
        # Gangs whose wait ran out go back to the queue and are tried again from the next
        # cycle on (the pods' back-off), so the GPUs they release go first to jobs behind them.
        released = self._hold(now)
        try:
            # The smallest gang of each shape that found no room: larger ones cannot either,
            # since free room only shrinks during the cycle (until PostFilter releases pods).
            too_large: dict[tuple[object, ...], int] = {}
            for entry in list(self.queue.ordered(now)):
                if entry.job_id in released:
                    continue
                job = self.jobs[entry.job_id]
                result.considered += 1
                self._schedule(job, now, result, too_large)
        finally:
            for job_id in self.waiting:
                self.state.release(self.holder(job_id))
        return result

    def _hold(self, now: float) -> set[str]:
        """Take back the reserved pods of waiting gangs; release those whose wait ran out and
        return their ids."""
        released: set[str] = set()
        for job_id, wait in list(self.waiting.items()):
            if now >= wait.since + self.permit_timeout:
                del self.waiting[job_id]
                released.add(job_id)
                self.permit_timeouts += 1
                job = self.jobs[job_id]
                job.record(
                    now, f"permit wait ran out: {wait.allocation.pods} reserved pods released"
                )
                continue
            try:
                self.state.allocate(self.holder(job_id), wait.allocation)
            except InputError:
                del self.waiting[job_id]
        return released

    def _schedule(
        self,
        job: Job,
        now: float,
        result: CycleResult,
        too_large: dict[tuple[object, ...], int],
    ) -> None:
        """One gang's turn: place its missing pods, then bind it, keep it at Permit, or
        reject it (see the class)."""
        request = job.request
        wait = self.waiting.get(job.job_id)
        held = wait.allocation.pods if wait is not None else 0
        need = request.pods - held
        shape = _pod_shape(request)
        if wait is None:
            smallest_failed = too_large.get(shape)
            if smallest_failed is not None and request.pods >= smallest_failed:
                return
            free_gpus = int(self.state.free_gpus[0][0])
            if request.gpus_per_pod and not request.is_fractional and free_gpus < job.gpus:
                too_large[shape] = request.pods
                job.reason = f"needs {job.gpus:g} GPUs; {free_gpus} are free"
                return
        result.searches += 1
        if request.on_one_node:
            nodes = self._one_node(request)
        else:
            peers = wait.allocation.nodes if wait is not None else None
            nodes = pick_nodes(self.state, request, need, peers, self.defaults, self.rng)
        placed = self._allocation(request, nodes) if nodes.size else None
        if nodes.size == need:
            assert placed is not None
            if wait is not None:
                self.state.release(self.holder(job.job_id))
                del self.waiting[job.job_id]
                placed = _joined(wait.allocation, placed)
            result.decisions.append(self.bind(job.job_id, Placement(request, placed), now))
            self._count_defaults(job.job_id, 1)
            return
        missing = need - nodes.size
        if missing > QUORUM_GAP * request.pods:
            if wait is not None:
                self.state.release(self.holder(job.job_id))
                del self.waiting[job.job_id]
                too_large.clear()  # released pods may make room for gangs that found none
            else:
                too_large[shape] = min(request.pods, too_large.get(shape, request.pods))
            if held or nodes.size:
                self.rejections += 1
            job.reason = (
                f"{missing} of its {request.pods} pods fit nowhere; the gang's reserved "
                "pods are released (coscheduling PostFilter)"
            )
            return
        assert placed is not None or wait is not None
        if wait is None:
            assert placed is not None
            wait = self.waiting[job.job_id] = PermitWait(placed, now)
        elif placed is not None:
            self.state.release(self.holder(job.job_id))
            wait.allocation = _joined(wait.allocation, placed)
        if placed is not None:
            self.state.allocate(self.holder(job.job_id), wait.allocation)
        job.reason = (
            f"waiting at Permit: {wait.allocation.pods} of {request.pods} pods reserved, "
            f"until +{wait.since + self.permit_timeout - now:.0f} s"
        )

    def _one_node(self, request: GangRequest) -> IntArray:
        """All the gang's pods on the best-scored node with room for them (none if none)."""
        capacity = CapacityView(self.state, request, exact=True).node_capacity()
        nodes = np.flatnonzero(capacity >= request.pods)
        if nodes.size == 0:
            return np.zeros(0, dtype=np.int64)
        topology, state = self.state.topology, self.state
        scores = resource_scores(
            topology.cpu_milli[nodes].astype(np.int64),
            topology.memory_mib[nodes].astype(np.int64),
            state.free_cpu_milli[nodes].astype(np.int64) - self.defaults[0][nodes],
            state.free_memory_mib[nodes].astype(np.int64) - self.defaults[1][nodes],
            request.pods * (request.cpu_milli or DEFAULT_CPU_MILLI),
            request.pods * (request.memory_mib or DEFAULT_MEMORY_MIB),
        )
        tied = np.flatnonzero(scores == scores.max())
        best = tied[self.rng.integers(tied.size)] if tied.size > 1 else tied[0]
        return np.full(request.pods, nodes[best], dtype=np.int64)

    def _allocation(self, request: GangRequest, nodes: IntArray) -> Allocation:
        """The allocation of one pod of `request` on each of `nodes` (repeats allowed)."""
        unique, counts = np.unique(nodes, return_counts=True)
        return placement_on(self.state, request, self.policy, unique, counts).allocation
