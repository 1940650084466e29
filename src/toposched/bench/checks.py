"""Checks a benchmark runs on its results before its timings count: a placement keeps every rule
its request states, a preemption's victims really free the room, a cycle's decisions agree with
the cluster state. Vectorised, so that a 50,004-pod gang is checked in milliseconds; the tests'
slower GPU-by-GPU checker (tests/placement_helpers.py) is compared with this one on random
clusters (tests/test_bench_checks.py)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.errors import ToposchedError
from toposched.cluster.state import MILLI_PER_GPU, Allocation, ClusterState, Health
from toposched.cluster.statement import Statement
from toposched.placement.request import GangRequest
from toposched.placement.search import Placement, place
from toposched.scheduler.core import CycleResult, Scheduler
from toposched.scheduler.decisions import Bind, Evict
from toposched.scheduler.jobs import JobState

__all__ = [
    "InvalidResult",
    "check_cycle",
    "check_gpu_accounts",
    "check_placement",
    "check_victims_free_room",
    "placement_problems",
]

IntArray = NDArray[np.int64]


class InvalidResult(ToposchedError):
    """A benchmark's result broke a rule it claims to keep: its timing would not count."""


def placement_problems(
    state: ClusterState, request: GangRequest, allocation: Allocation, applied: bool = False
) -> list[str]:
    """Every rule of `request` that `allocation` breaks on `state`, in words: pod count,
    per-pod resources, the required domain, each slice in one domain, health, GPU model, GPUs
    distinct and free (whole, or enough milli-GPU for shared pods), CPU and memory per node.
    An empty list is a valid placement. `applied`: the allocation is held on `state` already,
    so what it holds is read as free (as on the state without it, which is not changed)."""
    topology = state.topology
    nodes = np.asarray(allocation.nodes, dtype=np.int64)
    problems: list[str] = []
    if nodes.size != request.pods:
        problems.append(f"{nodes.size} pods placed, the gang has {request.pods}")
    if (allocation.gpu_milli, allocation.cpu_milli, allocation.memory_mib) != (
        request.gpu_milli,
        request.cpu_milli,
        request.memory_mib,
    ):
        problems.append("the allocation's per-pod resources differ from the request's")
    if nodes.size == 0:
        return problems
    if nodes.min() < 0 or nodes.max() >= topology.n_nodes:
        return [*problems, "a pod on a node outside the cluster"]
    domains = topology.node_domain
    if request.required and np.unique(domains[request.required][nodes]).size > 1:
        problems.append(f"pods span several domains of required level {request.required}")
    if request.on_one_node and np.unique(nodes).size > 1:
        problems.append("required node, but pods are on several nodes")
    for level, size in request.slices:
        if nodes.size % size:
            problems.append(f"{nodes.size} pods do not split into slices of {size}")
            continue
        labels = domains[level][nodes].reshape(-1, size)
        broken = np.flatnonzero((labels != labels[:, :1]).any(axis=1))
        if broken.size:
            problems.append(f"{broken.size} slices of {size} pods span domains of level {level}")
    node_slice = request.node_slice
    if node_slice > 1 and nodes.size % node_slice == 0:
        groups = nodes.reshape(-1, node_slice)
        if np.any(groups != groups[:, :1]):
            problems.append(f"slices of {node_slice} pods span nodes")
    problems += _rank_order_problems(nodes, [*domains, nodes])
    if np.any(state.health[nodes] != Health.HEALTHY):
        problems.append("pods on nodes that are not healthy")
    if (
        request.allowed_models is not None
        and not np.isin(topology.gpu_model[nodes], request.allowed_models).all()
    ):
        problems.append("pods on GPU models the request does not allow")
    problems += _resource_problems(state, allocation, nodes, applied)
    return problems


def _rank_order_problems(nodes: IntArray, domain_of: list[NDArray[Any]]) -> list[str]:
    """Rank order: each node's pods, and each domain's at every level, are consecutive ranks
    (a ring over ranks enters every node and domain once)."""
    problems: list[str] = []
    for level, labels in enumerate(domain_of):
        sequence = labels if level == len(domain_of) - 1 else labels[nodes]
        runs = 1 + int(np.count_nonzero(sequence[1:] != sequence[:-1]))
        distinct = int(np.unique(sequence).size)
        if runs != distinct:
            what = "nodes" if level == len(domain_of) - 1 else f"domains of level {level}"
            problems.append(f"ranks enter {what} {runs} times for {distinct} of them")
    return problems


