"""What runs on a Ray node for a gang: one detached actor per node of the gang, which starts the
gang's pods on that node and watches them to their end.

The actor holds the pods' place (their placement-group bundle and GPUs: one Ray worker process
per node of the gang, not per pod, as Ray starts worker processes slowly). Each pod's command
runs as a child process in a session of its own, so a stop reaches everything it started. A
stop sends SIGTERM (a job can catch it to checkpoint, see `toposched.payload.on_stop`) and, once
the grace period is over, SIGKILL to each pod's process group; the actor enforces the deadline
itself, so a stop completes even while the service is down. A pod is also killed when the
actor's process dies (Linux: the parent-death signal), as a container dies with its runtime.

Everything the backend learns (exit statuses, checkpoint lines, the stop under way) it asks the
actor, so a backend made after a restart of the service learns the same.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from toposched import payload

__all__ = ["HostPlace", "HostStatus", "PodSpec", "PodStatus", "PodsActor", "pod_command"]

_PR_SET_PDEATHSIG = 1
_TICK_S = 0.05
"""How often a pod's watcher looks for a stop to carry out while the pod runs."""
_PYTHON_NAMES = ("python", "python3")


def pod_command(command: Sequence[str]) -> list[str]:
    """`command` as the node runs it: a leading `python`/`python3` is the interpreter of the
    Ray worker (the one with toposched and the job's packages installed on that node)."""
    argv = list(command)
    if argv and argv[0] in _PYTHON_NAMES:
        argv[0] = sys.executable
    return argv


