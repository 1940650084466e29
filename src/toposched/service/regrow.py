"""The scheduler rebuilt from the service's job records: at start (see `recovery`) and when
nodes join the cluster (`regrow`).

A grown cluster is a new cluster model: nodes are ordered depth-first through the topology
tree, so a node that joins a rack moves every node after it. The service builds a new
scheduler on the new model and restores into it what the old one held, the way a restart
does (running jobs adopted on their allocations, node health, pending jobs in submission
order), all within one turn of the loop, so that no decision sees a half-built model.
Beyond what a restart keeps, the usage window, each job's history, attempts, preemptions
and last checkpoint, evictions under way and the nodes kept for their preemptors carry over.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable
from itertools import repeat
from operator import attrgetter, is_

import numpy as np
from numpy.typing import NDArray

from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation, ClusterState, Health
from toposched.cluster.topology import Topology
from toposched.jobs.spec import JobSpec
from toposched.scheduler.adoptions import Adoptions
from toposched.scheduler.core import Scheduler
from toposched.scheduler.jobs import Job, JobState, Nomination
from toposched.service.core import ServiceCore
from toposched.service.fits import ClusterLimits
from toposched.service.records import JobRecord
from toposched.service.store_protocol import StateStore

__all__ = [
    "cluster_fingerprint",
    "grown_while_stopped",
    "regrow",
    "remember_nodes",
    "renumbered",
    "restore_scheduler",
]

log = logging.getLogger("toposched.service")
IntArray = NDArray[np.int64]
_ALLOCATION, _START_TIME = attrgetter("allocation"), attrgetter("start_time")
NODES_KEY = "cluster_nodes"
"""The store's meta key of the model's node names, in the model's order."""


def cluster_fingerprint(topology: Topology) -> str:
    """Names, levels and GPUs of every node: a store belongs to one cluster."""
    digest = hashlib.sha256()
    digest.update(repr(topology.levels).encode())
    digest.update(topology.gpu_count.tobytes())
    names = topology.node_names
    for index in range(min(topology.n_nodes, 1000)):
        digest.update(names[index].encode())
    digest.update(str(topology.n_nodes).encode())
    return digest.hexdigest()


def remember_nodes(store: StateStore, topology: Topology) -> None:
    """Store the model's node names in its order, so that a restart on a cluster that grew
    while the service was stopped can renumber the stored allocations (`grown_while_stopped`).
    Kept for clusters that change under the service (a backend that follows nodes)."""
    store.set_meta(NODES_KEY, list(topology.node_names))


def grown_while_stopped(store: StateStore, topology: Topology) -> IntArray | None:
    """Each node of the store's cluster's number in `topology`, when `topology` holds every
    node of it (by name) and more: the cluster grew while the service was stopped. None when
    the store keeps no node names or `topology` is another cluster."""
    names = store.meta(NODES_KEY)
    if not isinstance(names, list) or len(names) >= topology.n_nodes:
        return None
    try:
        return np.array([topology.node_index(name) for name in names], dtype=np.int64)
    except InputError:
        return None


def renumbered(allocation: Allocation, moved: IntArray) -> Allocation:
    """`allocation` with each node `n` of the old model as node `moved[n]` of the new one."""
    return allocation.renumbered(moved)


def restore_scheduler(
    core: ServiceCore, spec_of: Callable[[JobRecord], JobSpec], now: float
) -> None:
    """Into `core.scheduler`, new and empty: the running jobs of `core.records` adopted on
    their allocations with their real start times (first: they hold their GPUs even on nodes
    cordoned or draining since), the node health the store holds, then the pending jobs in
    submission order, each with its original submit time."""
    records = core.records.values()
    running = [record for record in records if record.state is JobState.RUNNING]
    pending = [record for record in records if record.state is JobState.PENDING]
    allocations: list[Allocation] = list(map(_ALLOCATION, running))
    start_times: list[float] = list(map(_START_TIME, running))
    assert not any(map(is_, allocations, repeat(None))) and None not in start_times
    specs = list(map(spec_of, running))
    core.scheduler.adopt_many(Adoptions(specs, allocations, start_times), now)
    by_health: dict[Health, list[int]] = {}
    for name, word in core.store.node_health().items():
        if word != "healthy":
            by_health.setdefault(Health[word.upper()], []).append(core.node_index(name))
    for health, nodes in by_health.items():
        core.scheduler.set_health(nodes, health, now)
    core.scheduler.submit_many([spec_of(record) for record in pending], now)


