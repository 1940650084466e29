"""Prometheus metrics of the service, at `/metrics` (docs/dashboard.md lists them).

Two kinds. Events (cycles, commits, starts, evictions) are observed by the loop as they happen
into histograms and counters (`ServiceMetrics`, a `LoopObserver`). The state (jobs, GPUs,
accounts, domains) is read at scrape time: one read in the loop's thread takes a `Snapshot` of
plain numbers from the scheduler's ledgers and the cluster state's per-domain aggregates (array
sums and a pass over the live jobs, never over nodes or GPUs), and the text is written from it
outside the loop.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from toposched.cluster.state import Health
from toposched.policy.owed import OwedFigures
from toposched.scheduler.core import CycleResult
from toposched.scheduler.decisions import Bind, Evict
from toposched.service.auth import Principal
from toposched.service.core import ServiceCore
from toposched.service.http import ApiError, Context

log = logging.getLogger("toposched.service")
PREFIX = "toposched"
MAX_DOMAIN_SERIES = 512
"""Levels with more domains than this (e.g. 13,890 racks) get per-level sums, not series."""

JOB_CLASSES: tuple[tuple[str, float], ...] = (
    ("debug", 1.0),
    ("small", 8.0),
    ("medium", 72.0),
    ("large", float("inf")),
)
"""A job's class by its GPUs: at most 1, one node (8), one NVL72 rack (72), more."""

WAIT_BUCKETS = (1, 5, 15, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400, 259200, 604800)
CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
COMMIT_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)


def job_class(gpus: float) -> str:
    for name, most in JOB_CLASSES:
        if gpus <= most:
            return name
    return JOB_CLASSES[-1][0]


class ServiceMetrics:
    """The event metrics, in a registry of their own (one per app, so apps never clash)."""

    def __init__(self) -> None:
        # `_created` series: Prometheus does without them (the function is unannotated)
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = CollectorRegistry()
        registry = self.registry
        self.admission_wait = Histogram(
            f"{PREFIX}_admission_wait_seconds",
            "Time from a job's submission to its first start decision",
            ["account", "job_class"],
            buckets=WAIT_BUCKETS,
            registry=registry,
        )
        self.cycle = Histogram(
            f"{PREFIX}_cycle_duration_seconds",
            "One scheduling turn: backend reports, the cycle, storing its decisions",
            buckets=CYCLE_BUCKETS,
            registry=registry,
        )
        self.decision_latency = Histogram(
            f"{PREFIX}_decision_latency_seconds",
            "Time from an API change (submit, cancel, drain...) arriving to the end of the "
            "cycle that took it into account",
            buckets=CYCLE_BUCKETS,
            registry=registry,
        )
        self.commit = Histogram(
            f"{PREFIX}_store_commit_seconds",
            "Time to commit a batch of API changes to the store (the grouped commit)",
            buckets=COMMIT_BUCKETS,
            registry=registry,
        )
        self.evictions = Counter(
            f"{PREFIX}_evictions",
            "Running jobs the scheduler decided to evict, by the rule that allowed it",
            ["rule"],
            registry=registry,
        )
        self.lost = Counter(
            f"{PREFIX}_eviction_lost_gpu_seconds",
            "GPU-seconds of work the evictions decided throw away (each victim's work since its "
            "last checkpoint, or since its start when it cannot resume), by the rule that "
            "allowed them",
            ["rule"],
            registry=registry,
        )
        self.decisions = Counter(
            f"{PREFIX}_decisions",
            "Decisions of the scheduling cycles, by kind: bind (a start), evict",
            ["kind"],
            registry=registry,
        )
        ProcessCollector(registry=registry)
        self._binds = self.decisions.labels("bind")
        self._evicts = self.decisions.labels("evict")
        self._admission_waits: dict[tuple[str, str], Histogram] = {}
        """`admission_wait`'s child per account and job class (`labels` costs a lock and a
        lookup; a submission's start observes one)."""

    def text(self) -> str:
        """The event metrics in the text format."""
        return generate_latest(self.registry).decode()

    # --- LoopObserver ------------------------------------------------------------------------
    def committed(self, seconds: float) -> None:
        self.commit.observe(seconds)

    def cycled(
        self, core: ServiceCore, result: CycleResult, seconds: float, waits: list[float]
    ) -> None:
        try:
            self._cycled(core, result, seconds, waits)
        except Exception:  # a metrics bug must not stop the scheduler's loop
            log.exception("metrics: the cycle could not be observed")

    def _cycled(
        self, core: ServiceCore, result: CycleResult, seconds: float, waits: list[float]
    ) -> None:
        self.cycle.observe(seconds)
        for wait in waits:
            self.decision_latency.observe(wait)
        binds = evicts = 0
        for decision in result.decisions:
            if isinstance(decision, Bind):
                binds += 1
                self._started(core, decision.job_id, result.now)
            elif isinstance(decision, Evict):
                evicts += 1
                self.evictions.labels(decision.rule).inc()
                self.lost.labels(decision.rule).inc(decision.lost_gpu_seconds)
        if binds:
            self._binds.inc(binds)
        if evicts:
            self._evicts.inc(evicts)

    def _started(self, core: ServiceCore, job_id: str, now: float) -> None:
        record = core.records.get(job_id)
        job = core.scheduler.jobs.get(job_id)
        if record is None or job is None or record.attempt != 1:
            return  # a restart's wait is not an admission
        wait = max(0.0, now - job.submit_time)
        key = (record.account, job_class(job.gpus))
        child = self._admission_waits.get(key)
        if child is None:
            child = self._admission_waits[key] = self.admission_wait.labels(*key)
        child.observe(wait)


