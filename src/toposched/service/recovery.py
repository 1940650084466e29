"""Starting the service on a store: rebuild the scheduler from what was committed, then
reconcile with what the backend still runs.

Rebuilt: the budget tree, running jobs (adopted on their stored allocation with their real
start time), node health, pending jobs in submission order with their original submit times,
backend reports stored but not yet applied. Reconciled: a running job the backend still runs
is kept; one whose start was stored but never sent is started once; one the backend lost is
failed (requeued if resumable, as `Scheduler.fail` does); stops not yet sent are sent.

The store belongs to one cluster; with a backend that follows nodes (Ray), that cluster may
have grown while the service was stopped, and the stored allocations are renumbered into
the grown model (see `regrow`, which rebuilds the scheduler the same way while it runs).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from operator import attrgetter
from typing import Any

from toposched.backends.dry_run import DryRunBackend
from toposched.backends.protocol import Backend, Launch, NodeWatcher, Stop
from toposched.cluster.errors import InputError
from toposched.cluster.state import ClusterState
from toposched.cluster.topology import Topology
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Scheduler
from toposched.scheduler.jobs import JobState
from toposched.service.core import ServiceCore
from toposched.service.fits import ClusterLimits
from toposched.service.records import JobRecord
from toposched.service.regrow import (
    NODES_KEY,
    IntArray,
    cluster_fingerprint,
    grown_while_stopped,
    remember_nodes,
    renumbered,
    restore_scheduler,
)
from toposched.service.restore import RestoredSpecs, resume_simulated
from toposched.service.step import apply_new_reports, apply_reports
from toposched.service.store import StoredDecision
from toposched.service.store_protocol import StateStore

log = logging.getLogger("toposched.service")
_JOB_ID = attrgetter("job_id")


def starter(
    store: StateStore,
    topology: Topology,
    default_tree: Callable[[], BudgetTree],
    backend: Backend,
    resume_simulated: bool = True,
    settings: Mapping[str, Any] | None = None,
) -> Callable[[float], ServiceCore]:
    """The loop's first work: `recover(...)` at the loop's `now`, holding the interpreter in
    long slices (`RECOVERY_SWITCH_S`)."""

    def start(now: float) -> ServiceCore:
        with _long_slices():
            return recover(store, topology, default_tree, backend, now, resume_simulated, settings)

    return start


RECOVERY_SWITCH_S = 0.05
"""How long the recovering thread runs before the interpreter lets another thread run, instead
of Python's 5 ms. Meanwhile the HTTP side answers only health and 503s (not ready); with 5 ms
slices, a client polling for readiness takes a good part of the time the recovery needs."""


@contextmanager
def _long_slices() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(max(before, RECOVERY_SWITCH_S))
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def recover(
    store: StateStore,
    topology: Topology,
    default_tree: Callable[[], BudgetTree],
    backend: Backend,
    now: float,
    resume_simulated: bool = True,
    settings: Mapping[str, Any] | None = None,
) -> ServiceCore:
    """The service's state rebuilt from `store` and reconciled with `backend`. A dry-run
    backend's simulated runs die with the process; with `resume_simulated` the runs the store
    says were started go on in the new one, as real processes outlive a restart. `settings`:
    the scheduler's, by `SchedulerSettings` name (its defaults where not given)."""
    with store.transaction():
        moved = _claim_cluster(store, topology, isinstance(backend, NodeWatcher))
        tree = _tree(store, default_tree)
        scheduler = Scheduler(ClusterState(topology), tree, **(settings or {}))
        core = ServiceCore(scheduler, store, backend, ClusterLimits.of(topology))
        specs = RestoredSpecs()
        records = store.jobs()
        if moved is not None:
            _renumber(store, records, moved)
        _restore_records(core, records)
        restore_scheduler(core, specs.of, now)
        if resume_simulated and isinstance(backend, DryRunBackend):
            _resume_simulated(core, backend)
        apply_reports(core, store.unapplied_reports(), now)
        # What ended while the service was down comes as finished or failed, not lost.
        apply_new_reports(core, list(backend.poll(now)), now)
        _reconcile(core, now)
    core.send_outbox()
    return core


