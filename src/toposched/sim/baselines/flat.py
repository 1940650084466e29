"""Placement on a flat node list, without the topology tree, and the FIFO baseline built on it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.state import ClusterState
from toposched.jobs.spec import JobSpec
from toposched.placement.capacity import CapacityView
from toposched.placement.policies import PlacementPolicy
from toposched.placement.request import GangRequest
from toposched.placement.search import (
    Placement,
    PlacementResult,
    Unschedulable,
    UnschedulableCode,
    allocate_on,
)
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.scheduler.jobs import Job
from toposched.sim.baselines.queues import SubmitOrderQueue

__all__ = [
    "FifoFirstFit",
    "FirstFit",
    "flat_place",
    "placement_on",
    "without_topology",
]

IntArray = NDArray[np.int64]


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


def flat_place(
    state: ClusterState, request: GangRequest, policy: PlacementPolicy
) -> PlacementResult:
    """Place a gang on a flat list of nodes, ignoring the topology tree and its constraints.

    Nodes are ranked by the policy's node scores across the whole cluster (ties: lower index)
    and filled in that order, each up to the pods it holds. All or nothing: if the cluster as a
    whole cannot hold the gang, nothing is placed. `required: node` (every pod on one node) is
    kept.
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
        return placement_on(state, request, policy, np.array([chosen]), np.array([request.pods]))
    if total < request.pods:
        return Unschedulable(
            request,
            UnschedulableCode.CAPACITY,
            f"needs {request.pods} pods of {request.describe_pod_plain()}; the cluster has "
            f"room for {total} such pod{'' if total == 1 else 's'}",
        )
    scores = policy.node_scores(state, candidates, capacity[candidates], request)
    order = np.lexsort((candidates, scores))
    ranked = candidates[order]
    room = capacity[ranked]
    before = np.cumsum(room) - room
    take = np.clip(request.pods - before, 0, room)
    used = take > 0
    return placement_on(state, request, policy, ranked[used], take[used])


def placement_on(
    state: ClusterState,
    request: GangRequest,
    policy: PlacementPolicy,
    nodes: IntArray,
    pods: IntArray,
) -> Placement:
    """The placement of `pods[i]` pods on `nodes[i]` (each with room for them), GPUs picked as
    the placement engine picks them."""
    order = np.argsort(nodes, kind="stable")
    allocation = allocate_on(
        state, request, policy, nodes[order].astype(np.int64), pods[order].astype(np.int64)
    )
    return Placement(request, allocation)


def without_topology(request: GangRequest) -> GangRequest:
    """The request with its required level, preference and slices dropped."""
    return replace(request, required=0, preferred=None, slices=())


class FifoFirstFit(Scheduler):
    """Strict FIFO with first-fit placement and no topology: the simplest batch scheduler.

    Jobs are taken in submit order; the first job that does not fit stops the cycle (head-of-line
    blocking: nothing behind it starts, however small). Placement is first fit on a flat node
    list (lowest node index first); topology constraints (required, preferred, slices) are
    dropped. No preemption, no reservation, no backfill.
    """

    orders_owed_first = False

    def __init__(self, state: ClusterState, tree: BudgetTree) -> None:
        self.fifo = SubmitOrderQueue()
        super().__init__(
            state,
            tree,
            queue=self.fifo,
            policy=FirstFit(),
            max_preemptions_per_cycle=0,
            defragment=False,
            # Nothing is preempted: borrowed work keeps the protection it declared.
            borrowed_min_runtime=None,
            # A failed gang is requeued like any job.
            failed_first=False,
        )

    def submit(self, spec: JobSpec, now: float) -> Job:
        job = super().submit(spec, now)
        job.request = without_topology(job.request)
        return job

    def cycle(self, now: float) -> CycleResult:
        result = CycleResult(now)
        # Only the head is read: a job started leaves the queue, and the next one is the head.
        while (entry := self.fifo.head(now)) is not None:
            job = self.jobs[entry.job_id]
            result.considered += 1
            result.searches += 1
            outcome = flat_place(self.state, job.request, self.policy)
            if isinstance(outcome, Unschedulable):
                job.reason = f"head of the FIFO queue; {outcome.reason}"
                break
            result.decisions.append(self.bind(job.job_id, outcome, now))
        return result
