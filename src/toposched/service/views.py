"""The documents the API answers with (docs/api.md), read from the service's state in the
loop's thread."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from toposched.cluster.state import Health
from toposched.cluster.units import HOUR
from toposched.policy.queue_entry import QueueTier
from toposched.scheduler.jobs import Job, JobState, ReasonCode
from toposched.service.core import ServiceCore
from toposched.service.errors import Forbidden
from toposched.service.owed import window_hours
from toposched.service.records import JobRecord

AccountFilter = Callable[[str], bool]
MAX_LIST = 1000


def job_view(core: ServiceCore, record: JobRecord) -> dict[str, Any]:
    live = core.live_job(record.job_id)
    gpus = live.gpus if live is not None else _spec_gpus(record.spec)
    view: dict[str, Any] = {
        "id": record.job_id,
        "account": record.account,
        "priority": record.priority,
        "state": str(record.state),
        "pods": sum(int(shape.get("pods", 0)) for shape in _shapes(record.spec)),
        "gpus": float(gpus),
        "submit_time": record.submit_time,
        "start_time": record.start_time,
        "end_time": record.end_time,
        "reason": live.reason if live is not None else record.reason,
        "unallocated": record.unallocated,
        "preemptions": record.preemptions,
        "attempts": record.attempt,
        "nodes": core.allocation_nodes(record.allocation),
        "spec": record.spec,
    }
    if record.spec.get("pod_sets"):
        view["pod_sets"] = _set_views(record.spec["pod_sets"], live)
    return view


def _set_views(written: list[dict[str, Any]], live: Job | None) -> list[dict[str, Any]]:
    """Each pod set's name, pods asked, least pods (`min_pods`, else its pods) and, while the
    job runs, the pods it got (an elastic set's as many as fitted; else null)."""
    placed: list[int | None] = [None] * len(written)
    if live is not None and live.state is JobState.RUNNING and live.sets is not None:
        placed = [role.pods for role in (live.held or live.sets).roles]
    return [
        {
            "name": entry["name"],
            "pods": entry["pods"],
            "min_pods": entry.get("min_pods", entry["pods"]),
            "placed_pods": count,
        }
        for entry, count in zip(written, placed, strict=True)
    ]


def _shapes(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """The stored job's pod sets, or the job itself when it has one shape."""
    sets: list[dict[str, Any]] = spec.get("pod_sets") or [spec]
    return sets


def _spec_gpus(spec: dict[str, Any]) -> float:
    total = 0.0
    for shape in _shapes(spec):
        resources = shape.get("resources_per_pod", {})
        share = resources.get("gpu_milli", 1000) / 1000
        total += shape.get("pods", 0) * resources.get("gpus", 0) * share
    return total


def list_jobs(
    core: ServiceCore,
    visible: AccountFilter,
    account: str | None,
    state: JobState | None,
    limit: int,
    after: str | None,
) -> dict[str, Any]:
    """Jobs in submission order, from just after the job `after`."""
    start = 0
    if after is not None:
        start = core.record(after).seq
    rows: list[dict[str, Any]] = []
    last: JobRecord | None = None
    more = False
    for record in core.records.values():
        if record.seq <= start or not visible(record.account):
            continue
        if account is not None and not in_account(record.account, account):
            continue
        if state is not None and record.state is not state:
            continue
        if len(rows) == limit:
            more = True
            break
        rows.append(job_view(core, record))
        last = record
    return {"jobs": rows, "next": last.job_id if more and last is not None else None}


def in_account(account: str, ancestor: str) -> bool:
    return account == ancestor or account.startswith(ancestor + "/")


def queue_view(
    core: ServiceCore, now: float, visible: AccountFilter, account: str | None
) -> dict[str, Any]:
    rows = []
    for row in core.scheduler.queue_rows(now):
        if not visible(row.account) or (
            account is not None and not in_account(row.account, account)
        ):
            continue
        job = core.scheduler.jobs[row.job]
        rows.append(
            {
                "position": row.position,
                "id": row.job,
                "account": row.account,
                "priority": row.priority,
                "gpus": job.gpus,
                "submit_time": job.submit_time,
                "sort_key": _sort_key(row.tier, row.owed, row.standing, row.priority),
                "reason": row.reason,
                "code": str(row.code),
            }
        )
    return {"queue": rows}


def _sort_key(tier: str, owed: bool, standing: str, priority: int) -> list[Any]:
    """What orders the queue: the tier, whether the account is owed its budget, the account's
    fair-share standing in words, then the job's priority (submission order breaks ties)."""
    return [tier, owed, standing, priority]


def explain_view(core: ServiceCore, record: JobRecord, now: float) -> dict[str, Any]:
    history = [
        {"time": event.time, "event": event.kind, **event.data}
        for event in core.store.job_events(record.job_id)
    ]
    view: dict[str, Any] = {
        "id": record.job_id,
        "state": str(record.state),
        "position": None,
        "sort_key": None,
        "reason": record.reason,
        "code": str(ReasonCode.ENDED),
        "reservation": None,
        "reservation_note": None,
        "history": history,
    }
    if core.live_job(record.job_id) is None:
        return view
    explanation = core.scheduler.explain(record.job_id, now)
    view["reason"] = explanation.text if explanation.queue is not None else explanation.reason
    view["code"] = str(explanation.code)
    queued = explanation.queue
    if queued is not None:
        view["position"] = {
            "account": explanation.position_in_account,
            "overall": explanation.position,
        }
        standing = queued.standing.describe() if queued.standing is not None else "-"
        priority = queued.entry.priority
        view["sort_key"] = _sort_key(queued.tier.name.lower(), queued.owed, standing, priority)
    if explanation.reservation_start is not None:
        view["reservation"] = {
            "start_time": explanation.reservation_start,
            "domain": explanation.reservation_domain,
        }
    elif queued is not None:
        view["reservation_note"] = _never_reserved(core, record.job_id, queued.tier)
    return view


def _never_reserved(core: ServiceCore, job_id: str, tier: QueueTier) -> str | None:
    """Why the pending job never gets a reserved start (None: it may get one when it is the
    first blocked job that may): the cycle reserves only for allocated jobs of at least
    `reserve_min_gpus` GPUs."""
    if tier is not QueueTier.ALLOCATED:
        kind = tier.name.lower()
        return (
            f"a start is reserved only for work within a budget, and this job waits as {kind} work"
        )
    job = core.scheduler.jobs[job_id]
    least = core.scheduler.settings.reserve_min_gpus
    if job.gpus < least:
        return f"a start is reserved only for jobs of {least:g} GPUs or more"
    return None


# --- nodes -------------------------------------------------------------------------------------


def node_row(core: ServiceCore, node: int, jobs: list[str]) -> dict[str, Any]:
    state = core.scheduler.state
    topology = state.topology
    model = int(topology.gpu_model[node])
    return {
        "name": topology.node_names[node],
        "labels": topology.node_path(node),
        "health": Health(int(state.health[node])).name.lower(),
        "gpus": int(topology.gpu_count[node]),
        "free_gpus": int(state.free_whole_gpus[node]),
        "gpu_model": topology.gpu_models[model].name if topology.gpu_models else "",
        "jobs": jobs,
    }


def node_rows(
    core: ServiceCore, visible: AccountFilter, limit: int, after: str | None
) -> dict[str, Any]:
    """Nodes in topology order; a job on a node is named only to those who may see it."""
    topology = core.scheduler.state.topology
    first = 0 if after is None else core.node_index(after) + 1
    last = min(topology.n_nodes, first + limit)
    jobs_on: dict[int, list[str]] = {}
    for owner, allocation in core.scheduler.state.allocations.items():
        if not visible(core.records[owner].account):
            continue
        for node in dict.fromkeys(allocation.nodes.tolist()):
            if first <= node < last:
                jobs_on.setdefault(node, []).append(owner)
    rows = [node_row(core, node, jobs_on.get(node, [])) for node in range(first, last)]
    following = topology.node_names[last - 1] if last < topology.n_nodes and rows else None
    return {"nodes": rows, "next": following}


def one_node(core: ServiceCore, name: str) -> dict[str, Any]:
    node = core.node_index(name)
    jobs = core.scheduler.state.owners_on([node])
    return node_row(core, node, sorted(jobs))


def level_rows(core: ServiceCore, level_name: str) -> dict[str, Any]:
    state = core.scheduler.state
    topology = state.topology
    level = topology.level_index(level_name)
    n_domains = topology.n_domains(level)
    domain_of = topology.node_domain[level]
    healthy = np.bincount(domain_of[state.health == Health.HEALTHY], minlength=n_domains)
    gpus = np.bincount(domain_of, weights=topology.gpu_count, minlength=n_domains)
    sizes = topology.domain_sizes(level)
    rows = [
        {
            "domain": str(topology.domain_name(level, d)),
            "nodes": int(sizes[d]),
            "gpus": int(gpus[d]),
            "free_gpus": int(state.free_gpus[level][d]),
            "healthy_nodes": int(healthy[d]),
        }
        for d in range(n_domains)
    ]
    return {"level": level_name, "domains": rows}


# --- accounts ----------------------------------------------------------------------------------


def accounts_view(core: ServiceCore, now: float, visible: AccountFilter) -> dict[str, Any]:
    scheduler = core.scheduler
    tree = scheduler.tree
    pending: dict[str, int] = {}
    running: dict[str, int] = {}
    for record in core.records.values():
        counts = pending if record.state is JobState.PENDING else running
        if record.live:
            counts[record.account] = counts.get(record.account, 0) + 1
    ranking = scheduler.queue.ranking(now)
    rows = []
    for account in tree:
        if not visible(account):
            continue
        standing = ranking.standings.get(account)
        owed = core.owed.figures(core, account, now)
        rows.append(
            {
                "account": account,
                "budget_gpus": scheduler.budget_gpus(account),
                "running_gpus": scheduler.usage.running(account),
                "usage_gpu_hours": scheduler.usage.usage(account, now) / HOUR,
                "fair_share": tree.effective_share(account),
                "standing": standing.describe() if standing is not None else None,
                "pending": _count_below(pending, account),
                "running": _count_below(running, account),
                "owed_gpu_hours": owed.owed / HOUR,
                "delivered_gpu_hours": owed.delivered / HOUR,
                "delivered_within_owed_gpu_hours": owed.delivered_within_owed / HOUR,
                "owed_met": owed.owed_met,
            }
        )
    return {"tree": tree.to_dict(), "owed_window_hours": window_hours(core), "accounts": rows}


def _count_below(counts: dict[str, int], account: str) -> int:
    return sum(n for name, n in counts.items() if in_account(name, account))


def visible_job(core: ServiceCore, job_id: str, visible: AccountFilter) -> JobRecord:
    """The job's record; Forbidden if it belongs to an account the caller may not see."""
    record = core.record(job_id)
    if not visible(record.account):
        raise Forbidden(f"job {job_id!r} belongs to an account this token cannot see")
    return record


def policy_view(core: ServiceCore) -> dict[str, Any]:
    """The scheduler's settings that differ from the defaults (`SchedulerSettings.changes`),
    as plain JSON: what `toposched serve`'s policy flags chose."""
    return {"policy": core.scheduler.settings.changes_as_json()}
