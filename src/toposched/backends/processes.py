"""Processes the local backend started, known by id even after the service restarted.

A process id alone can name a stranger once the process ended and the id was reused, so a
process is recorded with its start time (Linux: /proc/<pid>/stat); a process whose start time
differs is not ours. Where /proc is absent, the id alone is used.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProcessId", "identify", "is_alive", "kill_group", "terminate"]

_PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessId:
    """A process id and its start time in clock ticks since boot (None where unknown)."""

    pid: int
    start: int | None

    def to_json(self) -> dict[str, int | None]:
        return {"pid": self.pid, "start": self.start}

    @classmethod
    def from_json(cls, value: object) -> ProcessId | None:
        if not isinstance(value, dict) or not isinstance(value.get("pid"), int):
            return None
        start = value.get("start")
        return cls(value["pid"], start if isinstance(start, int) else None)


def _stat(pid: int) -> tuple[str, int] | None:
    """The state letter and start time of `pid` from /proc, None if it has no entry there."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces; fields follow it.
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def identify(pid: int) -> ProcessId:
    """`pid` with its start time, read now (while the process surely exists)."""
    stat = _stat(pid)
    return ProcessId(pid, None if stat is None else stat[1])


def is_alive(process: ProcessId) -> bool:
    """Whether `process` still runs: same start time, not a zombie.

    A zombie child of this very process (one started by an earlier backend object that was
    dropped) is reaped here, so it does not look alive forever.
    """
    try:
        reaped, _ = os.waitpid(process.pid, os.WNOHANG)
        if reaped == process.pid:
            return False
    except ChildProcessError:
        pass
    if _PROC.is_dir():
        stat = _stat(process.pid)
        if stat is None or stat[0] in ("Z", "X"):
            return False
        return process.start is None or stat[1] == process.start
    try:
        os.kill(process.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def terminate(process: ProcessId) -> None:
    """SIGTERM to the process itself (the pod wrapper passes it on to the command)."""
    if is_alive(process):
        try:
            os.kill(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass


def kill_group(process: ProcessId) -> None:
    """SIGKILL to every process of the group `process` leads (it started its own session)."""
    if is_alive(process):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