def regrow(core: ServiceCore, topology: Topology, now: float) -> list[str]:
    """Replace the service's cluster model by `topology`, which holds every node of the
    current one (same name, levels and domains) and the nodes that joined; returns their
    names. In the caller's transaction: the running jobs' allocations are stored in the new
    model's node numbers and the store is marked as this cluster's, so that a restart on
    the grown cluster finds its state. InputError, with nothing changed, when `topology`
    does not hold the current model."""
    old = core.scheduler
    moved = _new_numbers(old.state.topology, topology)
    joined = sorted(set(topology.node_names) - set(old.state.topology.node_names))
    # Running jobs told to leave (evicted or moved), and for whom.
    leaving = {
        job.job_id: old.ledger.preemptor_of.get(job.job_id)
        for job in old.running.values()
        if job.evicting
    }
    # Copies: the old scheduler letting go of a victim takes it out of its nomination.
    nominations = {
        job.job_id: dataclasses.replace(job.nomination, victims=set(job.nomination.victims))
        for job in old.jobs.values()
        if job.state is JobState.PENDING and job.nomination is not None
    }
    changed: list[JobRecord] = []
    for record in core.records.values():
        allocation = record.allocation
        if record.state is JobState.RUNNING and allocation is not None:
            record.allocation = renumbered(allocation, moved)
            if not np.array_equal(record.allocation.nodes, allocation.nodes):
                changed.append(record)
    # The old scheduler lets go of its running jobs, their usage charged up to now; the new
    # one adopts them and charges them from now, in the same usage window.
    for job in list(old.running.values()):
        old.lifecycle.stop(job, now, old.jobs)
    core.scheduler = Scheduler(ClusterState(topology), old.tree, old.settings, usage=old.usage)
    core.limits = ClusterLimits.of(topology)
    stored = core.store.node_health()
    for name in joined:
        if stored.get(name, "healthy") != "healthy":
            core.store.set_node_health(name, "healthy")  # a node that joins is up
    restore_scheduler(core, lambda record: old.jobs[record.job_id].spec, now)
    _carry_over(old, core.scheduler, leaving, nominations, moved)
    for record in changed:
        core.store.update_job(record)
    core.store.set_meta("cluster", cluster_fingerprint(topology))
    remember_nodes(core.store, topology)
    for name in joined:
        core.event(now, "node", None, node=name, health="healthy", detail="joined the cluster")
    log.info(
        "the cluster model grew to %d nodes, %d GPUs: %s joined",
        topology.n_nodes,
        topology.n_gpus,
        ", ".join(joined),
    )
    core.dirty = True
    return joined


def _new_numbers(before: Topology, after: Topology) -> IntArray:
    """Each node of `before`'s number in `after`; InputError when `after` lacks one or puts
    it elsewhere in the tree."""
    if after.levels != before.levels:
        raise InputError("cluster levels", list(after.levels), f"must be {list(before.levels)}")
    numbers = np.empty(before.n_nodes, dtype=np.int64)
    names = before.node_names
    for node in range(before.n_nodes):
        name = names[node]
        number = after.node_index(name)
        if after.node_path(number) != before.node_path(node) or (
            after.gpu_count[number] != before.gpu_count[node]
        ):
            raise InputError("node", name, "must keep its place and GPUs when the cluster grows")
        numbers[node] = number
    return numbers


def _carry_over(
    old: Scheduler,
    new: Scheduler,
    leaving: dict[str, str | None],
    nominations: dict[str, Nomination],
    moved: IntArray,
) -> None:
    """What the old scheduler knew of each live job beyond its record: its history, attempts,
    preemptions and last checkpoint, whether it is on its way out and for whom, and the
    nodes kept for a preemptor (in the new model's numbers)."""
    for job_id, job in new.jobs.items():
        before = old.jobs[job_id]
        _copy_history(before, job)
        if job.state is JobState.RUNNING:
            if before.last_checkpoint is not None:
                new.report_checkpoint(job_id, before.last_checkpoint)
            if job_id in leaving:
                new.ledger.mark_leaving(job)
                new.ledger.preemptible.mark_evicting(job_id)
                preemptor = leaving[job_id]
                if preemptor is not None:
                    new.ledger.preemptor_of[job_id] = preemptor
            continue
        nomination = nominations.get(job_id)
        if nomination is not None:
            job.nomination = Nomination(
                {victim for victim in nomination.victims if victim in new.running},
                moved[nomination.nodes],
                nomination.decided_at,
                None if nomination.allocation is None else renumbered(nomination.allocation, moved),
            )
            job.reason, job.reason_code = before.reason, before.reason_code


def _copy_history(before: Job, job: Job) -> None:
    job.history = before.history
    job.attempts = before.attempts
    job.preemptions = before.preemptions
    job.evictions = before.evictions