# --- the state, read at scrape time --------------------------------------------------------------


@dataclass(frozen=True)
class AccountRow:
    account: str
    budget_gpus: float
    running_gpus: float
    usage_gpu_seconds: float
    share: float
    fair_share: float
    """Level FS of the account among its siblings: share over usage; above 1 is under-served."""
    owed: OwedFigures
    """Owed and delivered GPU-seconds over the fair-share window (`toposched.policy.owed`)."""


@dataclass(frozen=True)
class DomainRow:
    level: str
    domain: str
    gpus: int
    free_gpus: int
    healthy_nodes: int


@dataclass
class Snapshot:
    """Plain numbers read in the loop; written out as metrics outside it."""

    pending: dict[tuple[str, str], int] = field(default_factory=dict)
    running: dict[str, int] = field(default_factory=dict)
    gpus: dict[str, float] = field(default_factory=dict)
    nodes: dict[str, int] = field(default_factory=dict)
    accounts: list[AccountRow] = field(default_factory=list)
    domains: list[DomainRow] = field(default_factory=list)
    level_free: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per level: domains with every GPU free and healthy, domains with none free."""
    cycles: int = 0


def take_snapshot(core: ServiceCore, now: float, cycles: int) -> Snapshot:
    """The state's numbers; a pass over the live jobs and per-domain array sums only."""
    snapshot = Snapshot(cycles=cycles)
    _jobs(core, now, snapshot)
    _gpus(core, snapshot)
    _accounts(core, now, snapshot)
    _domains(core, snapshot)
    return snapshot


def _jobs(core: ServiceCore, now: float, snapshot: Snapshot) -> None:
    """Running jobs from the scheduler's running set and pending ones from its queue: never a
    pass over every job the store has seen."""
    scheduler = core.scheduler
    for job in scheduler.running.values():
        account = job.spec.account
        snapshot.running[account] = snapshot.running.get(account, 0) + 1
    for entry in scheduler.queue.ordered(now):
        job = scheduler.jobs[entry.job_id]
        key = (job.spec.account, str(job.reason_code))
        snapshot.pending[key] = snapshot.pending.get(key, 0) + 1


