"""The service's state: the scheduler, the job records mirroring the store, and what is due to
the backend. Only the loop's thread touches it; every change it makes to the store happens
inside the loop's open transaction, so nothing is seen or sent before it is committed."""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass, field
from typing import Any

from toposched.backends.protocol import (
    Backend,
    Launch,
    NodeWatcher,
    PodLaunch,
    Report,
    ReportKind,
    Stop,
)
from toposched.cluster.errors import InputError
from toposched.cluster.state import Allocation, Health
from toposched.jobs.spec import JobSpec
from toposched.scheduler.core import Scheduler
from toposched.scheduler.jobs import Job, JobState
from toposched.service.documents import parse_run
from toposched.service.errors import NotFound
from toposched.service.fits import ClusterLimits
from toposched.service.owed import OwedBook
from toposched.service.records import LIVE_STATES, JobRecord
from toposched.service.store_protocol import StateStore

Command = Launch | Stop
NAMES_KEPT = 1 << 16
"""Node names `ServiceCore.node_name` keeps; past it the memory starts again."""
log = logging.getLogger("toposched.service")


def _verb(command: Command) -> str:
    return "the start" if isinstance(command, Launch) else "the stop"


@dataclass
class ServiceCore:
    """Everything the loop owns. `outbox` holds decisions committed (or about to be, in the
    open transaction) and not yet handed to the backend; `sent` the ids handed over, marked in
    the store by the next transaction."""

    scheduler: Scheduler
    store: StateStore
    backend: Backend
    limits: ClusterLimits
    records: dict[str, JobRecord] = field(default_factory=dict)
    by_key: dict[str, str] = field(default_factory=dict)
    outbox: list[tuple[int, Command]] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    refused: list[Report] = field(default_factory=list)
    dirty: bool = True
    """Whether anything changed since the last cycle (a cycle runs only then, or on a tick)."""
    owed: OwedBook = field(default_factory=OwedBook)
    """Owed and delivered GPU-hours per team, advanced by the loop at each turn."""
    _names: dict[int, str] = field(default_factory=dict, init=False, repr=False)
    _names_of: object = field(default=None, init=False, repr=False)
    """The topology whose node names `_names` holds (a regrown cluster has another)."""

    @functools.cached_property
    def node_watcher(self) -> NodeWatcher | None:
        """The backend if it follows its nodes, else None: asked once, since the check against
        a runtime protocol costs tens of microseconds and the loop needs it at every turn."""
        return self.backend if isinstance(self.backend, NodeWatcher) else None

    # --- records ---------------------------------------------------------------------------
    def record(self, job_id: str) -> JobRecord:
        record = self.records.get(job_id)
        if record is None:
            raise NotFound("job", job_id)
        return record

    def add_record(self, record: JobRecord) -> None:
        self.store.insert_job(record)
        self.records[record.job_id] = record
        if record.idempotency_key is not None:
            self.by_key[record.idempotency_key] = record.job_id

    def forget_record(self, record: JobRecord) -> None:
        """Undo `add_record` in memory (the store undoes it with the command's savepoint)."""
        del self.records[record.job_id]
        if record.idempotency_key is not None:
            del self.by_key[record.idempotency_key]

    def live_job(self, job_id: str) -> Job | None:
        """The scheduler's job for a live record (pending or running), else None."""
        record = self.records.get(job_id)
        if record is None or not record.live:
            return None
        return self.scheduler.jobs.get(job_id)

    def sync(self, record: JobRecord, job: Job) -> None:
        """Copy the scheduler's view of a job into its record and store it."""
        if record.live and job.state not in LIVE_STATES:
            self.owed.ended(record.job_id)
        record.state = job.state
        record.start_time = job.start_time
        record.end_time = job.end_time
        record.preemptions = job.preemptions
        record.unallocated = job.unallocated
        # A job that ended keeps the last thing that happened to it ("finished", "cancelled",
        # "preempted; ..."), not the reason it last waited or ran.
        ended = not record.live and job.history
        record.reason = job.history[-1][1] if ended else job.reason
        running = job.state is JobState.RUNNING
        record.allocation = self.scheduler.state.allocations.get(job.job_id) if running else None
        self.store.update_job(record)

    def event(self, now: float, kind: str, record: JobRecord | None, **data: Any) -> None:
        if record is None:
            self.store.add_event(now, kind, None, None, **data)
        else:
            self.store.add_event(
                now, kind, record.job_id, record.account, state=str(record.state), **data
            )

    # --- decisions for the backend ---------------------------------------------------------
    def launch(self, record: JobRecord) -> Launch:
        allocation = record.allocation
        assert allocation is not None, record.job_id
        nodes: list[int] = allocation.nodes.tolist()
        name_of = {node: self.node_name(node) for node in nodes}
        # Ranks run set after set (one part, for pods of one shape).
        gpus_of = [
            (gpus, part.gpu_milli) for part in allocation.parts for gpus in part.gpus.tolist()
        ]
        pods = tuple(
            PodLaunch(rank=rank, node=name_of[node], gpus=tuple(gpus), gpu_milli=milli)
            for rank, (node, (gpus, milli)) in enumerate(zip(nodes, gpus_of, strict=True))
        )
        return Launch(
            job_id=record.job_id,
            attempt=record.attempt,
            pods=pods,
            run=parse_run(record.spec.get("run")),
            expected_runtime=self.spec_of(record).expected_runtime,
        )

    def node_name(self, node: int) -> str:
        """A node's name, kept once made: a large fleet's names are built on demand
        (`GeneratedNames`, a few microseconds each) and every start names its nodes."""
        topology = self.scheduler.state.topology
        names = self._names
        if self._names_of is not topology or len(names) >= NAMES_KEPT:
            names.clear()
            self._names_of = topology
        name = names.get(node)
        if name is None:
            name = names[node] = topology.node_names[node]
        return name

    def spec_of(self, record: JobRecord) -> JobSpec:
        """The job's validated spec: the scheduler's for a job it holds, else read from the
        stored document."""
        job = self.scheduler.jobs.get(record.job_id)
        if job is not None:
            return job.spec
        fields = {key: value for key, value in record.spec.items() if key != "run"}
        return JobSpec.from_dict(fields)

    def queue_start(self, record: JobRecord) -> Launch:
        decision = self.store.add_decision(record.job_id, record.attempt, "start", {})
        launch = self.launch(record)
        self.outbox.append((decision, launch))
        return launch

    def queue_stop(self, record: JobRecord, attempt: int, grace_s: float, evicted: bool) -> None:
        payload = {"grace_s": grace_s, "evicted": evicted}
        decision = self.store.add_decision(record.job_id, attempt, "stop", payload)
        self.outbox.append((decision, Stop(record.job_id, attempt, grace_s, evicted)))

    def take_outbox(self) -> list[tuple[int, Command]]:
        """The decisions stored since the last call, to send once their commit is done."""
        outbox, self.outbox = self.outbox, []
        return outbox

    def send_outbox(self, outbox: list[tuple[int, Command]] | None = None) -> None:
        """Hand committed decisions (`outbox`, or else all stored so far) to the backend,
        oldest first. A start the backend refuses becomes a failure report of that run,
        applied with the backend's own reports."""
        if outbox is None:
            outbox = self.take_outbox()
        for decision_id, command in outbox:
            try:
                if isinstance(command, Launch):
                    self.backend.start(command)
                else:
                    self.backend.stop(command)
            except Exception as error:  # any backend error: the service keeps serving
                log.error("backend refused %s of %s: %s", _verb(command), command.job_id, error)
                if isinstance(command, Launch):
                    self.refused.append(
                        Report(
                            command.job_id,
                            command.attempt,
                            ReportKind.FAILED,
                            0.0,
                            f"the backend refused to start it: {error}",
                        )
                    )
            self.sent.append(decision_id)

    def take_refused(self, now: float) -> list[Report]:
        refused, self.refused = self.refused, []
        return [dataclasses.replace(report, time=now) for report in refused]

    def flush_sent(self) -> None:
        """Inside a transaction: mark the decisions handed over since the last one."""
        if self.sent:
            self.store.mark_sent(self.sent)
            self.sent = []

    # --- nodes -----------------------------------------------------------------------------
    def node_index(self, name: str) -> int:
        try:
            return self.scheduler.state.topology.node_index(name)
        except (InputError, KeyError):
            raise NotFound("node", name) from None

    def set_health(self, name: str, health: Health, now: float) -> None:
        """Change one node's health; gangs on a node that goes down fail (resumable ones are
        requeued) and the backend is told to stop what is left of them."""
        node = self.node_index(name)
        before = {job_id: self.records[job_id].attempt for job_id in self.scheduler.running}
        failed = self.scheduler.set_health([node], health, now)
        self.store.set_node_health(name, health.name.lower())
        self.event(now, "node", None, node=name, health=health.name.lower())
        for job in failed:
            record = self.records[job.job_id]
            self.sync(record, job)
            self.queue_stop(record, before[job.job_id], 0.0, evicted=False)
            self.event(now, "failed", record, detail=f"node {name} down")
            if record.pending:
                self.event(now, "requeued", record)
        self.dirty = True

    def allocation_nodes(self, allocation: Allocation | None) -> list[str]:
        if allocation is None:
            return []
        return [self.node_name(node) for node in dict.fromkeys(allocation.nodes.tolist())]
