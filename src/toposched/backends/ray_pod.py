"""What runs on a Ray node for each pod: a detached actor that starts the pod's command and
watches it to its end.

The actor holds the pod's place (its placement-group bundle and GPUs); the command runs as a
child process in a session of its own, so a stop reaches everything it started. A stop sends
SIGTERM (a job can catch it to checkpoint, see `toposched.payload.on_stop`) and, once the
grace period is over, SIGKILL to the child's process group; the actor enforces the deadline
itself, so a stop completes even while the service is down. The child is also killed when the
actor's process dies (Linux: the parent-death signal), as a container dies with its runtime.

Everything the backend learns (exit status, checkpoint lines, the stop under way) it asks the
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

__all__ = ["PodActor", "PodPlace", "PodStatus", "pod_command"]

_PR_SET_PDEATHSIG = 1
_TICK_S = 0.05
"""How often the actor looks for a stop to carry out while its command runs."""
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


def _signal_group(pid: int, signum: int, leader_only: bool = False) -> None:
    try:
        if leader_only:
            os.kill(pid, signum)
        else:
            os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


@dataclass(frozen=True)
class PodPlace:
    """Where a pod's actor landed: its Ray node, that node's address, and a port free there
    (rank 0's is the gang's rendezvous port)."""

    node_id: str
    address: str
    port: int
    gpu_ids: tuple[str, ...]
    """The GPU ids Ray assigned to the actor (for the record: toposched's indices are used)."""


@dataclass(frozen=True)
class PodStatus:
    """What the actor knows of its pod now."""

    launched: bool
    returncode: int | None
    """None while the command runs (or before it started)."""
    detail: str
    checkpoints: tuple[str, ...]
    """Checkpoint lines written since the last status (JSON, one per `checkpointed` call)."""
    stop_kind: str | None
    """The stop under way ("evicted", "stopped", "failed"), if any."""
    killed: bool
    """Whether the grace period ran out and the pod was killed."""
    log: str


class PodActor:
    """One pod of one attempt of a job (made a Ray actor by the backend; `max_concurrency` > 2
    so `watch` can wait while `stop` is called)."""

    def __init__(self, job_id: str, attempt: int, rank: int) -> None:
        self.rank = rank
        self.folder = Path(tempfile.mkdtemp(prefix=f"toposched-{attempt}-{rank}-"))
        self.checkpoint_file = self.folder / "checkpoint"
        self.log_file = self.folder / "pod.log"
        self._lock = threading.Condition()
        self._launched = False
        self._returncode: int | None = None
        self._detail = ""
        self._checkpoint_seen = 0
        self._stop_kind: str | None = None
        self._killed = False
        self._deadline = float("inf")

    def place(self) -> PodPlace:
        import ray

        context = ray.get_runtime_context()
        address = ray.util.get_node_ip_address()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
            port = int(probe.getsockname()[1])
        gpu_ids = tuple(str(g) for g in ray.get_gpu_ids())
        return PodPlace(str(context.get_node_id()), str(address), port, gpu_ids)

    def launch(self, command: Sequence[str], env: Mapping[str, str], workdir: str | None) -> None:
        """Start the command (unless a stop came first); a failure to start ends the pod."""
        with self._lock:
            if self._launched:
                return
            self._launched = True
            if self._stop_kind is not None:
                self._end(-signal.SIGTERM, "stopped before it started")
                return
        full_env = {**env, payload.CHECKPOINT_FILE: str(self.checkpoint_file)}
        ready = threading.Event()
        thread = threading.Thread(
            target=self._supervise, args=(list(command), full_env, workdir, ready), daemon=True
        )
        thread.start()
        ready.wait()

    def _supervise(
        self, command: list[str], env: dict[str, str], workdir: str | None, ready: threading.Event
    ) -> None:
        """Run the command to its end, carrying out a stop; this thread lives as long as the
        child (whose death signal is tied to the thread that started it)."""
        try:
            with open(self.log_file, "ab") as log:
                child = subprocess.Popen(
                    pod_command(command),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=workdir,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,
                )
        except OSError as error:
            with self._lock:
                self._end(127, f"could not be started: {error.strerror or error}")
            ready.set()
            return
        ready.set()
        terminated = False
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
                _signal_group(child.pid, signal.SIGTERM, leader_only=True)
            if stopping and time.monotonic() >= deadline and not self._killed:
                with self._lock:
                    self._killed = True
                _signal_group(child.pid, signal.SIGKILL)
        _signal_group(child.pid, signal.SIGKILL)  # What the command left in its session.
        with self._lock:
            self._end(returncode, "killed after the grace period" if self._killed else "")

    def _end(self, returncode: int, detail: str) -> None:
        self._returncode = returncode
        self._detail = detail
        self._lock.notify_all()

    def stop(self, kind: str, grace_s: float) -> None:
        """SIGTERM to the command, SIGKILL to its process group once `grace_s` seconds are
        over; a later stop can shorten the grace period, never lengthen it."""
        with self._lock:
            if self._stop_kind is None:
                self._stop_kind = kind
            self._deadline = min(self._deadline, time.monotonic() + max(grace_s, 0.0))

    def watch(self, timeout_s: float) -> PodStatus:
        """The pod's status once it ended or wrote a checkpoint line, or after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            while self._returncode is None and not self._fresh_checkpoint():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._lock.wait(min(left, 0.2))
            return self._status()

    def _fresh_checkpoint(self) -> bool:
        try:
            return self.checkpoint_file.stat().st_size > self._checkpoint_seen
        except OSError:
            return False

    def _status(self) -> PodStatus:
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
        return PodStatus(
            self._launched,
            self._returncode,
            self._detail,
            lines,
            self._stop_kind,
            self._killed,
            str(self.log_file),
        )


def checkpoint_note(line: str) -> str:
    """What a checkpoint line says, as the local backend words it ("rank 0: step 100")."""
    try:
        value = json.loads(line)
        rank, note = value.get("rank"), str(value.get("note") or "")
    except (ValueError, AttributeError):
        return "checkpointed"
    return f"rank {rank}: {note}" if note else f"rank {rank}"