def _resource_problems(
    state: ClusterState, allocation: Allocation, nodes: IntArray, applied: bool
) -> list[str]:
    """GPUs in range, distinct within a pod, and with the share taken free; CPU and memory per
    node within what is free (with the allocation's own share when it is `applied`)."""
    problems: list[str] = []
    gpus = np.asarray(allocation.gpus, dtype=np.int64)
    if gpus.size:
        if gpus.shape[0] != nodes.size:
            return [f"GPU table of {gpus.shape[0]} rows for {nodes.size} pods"]
        if np.any(gpus < 0) or np.any(gpus >= state.topology.gpu_count[nodes][:, None]):
            return ["a pod names a GPU its node does not have"]
        ordered = np.sort(gpus, axis=1)
        if np.any(ordered[:, 1:] == ordered[:, :-1]):
            problems.append("a pod lists a GPU twice")
        width = int(state.gpu_free_milli.shape[1])
        slots = np.repeat(nodes, gpus.shape[1]) * width + gpus.reshape(-1)
        used, taken = np.unique(slots, return_counts=True)
        free = state.gpu_free_milli.reshape(-1)[used]
        if applied:
            free = free + taken * allocation.gpu_milli
        if np.any(taken * allocation.gpu_milli > free):
            problems.append("GPUs taken beyond their free share")
        if allocation.gpu_milli == MILLI_PER_GPU and np.any(taken > 1):
            problems.append("a whole GPU given to two pods")
    node_ids, pods = np.unique(nodes, return_counts=True)
    free_cpu = state.free_cpu_milli[node_ids]
    free_memory = state.free_memory_mib[node_ids]
    if applied:
        free_cpu = free_cpu + pods * allocation.cpu_milli
        free_memory = free_memory + pods * allocation.memory_mib
    if np.any(pods * allocation.cpu_milli > free_cpu):
        problems.append("CPU over-allocated")
    if np.any(pods * allocation.memory_mib > free_memory):
        problems.append("memory over-allocated")
    return problems


def check_placement(state: ClusterState, request: GangRequest, placement: Placement) -> None:
    """Raise `InvalidResult` unless the placement keeps every rule and the state itself accepts
    it (applied on a statement, then undone)."""
    problems = placement_problems(state, request, placement.allocation)
    if problems:
        raise InvalidResult(f"invalid placement of {request.name}: " + "; ".join(problems))
    statement = Statement(state)
    try:
        statement.allocate(f"check-{request.name}", placement.allocation)
    finally:
        statement.discard()


def check_victims_free_room(
    state: ClusterState, request: GangRequest, victims: Iterable[str]
) -> Placement:
    """Release `victims` on a statement and place `request` there: raise `InvalidResult` unless
    it then fits, validly. Returns that placement (found with the victims gone; undone)."""
    statement = Statement(state)
    try:
        statement.release_many(list(victims))
        found = place(state, request)
        if not isinstance(found, Placement):
            raise InvalidResult(f"the victims do not free room for {request.name}: {found}")
        check_placement(state, request, found)
        return found
    finally:
        statement.discard()


def check_cycle(scheduler: Scheduler, result: CycleResult) -> None:
    """Raise `InvalidResult` unless every decision of the cycle agrees with the scheduler: a
    bound job runs and holds exactly its allocation, keeping its request's rules on the state
    less its own pods; an evicted job was running (or is leaving) and its preemptor waits.
    The state is only read: the next cycle finds it, and its version, as this one left it."""
    state = scheduler.state
    for decision in result.decisions:
        if isinstance(decision, Bind):
            job = scheduler.jobs[decision.job_id]
            held = state.allocations.get(decision.job_id)
            if job.state is not JobState.RUNNING or held is None:
                raise InvalidResult(f"bound job {decision.job_id} is {job.state}, not running")
            if not np.array_equal(held.nodes, decision.allocation.nodes):
                raise InvalidResult(f"bound job {decision.job_id} holds other nodes")
            problems = placement_problems(state, job.request, decision.allocation, applied=True)
            if problems:
                raise InvalidResult(f"bound job {decision.job_id}: " + "; ".join(problems))
        elif isinstance(decision, Evict):
            victim = scheduler.jobs[decision.job_id]
            if decision.job_id not in state.allocations:
                raise InvalidResult(f"evicted job {decision.job_id} holds nothing")
            if victim.state is JobState.PENDING:
                raise InvalidResult(f"evicted job {decision.job_id} was not running")
            if scheduler.jobs[decision.preemptor].state is not JobState.PENDING:
                preemptor = scheduler.jobs[decision.preemptor]
                if preemptor.state is not JobState.RUNNING:
                    raise InvalidResult(f"preemptor {decision.preemptor} is {preemptor.state}")


def check_gpu_accounts(state: ClusterState) -> None:
    """Raise `InvalidResult` unless every GPU's free milli-GPU is its capacity less what the
    allocations hold (no GPU given twice). Linear in the allocations: run it once per fleet."""
    taken = np.zeros_like(state.gpu_free_milli, dtype=np.int64)
    width = int(taken.shape[1])
    flat = taken.reshape(-1)
    for held in state.allocations.values():
        for allocation in held.parts:
            if allocation.gpus.size:
                slots = np.repeat(allocation.nodes, allocation.gpus.shape[1]) * width
                np.add.at(flat, slots + allocation.gpus.reshape(-1), allocation.gpu_milli)
    if np.any(flat > MILLI_PER_GPU) or np.any(
        (state.gpu_free_milli.reshape(-1) + flat)[flat > 0] != MILLI_PER_GPU
    ):
        raise InvalidResult("GPUs held by more than they have, or free counts out of step")