def _die_with_parent() -> None:
    """In the child before exec: be killed when the thread that started it ends (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def _signal(pid: int, signum: int, group: bool) -> None:
    try:
        if group:
            os.killpg(pid, signum)
        else:
            os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass(frozen=True)
class HostPlace:
    """Where an actor landed: its Ray node, that node's address, and a port free there (the
    rendezvous port when the actor holds rank 0)."""

    node_id: str
    address: str
    port: int


@dataclass(frozen=True)
class PodSpec:
    """What one pod on this node runs."""

    rank: int
    command: tuple[str, ...]
    env: Mapping[str, str]
    workdir: str | None


@dataclass(frozen=True)
class PodStatus:
    rank: int
    returncode: int | None
    """None while the command runs (or before it started)."""
    detail: str
    log: str


@dataclass(frozen=True)
class HostStatus:
    """What the actor knows of its pods now."""

    ranks: tuple[int, ...]
    launched: bool
    pods: tuple[PodStatus, ...]
    checkpoints: tuple[str, ...]
    """Checkpoint lines written since the last status (JSON, one per `checkpointed` call)."""
    stop_kind: str | None
    """The stop under way ("evicted", "stopped", "failed"), if any."""
    killed: bool
    """Whether the grace period ran out and a pod was killed."""


class PodsActor:
    """The pods `ranks` of one attempt of a job, on one node (made a Ray actor by the backend;
    `max_concurrency` > 2 so `watch` can wait while `stop` is called)."""

    def __init__(self, job_id: str, attempt: int, ranks: Sequence[int]) -> None:
        self.ranks = tuple(ranks)
        self.folder = Path(tempfile.mkdtemp(prefix=f"toposched-{attempt}-"))
        self.checkpoint_file = self.folder / "checkpoint"
        self._lock = threading.Condition()
        self._launched = False
        self._exits: dict[int, tuple[int, str]] = {}
        self._exits_seen = 0
        self._checkpoint_seen = 0
        self._stop_kind: str | None = None
        self._deadline = float("inf")
        self._killed = False

    def place(self) -> HostPlace:
        import ray

        address = str(ray.util.get_node_ip_address())
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
            port = int(probe.getsockname()[1])
        return HostPlace(str(ray.get_runtime_context().get_node_id()), address, port)

    def log_file(self, rank: int) -> Path:
        return self.folder / f"{rank}.log"

    def launch(self, pods: Sequence[PodSpec]) -> None:
        """Start every pod (none if a stop came first); a pod that cannot start has ended."""
        with self._lock:
            if self._launched:
                return
            self._launched = True
            if self._stop_kind is not None:
                for pod in pods:
                    self._end(pod.rank, -signal.SIGTERM, "stopped before it started")
                return
        for pod in pods:
            ready = threading.Event()
            threading.Thread(target=self._supervise, args=(pod, ready), daemon=True).start()
            ready.wait()

    def _supervise(self, pod: PodSpec, ready: threading.Event) -> None:
        """Run one pod to its end, carrying out a stop; this thread lives as long as the pod
        (whose death signal is tied to the thread that started it)."""
        env = {**os.environ, **pod.env, payload.CHECKPOINT_FILE: str(self.checkpoint_file)}
        try:
            with open(self.log_file(pod.rank), "ab") as log:
                child = subprocess.Popen(
                    pod_command(pod.command),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=pod.workdir,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
        except OSError as error:
            with self._lock:
                self._end(pod.rank, 127, f"could not be started: {error.strerror or error}")
            ready.set()
            return
        ready.set()
        terminated = killed = False
        while True:
            try:
                returncode = child.wait(timeout=_TICK_S)
                break
            except subprocess.TimeoutExpired:
                pass
            with self._lock:
                stopping, deadline = self._stop_kind is not None, self._deadline
            if stopping and not terminated:
                terminated = True
                _signal(child.pid, signal.SIGTERM, group=False)
            if stopping and not killed and time.monotonic() >= deadline:
                killed = True
                with self._lock:
                    self._killed = True
                _signal(child.pid, signal.SIGKILL, group=True)
        _signal(child.pid, signal.SIGKILL, group=True)  # What the command left in its session.
        with self._lock:
            self._end(pod.rank, returncode, "killed after the grace period" if killed else "")

    def _end(self, rank: int, returncode: int, detail: str) -> None:
        self._exits[rank] = (returncode, detail)
        self._lock.notify_all()

    def stop(self, kind: str, grace_s: float) -> None:
        """SIGTERM to every pod's command, SIGKILL to its process group once `grace_s` seconds
        are over; a later stop can shorten the grace period, never lengthen it."""
        with self._lock:
            if self._stop_kind is None:
                self._stop_kind = kind
            self._deadline = min(self._deadline, time.monotonic() + max(grace_s, 0.0))

    def watch(self, timeout_s: float) -> HostStatus:
        """The pods' status once one more ended or a checkpoint line came, or after
        `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while len(self._exits) == self._exits_seen and not self._fresh_checkpoint():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(min(left, 0.2))
            self._exits_seen = len(self._exits)
            return self._status()

    def _fresh_checkpoint(self) -> bool:
        try:
            return self.checkpoint_file.stat().st_size > self._checkpoint_seen
        except OSError:
            return False

    def _status(self) -> HostStatus:
        lines: tuple[str, ...] = ()
        try:
            with open(self.checkpoint_file, "rb") as handle:
                handle.seek(self._checkpoint_seen)
                fresh = handle.read()
            complete = fresh[: fresh.rfind(b"\n") + 1]
            self._checkpoint_seen += len(complete)
            lines = tuple(line.decode("utf-8", "replace") for line in complete.splitlines())
        except OSError:
            pass
        pods = []
        for rank in self.ranks:
            returncode, detail = self._exits.get(rank, (None, ""))
            pods.append(PodStatus(rank, returncode, detail, str(self.log_file(rank))))
        return HostStatus(
            self.ranks,
            self._launched,
            tuple(pods),
            lines,
            self._stop_kind,
            self._killed,
        )


def checkpoint_note(line: str) -> str:
    """What a checkpoint line says, as the local backend words it ("rank 0: step 100")."""
    try:
        value = json.loads(line)
        rank, note = value.get("rank"), str(value.get("note") or "")
    except (ValueError, AttributeError):
        return "checkpointed"
    return f"rank {rank}: {note}" if note else f"rank {rank}"
