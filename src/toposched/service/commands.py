"""What API calls ask of the service: each runs in the loop's thread, inside the loop's
transaction, and validates everything before it changes anything."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toposched.backends.protocol import RunSpec
from toposched.cluster.errors import InputError
from toposched.cluster.state import Health
from toposched.policy.budget import BudgetTree
from toposched.scheduler.jobs import JobState
from toposched.service.core import ServiceCore
from toposched.service.documents import accept_job
from toposched.service.errors import Conflict
from toposched.service.fits import MAX_PRIORITY
from toposched.service.records import JobRecord


@dataclass(frozen=True)
class Submission:
    """A parsed submission: the job fields, what it runs, its idempotency key and the hash of
    its body (None without a key: it tells only a retry from another use of the key)."""

    fields: Mapping[str, Any]
    run: RunSpec | None
    idempotency_key: str | None
    body_hash: str | None


def submit(core: ServiceCore, submission: Submission, now: float) -> tuple[JobRecord, bool]:
    """The job's record and whether it was created now (False: the key's earlier answer)."""
    key = submission.idempotency_key
    if key is not None and key in core.by_key:
        earlier = core.records[core.by_key[key]]
        if earlier.body_hash != submission.body_hash:
            raise Conflict(
                "Idempotency-Key", key, "was used before with another body; use a new key"
            )
        return earlier, False
    accepted = accept_job(submission.fields, submission.run, now)
    spec = accepted.spec
    existing = core.records.get(spec.name)
    if existing is not None:
        raise Conflict("name", spec.name, f"a job of that name exists ({existing.state})")
    core.limits.check(spec, core.scheduler.tree)
    record = JobRecord(
        job_id=spec.name,
        account=spec.account,
        priority=spec.priority,
        state=JobState.PENDING,
        spec=accepted.document,
        submit_time=now,
        idempotency_key=key,
        body_hash=submission.body_hash,
        spec_text=accepted.text,
    )
    # Stored first: a row the store refuses leaves the scheduler untouched, and a job the
    # scheduler refuses is rolled back with the command's savepoint.
    core.add_record(record)
    try:
        submitted = core.scheduler.submit(spec, now)
    except BaseException:
        core.forget_record(record)
        raise
    record.reason = submitted.reason
    core.owed.asked(core, submitted)
    core.event(now, "submitted", record)
    core.dirty = True
    return record, True


def cancel(core: ServiceCore, job_id: str, now: float) -> JobRecord:
    record = core.record(job_id)
    if not record.live:
        raise Conflict("job", job_id, f"is already {record.state}")
    job = core.scheduler.jobs[job_id]
    was_running = job.state is JobState.RUNNING
    grace = core.scheduler.grace_for(job) if was_running else 0.0
    core.scheduler.cancel(job_id, now)
    core.sync(record, job)
    if was_running:
        core.queue_stop(record, record.attempt, grace, evicted=False)
    core.event(now, "cancelled", record)
    core.dirty = True
    return record


def set_priority(core: ServiceCore, job_id: str, priority: Any, now: float) -> JobRecord:
    record = core.record(job_id)
    if isinstance(priority, bool) or not isinstance(priority, int) or abs(priority) > MAX_PRIORITY:
        raise InputError(
            "priority",
            priority,
            f"must be an integer from -{MAX_PRIORITY:,} to {MAX_PRIORITY:,} (higher runs first)",
        )
    if not record.live:
        raise Conflict("job", job_id, f"is already {record.state}")
    core.scheduler.set_priority(job_id, priority, now)
    record.priority = priority
    record.spec = {**record.spec, "priority": priority}
    core.store.update_job(record, priority=True)
    core.event(now, "priority", record, priority=priority)
    core.dirty = True
    return record


_HEALTH_OF_ACTION = {
    "drain": Health.DRAINING,
    "cordon": Health.CORDONED,
    "uncordon": Health.HEALTHY,
    "down": Health.DOWN,
    "up": Health.HEALTHY,
}
NODE_ACTIONS = tuple(_HEALTH_OF_ACTION)


def node_action(core: ServiceCore, name: str, action: str, now: float) -> str:
    health = _HEALTH_OF_ACTION.get(action)
    if health is None:
        raise InputError("action", action, f"must be one of {', '.join(NODE_ACTIONS)}")
    core.set_health(name, health, now)
    return name


def replace_tree(core: ServiceCore, document: Any, now: float) -> BudgetTree:
    """Replace the budget tree as a whole: validated, tried on a copy, then applied."""
    new = BudgetTree.from_dict(document)
    for record in core.records.values():
        if record.live and (record.account not in new or not new.is_leaf(record.account)):
            raise Conflict(
                "accounts",
                record.account,
                f"job {record.job_id} ({record.state}) charges to it; it must stay a leaf",
            )
    tree = core.scheduler.tree
    trial = BudgetTree.from_dict(tree.to_dict())
    _reshape(trial, new)
    _reshape(tree, new)
    core.store.set_meta("budget_tree", tree.to_dict())
    core.event(now, "accounts", None, accounts=len(tree))
    core.dirty = True
    return tree


def _reshape(tree: BudgetTree, new: BudgetTree) -> None:
    """Change `tree` in place into `new`: vanished accounts go, shares change, new ones come."""
    for path in sorted(set(tree) - set(new), key=lambda p: p.count("/"), reverse=True):
        if path in tree:
            tree.remove_account(path, recursive=True)
    kept = {path: new.share(path) for path in tree if path}
    if kept:
        tree.set_shares(kept)
    for path in new:
        if path and path not in tree:
            tree.add_account(path, new.share(path))
