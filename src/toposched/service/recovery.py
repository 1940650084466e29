"""Starting the service on a store: rebuild the scheduler from what was committed, then
reconcile with what the backend still runs.

Rebuilt: the budget tree, running jobs (adopted on their stored allocation with their real
start time), node health, pending jobs in submission order with their original submit times,
backend reports stored but not yet applied. Reconciled: a running job the backend still runs
is kept; one whose start was stored but never sent is started once; one the backend lost is
failed (requeued if resumable, as `Scheduler.fail` does); stops not yet sent are sent.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable

from toposched.backends.dry_run import DryRunBackend
from toposched.backends.protocol import Backend, Launch, Stop
from toposched.cluster.errors import InputError
from toposched.cluster.state import ClusterState, Health
from toposched.cluster.topology import Topology
from toposched.policy.budget import BudgetTree
from toposched.scheduler.core import Adoption, Scheduler
from toposched.scheduler.jobs import JobState
from toposched.service.core import ServiceCore
from toposched.service.documents import StoredSpecs
from toposched.service.fits import ClusterLimits
from toposched.service.records import JobRecord
from toposched.service.restore import resume_simulated
from toposched.service.step import apply_new_reports, apply_reports
from toposched.service.store import StoredDecision
from toposched.service.store_protocol import StateStore

log = logging.getLogger("toposched.service")


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


def starter(
    store: StateStore,
    topology: Topology,
    default_tree: Callable[[], BudgetTree],
    backend: Backend,
    resume_simulated: bool = True,
) -> Callable[[float], ServiceCore]:
    """The loop's first work: `recover(...)` at the loop's `now`."""
    return lambda now: recover(store, topology, default_tree, backend, now, resume_simulated)


def recover(
    store: StateStore,
    topology: Topology,
    default_tree: Callable[[], BudgetTree],
    backend: Backend,
    now: float,
    resume_simulated: bool = True,
) -> ServiceCore:
    """The service's state rebuilt from `store` and reconciled with `backend`. A dry-run
    backend's simulated runs die with the process; with `resume_simulated` the runs the store
    says were started go on in the new one, as real processes outlive a restart."""
    with store.transaction():
        tree = _tree(store, topology, default_tree)
        scheduler = Scheduler(ClusterState(topology), tree)
        core = ServiceCore(scheduler, store, backend, ClusterLimits.of(topology))
        # Running jobs first: they hold their GPUs even on nodes cordoned or draining since.
        specs = StoredSpecs()
        _restore_jobs(core, store.jobs(), specs, now)
        _restore_health(core, now)
        _restore_pending(core, specs, now)
        if resume_simulated and isinstance(backend, DryRunBackend):
            _resume_simulated(core, backend)
        apply_reports(core, store.unapplied_reports(), now)
        # What ended while the service was down comes as finished or failed, not lost.
        apply_new_reports(core, list(backend.poll(now)), now)
        _reconcile(core, now)
    core.send_outbox()
    return core


def _tree(
    store: StateStore, topology: Topology, default_tree: Callable[[], BudgetTree]
) -> BudgetTree:
    fingerprint = cluster_fingerprint(topology)
    stored = store.meta("cluster")
    if stored is not None and stored != fingerprint:
        raise InputError(
            "store",
            store.path,
            "holds the state of another cluster; start with the same "
            "cluster options it was made with, or use another --store",
        )
    store.set_meta("cluster", fingerprint)
    document = store.meta("budget_tree")
    if document is None:
        tree = default_tree()
        store.set_meta("budget_tree", tree.to_dict())
        return tree
    return BudgetTree.from_dict(document)


def _restore_health(core: ServiceCore, now: float) -> None:
    by_health: dict[Health, list[int]] = {}
    for name, word in core.store.node_health().items():
        if word != "healthy":
            by_health.setdefault(Health[word.upper()], []).append(core.node_index(name))
    for health, nodes in by_health.items():
        core.scheduler.set_health(nodes, health, now)


def _restore_jobs(
    core: ServiceCore, records: list[JobRecord], specs: StoredSpecs, now: float
) -> None:
    for record in records:
        core.records[record.job_id] = record
        if record.idempotency_key is not None:
            core.by_key[record.idempotency_key] = record.job_id
    adoptions = []
    for record in records:
        if record.state is JobState.RUNNING:
            assert record.allocation is not None and record.start_time is not None
            adoptions.append(
                Adoption(specs.spec(record.spec), record.allocation, record.start_time)
            )
    core.scheduler.adopt_many(adoptions, now)
    log.info("recovered %d jobs", len(records))


def _restore_pending(core: ServiceCore, specs: StoredSpecs, now: float) -> None:
    """Pending jobs in submission order, each with its original submit time."""
    for record in core.records.values():
        if record.state is JobState.PENDING:
            core.scheduler.submit(specs.spec(record.spec), now)


def _resume_simulated(core: ServiceCore, backend: DryRunBackend) -> None:
    resume_simulated(core, backend)


def _reconcile(core: ServiceCore, now: float) -> None:
    alive = {(run.job_id, run.attempt) for run in core.backend.running()}
    unsent = core.store.unsent_decisions()
    starting = {(d.job_id, d.attempt) for d in unsent if d.kind == "start"}
    for record in list(core.records.values()):
        key = (record.job_id, record.attempt)
        if record.state is not JobState.RUNNING or key in alive or key in starting:
            continue
        job = core.scheduler.fail(record.job_id, now)
        core.sync(record, job)
        core.event(now, "failed", record, detail="lost by the backend across a restart")
        if record.pending:
            core.event(now, "requeued", record)
    _stop_orphans(core, alive, unsent)
    for decision in unsent:
        command = _resend(core, decision, alive)
        if command is None:
            core.sent.append(decision.decision_id)
        else:
            core.outbox.append((decision.decision_id, command))
    core.flush_sent()
    core.dirty = True


def _stop_orphans(
    core: ServiceCore, alive: set[tuple[str, int]], unsent: list[StoredDecision]
) -> None:
    """Runs the backend still has that the store does not know as running (a store restored
    from an older backup, a run cancelled or ended while the service was down) are stopped,
    with the job's grace period where the job is known, so that nothing holds GPUs the
    scheduler thinks free."""
    known = {(r.job_id, r.attempt) for r in core.records.values() if r.state is JobState.RUNNING}
    known |= {(d.job_id, d.attempt) for d in unsent}
    for job_id, attempt in sorted(alive - known):
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
