"""The files a local run keeps under its state folder, shared by the backend and the pod wrapper.

One folder per attempt, `<state>/jobs/<job>/<attempt>/`, holds everything needed to find the
run again after the service restarts: what was launched, each pod's process id, each pod's
exit status (written by the wrapper as the pod ends), the stop in progress, the outcome, and
the pods' captured output. Every file but the logs and the checkpoint file is written whole
(to a temporary name, then renamed), so a reader never sees half of one.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

__all__ = ["AttemptFiles", "PodExit", "job_folder_name", "read_json", "write_json"]


def job_folder_name(job_id: str) -> str:
    """`job_id` as one safe folder name: percent-encoded, never "." or ".." or hidden."""
    name = quote(job_id, safe="")
    return "%2E" + name[1:] if name.startswith(".") else name


def write_json(path: Path, value: Any) -> None:
    """Write `value` to `path` whole: a crash leaves the old file or the new one, never half."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(value, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def read_json(path: Path) -> Any:
    """The JSON value in `path`, or None when it does not exist (or is unreadable)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class PodExit:
    """How a pod's command ended: its exit code (negative: killed by that signal), or why it
    could not be started."""

    returncode: int
    detail: str = ""

    def describe(self, rank: int) -> str:
        if self.detail:
            return f"pod {rank}: {self.detail}"
        if self.returncode < 0:
            return f"pod {rank} was killed by signal {-self.returncode}"
        return f"pod {rank} exited with status {self.returncode}"


@dataclass(frozen=True)
class AttemptFiles:
    """Paths of one attempt's files."""

    folder: Path

    @classmethod
    def of(cls, state_dir: Path, job_id: str, attempt: int) -> AttemptFiles:
        return cls(state_dir / "jobs" / job_folder_name(job_id) / str(attempt))

    @property
    def launch(self) -> Path:
        """What was launched (job, attempt, pods, port); written before any pod starts."""
        return self.folder / "launch.json"

    @property
    def stop(self) -> Path:
        """The stop in progress: its outcome, deadline for the hard stop, and detail."""
        return self.folder / "stop.json"

    @property
    def outcome(self) -> Path:
        """The final report once every pod is gone."""
        return self.folder / "outcome.json"

    @property
    def delivered(self) -> Path:
        """Present once the outcome was handed to the service: nothing left to report."""
        return self.folder / "delivered"

    @property
    def checkpoint(self) -> Path:
        """Appended to by the job (`toposched.payload.checkpointed`) each time it saves state."""
        return self.folder / "checkpoint"

    @property
    def checkpoint_seen(self) -> Path:
        """How many bytes of the checkpoint file were already reported."""
        return self.folder / "checkpoint.seen"

    def log(self, rank: int) -> Path:
        return self.folder / f"{rank}.log"

    def pid(self, rank: int) -> Path:
        return self.folder / f"{rank}.pid"

    def exit(self, rank: int) -> Path:
        return self.folder / f"{rank}.exit"

    def write_exit(self, rank: int, pod_exit: PodExit) -> None:
        write_json(self.exit(rank), {"returncode": pod_exit.returncode, "detail": pod_exit.detail})

    def read_exit(self, rank: int) -> PodExit | None:
        value = read_json(self.exit(rank))
        if not isinstance(value, dict) or not isinstance(value.get("returncode"), int):
            return None
        return PodExit(value["returncode"], str(value.get("detail", "")))
