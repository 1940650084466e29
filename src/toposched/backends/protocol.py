"""The backend protocol: what the service asks of whatever runs the pods.

A backend is small and dumb. The service hands it a `Launch` (a bound job's pods, each with
its node and GPU indices) or a `Stop` (with a grace period), and later collects `Report`s of
what happened. It never chooses anything.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import NamedTuple, Protocol, runtime_checkable

from toposched.cluster.state import Health
from toposched.cluster.topology import Topology


@dataclass(frozen=True)
class RunSpec:
    """What every pod of a job runs: an argv (no shell), extra environment, working folder."""

    command: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str | None = None


@dataclass(frozen=True)
class PodLaunch:
    """One pod: its rank in the gang, the node it runs on and the GPUs it holds there.

    `gpus` are indices of whole GPUs on the node; a fractional pod has one index and
    `gpu_milli` < 1000.
    """

    rank: int
    node: str
    gpus: tuple[int, ...]
    gpu_milli: int = 1000


@dataclass(frozen=True)
class Launch:
    """Start every pod of `job_id` (one attempt); `attempt` tells runs of a requeued job apart."""

    job_id: str
    attempt: int
    pods: tuple[PodLaunch, ...]
    run: RunSpec | None
    expected_runtime: float | None = None
    """Seconds; the dry-run backend reports the job finished after this long."""


@dataclass(frozen=True)
class Stop:
    """Stop `job_id`: a termination signal it can catch, then a hard stop after `grace_s`."""

    job_id: str
    attempt: int
    grace_s: float
    evicted: bool
    """True for an eviction (reported back as `EVICTED`), False for a cancellation."""


class ReportKind(StrEnum):
    STARTED = "started"
    FINISHED = "finished"
    FAILED = "failed"
    EVICTED = "evicted"
    """Gone after a `Stop` with `evicted=True`: its capacity may be reused."""
    STOPPED = "stopped"
    """Gone after a `Stop` with `evicted=False` (a cancellation)."""
    CHECKPOINTED = "checkpointed"


@dataclass(frozen=True)
class Report:
    """Something that happened to a job's run, at `time` on the service's clock."""

    job_id: str
    attempt: int
    kind: ReportKind
    time: float
    detail: str = ""
    """E.g. "pod 3 exited with status 1" for a failure."""


class RunningJob(NamedTuple):
    """A job the backend still runs, for reconciliation after a restart (a tuple: a restart
    of a dry-run fleet lists a hundred thousand)."""

    job_id: str
    attempt: int


class Backend(Protocol):
    """What the service drives. Calls come from the service's loop, one at a time."""

    def start(self, launch: Launch) -> None:
        """Start the pods; return at once (a `STARTED` report follows)."""

    def stop(self, stop: Stop) -> None:
        """Signal the pods; return at once (an `EVICTED` or `STOPPED` report follows)."""

    def poll(self, now: float) -> Sequence[Report]:
        """Reports since the last call, oldest first."""

    def running(self) -> Sequence[RunningJob]:
        """Every job the backend still runs (after a restart: what survived it)."""

    def log_path(self, job_id: str, rank: int) -> str | None:
        """Where a pod's captured output is, if the backend keeps it on this machine."""

    def close(self) -> None:
        """Stop watching; pods keep running unless the backend cannot outlive the service."""


@dataclass(frozen=True)
class NodeChange:
    """A node of the cluster model whose health the backend saw change, e.g. a machine that
    died (`DOWN`) or came back (`HEALTHY`)."""

    node: str
    health: Health
    detail: str = ""


@runtime_checkable
class NodeWatcher(Protocol):
    """A backend that also follows the nodes it runs pods on (e.g. Ray): their health, and
    nodes that join.

    The service applies each change with its node-failure handling: a gang on a node gone
    `DOWN` fails, resumable work is requeued; a grown model replaces the service's at once
    (see `toposched.service.regrow`). Backends on a fixed machine need not offer it;
    `isinstance(backend, NodeWatcher)` tells.
    """

    def node_changes(self) -> Sequence[NodeChange]:
        """Changes since the last call, oldest first."""

    def grown_model(self) -> Topology | None:
        """The cluster model with the nodes that joined since the last call (every node of
        the model before kept, by name), or None when none joined. Asked after
        `node_changes`; the service grows its model before applying those changes."""