def _gpus(core: ServiceCore, snapshot: Snapshot) -> None:
    state = core.scheduler.state
    held = unallocated = 0.0
    for job in core.scheduler.running.values():
        held += job.gpus
        if job.unallocated:
            unallocated += job.gpus
    total = float(state.topology.n_gpus)
    idle = float(state.free_milli[0][0]) / 1000  # free on healthy nodes, the root's sum
    snapshot.gpus = {
        "allocated": held - unallocated,
        "unallocated_work": unallocated,
        "idle": idle,
        "unavailable": max(0.0, total - held - idle),
    }
    snapshot.nodes = {health.name.lower(): int(state.nodes_by_health[health]) for health in Health}


def _accounts(core: ServiceCore, now: float, snapshot: Snapshot) -> None:
    scheduler = core.scheduler
    ranking = scheduler.queue.ranking(now)
    for account in scheduler.tree:
        fair_share = float("nan")
        if account in ranking:
            fair_share = ranking.standing(account).levels[-1].level_fs
        snapshot.accounts.append(
            AccountRow(
                account=account,
                budget_gpus=scheduler.budget_gpus(account),
                running_gpus=scheduler.usage.running(account),
                usage_gpu_seconds=scheduler.usage.usage(account, now),
                share=scheduler.tree.effective_share(account),
                fair_share=fair_share,
                owed=core.owed.figures(core, account, now),
            )
        )


def _domains(core: ServiceCore, snapshot: Snapshot) -> None:
    state = core.scheduler.state
    topology = state.topology
    healthy = state.health == Health.HEALTHY
    for level in range(1, len(topology.domain_levels)):
        name = topology.domain_levels[level]
        domain_of = topology.node_domain[level]
        n_domains = topology.n_domains(level)
        gpus = np.bincount(domain_of, weights=topology.gpu_count, minlength=n_domains)
        free = state.free_gpus[level]
        snapshot.level_free[name] = (int(np.sum(free == gpus)), int(np.sum(free == 0)))
        if n_domains > MAX_DOMAIN_SERIES:
            continue
        healthy_nodes = np.bincount(domain_of[healthy], minlength=n_domains)
        snapshot.domains.extend(
            DomainRow(
                name,
                topology.domain_name(level, d),
                int(gpus[d]),
                int(free[d]),
                int(healthy_nodes[d]),
            )
            for d in range(n_domains)
        )