def _claim_cluster(store: StateStore, topology: Topology, follows_nodes: bool) -> IntArray | None:
    """Check that the store holds the state of this cluster, and mark it so. A cluster that
    changes under the service (`follows_nodes`, e.g. Ray) may have grown while the service
    was stopped: then each stored node's number in the new model, else None."""
    fingerprint = cluster_fingerprint(topology)
    stored = store.meta("cluster")
    moved = None
    if stored is not None and stored != fingerprint:
        moved = grown_while_stopped(store, topology) if follows_nodes else None
        if moved is None:
            raise InputError(
                "store",
                store.path,
                "holds the state of another cluster; start with the same "
                "cluster options it was made with, or use another --store",
            )
        log.info("the cluster grew to %d nodes while the service was stopped", topology.n_nodes)
    if stored != fingerprint:
        store.set_meta("cluster", fingerprint)
    if follows_nodes and (moved is not None or store.meta(NODES_KEY) is None):
        remember_nodes(store, topology)
    return moved


def _tree(store: StateStore, default_tree: Callable[[], BudgetTree]) -> BudgetTree:
    document = store.meta("budget_tree")
    if document is None:
        tree = default_tree()
        store.set_meta("budget_tree", tree.to_dict())
        return tree
    return BudgetTree.from_dict(document)


def _renumber(store: StateStore, records: list[JobRecord], moved: IntArray) -> None:
    """Running jobs' stored allocations in the grown model's node numbers."""
    for record in records:
        if record.state is JobState.RUNNING and record.allocation is not None:
            record.allocation = renumbered(record.allocation, moved)
            store.update_job(record)


def _restore_records(core: ServiceCore, records: list[JobRecord]) -> None:
    core.records.update(zip(map(_JOB_ID, records), records, strict=True))
    core.by_key.update(
        (record.idempotency_key, record.job_id)
        for record in records
        if record.idempotency_key is not None
    )
    log.info("recovered %d jobs", len(records))


def _resume_simulated(core: ServiceCore, backend: DryRunBackend) -> None:
    resume_simulated(core, backend)


def _reconcile(core: ServiceCore, now: float) -> None:
    alive: set[tuple[str, int]] = set(core.backend.running())  # (job id, attempt) tuples
    unsent = core.store.unsent_decisions()
    starting = {(d.job_id, d.attempt) for d in unsent if d.kind == "start"}
    state = JobState.RUNNING
    running = {
        (record.job_id, record.attempt): record
        for record in core.records.values()
        if record.state is state
    }
    lost = running.keys() - alive - starting
    for key, record in running.items():
        if key not in lost:
            continue
        job = core.scheduler.fail(record.job_id, now)
        core.sync(record, job)
        core.event(now, "failed", record, detail="lost by the backend across a restart")
        if record.pending:
            core.event(now, "requeued", record)
    _stop_orphans(core, alive - running.keys(), unsent)
    for decision in unsent:
        command = _resend(core, decision, alive)
        if command is None:
            core.sent.append(decision.decision_id)
        else:
            core.outbox.append((decision.decision_id, command))
    core.flush_sent()
    core.dirty = True


def _stop_orphans(
    core: ServiceCore, unknown: set[tuple[str, int]], unsent: list[StoredDecision]
) -> None:
    """Runs the backend still has that the store does not know as running (`unknown`: a store
    restored from an older backup, a run cancelled or ended while the service was down) are
    stopped, with the job's grace period where the job is known, so that nothing holds GPUs
    the scheduler thinks free; but runs of a decision not yet sent."""
    for job_id, attempt in sorted(unknown - {(d.job_id, d.attempt) for d in unsent}):
        job = core.scheduler.jobs.get(job_id)
        grace_s = 0.0 if job is None else core.scheduler.grace_for(job)
        log.warning(
            "stopping %s (attempt %d): running, but not as far as the store knows", job_id, attempt
        )
        payload = {"grace_s": grace_s, "evicted": False}
        decision = core.store.add_decision(job_id, attempt, "stop", payload)
        core.outbox.append((decision, Stop(job_id, attempt, grace_s, evicted=False)))


def _resend(
    core: ServiceCore, decision: StoredDecision, alive: set[tuple[str, int]]
) -> Launch | Stop | None:
    """The command of a decision stored but not sent, if it still has to be carried out."""
    record = core.records.get(decision.job_id)
    key = (decision.job_id, decision.attempt)
    if decision.kind == "start":
        current = record is not None and record.state is JobState.RUNNING
        if not current or record is None or record.attempt != decision.attempt or key in alive:
            return None
        return core.launch(record)
    if key not in alive:
        return None
    payload = decision.payload
    return Stop(decision.job_id, decision.attempt, payload["grace_s"], payload["evicted"])
