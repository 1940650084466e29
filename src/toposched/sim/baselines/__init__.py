"""Baseline schedulers the simulator drives next to toposched: FIFO, Slurm-like and kube-like.

Each baseline is a factory `(state, tree) -> SchedulerLike`, like `toposched_scheduler`, and
each subclasses `toposched.scheduler.core.Scheduler`, so that job bookkeeping, node failures,
requeues and the decisions the simulator carries out are the same code for every scheduler.
What differs is what the baselines are about: queue order, placement, preemption and the cycle.

- `fifo_first_fit`: strict FIFO with head-of-line blocking, first fit over a flat node list.
- `slurm_like`: multifactor priority (age, classic fair share, job size), EASY backfill behind
  one reservation for the queue head, topology/tree preferring the fewest leaf switches, and a
  job's required level kept for Slurm's default `--switches` wait (`SlurmLike`).
- `slurm_like_preempt`: the same with preemption by partition priority tier and requeue:
  budgeted work preempts work no budget pays for (`SlurmPreemption`).
- `kube_like`: kube-scheduler's default profile, pod by pod (LeastAllocated and
  BalancedAllocation over CPU and memory, pod affinity for a job's topology), FIFO without
  head-of-line blocking, gangs held at the coscheduling plugin's Permit (`KubeLike`).

Only `slurm_like_preempt` preempts; none defragments. The simulator's own accounting
(allocated vs unallocated GPU-hours, owed GPU-hours) still labels the work by its budget, so
the summaries compare like with like. docs/simulator.md says what each models and omits.
"""

from __future__ import annotations

from collections.abc import Callable

from toposched.cluster.state import ClusterState
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler
from toposched.sim.baselines.flat import FifoFirstFit, FirstFit, flat_place
from toposched.sim.baselines.kube import KubeLike, PermitWait, pick_nodes, resource_scores
from toposched.sim.baselines.queues import MultifactorQueue, Partition, SubmitOrderQueue
from toposched.sim.baselines.slurm import (
    SLURM_MAX_SWITCH_WAIT,
    SlurmLike,
    SlurmOptions,
    SlurmPreemption,
)

__all__ = [
    "BASELINES",
    "BaselineFactory",
    "SLURM_MAX_SWITCH_WAIT",
    "FifoFirstFit",
    "FirstFit",
    "KubeLike",
    "MultifactorQueue",
    "Partition",
    "PermitWait",
    "SlurmLike",
    "SlurmOptions",
    "SlurmPreemption",
    "SubmitOrderQueue",
    "fifo_first_fit",
    "flat_place",
    "kube_like",
    "pick_nodes",
    "resource_scores",
    "slurm_like",
    "slurm_like_preempt",
]


def fifo_first_fit(state: ClusterState, tree: BudgetTree) -> FifoFirstFit:
    """Strict FIFO, first fit, no topology, no preemption, reservation or backfill."""
    return FifoFirstFit(state, tree)


def slurm_like(state: ClusterState, tree: BudgetTree) -> SlurmLike:
    """Multifactor priority, EASY backfill, topology/tree with `--switches` waits."""
    return SlurmLike(state, tree)


def slurm_like_preempt(state: ClusterState, tree: BudgetTree) -> SlurmLike:
    """`slurm_like` with preemption by partition priority tier, victims requeued."""
    return SlurmLike(state, tree, SlurmOptions(preemption=SlurmPreemption()))


def kube_like(state: ClusterState, tree: BudgetTree) -> KubeLike:
    """kube-scheduler's default profile pod by pod, gangs held at Permit until whole."""
    return KubeLike(state, tree)


BaselineFactory = Callable[[ClusterState, BudgetTree], Scheduler]
"""Builds a baseline on a fresh cluster state and budget tree (a `SchedulerFactory`)."""

BASELINES: dict[str, BaselineFactory] = {
    "slurm_like": slurm_like,
    "slurm_like_preempt": slurm_like_preempt,
    "kube_like": kube_like,
    "fifo_first_fit": fifo_first_fit,
}
"""Every baseline by name, in the order reports show them (after toposched): the names of
`sim/baseline_names.py`."""