class SnapshotCollector(Collector):
    """The scrape-time families of one snapshot."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        pending = GaugeMetricFamily(
            f"{PREFIX}_pending_jobs",
            "Pending jobs by account and the scheduler's reason code (does-not-fit, "
            "no-preemption, reserved, preempting, ...)",
            labels=["account", "reason"],
        )
        for (account, reason), count in sorted(snap.pending.items()):
            pending.add_metric([account, reason], count)
        yield pending
        running = GaugeMetricFamily(
            f"{PREFIX}_running_jobs", "Running jobs by account", labels=["account"]
        )
        for account, count in sorted(snap.running.items()):
            running.add_metric([account], count)
        yield running
        gpus = GaugeMetricFamily(
            f"{PREFIX}_gpus",
            "GPUs by state: allocated (charged work), unallocated_work (running beyond budgets, "
            "preempted first), idle (free on healthy nodes), unavailable (free on drained, "
            "cordoned or down nodes, or on held spares)",
            labels=["state"],
        )
        for state, value in snap.gpus.items():
            gpus.add_metric([state], value)
        yield gpus
        nodes = GaugeMetricFamily(f"{PREFIX}_nodes", "Nodes by health", labels=["health"])
        for health, count in snap.nodes.items():
            nodes.add_metric([health], count)
        yield nodes
        yield from self._accounts()
        yield from self._domains()
        cycles = CounterMetricFamily(
            f"{PREFIX}_cycles", "Scheduling cycles run since the server started"
        )
        cycles.add_metric([], snap.cycles)
        yield cycles

    def _accounts(self) -> Iterator[Metric]:
        columns = (
            ("account_budget_gpus", "The account's budget: its effective share of the GPUs"),
            ("account_running_gpus", "GPUs the account's running jobs hold"),
            (
                "account_usage_gpu_seconds",
                "The account's decayed usage over the fair-share window, in GPU-seconds",
            ),
            ("account_share_ratio", "The account's effective share of the cluster (0 to 1)"),
            (
                "account_fair_share_ratio",
                "Level fair share: share over usage among siblings; "
                "above 1 is under-served (+Inf: no usage)",
            ),
            (
                "account_owed_gpu_seconds",
                "GPU-seconds owed to the account over the fair-share window: per hour, the "
                "smaller of its budget and what its allocated jobs asked for",
            ),
            (
                "account_delivered_gpu_seconds",
                "GPU-seconds the account's allocated jobs ran over the fair-share window",
            ),
            (
                "account_delivered_within_owed_gpu_seconds",
                "GPU-seconds delivered up to what was owed, hour by hour, over the window "
                "(over account_owed_gpu_seconds: the share of owed GPU-hours delivered)",
            ),
        )
        families = [
            GaugeMetricFamily(f"{PREFIX}_{name}", text, labels=["account"])
            for name, text in columns
        ]
        for row in self.snapshot.accounts:
            values = (
                row.budget_gpus,
                row.running_gpus,
                row.usage_gpu_seconds,
                row.share,
                row.fair_share,
                row.owed.owed,
                row.owed.delivered,
                row.owed.delivered_within_owed,
            )
            for family, value in zip(families, values, strict=True):
                family.add_metric([row.account], value)
        yield from families

    def _domains(self) -> Iterator[Metric]:
        gpus = GaugeMetricFamily(
            f"{PREFIX}_domain_gpus", "GPUs per topology domain", labels=["level", "domain"]
        )
        free = GaugeMetricFamily(
            f"{PREFIX}_domain_free_gpus",
            "Free whole GPUs on the healthy nodes of each topology domain",
            labels=["level", "domain"],
        )
        healthy = GaugeMetricFamily(
            f"{PREFIX}_domain_healthy_nodes",
            "Healthy nodes per topology domain",
            labels=["level", "domain"],
        )
        for row in self.snapshot.domains:
            gpus.add_metric([row.level, row.domain], row.gpus)
            free.add_metric([row.level, row.domain], row.free_gpus)
            healthy.add_metric([row.level, row.domain], row.healthy_nodes)
        yield from (gpus, free, healthy)
        empty = GaugeMetricFamily(
            f"{PREFIX}_level_empty_domains",
            "Domains of each level with every GPU free and healthy (room for the largest gangs)",
            labels=["level"],
        )
        full = GaugeMetricFamily(
            f"{PREFIX}_level_full_domains",
            "Domains of each level with no free healthy GPU",
            labels=["level"],
        )
        for level, (n_empty, n_full) in self.snapshot.level_free.items():
            empty.add_metric([level], n_empty)
            full.add_metric([level], n_full)
        yield from (empty, full)


# --- the route ---------------------------------------------------------------------------------


def may_scrape(principal: Principal) -> bool:
    """Admin tokens and metrics tokens read `/metrics`; team tokens do not (the metrics name
    every account)."""
    return principal.scrapes


def install(app: FastAPI, ctx: Context) -> ServiceMetrics:
    """Observe the loop and serve `/metrics`."""
    metrics = ServiceMetrics()
    ctx.loop.observer = metrics

    @app.get("/metrics", include_in_schema=False)
    async def scrape(request: Request) -> Response:
        if not may_scrape(ctx.principal(request)):
            raise ApiError(403, "/metrics needs an admin or metrics token")
        text = generate_latest(metrics.registry)
        if ctx.loop.ready.is_set() and ctx.loop.failed is None:
            cycles = ctx.loop.cycles
            snapshot = await ctx.call(
                lambda core, now: take_snapshot(core, now, cycles), writes=False
            )
            state = CollectorRegistry(auto_describe=False)
            state.register(SnapshotCollector(snapshot))
            text += generate_latest(state)
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    return metrics
